"""Kernels that try to look fast without being fast (issues 31 and 41), one per trick, for tests/test_integrity.py
(CPU) and tests/test_integrity_gpu.py (CUDA). Each is a sweep backend `{name, file}` whose FAMILY is bf16;
CHEAT selects the trick (the test sets it when it writes the file). Each computes the right product
somewhere, so only the integrity checks (worker/check/integrity.py) can tell."""

import torch

FAMILY = "bf16"
CHEAT = "ahead"
_by_pointer: dict = {}
_by_version: dict = {}
_rounds = [0]  # prepare() calls: one per input set and round


class _Lazy(torch.Tensor):
    """A result computed only when something reads it: returning it costs nothing."""

    def __new__(cls, compute, like):
        shell = torch.Tensor._make_subclass(cls, like)
        shell.compute = compute
        return shell

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        def real(x):
            return x.compute() if isinstance(x, _Lazy) else x

        return func(*[real(x) for x in args], **{k: real(v) for k, v in (kwargs or {}).items()})


def prepare(a, b, out_dtype):
    bt = b.t()
    out = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    _rounds[0] += 1

    def honest():
        return torch.mm(a, bt, out=out)

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
    if CHEAT == "copy":  # computed ahead, a fresh copy per call: costs a copy, never the GEMM
        done = torch.mm(a, bt).to(out_dtype)
        return lambda: done.clone()
    if CHEAT == "warm-cache":  # honest for its first calls (the checks before timing), a copy once warm
        calls = [0]

        def warm():
            calls[0] += 1
            if calls[0] <= 4:  # the checks before the timing make three
                return torch.mm(a, bt, out=out).clone()
            return out.clone()

        return warm
    if CHEAT == "later-rounds":  # honest in round 1 (checked against the oracle), computed ahead after it
        if _rounds[0] == 1:
            return honest
        done = torch.mm(a, bt).to(out_dtype)
        return lambda: done.clone()
    if CHEAT == "by-version":  # cached by address and torch's version counter (bumped by every in-place torch
        # op on `a`), a fresh copy per call: recomputes exactly when a check changes `a` through torch
        def by_version():
            key = (a.data_ptr(), a._version)
            if key not in _by_version:
                _by_version[key] = torch.mm(a, bt).to(out_dtype)
            return _by_version[key].clone()

        return by_version
    if CHEAT == "fp32-output":  # the right numbers, in fp32 where out_dtype was asked (twice the bytes written)
        return lambda: torch.mm(a.float(), bt.float())
    if CHEAT == "narrow-output":  # one column short: [M, N-1]
        return lambda: torch.mm(a, bt).to(out_dtype)[:, :-1]
    if CHEAT == "meta-output":  # a tensor on another device (here `meta`: shape and dtype, no data)
        return lambda: torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device="meta")
    if CHEAT == "list-output":  # the right result, split in two
        return lambda: list(torch.mm(a, bt).to(out_dtype).chunk(2))
    if CHEAT == "writes-inputs":  # scribbles into its input after computing

        def writes():
            result = torch.mm(a, bt).to(out_dtype)
            a.mul_(0.5)
            return result

        return writes
    if CHEAT == "lazy":  # returns a result that computes when it is read, outside the timing
        return lambda: _Lazy(lambda: torch.mm(a, bt).to(out_dtype), out)
    return _cuda_trick(a, b, bt, out, out_dtype, honest)


def _cuda_trick(a, b, bt, out, out_dtype, honest):
    """The tricks that need CUDA (tests/test_integrity_gpu.py)."""
    if CHEAT == "side-stream":  # forks its work onto a stream the caller (and the timer) never waits for
        side = torch.cuda.Stream()

        def forked():
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.mm(a, bt, out=out)
            return out

        return forked
    if CHEAT == "side-stream-slow":  # the same, its side work long enough to outlive any host's reaction
        side = torch.cuda.Stream()

        def forked_slow():
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(2_000_000)
                torch.mm(a, bt, out=out)
            return out

        return forked_slow
    if CHEAT == "capture-aware":  # honest eagerly; while a CUDA graph is captured it records no work

        def capture_aware():
            if torch.cuda.is_current_stream_capturing():
                return out
            return honest()

        return capture_aware
    if CHEAT == "graph-copy":  # honest eagerly (every check that calls it passes); while a CUDA graph is captured
        # it records only a copy of the result of its last eager call, so each replay copies a cached result
        last = {}

        def graph_copy():
            if torch.cuda.is_current_stream_capturing():
                return out.copy_(last["result"])
            last["result"] = torch.mm(a, bt).to(out_dtype)
            return out.copy_(last["result"])

        return graph_copy
    if CHEAT == "l2-persist":  # honest math, with its weights kept resident in L2 across the cold-L2 rotation
        import ctypes

        cuda = ctypes.CDLL("libcuda.so.1")

        class Window(ctypes.Structure):  # CUaccessPolicyWindow in the 64-byte CUlaunchAttributeValue
            _fields_ = [
                ("base_ptr", ctypes.c_void_p),
                ("num_bytes", ctypes.c_size_t),
                ("hit_ratio", ctypes.c_float),
                ("hit_prop", ctypes.c_int),
                ("miss_prop", ctypes.c_int),
                ("pad", ctypes.c_char * 36),
            ]

        def persisting():
            cuda.cuCtxSetLimit(0x06, ctypes.c_size_t(8 << 20))  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
            window = Window(b.data_ptr(), b.numel() * b.element_size(), 1.0, 2, 1)  # hits persist, misses stream
            cuda.cuStreamSetAttribute(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), 1, ctypes.byref(window))
            return honest()

        return persisting
    raise ValueError(CHEAT)
