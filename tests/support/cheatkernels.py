"""Kernels that cheat, and honest ones beside them, as a user's kernel files: the sweeps of the integrity
tests (tests/test_integrity.py on the CPU, tests/test_integrity_gpu.py on the device)."""

from __future__ import annotations

from support.files import REPO

CHEATS = (REPO / "tests" / "kernels" / "cheats.py").read_text()
HONEST = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    bt = b.t()
    out = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    return lambda: torch.mm(a, bt, out=out)   # the same output buffer every call, filled anew
"""
# Converts A in prepare (as a quantizing kernel would) and says what its call reads: never flagged.
CONVERTS_AND_SAYS = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    a2, bt = a.clone(), b.t()
    run = lambda: torch.mm(a2, bt)
    run.reads = [a2]
    return run
"""
# The same without saying it: its result cannot follow a change of `a`, and the reason says what to do.
CONVERTS_SILENTLY = CONVERTS_AND_SAYS.replace("    run.reads = [a2]\n", "")

# cheat -> (the check named in the row, words of its reason)
CPU_CHEATS = {
    "ahead": ("cached", "its call returned a result it did not compute"),
    "by-pointer": ("cached", "its call returned a result it did not compute"),
    "by-version": ("cached", "its result did not follow its inputs"),  # issue 41: keyed on torch's version counter
    "copy": ("cached", "its result did not follow its inputs"),
    "warm-cache": ("cached", "its result did not follow its inputs"),
    "later-rounds": ("cached", "round 2 of 2: integrity (cached): its result did not follow its inputs"),
    "writes-inputs": ("wrote-inputs", "it wrote into its inputs"),
    "lazy": ("lazy", "its call returned a _Lazy, not a plain tensor"),
}


def cheat_source(cheat: str) -> str:
    return CHEATS.replace('CHEAT = "ahead"', f'CHEAT = "{cheat}"')
