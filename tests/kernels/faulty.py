"""A user kernel for the fault tests: a correct bf16 GEMM that fails as its host's environment says.

FLEETBENCH_TEST_FAULT=action:M[,action:M...], at prepare time of the case with that M:
  segv     the worker process dies by SIGSEGV
  exit     it dies with status 1
  hang     it stops answering (sleeps)
  garbage  a corrupt line lands in the attempt's results.jsonl and on the protocol channel, as a torn
           write would leave it
The faults live here, in the code under test, never in the worker's own path."""
import os
import signal
import sys
import time

import torch

FAMILY = "bf16"


def _garbage() -> None:
    results = sys.argv[sys.argv.index("--results") + 1]
    line = '{"kind": "case", "schema_version": 1, "oops"'
    with open(results, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    channel = os.environ.get("FLEETBENCH_PROTOCOL_FD")
    if channel:
        os.write(int(channel), ("@@fleetbench-record " + line + "\n").encode())


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
