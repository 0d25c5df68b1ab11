"""Checks that a kernel cannot cheat, run for every backend in every round; each failure is a Finding
named by the check it failed (the names are data: Correctness.integrity, a row's `integrity` column).

- cached: a result computed ahead (in `prepare`) or cached (by input pointer, or by value) and returned
  again costs nothing to time. The first output is poisoned (NaN) before a second call: one that hands
  back what it computed before shows the poison. Then the values the call reads change in place to
  values with a known exact answer: the sign of operand A is flipped in the buffers the call reads
  (bf16 negated, e4m3 sign bit, both sign bits of a packed e2m1 byte; scales untouched), so the next
  output must be the exact negation of the one before; a copy of a cached result is not. The flips are
  raw writes into the same storage through an alias with its own version counter: the tensor's
  `_version` does not move, so a cache keyed on it (or on the address) sees no change. A backend
  names those buffers as `fn.reads` (per input set, the tensors holding A as its call reads them);
  a user kernel reads the `a` it was given unless its callable says otherwise (worker/backends/userkernel.py).
  This runs before the first timing and again after every timing (a kernel may turn to a cache once
  warm, or from its second round on).
- wrote-inputs: a kernel that writes into its inputs changes what every later call and check sees:
  the inputs (and the buffers it reads) are compared, bit for bit, before and after a call.
- lazy: the call must return plain tensors holding the result, not an object (a tensor subclass, a
  future) that computes when read, outside the timing.
- side-stream: the output must be complete in the caller's stream order when the call returns, and in
  the timer's stream order when the timer ends: it is copied there before the device is synchronized
  and compared with what it holds after. A call that forks work onto another stream and never joins
  it makes CUDA-graph capture fail ("not joined"): named too. (Eager, a copy can still race work on a
  side stream that ends within a few microseconds; a captured graph cannot.)
- untimed: exactly what one timed sample runs (worker/measure/timing.py `timed_once`: one replay of the timed
  graph) must produce the result: its output is poisoned, the sample run, and the output of the input
  set its last call used is judged (against that set's oracle in round 1). Work done once at capture
  (on a side stream the capture did not follow, or a kernel that computes only when not captured)
  leaves the poison. Then one more timed sample runs with operand A negated (raw, in every input set)
  and must return the negation: a timed graph holding none of the kernels an eager call runs (a copy
  of a result computed outside it, say) replays the same numbers and is named `untimed`.
- l2-persistence: inputs kept resident in L2 defeat cold-L2 timing. The persisting set-aside is reset
  to 0 (and persisting lines to normal) before every timing, and a call that sets it again, or sets
  an access-policy window on its stream, is named.
- impossible: a case timed faster than the GPU's speed of light for its FLOPs and bytes, beyond a
  margin, is not a result (worker/check/physics.py).

The output contract (dtype, shape, device; worker/check/verify.py output_problem) is checked on every call
these checks observe when they are told what is expected: a call that breaks it raises WrongOutput.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Callable, Optional

CACHED = "cached"
WROTE_INPUTS = "wrote-inputs"
LAZY = "lazy"
SIDE_STREAM = "side-stream"
UNTIMED = "untimed"
L2_PERSISTENCE = "l2-persistence"
IMPOSSIBLE = "impossible"
CHECKS = (CACHED, WROTE_INPUTS, LAZY, SIDE_STREAM, UNTIMED, L2_PERSISTENCE, IMPOSSIBLE)


@dataclass(frozen=True)
class Finding:
    check: str  # one of CHECKS
    text: str

    def __str__(self) -> str:
        return f"integrity ({self.check}): {self.text}"


class IntegrityFailure(Exception):
    """Raised from a timing whose kernel failed an integrity check: its numbers are not a result."""

    def __init__(self, findings: list[Finding]):
        super().__init__("; ".join(map(str, findings)))
        self.findings = findings


# -- what a call returned ------------------------------------------------------------------------------


def tensors_of(result) -> Optional[list]:
    """The plain tensors a call returned (one, or a list: an MoE loop's per-expert outputs), or None when
    it returned anything else (a tensor subclass, a future, a callable)."""
    import torch

    items = result if isinstance(result, (list, tuple)) else [result]
    return list(items) if items and all(type(t) is torch.Tensor for t in items) else None


def _lazy(result) -> Finding:
    import torch

    items = result if isinstance(result, (list, tuple)) else [result]
    odd = next((x for x in items if type(x) is not torch.Tensor), result)
    return Finding(
        LAZY,
        f"its call returned a {type(odd).__name__}, not a plain tensor holding the result "
        "(a result computed when it is read is computed outside the timing)",
    )


def bitwise_equal(x, y) -> bool:
    """Same shape, dtype and bytes (NaN included, which torch.equal calls unequal)."""
    import torch

    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    return torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))


def _all_nan(t) -> bool:
    import torch

    return t.is_floating_point() and t.numel() > 0 and bool(torch.isnan(t).all())


def _poison(outputs: list) -> bool:
    """Fill the floating outputs with NaN; whether any was poisoned (an all-NaN output stays as it is)."""
    import torch

    done = False
    for t in outputs:
        if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) and not _all_nan(t):
            t.fill_(float("nan"))
            done = True
    return done


# -- exact sign flips of the buffers a call reads -------------------------------------------------------


def flip_sign(t) -> None:
    """Negate `t` in place, exactly, in its stored format: float negated; float8 (e4m3/e5m2) sign bit;
    uint8 and float4_e2m1fn_x2 hold packed e2m1 (two FP4 codes per byte): both sign bits. Applied twice
    it restores every bit. The write goes through `t.data`, an alias of the same storage with a version
    counter of its own: `t._version` does not move, so a kernel keying a cache on it cannot tell.
    Raises TypeError for a format with no exact negation here."""
    import torch

    t = t.data
    fp8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)}
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    if t.dtype in fp8:
        t.view(torch.uint8).bitwise_xor_(0x80)
    elif t.dtype == torch.uint8 or (fp4 is not None and t.dtype == fp4):
        t.view(torch.uint8).bitwise_xor_(0x88)
    elif t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        t.neg_()
    else:
        raise TypeError(f"no exact sign flip for {t.dtype}")


def reads_of(fn, set_index: int) -> list:
    """The tensors holding operand A of input set `set_index` as `fn` reads them (`fn.reads`), each
    storage once; [] when the backend does not say."""
    reads = getattr(fn, "reads", None)
    if not reads:
        return []
    seen, out = set(), []
    for t in reads[set_index]:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _relative_error(out, ref) -> float:
    import torch

    o, r = out.detach().to(torch.float64).flatten(), ref.detach().to(torch.float64).flatten()
    norm = r.norm().item()
    return (o - r).norm().item() / norm if norm > 0 else float(o.norm().item() > 0)


# -- one call, observed ---------------------------------------------------------------------------------


def _observed_call(call: Callable[[], object], as_output, synchronize, when: str, expected=None):
    """(result, a copy of its output taken in the caller's stream order before the device is synchronized,
    findings). The copy differing from the output after synchronizing means work the caller's stream
    does not wait for was still writing it. Raises verify.WrongOutput when the result breaks `expected`
    (a verify.Expected), or is a list of tensors that do not stack into one output."""
    from .verify import WrongOutput, describe, output_problem

    result = call()
    if tensors_of(result) is None:
        synchronize()
        return result, None, [_lazy(result)]
    problem = output_problem(result, expected) if expected is not None else None
    if problem:
        raise WrongOutput(problem)
    try:
        snap = as_output(result).clone()
    except RuntimeError as exc:  # per-expert outputs that do not stack (torch.cat): name each part
        if not isinstance(result, (list, tuple)):
            raise
        parts = ", ".join(describe(t.dtype, t.shape, t.device) for t in result)
        raise WrongOutput(f"output is a list of tensors that do not stack into one [rows, N] output: {parts}") from exc
    synchronize()
    if not bitwise_equal(snap, as_output(result)):
        return (
            result,
            snap,
            [
                Finding(
                    SIDE_STREAM,
                    f"its output was still being written after {when}: work on a "
                    "stream the caller's stream does not wait for",
                )
            ],
        )
    return result, snap, []


def _follows_flip(call, reads: list, before, as_output, synchronize, tolerance: float, expected=None) -> list[Finding]:
    """Flip the sign of `reads` (operand A as the call reads it), call, flip back: the output must be the
    negation of `before` (the output on the unflipped values) within `tolerance`."""
    for t in reads:
        flip_sign(t)
    try:
        _, snap, findings = _observed_call(call, as_output, synchronize, "its call returned", expected)
    finally:
        for t in reads:
            flip_sign(t)
        synchronize()
    if findings:
        return findings
    rel = _relative_error(snap, -before)
    if not rel <= tolerance:
        return [
            Finding(
                CACHED,
                f"its result did not follow its inputs: with operand A negated in the buffers "
                f"its call reads, it returned rel_err {rel:.3g} against the negated result "
                f"(a result cached by value or computed ahead; a user kernel whose prepare "
                f"converts `a` names what its call reads as `reads`, worker/backends/userkernel.py)",
            )
        ]
    return []


def check_calls(
    call: Callable[[], object],
    inputs: list,
    reads: list,
    as_output: Callable[[object], object],
    synchronize: Callable[[], None],
    tolerance: float,
    expected=None,
) -> tuple[Optional[object], list[Finding], float]:
    """Three calls before the first timing: (the output to judge against the oracle, or None when there is
    none to judge; the findings; the seconds of the first call, which any result check makes: JIT builds
    and lazy set-up land there, not in the checks' cost). The inputs and `reads` must be left as they
    were; the second call must overwrite the poisoned first output; the third, on A negated in `reads`
    (raw writes: worker/check/integrity.py flip_sign), must negate it. `expected` (a verify.Expected): what
    every call must return, checked before anything else; raises verify.WrongOutput, naming both."""
    watched = _unique(list(inputs) + list(reads))
    kept = [t.clone() for t in watched]
    findings: list[Finding] = []
    t0 = time.perf_counter()
    first, first_snap, found = _observed_call(call, as_output, synchronize, "its call returned", expected)
    first_s = time.perf_counter() - t0
    if first_snap is None:
        return None, found, first_s
    findings += found
    if any(not bitwise_equal(t, k) for t, k in zip(watched, kept)):
        findings.append(Finding(WROTE_INPUTS, "it wrote into its inputs"))
        for t, k in zip(watched, kept):
            t.copy_(k)
        synchronize()
    poisoned = _poison(tensors_of(first))
    second, second_snap, found = _observed_call(call, as_output, synchronize, "its call returned", expected)
    if second_snap is None:
        return None, findings + found, first_s
    findings += found
    if poisoned and any(_all_nan(t) for t in tensors_of(second)):
        # judged as what the kernel returned: the zeros kernel still reads rel_err 1.0
        return (
            first_snap,
            findings
            + [
                Finding(
                    CACHED,
                    "its call returned a result it did not compute (computed ahead or cached, and returned again)",
                )
            ],
            first_s,
        )
    if reads and not findings:
        findings += _follows_flip(call, reads, second_snap, as_output, synchronize, tolerance, expected)
    return second_snap, findings, first_s


def _unique(tensors: list) -> list:
    seen, out = set(), []
    for t in tensors:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


# -- around each timing ---------------------------------------------------------------------------------


class Watched:
    """`fn` as the timer calls it, keeping what its latest call returned: in graph mode the last captured
    call's outputs, which every replay of the graph writes."""

    __slots__ = ("fn", "last", "reads")

    def __init__(self, fn):
        self.fn = fn
        self.last = None
        self.reads = getattr(fn, "reads", None)

    def __call__(self, i: int):
        self.last = self.fn(i)
        return self.last


class RoundGuard:
    """The integrity checks around one timing of one case: `watched` is what the timer calls,
    `timed_once` what worker/measure/timing.py hands one timed sample to, `after_timing` the re-check on fresh
    values. `judge(output, set_index)` says what is wrong with the timed sample's output of that input set
    (None: right); without one (a later round, whose eager path passed the oracle in round 1), the call on
    negated inputs after the timing vouches for that output, and an eager call names what differs only
    when it fails. Each raises IntegrityFailure; `seconds` is the time spent in these checks."""

    def __init__(
        self,
        fn,
        as_output,
        synchronize,
        tolerance: float,
        judge: Optional[Callable[[object, int], Optional[str]]] = None,
        l2: Optional["L2Persistence"] = None,
        watched: Optional[Watched] = None,
    ):
        # `watched`: an earlier round's, when this round replays the graph captured through it
        self.watched = watched if watched is not None else Watched(fn)
        # That graph followed negated inputs when its round timed it (_timed_follows_flip), and a graph
        # replays the same nodes for as long as it lives: its later rounds skip that one more sample.
        self.graph_vouched = watched is not None
        self.as_output = as_output
        self.synchronize = synchronize
        self.tolerance = tolerance
        self.judge = judge
        self.l2 = l2
        self.seconds = 0.0
        self.timed: Optional[tuple] = None  # (input set, output) of the timed sample that passed

    def before_timing(self) -> None:
        """Name L2 persistence set since the round began (in `prepare`, say), and reset it."""
        t0 = time.perf_counter()
        findings = []
        if self.l2 is not None:
            findings = self.l2.findings()
            self.l2.reset()
        self.seconds += time.perf_counter() - t0
        if findings:
            raise IntegrityFailure(findings)

    def timed_once(self, run: Callable[[], int]) -> None:
        t0 = time.perf_counter()
        try:
            findings = self._timed(run)
            if self.l2 is not None:
                findings += self.l2.findings()
        finally:
            self.seconds += time.perf_counter() - t0
        if findings:
            raise IntegrityFailure(findings)

    def _timed(self, run: Callable[[], int]) -> list[Finding]:
        outputs = tensors_of(self.watched.last)
        if outputs is None:
            return [_lazy(self.watched.last)]
        _poison(outputs)
        set_index = run()
        snap = self.as_output(self.watched.last).clone()  # in the timer's stream order
        self.synchronize()
        if not bitwise_equal(snap, self.as_output(self.watched.last)):
            return [
                Finding(
                    SIDE_STREAM,
                    "its output was still being written after the timer's end: work on a "
                    "stream the timer does not wait for",
                )
            ]
        if _all_nan(snap):
            return [
                Finding(
                    UNTIMED,
                    "the timed work left its output as it was: the result came from work outside "
                    "what is timed (computed ahead, or on another stream while the graph was "
                    "captured)",
                )
            ]
        problem = self.judge(snap, set_index) if self.judge is not None else None
        if problem:
            return [
                Finding(
                    UNTIMED,
                    f"what is timed does not compute the result: the output of one timed sample "
                    f"(input set {set_index}): {problem}",
                )
            ]
        self.timed = (set_index, snap)
        return [] if self.graph_vouched else self._timed_follows_flip(run, set_index, snap)

    def _timed_follows_flip(self, run: Callable[[], int], set_index: int, before) -> list[Finding]:
        """One more timed sample, its output poisoned, with operand A negated in every input set's buffers
        (raw writes, torch's version counter unmoved): its output must be the negation of `before`. What is
        timed replaying a result computed outside it (a graph of copies of a cached result) does not."""
        fn = self.watched.fn
        n_sets = len(getattr(fn, "reads", None) or [])
        reads = _unique([t for j in range(n_sets) for t in reads_of(fn, j)])
        if not reads:
            return []
        for t in reads:
            flip_sign(t)
        try:
            _poison(tensors_of(self.watched.last))
            flipped_set = run()
            snap = self.as_output(self.watched.last).clone()
        finally:
            for t in reads:
                flip_sign(t)
            self.synchronize()
        rel = _relative_error(snap, -before) if flipped_set == set_index else float("inf")
        if rel <= self.tolerance:
            return []
        what = (
            "left its output as it was" if _all_nan(snap) else f"returned rel_err {rel:.3g} against the negated result"
        )
        return [
            Finding(
                UNTIMED,
                f"what is timed does not follow its inputs: with operand A negated in the buffers "
                f"its call reads (written in place, torch's version counter unmoved), one timed "
                f"sample {what}: the timed work replays a result computed outside it (copies of a "
                f"cached result, say), not the kernels an eager call runs",
            )
        ]

    def _which_differs(self, call, set_index: int, timed) -> list[Finding]:
        """After a failed flip with an unjudged timed sample: `untimed` when an eager call on the same inputs
        disagrees with the timed sample's output ([] when it agrees: the call itself did not follow)."""
        _, eager, found = _observed_call(call, self.as_output, self.synchronize, "its call returned")
        if eager is None or found:
            return found
        rel = _relative_error(timed, eager)
        if rel <= self.tolerance:
            return []
        return [
            Finding(
                UNTIMED,
                f"what is timed does not compute the result: the output of one timed sample "
                f"(input set {set_index}) is rel_err {rel:.3g} from an eager call's on the same inputs",
            )
        ]

    def capture_failed(self, exc: BaseException) -> None:
        """Raise IntegrityFailure when `exc` (from the timing) is a CUDA-graph capture that failed on a fork
        its call never joined; return otherwise."""
        text = str(exc)
        if "not joined" in text or "Unjoined" in text:
            raise IntegrityFailure(
                [
                    Finding(
                        SIDE_STREAM,
                        "its call forks work onto another stream and never joins "
                        "it back, so the timer does not wait for it (CUDA-graph "
                        f"capture: {text.strip().splitlines()[0][:200]})",
                    )
                ]
            ) from None

    def after_timing(self) -> None:
        """Fresh values in the same buffers, after the timing: a call on A negated must negate the output
        of the same input set (the timed sample's, else one more call's); then the L2 settings."""
        t0 = time.perf_counter()
        try:
            fn = self.watched.fn
            set_index, before = self.timed or (0, None)
            call = lambda: fn(set_index)  # noqa: E731
            findings = []
            if before is None:
                _, before, findings = _observed_call(call, self.as_output, self.synchronize, "its call returned")
            reads = reads_of(fn, set_index)
            if before is not None and not findings and reads:
                findings = _follows_flip(call, reads, before, self.as_output, self.synchronize, self.tolerance)
                if findings and self.timed is not None and self.judge is None:
                    findings = self._which_differs(call, set_index, before) or findings
            if self.l2 is not None:
                findings = findings + self.l2.findings()
        finally:
            self.seconds += time.perf_counter() - t0
        if findings:
            raise IntegrityFailure(findings)


# -- L2 persistence, through the CUDA driver ------------------------------------------------------------


class L2Persistence:
    """This process's L2 persistence settings through the CUDA driver (libcuda, the one every CUDA
    runtime in the process shares): the L2 set aside for persisting accesses (a context limit), and
    the access-policy window of the stream the calls run on. Torch has no API for either."""

    LIMIT_PERSISTING_L2 = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    ACCESS_POLICY_WINDOW = 1  # CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW (a stream attribute too)
    _ATTR_BYTES = 64  # CUlaunchAttributeValue is a union padded to 64 bytes; num_bytes is at offset 8

    def __init__(self, lib):
        self.lib = lib

    @classmethod
    def open(cls) -> Optional["L2Persistence"]:
        """The driver's settings, or None where they cannot be read (no driver, no context, a GPU or a
        MIG slice without L2 persistence): the check is then not made."""
        import torch

        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return None
        torch.cuda.synchronize()  # the process's CUDA context exists and is this thread's current one
        found = cls(lib)
        return found if found.limit() is not None else None

    def limit(self) -> Optional[int]:
        size = ctypes.c_size_t(0)
        return size.value if self.lib.cuCtxGetLimit(ctypes.byref(size), self.LIMIT_PERSISTING_L2) == 0 else None

    def _stream(self) -> int:
        import torch

        return int(torch.cuda.current_stream().cuda_stream)

    def window_bytes(self) -> Optional[int]:
        """The access-policy window's size on the current stream (0: none), or None if unreadable."""
        value = (ctypes.c_char * self._ATTR_BYTES)()
        if self.lib.cuStreamGetAttribute(ctypes.c_void_p(self._stream()), self.ACCESS_POLICY_WINDOW, value) != 0:
            return None
        return ctypes.c_size_t.from_buffer(value, 8).value

    def reset(self) -> None:
        """No L2 set aside for persisting accesses, every persisting line back to normal, and no window on
        the current stream."""
        if self.limit():
            self.lib.cuCtxSetLimit(self.LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
        self.lib.cuCtxResetPersistingL2Cache()
        if self.window_bytes():
            self.lib.cuStreamSetAttribute(
                ctypes.c_void_p(self._stream()), self.ACCESS_POLICY_WINDOW, (ctypes.c_char * self._ATTR_BYTES)()
            )

    def findings(self) -> list[Finding]:
        """What the kernel changed since the last reset (then reset again, so no later case inherits it)."""
        found = []
        limit = self.limit()
        if limit:
            found.append(
                Finding(
                    L2_PERSISTENCE,
                    f"it set aside {limit} bytes of L2 for persisting accesses "
                    "(inputs kept resident in L2 defeat cold-L2 timing)",
                )
            )
        window = self.window_bytes()
        if window:
            found.append(Finding(L2_PERSISTENCE, f"it set an L2 access-policy window of {window} bytes on its stream"))
        if found:
            self.reset()
        return found
