"""Checks a kernel cannot cheat, run for every backend as its result is checked: the call the timing
repeats must do its work in the call, and leave its inputs as it found them.

- A result computed ahead (in `prepare`, or cached by input pointer) and returned again costs nothing to
  time. So the first output is poisoned (NaN) before a second call, and the second call's output is what
  the oracle judges: a kernel that computes in the call overwrites the poison; one that hands back what
  it computed before returns it.
- A kernel that writes into its inputs changes what every later call and check sees: the inputs are
  compared, bit for bit, before and after the first call, and put back.
Not covered here (they need the GPU): work on a side stream the timer does not wait for, and L2
persistence windows (issue 31).
"""
from __future__ import annotations

from typing import Callable


def call_twice_checked(call: Callable[[], object], inputs: list, as_output: Callable[[object], object],
                       synchronize: Callable[[], None]) -> tuple[object, list[str]]:
    """(the second call's output, what the kernel did that it must not)."""
    import torch

    kept = [t.clone() for t in inputs]
    first = as_output(call())
    synchronize()
    problems = []
    if any(not torch.equal(t, k) for t, k in zip(inputs, kept)):
        problems.append("it wrote into its inputs")
        for t, k in zip(inputs, kept):
            t.copy_(k)
    poisoned = isinstance(first, torch.Tensor) and first.is_floating_point()
    if poisoned:
        returned = first.clone()  # what the kernel gave, judged as such if it only hands it back
        first.fill_(float("nan"))
    second = as_output(call())
    synchronize()
    if poisoned and isinstance(second, torch.Tensor) and second.data_ptr() == first.data_ptr() \
            and bool(torch.isnan(second).all()):
        problems.append("its call returned a result it did not compute (computed ahead or cached, and "
                        "returned again)")
        return returned, problems
    return second, problems
