"""A user kernel for the fault tests: a correct bf16 GEMM that fails as its host's environment says.

FLEETBENCH_TEST_FAULT=action:M[,action:M...], at prepare time of the case with that M:
  segv     the worker process dies by SIGSEGV
  exit     it dies with status 1
  hang     it stops answering (sleeps)
  garbage  a torn record line on every pipe of the process, the protocol channel among them
The faults live here, in the code under test, never in the worker's own path."""

import os
import signal
import time

import torch

FAMILY = "bf16"


def _garbage() -> None:
    """A torn record on every pipe this process holds (the protocol channel among them: its name is no
    longer in the environment of code under test)."""
    line = ('@@fleetbench-record {"kind": "case", "schema_version": 1, "oops"\n').encode()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                os.write(int(name), line)
        except OSError:
            pass


def prepare(a, b, out_dtype):
    for item in filter(None, os.environ.get("FLEETBENCH_TEST_FAULT", "").split(",")):
        action, _, m = item.partition(":")
        if int(m) != a.shape[0]:
            continue
        if action == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif action == "exit":
            os._exit(1)
        elif action == "hang":
            while True:
                time.sleep(3600)
        elif action == "garbage":
            _garbage()
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
