# Runs a notebook with an endless cell through Debian's nbclient, as
# papermill and nbconvert do, twice: with interrupt_on_timeout (the cell
# is interrupted after the timeout and the notebook goes on) and without
# (nbclient raises CellTimeoutError and shuts the kernel down). Prints
# what it saw as one JSON object.
#
# usage: nbclient_timeout.py KERNEL_NAME
import json
import sys
import time

import nbclient
import nbformat
from nbclient.exceptions import CellTimeoutError

v4 = nbformat.v4


def notebook():
    nb = v4.new_notebook()
    nb.metadata.kernelspec = {"name": sys.argv[1], "display_name": "Linger (Starlark)", "language": "starlark"}
    nb.cells = [v4.new_code_cell("n = 0"), v4.new_code_cell("while True:\n    n += 1"), v4.new_code_cell("print(n > 0)")]
    return nb


out = {}
nb = notebook()
t0 = time.monotonic()
nbclient.NotebookClient(nb, kernel_name=sys.argv[1], timeout=3, interrupt_on_timeout=True, allow_errors=True).execute()
out["interrupted"] = {"seconds": time.monotonic() - t0, "outputs": [c.outputs for c in nb.cells]}

nb = notebook()
t0 = time.monotonic()
try:
    nbclient.NotebookClient(nb, kernel_name=sys.argv[1], timeout=3).execute()
    out["timeout"] = {"raised": None}
except CellTimeoutError as e:
    out["timeout"] = {"raised": type(e).__name__, "message": str(e)}
out["timeout"]["seconds"] = time.monotonic() - t0
print(json.dumps(out))
