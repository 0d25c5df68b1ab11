"""Run cases: support check, seeded inputs, correctness verdict, timing in rounds, one JSON line each.

Each case is timed in `timing.rounds` independent rounds, spread over the sweep: round 1 of every case,
then round 2 of every case, and so on (round_order), so a case's rounds see much of what separate runs
would see (clock and power states, time passing, the neighbours it runs between, and with
`timing.fresh_inputs` where its inputs sit and its capture: docs/TIMING.md) and their spread is honest
about that run-to-run variation. Round 1 prepares the inputs, checks the result against the oracle (a
wrong result is never timed), warms up and captures the timed graph; a later round builds on input sets
allocated afresh while the last round's are held (fresh_inputs), or replays round 1's graph (kept while
the kept graphs fit KEEP_SHARE of the GPU's memory; else it prepares and captures its own), settles it
and samples it. Every round runs the integrity checks around its timing (worker/check/integrity.py: a kernel that
caches, works on a side stream, returns a lazy result, writes into its inputs or keeps them in L2 is
`failed`, its reason naming the check, and its numbers dropped). A case that raises is recorded as failed
(with the traceback tail) and the loop goes on.
A record is appended, flushed and fsynced as each round ends (`complete: false` until the last one,
worker/contract/rounds.py), so a dying or stopped host loses at most the round in flight, and a case that has
rounds already (a restart after a crash, a later attempt) times only those still missing. The case
and round in flight are kept in `<results>.inflight` for the supervisor, which names a crash and stops
a round past its limit (worker/sweep/supervise.py).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from ..backends import availability_problem
from ..check.integrity import IntegrityFailure
from ..contract.catalog import CATALOG, ORACLE_BACKENDS, support_problem
from ..contract.protocol import (
    EXIT_CANNOT_START,
    append_line,
    done_case_ids,
    emit_progress,
    has_facts,
    heartbeat,
    now_iso,
)
from ..contract.rounds import add_rounds, rounds_in
from ..contract.schema import CaseRecord, CaseSpec, FactsRecord, Health, Stats, WorkerParams
from ..measure.timing import LATER_WARMUP_MS, Timer

# Cold-L2 rotation: input sets totalling at least this many L2 sizes, within these bounds.
COLD_L2_FACTOR = 3
MAX_SETS = 64
# What a case's first round built (inputs, timed graph) is kept for its later rounds while everything kept
# stays within this share of the GPU's memory; a case beyond it builds its own in each round.
KEEP_SHARE = 0.25


class Kept:
    """A case's inputs and timed graph, built in its first round and replayed by its later ones."""

    __slots__ = ("fn", "sets", "n_sets", "watched", "graph", "nbytes")

    def __init__(self, fn, sets, n_sets: int, watched, graph, nbytes: int):
        self.fn, self.sets, self.n_sets, self.watched, self.graph, self.nbytes = (
            fn,
            sets,
            n_sets,
            watched,
            graph,
            nbytes,
        )


def append_record(path: Path, record: CaseRecord | FactsRecord) -> None:
    append_line(path, record.model_dump_json())


class RoundTiming(NamedTuple):
    """One round's timing (CaseRunner._time): its Stats with its one RoundStats, its Health (None without
    NVML), and what the timing says beside its numbers (timing.Timing.notes)."""

    stats: Stats
    health: Optional[Health]
    notes: tuple[str, ...] = ()


class SharedSets(NamedTuple):
    """Input sets the contenders of a shape share: who made them (their seed), their bits' fingerprint
    when made, the cases timing on them, and the round they were made for (fresh_inputs: each round's
    contenders share that round's sets)."""

    made_by: CaseSpec
    sets: list
    fingerprint: list
    users: set
    generation: int = 1


def _fingerprint(sets: list) -> list:
    """Each tensor's bits summed as integers (exact, one synchronization): what a write into it changes."""
    import torch

    sums = [t.view(torch.int16).sum(dtype=torch.int64) for pair in sets for t in pair]
    return torch.stack(sums).tolist() if sums else []


