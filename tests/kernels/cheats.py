"""Kernels that try to look fast without being fast (issue 31), one per trick, for tests/test_integrity.py.
Each is a sweep backend `{name, file}` whose FAMILY is bf16; CHEAT selects the trick (set by the test
when it writes the file)."""
import torch

FAMILY = "bf16"
CHEAT = "ahead"
_by_pointer: dict = {}


def prepare(a, b, out_dtype):
    bt = b.t()
    if CHEAT == "ahead":  # computed once, returned on every call: timed at the cost of returning a tensor
        done = torch.mm(a, bt).to(out_dtype)
        return lambda: done
    if CHEAT == "by-pointer":  # cached by the input's address: the first call computes, the rest look it up
        def by_pointer():
            key = (a.data_ptr(), b.data_ptr())
            if key not in _by_pointer:
                _by_pointer[key] = torch.mm(a, bt).to(out_dtype)
            return _by_pointer[key]
        return by_pointer
    if CHEAT == "writes-inputs":  # scribbles into its input after computing
        def writes():
            out = torch.mm(a, bt).to(out_dtype)
            a.mul_(0.5)
            return out
        return writes
    raise ValueError(CHEAT)
