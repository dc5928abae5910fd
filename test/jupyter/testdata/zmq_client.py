# Drives `linger kernel --connection-file` with Debian's jupyter_client,
# as a frontend would; prints what it saw as one JSON object.
import json
import sys

from jupyter_client import BlockingKernelClient

c = BlockingKernelClient()
c.load_connection_file(sys.argv[1])
c.start_channels()
c.wait_for_ready(timeout=60)
out = {}
out["kernel_info"] = c.kernel_info(reply=True, timeout=20)["content"]


def run(code):
    seen = []
    hook = lambda m: seen.append({"msg_type": m["msg_type"], "content": m["content"]})
    reply = c.execute_interactive(code, timeout=60, output_hook=hook)
    return {"reply": reply["content"], "iopub": seen}


out["print"] = run("print(1+1)")
out["expr"] = run("3*7")
out["error"] = run("1 // 0")
out["bad"] = run("print(x_bad)")
out["complete"] = c.complete("pri", 3, reply=True, timeout=20)["content"]
out["inspect"] = c.inspect("print", 5, reply=True, timeout=20)["content"]


def reply_to(msg_id):
    while True:
        m = c.get_shell_msg(timeout=20)
        if m["parent_header"].get("msg_id") == msg_id:
            return m["content"]


out["is_complete"] = reply_to(c.is_complete("x = ("))
out["shutdown"] = c.shutdown(reply=True, timeout=20)["content"]
c.stop_channels()
print(json.dumps(out))
