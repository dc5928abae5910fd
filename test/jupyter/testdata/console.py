# Runs Debian's `jupyter console --kernel KERNEL --simple-prompt` under
# pexpect, as a person at a terminal does: a print, a function, its
# result as Out[n], an error, Ctrl-C on an endless loop, and Ctrl-D to
# leave (the console shuts its kernel down). The simple prompt reads one
# line a cell (jupyter_console 6.4 says so: "Multi-line input not
# supported"), so the function is a one-line def. Prints the
# transcript on stdout; exits 1 with the transcript on stderr when an
# expected line does not come.
#
# usage: console.py KERNEL
import sys
import time

import pexpect

log = []


class Tee:
    def write(self, s):
        log.append(s)

    def flush(self):
        pass


c = pexpect.spawn("/usr/bin/jupyter-console", ["--kernel", sys.argv[1], "--simple-prompt",
                                              "--ZMQTerminalIPythonApp.confirm_exit=False"],
                  encoding="utf-8", timeout=60, dimensions=(40, 200))
c.logfile_read = Tee()


def expect(pattern):
    try:
        c.expect(pattern)
    except (pexpect.TIMEOUT, pexpect.EOF) as e:
        sys.stderr.write("".join(log))
        sys.stderr.write("\n--- waited for %r: %s\n" % (pattern, type(e).__name__))
        sys.exit(1)


expect(r"In \[1\]: ")
c.sendline("print(6 * 7)")
expect(r"42\r?\n")
expect(r"In \[2\]: ")
c.sendline("def double(a): return a * 2")
expect(r"In \[3\]: ")
c.sendline("double(21)")
expect(r"Out\[3\]: 42")
expect(r"In \[4\]: ")
c.sendline("1 // 0")
expect(r"ZeroDivisionError|division by zero")
expect(r"In \[5\]: ")
c.sendline("n = 0")
expect(r"In \[6\]: ")
c.sendline("while True: n += 1")
# The loop runs; Ctrl-C interrupts it through the kernel manager. An
# interrupt that comes before the cell began (a busy machine) does
# nothing, as in ipykernel: press it again.
for attempt in range(10):
    time.sleep(1.5)
    c.sendintr()
    try:
        c.expect(r"KeyboardInterrupt", timeout=5)
        break
    except pexpect.TIMEOUT:
        continue
else:
    expect(r"KeyboardInterrupt")
expect(r"In \[\d+\]: ")
c.sendline("print(n > 0)")
expect(r"True\r?\n")
expect(r"In \[\d+\]: ")
c.sendeof()
c.expect(pexpect.EOF, timeout=30)
c.close()
sys.stdout.write("".join(log))
sys.exit(0 if c.exitstatus == 0 else 2)