class CaseRunner:
    """Holds what every case on this device shares: device facts, the NVML probe and the process's Timer."""

    def __init__(self, device_wanted: str = "auto"):
        from ..host.env import detect_device

        self.device = detect_device(device_wanted)
        self.timer = Timer()  # this process's CUDA timing (worker/measure/timing.py) and its Tuning
        self.calibration = None  # this GPU's measured peaks (worker/measure/calibrate.py), for speed of light
        self.probe = None
        self.l2 = None  # the L2 persistence settings (worker/check/integrity.py), where the driver has them
        self.kept: dict[str, Kept] = {}  # by case id: what a later round of the case replays
        self.shared_sets: dict[tuple, SharedSets] = {}  # the contenders' one set of inputs (_sets_for)
        self.share_inputs = False  # _run_cases turns it on: a sweep's units, released as each case ends
        self.keep_budget = 0  # bytes
        self.clock = None  # the SM clock read in the stream (worker/measure/streamclock.py), where it loads
        if self.device.device == "cuda":
            import torch

            from ..measure.streamclock import StreamClock

            self.clock = StreamClock.open()

            self.keep_budget = int(
                KEEP_SHARE * torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            )
            from ..check.integrity import L2Persistence
            from ..host.health import NvmlProbe

            self.probe = NvmlProbe.for_current_device()
            self.l2 = L2Persistence.open()

    def run(self, case: CaseSpec) -> CaseRecord:
        """The case's first round: the full record, timed once (unless it is not ok)."""
        started_at, t0 = now_iso(), time.perf_counter()

        def record(status: str, reason: str = "", **fields) -> CaseRecord:
            return self.record_of(case, t0, started_at, status, reason, **fields)

        spec = _spec_of(case)
        early = self.before_measure(case, spec, t0, started_at)
        if early is not None:
            return early
        try:
            return self._freeing_kept(lambda: self._measure(case, spec, record))
        except Exception as exc:
            tb = traceback.format_exc()
            return record("failed", f"{type(exc).__name__}: {exc}"[:500], traceback=tb[-4000:])

    @staticmethod
    def record_of(case: CaseSpec, t0: float, started_at: str, status: str, reason: str = "", **fields) -> CaseRecord:
        """A record of `case`, begun at perf_counter() `t0` (`started_at` in ISO)."""
        return CaseRecord(
            case_id=case.case_id,
            case=case,
            status=status,
            reason=reason,
            started_at=started_at,
            duration_s=round(time.perf_counter() - t0, 4),
            **fields,
        )

    def before_measure(self, case: CaseSpec, spec, t0: float, started_at: str) -> Optional[CaseRecord]:
        """The record of a case that is not measured here (a kernel file that cannot load, an unknown,
        unsupported or unavailable backend, the no-op), or None."""

        def record(status: str, reason: str = "") -> CaseRecord:
            return self.record_of(case, t0, started_at, status, reason)

        if isinstance(spec, str):  # a user file that cannot load is unavailable; an unknown name is a failure
            return record("unavailable" if case.kernel_sha256 else "failed", spec)
        problem = support_problem(spec, case.m, case.n, case.k, self.device.compute_capability)
        if problem:
            return record("unsupported", problem)
        problem = None if case.kernel_sha256 else availability_problem(spec)
        if problem:
            return record("unavailable", problem)
        if spec.name == "noop":
            return record("ok", "no-op: nothing was measured")
        return None

    def _prepare(self, case: CaseSpec, spec, generation: int = 1):
        """(fn, input sets, how many) for one round (`generation`: which, for the sets the contenders of a
        shape share): inputs made from the case's seed, the backend prepared."""
        import torch

        n_sets = self._input_sets(case, spec.family)
        if case.workload == "moe":
            from ..backends import moe

            sets = [moe.inputs(case, s, self.device.device) for s in range(n_sets)]
            return moe.prepare(spec, sets, getattr(torch, case.out_dtype)), sets, n_sets
        sets = self._sets_for(case, n_sets, generation)
        if case.kernel_sha256:
            from ..backends import userkernel

            module = userkernel.load(case.backend, case.kernel_sha256)
        else:
            module = importlib.import_module(f"worker.backends.{spec.module}")
        fn = module.prepare(spec, sets, getattr(torch, case.out_dtype))
        return fn, sets, n_sets

    def _time(self, case: CaseSpec, fn, n_sets: int, guard=None, graph=None, keep=None) -> RoundTiming:
        """One round's timing (RoundTiming). With `guard` (an integrity.RoundGuard), the integrity checks
        around it: raises IntegrityFailure. `graph`: a kept timing.TimedGraph to replay; `keep(graph)` is
        told of one built now (worker/measure/timing.py Timer.time_cuda)."""
        from ..contract.schema import RoundStats
        from ..host.health import (
            CPU_ROUND_TRIES,
            GPU_ROUND_TRIES,
            assess,
            cpu_counters,
            host_reference_us,
            round_environment,
        )
        from ..measure.timing import Timing, time_cpu

        if guard is not None:
            guard.before_timing()
        t0 = time.perf_counter()
        cpu_before = cpu_counters()
        before = self.probe.snapshot() if self.probe else None
        t_timing = time.perf_counter()
        if self.device.device == "cuda":
            # Health is judged from the end of settling: settling brings the GPU to the case's own clock,
            # which for a heavy GEMM is its power-limited one, and that fall is what it should be measured
            # at. (The settled tail, already judged drift-free, is counted as samples: worker/measure/timing.py.)
            def settled() -> None:
                nonlocal before
                before = self.probe.snapshot() if self.probe else None

            spec = _spec_of(case)
            timed = self._time_cuda(
                case,
                fn,
                n_sets,
                settled,
                guard,
                load=None if isinstance(spec, str) else lambda us: self.load_share(case, spec, us),
                graph=graph,
                keep=keep,
                clock=getattr(self, "clock", None),
            )
        else:
            timed = Timing(time_cpu(guard.watched if guard else fn, n_sets, case.timing), {})
        stats = timed.stats
        timing_s = time.perf_counter() - t_timing
        after = self.probe.snapshot() if self.probe else None
        health = assess(before, after) if before is not None and after is not None else None
        tries = GPU_ROUND_TRIES if self.device.device == "cuda" else CPU_ROUND_TRIES
        env = round_environment(cpu_before, cpu_counters(), before, after, host_reference_us(tries))
        if self.probe is not None:
            from ..host.env import gpu_processes

            env["gpu_processes"] = gpu_processes()
        phases = {k: round(v, 4) for k, v in timed.phases.items()} if self.device.device == "cuda" else None
        clock = getattr(self, "clock", None)
        stream_mhz = clock.window_mhz if clock is not None and case.timing.mode != "events" else None
        one = RoundStats(
            median_us=stats.median_us,
            n=stats.n,
            rel_ci=stats.rel_ci,
            settle_ms=stats.settle_ms,
            timing_s=round(timing_s, 4),
            probe_s=round(time.perf_counter() - t0 - timing_s, 4),
            timing_phases=phases or None,
            sm_clock_stream_mhz=None if stream_mhz is None else round(stream_mhz, 1),
            **env,
        )
        if guard is not None:
            guard.after_timing()
            self._physics(case, stats.median_us)
        return RoundTiming(stats.model_copy(update={"rounds": [one]}), health, timed.notes)

    def _physics(self, case: CaseSpec, median_us: float) -> None:
        """Raises IntegrityFailure (`impossible`) when a round's median is faster than this GPU can go for
        the case's FLOPs and bytes (worker/check/physics.py); a CPU is not judged."""
        from ..check.physics import impossible

        spec = _spec_of(case)
        if self.device.device != "cuda" or isinstance(spec, str):
            return
        work = self._metrics(case, spec, median_us)
        found = impossible(
            work.flops, work.bytes, spec.family, median_us, self.calibration, self.device.name, l2=case.timing.l2
        )
        if found is not None:
            raise IntegrityFailure([found])

    def _time_cuda(self, case: CaseSpec, fn, n_sets: int, settled, guard, load=None, graph=None, keep=None, clock=None):
        import torch

        before = torch.cuda.current_stream()
        if clock is not None:
            clock.window_mhz = None
        try:
            return self.timer.time_cuda(
                guard.watched if guard else fn,
                n_sets,
                case.timing,
                settled,
                timed_once=guard.timed_once if guard else None,
                load=load,
                graph=graph,
                keep=keep,
                clock=clock,
            )
        except RuntimeError as exc:
            if guard is not None:
                guard.capture_failed(exc)
            raise
        finally:
            if torch.cuda.current_stream() != before:  # a capture that failed leaves its stream current
                torch.cuda.set_stream(before)

    @staticmethod
    def _costs(stats, **phases):
        """`stats` with where its (one) round's time went: prepare_s, check_s (before the timing), and
        integrity_s (the integrity checks' share of check_s and timing_s)."""
        one = stats.rounds[0].model_copy(update={k: round(v, 4) for k, v in phases.items()})
        return stats.model_copy(update={"rounds": [one]})

    def again(self, case: CaseSpec, calls_per_sample: int = 0, generation: int = 2) -> tuple:
        """A later round (`generation`: its number) of a case whose first round was ok: (Stats, Health or
        None, seconds taken). Raises integrity.IntegrityFailure when the kernel fails an integrity check
        in this round."""
        return self._freeing_kept(lambda: self._again(case, calls_per_sample, generation))

    def _freeing_kept(self, work: Callable[[], object]):
        """`work()`; after an out-of-memory error with graphs kept, every kept graph and its inputs are
        dropped and `work()` runs once more. Anything else it raises, it raises."""
        try:
            return work()
        except Exception as exc:
            if type(exc).__name__ != "OutOfMemoryError" or not (self.kept or self.__dict__.get("shared_sets")):
                raise
        import torch

        self.release()
        torch.cuda.empty_cache()
        return work()

    def _again(self, case: CaseSpec, calls_per_sample: int, generation: int = 2) -> tuple:
        t0 = time.perf_counter()
        spec = _spec_of(case)
        self._round_start()
        kept = self.kept.get(case.case_id)
        if kept is not None and not self._fresh_inputs(case):
            # the graph round 1 captured: settling runs it into the case's steady state
            guard = self._guard(case, spec, kept.fn, kept.sets, first_round=False, watched=kept.watched)
            stats, health, _ = self._time(case, kept.fn, kept.n_sets, guard, graph=kept.graph)
            return self._costs(stats, prepare_s=0.0, integrity_s=guard.seconds), health, time.perf_counter() - t0
        # fresh_inputs: `kept`, the last round's graph and inputs, is held until this round's are made, so
        # these sit elsewhere in memory (freed first, the allocator would hand back the same blocks).
        self.kept.pop(case.case_id, None)
        before = self._allocated()
        fn, sets, n_sets = self._prepare(case, spec, generation)
        prepared = time.perf_counter()
        guard = self._guard(case, spec, fn, sets, first_round=False)
        # JIT builds, autotuning and lazy allocations happened in round 1 (its full warm-up): a later round
        # warms briefly, and settling brings the GPU to the case's state as in every round.
        # `calls_per_sample`: round 1's, so the graph is sized without a probe graph of its own.
        warm = case.timing.model_copy(
            update={
                "warmup_ms": min(case.timing.warmup_ms, LATER_WARMUP_MS),
                "calls_per_sample": case.timing.calls_per_sample or calls_per_sample,
            }
        )
        built = []
        stats, health, _ = self._time(case.model_copy(update={"timing": warm}), fn, n_sets, guard, keep=built.append)
        self._keep(case, fn, sets, n_sets, guard, built, before)
        del fn, sets, kept
        return self._costs(stats, prepare_s=prepared - t0, integrity_s=guard.seconds), health, time.perf_counter() - t0

    def _fresh_inputs(self, case: CaseSpec) -> bool:
        """Whether a later round of `case` builds anew on input sets of its own round
        (TimingOptions.fresh_inputs; a GPU only: a CPU replays no graph)."""
        return case.timing.fresh_inputs and self.device.device == "cuda"

    def _allocated(self) -> int:
        if self.device.device != "cuda":
            return 0
        import torch

        return torch.cuda.memory_allocated()

    def _keep(self, case: CaseSpec, fn, sets, n_sets: int, guard, built: list, before: int) -> None:
        """Keep a timed graph just built (`built`: [TimedGraph] or []) with its inputs for the case's later
        rounds, when everything kept then fits the budget (KEEP_SHARE)."""
        if not built or case.timing.rounds < 2:
            return
        nbytes = max(0, self._allocated() - before)
        if sum(k.nbytes for k in self.kept.values()) + nbytes <= self.keep_budget:
            self.kept[case.case_id] = Kept(fn, sets, n_sets, guard.watched, built[0], nbytes)

    def _sets_for(self, case: CaseSpec, n_sets: int, generation: int = 1) -> list:
        """The case's input sets. In a sweep on a GPU (`share_inputs`, set by _run_cases) the contenders of a
        shape (headtohead.group_key) that rotate through as many sets (one operand family: _input_sets) read
        one and the same sets, the first contender's, for as long as any of them is timing: two graphs of
        the same GEMM on input sets of their own read apart at the power cap, the same way in every cycle
        of a head-to-head, and on the same inputs they do not (benchmarks/gpu_state/buffers.py, RESULTS.md
        issue 40). Each set is made from the case's seed either way, so the values are the same; a
        contender that wrote into them is undone before any other times on them (restore_shared). With
        fresh_inputs, the first contender of a later round (`generation`) makes that round's sets while
        the last round's are still held (their users carry over), and its contenders share those."""
        from .headtohead import group_key

        dev = self.device.device
        key = group_key(case) if dev == "cuda" and getattr(self, "share_inputs", False) else None
        if key is None:
            return [self._inputs(case, s, dev) for s in range(n_sets)]
        shared = self.__dict__.setdefault("shared_sets", {})  # tests build bare runners
        entry = shared.get((key, n_sets))
        stale = entry is not None and entry.generation < generation and self._fresh_inputs(case)
        if entry is None or stale:
            sets = [self._inputs(case, s, dev) for s in range(n_sets)]  # whole before anyone may take it
            users = set(entry.users) if stale else set()
            entry = shared[(key, n_sets)] = SharedSets(case, sets, _fingerprint(sets), users, generation)
        entry.users.add(case.case_id)
        return entry.sets

    def restore_shared(self, case: CaseSpec) -> Optional[str]:
        """Before a round of `case` (or its unit's head-to-head): the input sets it shares, put back to the
        seed's values in place where a contender wrote into them (a kept graph reads the same tensors).
        Returns what was found changed, for the host's log, or None."""
        for entry in self.__dict__.get("shared_sets", {}).values():
            if case.case_id not in entry.users or _fingerprint(entry.sets) == entry.fingerprint:
                continue
            for s, tensors in enumerate(entry.sets):
                for t, fresh in zip(tensors, self._inputs(entry.made_by, s, self.device.device)):
                    t.copy_(fresh)
            return f"the inputs {case.m}x{case.n}x{case.k}'s contenders share were written into; restored from the seed"
        return None

    def release(self, case_id: Optional[str] = None) -> None:
        """Drop what was kept for a case (all cases: None), and input sets no contender still times on."""
        shared = self.__dict__.get("shared_sets", {})
        if case_id is None:
            self.kept.clear()
            shared.clear()
            return
        self.kept.pop(case_id, None)
        for key, entry in list(shared.items()):
            entry.users.discard(case_id)
            if not entry.users:
                del shared[key]

    def _round_start(self) -> None:
        """Before a round's `prepare`: L2 persistence that anything before set is not this case's doing."""
        if getattr(self, "l2", None) is not None:
            self.l2.reset()

    def math_us(self, case: CaseSpec, spec) -> Optional[float]:
        """The case's tensor math at this GPU's calibrated peak (None: no calibrated peak for its family)."""
        calibration = getattr(self, "calibration", None)  # tests build bare runners
        if calibration is None or spec.family not in calibration.tflops:
            return None
        if case.workload == "moe":
            flops = 2.0 * sum(case.moe.counts) * case.n * case.k
        else:
            flops = 2.0 * case.m * case.n * case.k
        return flops / (calibration.tflops[spec.family] * 1e12) * 1e6

    def load_share(self, case: CaseSpec, spec, per_call_us: float) -> Optional[float]:
        """The share of the calibrated tensor peak a call of `per_call_us` uses: how hard it drives the GPU
        towards its power limit (worker/measure/timing.py Timer.settle_floor). An oracle computes in fp32 off the tensor
        cores: 0. None where there is no calibrated peak."""
        if case.backend in ORACLE_BACKENDS:
            return 0.0
        at_peak = self.math_us(case, spec)
        return None if at_peak is None or per_call_us <= 0 else at_peak / per_call_us

    def _metrics(self, case: CaseSpec, spec, median_us: float):
        import torch

        from ..contract.metrics import gemm_metrics, moe_metrics

        out_bytes = torch.empty((), dtype=getattr(torch, case.out_dtype)).element_size()
        # An oracle computes in fp32 whatever its family: no tensor-core peak is its speed of light.
        calibration = None if case.backend in ORACLE_BACKENDS else self.calibration
        if case.workload == "moe":
            return moe_metrics(
                case.moe.counts,
                case.n,
                case.k,
                spec.family,
                median_us,
                self.device.name or None,
                out_bytes=out_bytes,
                calibration=calibration,
            )
        return gemm_metrics(
            case.m,
            case.n,
            case.k,
            spec.family,
            median_us,
            self.device.name or None,
            out_bytes=out_bytes,
            calibration=calibration,
        )

    def _measure(self, case: CaseSpec, spec, record) -> CaseRecord:
        from ..check.integrity import IntegrityFailure
        from ..check.verify import failure_reason, with_integrity

        t0 = time.perf_counter()
        self._round_start()
        before = self._allocated()
        fn, sets, n_sets = self._prepare(case, spec)
        prepared = time.perf_counter()
        check, integrity_s = self._check(case, spec, fn, sets[0])
        if check.verdict == "fail":
            # A wrong answer is not timed: a fast wrong kernel is not a result.
            return record("failed", failure_reason(check), correctness=check)
        checked = time.perf_counter()
        guard = self._guard(case, spec, fn, sets, first_round=True)
        built = []
        try:
            stats, health, notes = self._time(case, fn, n_sets, guard, keep=built.append)
        except IntegrityFailure as exc:  # caught around the timing: its numbers are not a result
            check = with_integrity(check, exc.findings)
            return record("failed", failure_reason(check), correctness=check)
        self._keep(case, fn, sets, n_sets, guard, built, before)
        stats = self._costs(
            stats, prepare_s=prepared - t0, check_s=checked - prepared, integrity_s=integrity_s + guard.seconds
        )
        metrics = self._metrics(case, spec, stats.median_us)
        del fn, sets
        reason = "; ".join(dict.fromkeys(notes)) if self.device.device == "cuda" else ""
        return record("ok", reason, timing=stats, metrics=metrics, correctness=check, health=health)

    def _references(self, case: CaseSpec, spec, one_set):
        """(oracle, bf16 product or None, Thresholds): what an output of input set `one_set` is judged by,
        the oracle of its operand family (worker/check/verify.py)."""
        from ..check.verify import REFERENCE_SELF, THRESHOLDS

        if case.workload == "moe":
            from ..backends import moe

            a, w, counts = one_set
            exact = moe.oracle("bf16", a, w, counts)
            if spec.option == "reference":  # the oracle itself, run as a backend: judged like any bf16 result
                return exact, None, THRESHOLDS["bf16"]
            return moe.oracle(spec.family, a, w, counts), exact, THRESHOLDS[spec.family]
        from ..backends.fp8 import dequantized_product
        from ..check import nvfp4

        a, b = one_set
        bf16_ref = a.float() @ b.float().T
        if case.backend == "reference-nvfp4":
            return bf16_ref, None, REFERENCE_SELF
        oracle = {
            "bf16": lambda: bf16_ref,
            "fp8": lambda: dequantized_product(a, b),
            "fp4": lambda: nvfp4.reference_gemm(a, b),
        }[spec.family]()
        return oracle, bf16_ref, THRESHOLDS[spec.family]

    @staticmethod
    def _as_output(case: CaseSpec):
        """A call's result as the one tensor its verdict judges (an MoE loop returns one per expert)."""
        if case.workload == "moe":
            from ..backends import moe

            return moe.as_output
        return lambda result: result

    def _check(self, case: CaseSpec, spec, fn, first_set):
        """(verdict, seconds the integrity checks added): the output against the oracle of its operand family
        (and the bf16 product), and whether the call did its work (worker/check/integrity.py)."""
        from ..check.integrity import check_calls, reads_of
        from ..check.verify import THRESHOLDS, expected_output, no_result, verdict, with_integrity

        # An MoE layer's weights can be gigabytes: its activations are the inputs compared.
        inputs = list(first_set[:1] if case.workload == "moe" else first_set)
        oracle, bf16_ref, th = self._references(case, spec, first_set)
        expected = expected_output(case, spec, oracle)  # dtype, shape, device: checked before the values
        t0 = time.perf_counter()
        out, findings, first_s = check_calls(
            lambda: fn(0),
            inputs,
            reads_of(fn, 0),
            self._as_output(case),
            self._synchronize,
            THRESHOLDS[spec.family].max_rel_err,
            expected,
        )
        findings += self.l2.findings() if getattr(self, "l2", None) is not None else []
        spent = time.perf_counter() - t0 - first_s  # the first call is the result check's own
        if out is None:  # nothing to judge (a lazy result): the findings say what it returned
            return no_result(th, findings), spent
        return with_integrity(verdict(out, oracle, bf16_ref, th, expected), findings), spent

    def _check_moe(self, case: CaseSpec, spec, fn, first_set):
        """An MoE layer's verdict alone (tests/test_moe.py checks the per-expert oracle through it)."""
        return self._check(case, spec, fn, first_set)[0]

    def _guard(self, case: CaseSpec, spec, fn, sets, first_round: bool, watched=None):
        """The integrity checks around one timing (integrity.RoundGuard). In the first round the output of
        one timed sample is judged against the oracle of the input set it used; in later ones the call on
        negated inputs after the timing vouches for it (the eager path passed the oracle in round 1)."""
        from ..check.integrity import RoundGuard
        from ..check.verify import THRESHOLDS, verdict

        def against_oracle(out, set_index: int):
            check = verdict(out, *self._references(case, spec, sets[set_index]))
            return None if check.verdict == "pass" else check.detail

        return RoundGuard(
            fn,
            self._as_output(case),
            self._synchronize,
            THRESHOLDS[spec.family].max_rel_err,
            against_oracle if first_round else None,
            getattr(self, "l2", None),
            watched=watched,
        )

    def _synchronize(self) -> None:
        if self.device.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def _input_sets(self, case: CaseSpec, family: str) -> int:
        if self.device.device != "cuda" or case.timing.l2 == "hot" or not self.device.l2_bytes:
            return 1
        operand = {"bf16": 2, "fp8": 1, "fp4": 0.5625}[family]
        if case.backend in ORACLE_BACKENDS:
            # An oracle computes in fp32 (its operands dequantized in every call, or held as fp32): what it
            # streams between two uses of a set is fp32, whatever its inputs are stored as.
            operand = 4
        if case.workload == "moe":
            counts = [c for c in case.moe.counts if c]
            per_set = (sum(counts) + len(counts) * case.n) * case.k * operand
            if per_set >= COLD_L2_FACTOR * self.device.l2_bytes:
                return 1  # one set already streams several L2s of weights per call: each replay starts cold
        else:
            per_set = (case.m + case.n) * case.k * operand
        return max(2, min(MAX_SETS, math.ceil(COLD_L2_FACTOR * self.device.l2_bytes / per_set) + 1))

    @staticmethod
    def _inputs(case: CaseSpec, set_index: int, dev: str):
        import torch

        gen = torch.Generator(device=dev)
        gen.manual_seed(case.seed * 1_000_003 + set_index)
        a = torch.randn((case.m, case.k), generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
        b = torch.randn((case.n, case.k), generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
        return a, b


def run_params(params: WorkerParams, results: Path) -> int:
    """Run every case without a record yet, beating all the while (protocol.heartbeat: torch's import and
    the CUDA start-up included). Returns 0 (failures are records, not exit codes), or EXIT_CANNOT_START
    when this host's Python lacks what any case needs."""
    from ..host.env import collect_facts

    with heartbeat():
        try:
            runner = CaseRunner(params.device)
        except ImportError as exc:  # the host's Python lacks what every case needs: retrying cannot help
            print(
                f"fleetbench: the worker cannot start with {sys.executable}: {type(exc).__name__}: {exc} "
                "(install the worker's dependencies there, e.g. `fleetbench provision`)",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_CANNOT_START
        first_start = not has_facts(results)
        inflight = results.with_name(results.name + ".inflight")
        # A restarted child (after a crash) reads the calibration its predecessor just cached.
        mode = params.calibration if first_start or params.calibration == "off" else "cached"
        runner.calibration = _calibrate(runner, params.cases, mode)
        if first_start:
            from ..host.clocks import CLOCK_ENV

            locked = os.environ.get(CLOCK_ENV)
            facts = collect_facts(runner.device)
            if runner.device.device == "cuda" and runner.clock is None:
                from ..measure.streamclock import StreamClock

                facts.notes.append(f"no SM clock read in the stream (NVML's reading only): {StreamClock.problem}")
            append_record(
                results,
                facts.model_copy(
                    update={
                        "calibration": runner.calibration,
                        "sm_clock_locked_mhz": int(locked) if locked else None,
                        "power_limit_w": runner.probe.power_limit_w() if runner.probe else None,
                    }
                ),
            )
        if mode != "off" and runner.device.device == "cuda":  # where the calibration loaded them before it
            _load_kernel_files(params.cases, inflight)  # the user's code runs from here on, after the facts
        done = done_case_ids(results)
        todo = [c for c in params.cases if c.case_id not in done]
        _run_cases(
            runner,
            todo,
            done,
            params.cases_in_run or len(params.cases),
            results,
            inflight,
            partial=partial_records(results),
        )
        inflight.unlink(missing_ok=True)
    return 0


def partial_records(results: Path) -> dict[str, CaseRecord]:
    """The latest incomplete record of each case in `results` (its rounds so far)."""
    from ..contract.schema import SCHEMA_VERSION

    partial: dict[str, CaseRecord] = {}
    if not results.exists():
        return partial
    for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
        if '"complete":false' not in line:
            continue
        try:
            rec = CaseRecord.model_validate_json(line)
        except ValueError:
            continue
        if rec.schema_version == SCHEMA_VERSION and rec.status == "ok":
            partial[rec.case_id] = rec
    return partial


def mark_inflight(inflight: Path, case_id: str, what: str) -> None:
    """Say which case (and which of its steps) runs now: the supervisor names it if the process dies,
    and stops it when it outlives its limit (counted from this file's time)."""
    inflight.write_text(f"{case_id}\n{what}\n", encoding="utf-8")


def _calibrate(runner: "CaseRunner", cases: list[CaseSpec], mode: str):
    """This GPU's peaks for the operand families of the cases that can run here (None on the CPU)."""
    if mode == "off" or runner.device.device != "cuda":
        return None
    from ..backends import userkernel
    from ..measure.calibrate import calibrate

    families = set()
    for case in cases:
        # A user's file is not run for this: the calibration and the facts are written before any of the
        # user's code runs (the controller judges the user's records by them: worker/contract/physics.py).
        spec = None if case.kernel_sha256 else CATALOG.get(case.backend)
        family = userkernel.declared_family(case.kernel_sha256) if case.kernel_sha256 else spec and spec.family
        if family and not (spec and spec.name == "noop"):  # a plumbing check measures nothing
            families.add(family)
    if not families:
        return None
    # Announced only for what is measured now (a cached peak is read, not measured).
    return calibrate(
        runner.device,
        families,
        mode,
        on_measure=lambda items: emit_progress(event="calibrate", families=items, mode=mode),
    )


def _load_kernel_files(cases: list[CaseSpec], inflight: Path) -> None:
    """Load the user's kernel files of `cases` (their code runs), each marked in flight: a hang there is
    that case's."""
    for case in cases:
        if case.kernel_sha256:
            mark_inflight(inflight, case.case_id, "loading its kernel file")
            _spec_of(case)
    inflight.unlink(missing_ok=True)


def round_order(todo: list[CaseSpec], load: Callable[[CaseSpec], Optional[float]]) -> list[CaseSpec]:
    """The order of every round: the lightest case first, the heaviest last (`load`: the share of the
    GPU's tensor peak a case uses), ties by case id, whatever order the sweep lists them in. What a case
    inherits from the one before it is then the same in every run of the sweep, and a heavy case follows
    one near its own clock and power state instead of a light one at the burst clock; settling
    (worker/measure/timing.py) takes the rest. Where loads are unknown (no calibration: a CPU, `calibration:
    off`) the sweep's order stays."""
    loads = {c.case_id: load(c) for c in todo}
    if any(v is None for v in loads.values()):
        return list(todo)
    return sorted(todo, key=lambda c: (loads[c.case_id], c.case_id))


def _run_cases(
    runner: "CaseRunner",
    todo: list[CaseSpec],
    done: set[str],
    total: int,
    results: Path,
    inflight: Path,
    partial: Optional[dict[str, CaseRecord]] = None,
) -> None:
    """Round 1 of every case, then round 2 of those still timing (in the same order: round_order), and so on
    (module docstring), each case until it is sure (rounds_decision). On a GPU the contenders of a shape are
    one unit: each timed on its own, one after the other, then head-to-head (worker/sweep/headtohead.py), in
    every round. `partial`: cases with rounds already timed, which go on from there."""
    from ..contract.pairing import log_variance, median_prior, pair_round_variance, paired_rounds, work_per_round
    from .headtohead import duel, units_of

    pending: dict[str, CaseRecord] = dict(partial or {})  # ok, rounds so far
    work_variances: dict[str, float] = {}  # per case, its log-work variance over its rounds so far
    pair_variances: dict[tuple, float] = {}  # per two contenders, their paired ratio's between-round variance

    def end(rec: CaseRecord) -> None:
        append_record(results, rec)
        done.add(rec.case_id)
        pending.pop(rec.case_id, None)
        runner.release(rec.case_id)  # its graph and inputs, if kept, are no longer needed
        emit_progress(
            event="end",
            done=len(done),
            total=total,
            case_id=rec.case_id,
            status=rec.status,
            reason=rec.reason[:200],
            median_us=rec.timing.median_us if rec.timing else None,
        )

    def load(case: CaseSpec) -> Optional[float]:
        """Measured in an earlier round where there is one, else as the case would load the GPU at its
        speed of light plus a fixed few microseconds (a rank for round 1, not a measurement)."""
        if getattr(runner, "calibration", None) is None:
            return None
        spec = _spec_of(case)
        if isinstance(spec, str):
            return 0.0
        rec = pending.get(case.case_id)
        if rec is not None and rec.timing is not None:
            share = runner.load_share(case, spec, rec.timing.median_us)
        else:
            at_peak = runner.math_us(case, spec)
            share = runner.load_share(case, spec, (at_peak or 0.0) + runner.timer.tuning.expected_fixed_us)
        return 1.0 if share is None else share  # a family without a calibrated peak: as heavy

    def mark(case: CaseSpec, what: str) -> None:
        mark_inflight(inflight, case.case_id, what)

    grouped = getattr(runner, "device", None) is not None and runner.device.device == "cuda"
    runner.share_inputs = grouped  # every case here ends through end(), which releases what it shared
    units = units_of(todo, grouped)

    def restored(case: CaseSpec) -> None:
        found = runner.restore_shared(case) if grouped else None
        if found:
            print(f"fleetbench: {found}", file=sys.stderr, flush=True)

    passes = max((c.timing.rounds for c in todo), default=1)
    for r in range(passes):
        for unit in unit_order(units, load):
            members = [
                (c, pending.get(c.case_id)) for c in unit if c.case_id not in done and (r == 0 or c.case_id in pending)
            ]
            if not members:
                continue
            for case, first in members:
                this_round = rounds_in(first) + 1 if first is not None else 1
                emit_progress(
                    event="start",
                    done=len(done),
                    total=total,
                    case_id=case.case_id,
                    backend=case.backend,
                    m=case.m,
                    n=case.n,
                    k=case.k,
                    round=this_round,
                    rounds=case.timing.rounds,
                )
            records = []
            for case, first in members:
                restored(case)
                records.append(_alone(runner, case, first, inflight))
            timed = []
            for rec in records:
                if rec.status != "ok" or rec.timing is None or rec.complete:
                    end(rec)
                else:
                    timed.append(rec)
            if len(timed) > 1:
                mark(timed[0].case, "head-to-head with " + ", ".join(r.case.backend for r in timed[1:]))
                for rec in timed:
                    restored(rec.case)
                try:
                    timed = duel(runner, timed, runner.timer.tuning)
                except Exception as exc:  # the pairing is beside the numbers: without it, the rounds stand unpaired
                    print(
                        f"fleetbench: the head-to-head timing of {', '.join(r.case.backend for r in timed)} "
                        f"({timed[0].case.m}x{timed[0].case.n}x{timed[0].case.k}) failed: {type(exc).__name__}: "
                        f"{exc}",
                        file=sys.stderr,
                        flush=True,
                    )
            for rec in timed:
                v = log_variance(work_per_round(rec.timing))
                if v is not None:
                    work_variances[rec.case_id] = v
            for i, a in enumerate(timed):
                for b in timed[i + 1 :]:
                    v = pair_round_variance(paired_rounds(a.timing, b.timing))
                    if v is not None:
                        pair_variances[(a.case_id, b.case_id)] = v
            stop = rounds_decision(
                timed, median_prior(list(work_variances.values())), median_prior(list(pair_variances.values()))
            )
            for rec in timed:
                if stop is not None or rounds_in(rec) >= rec.case.timing.rounds:
                    why = stop or ("fixed" if _min_rounds(rec.case) >= rec.case.timing.rounds else "cap")
                    end(
                        rec.model_copy(
                            update={"complete": True, "timing": rec.timing.model_copy(update={"rounds_stop": why})}
                        )
                    )
                else:
                    append_record(results, rec)
                    pending[rec.case_id] = rec


def _min_rounds(case: CaseSpec) -> int:
    return min(case.timing.min_rounds, case.timing.rounds)


def rounds_decision(
    records: list[CaseRecord], work_prior: Optional[float] = None, pair_prior: Optional[float] = None
) -> Optional[str]:
    """Whether a unit's cases (their records after this round; contenders timed together stop together,
    so their rounds stay paired) have had rounds enough: "fixed" (min_rounds == rounds, reached), "cap",
    "target" (each case's interval of its time or its work within ±round_target, and each head-to-head
    ratio's within ±pair_target), or None: another round. `work_prior`, `pair_prior`: the run's median
    log-work variance and paired-ratio between-round variance so far, which moderate each case's and
    each pair's (worker/contract/pairing.py case_is_sure, pair_interval)."""
    from ..contract.pairing import case_is_sure, pair_interval, paired_rounds

    if not records:
        return None
    opts = records[0].case.timing
    done = min(rounds_in(r) for r in records)
    if done < _min_rounds(records[0].case):
        return None
    if done >= opts.rounds:
        return "fixed" if _min_rounds(records[0].case) >= opts.rounds else "cap"
    if not all(case_is_sure(r.timing, r.case.timing.round_target, work_prior) for r in records):
        return None
    for i, a in enumerate(records):
        for b in records[i + 1 :]:
            interval = pair_interval(paired_rounds(a.timing, b.timing), pair_prior)
            if interval is not None and interval.half_width > opts.pair_target:
                return None
    return "target"


def _alone(runner: "CaseRunner", case: CaseSpec, first: Optional[CaseRecord], inflight: Path) -> CaseRecord:
    """One round of a case timed on its own: its record after it (an ok one with `complete` False), or the
    final record of a case that failed or could not run."""
    this_round = rounds_in(first) + 1 if first is not None else 1
    mark_inflight(inflight, case.case_id, f"round {this_round} of at most {case.timing.rounds}")
    if first is None:
        rec = runner.run(case)
        return rec if rec.status != "ok" or rec.timing is None else rec.model_copy(update={"complete": False})
    try:
        stats, health, seconds = runner.again(case, first.timing.calls_per_sample, this_round)
    except IntegrityFailure as exc:  # this round's numbers are not a result, nor are the earlier ones
        from ..check.verify import failure_reason, with_integrity

        check = with_integrity(first.correctness, exc.findings)
        return first.model_copy(
            update={
                "status": "failed",
                "timing": None,
                "metrics": None,
                "complete": True,
                "correctness": check,
                "reason": f"round {this_round} of {case.timing.rounds}: {failure_reason(check)}",
            }
        )
    except Exception as exc:
        return first.model_copy(
            update={
                "status": "failed",
                "timing": None,
                "metrics": None,
                "complete": True,
                "reason": f"round {this_round} of {case.timing.rounds}: {type(exc).__name__}: {exc}"[:500],
                "traceback": traceback.format_exc()[-4000:],
            }
        )
    return add_rounds(first, stats, health, seconds, case.timing.rounds).model_copy(update={"complete": False})


def unit_order(units: list[list[CaseSpec]], load: Callable[[CaseSpec], Optional[float]]) -> list[list[CaseSpec]]:
    """The order of a round's units (round_order over units): by their heaviest case, lightest first."""
    if not units:
        return []
    firsts = {id(u): max(round_order(u, load), key=lambda c: (load(c) or 0.0, c.case_id)) for u in units}
    order = round_order([firsts[id(u)] for u in units], load)
    by_case = {firsts[id(u)].case_id: u for u in units}
    return [by_case[c.case_id] for c in order]


def _spec_of(case: CaseSpec):
    """The case's backend spec (a user kernel's from its file, loaded once), or why there is none."""
    if case.kernel_sha256:
        from ..backends import userkernel

        loaded = userkernel.load(case.backend, case.kernel_sha256)
        return loaded if isinstance(loaded, str) else loaded.spec
    spec = CATALOG.get(case.backend)
    return spec or f"unknown backend {case.backend!r} (this worker knows: {', '.join(CATALOG)})"


def load_params(path: Path) -> WorkerParams:
    return WorkerParams.model_validate_json(Path(path).read_text(encoding="utf-8"))


def crashed_record(case: CaseSpec, reason: str, status: str = "crashed") -> CaseRecord:
    """What the supervisor records for a case its child did not finish (crashed, or hung and stopped)."""
    return CaseRecord(
        case_id=case.case_id, case=case, status=status, reason=reason, started_at=now_iso(), duration_s=0.0
    )


def find_case(params: WorkerParams, case_id: str) -> Optional[CaseSpec]:
    return next((c for c in params.cases if c.case_id == case_id), None)
