# Drives the linger kernelspec with Debian's jupyter_client as a frontend's
# kernel manager does (KernelManager, BlockingKernelClient): history and
# comm_info, interrupt by message and by signal, two clients on one
# kernel, a wrong protocol version and an unknown message type, restart
# and shutdown. Prints what it saw as one JSON object.
#
# usage: zmq_manager.py KERNEL_NAME SIGNAL_KERNEL_NAME
import json
import sys
import threading
import time

from jupyter_client import KernelManager

LONG = "n = 0\nwhile True:\n    n += 1\n"
out = {}


def start(name):
    km = KernelManager(kernel_name=name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def run(kc, code, timeout=60, on_input=None):
    seen = []

    def hook(m):
        seen.append({"msg_type": m["msg_type"], "content": m["content"], "parent": m["parent_header"].get("msg_id")})
        if m["msg_type"] == "execute_input" and on_input:
            on_input()

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return {"reply": reply["content"], "iopub": seen, "msg_id": reply["parent_header"]["msg_id"]}


def interrupted(km, kc):
    """Runs an endless loop, interrupts it a second after the kernel said
    it began (execute_input: a busy machine may take a while to start it)
    and returns the reply, how long it took, and the cell after it."""
    t0 = time.monotonic()
    r = run(kc, LONG, timeout=30, on_input=lambda: threading.Timer(1.0, km.interrupt_kernel).start())
    return {"run": r, "seconds": time.monotonic() - t0, "after": run(kc, "print(n > 0)")}


def reply_to(kc, msg_id):
    while True:
        m = kc.get_shell_msg(timeout=20)
        if m["parent_header"].get("msg_id") == msg_id:
            return m


km, kc = start(sys.argv[1])
out["pid"] = km.provisioner.pid
run(kc, "a = 6")
run(kc, "print(a * 7)")
h = kc.history(hist_access_type="tail", n=10, output=False, raw=True)
out["history"] = reply_to(kc, h)["content"]
ci = kc.comm_info()
out["comm_info"] = reply_to(kc, ci)["content"]

# A wrong protocol version and an unknown message type: replies with
# status error, and the kernel goes on.
m = kc.session.msg("execute_request", {"code": "print('v4')", "silent": False})
m["header"]["version"] = "4.1"
kc.shell_channel.send(m)
out["old_version"] = reply_to(kc, m["header"]["msg_id"])["content"]
m = kc.session.msg("frobnicate_request", {})
kc.shell_channel.send(m)
r = reply_to(kc, m["header"]["msg_id"])
out["unknown"] = {"msg_type": r["msg_type"], "content": r["content"]}

# Interrupt by message (the kernelspec's interrupt_mode).
out["interrupt_message"] = interrupted(km, kc)

# Two clients on one kernel: the second's cell waits for the first's,
# each gets its own reply, and both see every output on iopub.
kc2 = km.client()
kc2.start_channels()
kc2.wait_for_ready(timeout=30)
# The first cell is under way (its first line printed) before the second
# is sent: two sockets' messages have no order of their own.
first = kc.execute("print('one', 0)\nk = 0\nwhile k < 300000:\n    k += 1\nfor i in range(1, 3):\n    print('one', i)\nb = 1")
while True:
    msg = kc.get_iopub_msg(timeout=20)
    if msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == first:
        break
second = kc2.execute("print('two', b)")
r1 = reply_to(kc, first)
r2 = reply_to(kc2, second)
seen2 = []
idle = set()
deadline = time.monotonic() + 10
while time.monotonic() < deadline and idle != {first, second}:
    try:
        msg = kc2.get_iopub_msg(timeout=1)
    except Exception:
        continue
    parent = msg["parent_header"].get("msg_id")
    if msg["msg_type"] == "stream":
        seen2.append({"parent": parent, "text": msg["content"]["text"]})
    if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle" and parent in (first, second):
        idle.add(parent)
out["two_clients"] = {"first": first, "second": second, "reply1": r1["content"], "reply2": r2["content"],
                      "reply1_date": str(r1["header"]["date"]), "reply2_date": str(r2["header"]["date"]), "iopub2": seen2}
kc2.stop_channels()

# Restart: shutdown_request with restart, and the manager starts a new
# process, whose session knows nothing of the old one.
km.restart_kernel(now=False)
kc.wait_for_ready(timeout=60)
out["restart_pid"] = km.provisioner.pid
out["after_restart"] = run(kc, "print(a)")
out["after_restart_ok"] = run(kc, "print('fresh')")
kc.stop_channels()
km.shutdown_kernel(now=False)
out["alive_after_shutdown"] = km.is_alive()

# Interrupt by signal: SIGINT interrupts the cell, the kernel lives on.
km, kc = start(sys.argv[2])
out["signal_pid"] = km.provisioner.pid
out["interrupt_signal"] = interrupted(km, kc)
kc.stop_channels()
km.shutdown_kernel(now=False)
print(json.dumps(out))
