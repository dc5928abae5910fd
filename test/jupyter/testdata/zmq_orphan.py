# Starts the linger kernelspec with Debian's jupyter_client's
# KernelManager, runs a cell, prints the kernel's pid and vanishes without
# a shutdown_request: what a frontend killed by the OOM killer does.
#
# usage: zmq_orphan.py KERNEL_NAME
import os
import sys

from jupyter_client import KernelManager

km = KernelManager(kernel_name=sys.argv[1])
km.start_kernel()
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=60)
kc.execute_interactive("x = 1", timeout=60)
print(km.provisioner.pid, flush=True)
os._exit(0)
