"""One round of a shape's contenders, timed head-to-head (worker/interleave.py), with every check a case
timed alone gets.

Each member is first armed on its own, as worker/runner.py arms a case timed alone: round 1 prepares its
inputs, checks its result against the oracle, warms up, captures its timed graph and runs the integrity
checks that come before a timing; a later round replays the graph round 1 kept (or builds its own). A
member that fails there ends with its own record and the rest go on. The armed members are then timed
together, and each one's integrity checks after the timing run on its own again: a member that fails
them is failed, its numbers dropped, while the others keep theirs (their samples were their own replays).
"""
from __future__ import annotations

import secrets
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Optional

from .integrity import IntegrityFailure
from .protocol import now_iso
from .rounds import add_rounds
from .schema import CaseRecord, CaseSpec, RoundStats, TimingOptions
from .timing import LATER_WARMUP_MS


def group_key(case: CaseSpec) -> Optional[str]:
    """What a case's contenders share (its shape, dtypes, seed, label, routing and timing options), or
    None when the case is timed alone (head_to_head off, per-call events, burst timings)."""
    t = case.timing
    if not t.head_to_head or t.mode == "events" or t.state == "burst":
        return None
    moe = case.moe.model_dump_json() if case.moe is not None else ""
    return "|".join(map(str, (case.workload, case.m, case.n, case.k, case.out_dtype, case.seed, case.label, moe,
                              t.model_dump_json())))


def units_of(cases: list[CaseSpec], grouped: bool) -> list[list[CaseSpec]]:
    """The cases as the units a round times: contenders together (when `grouped`: a GPU), else one by one
    (the oracles always: they are references, not contenders); in the order the cases come."""
    if not grouped:
        return [[c] for c in cases]
    from .backends import ORACLE_BACKENDS

    units: dict[str, list[CaseSpec]] = {}
    for c in cases:
        # An oracle (fp32 off the tensor cores) is no contender, and its load would set the group's clock.
        key = None if c.backend in ORACLE_BACKENDS else group_key(c)
        units.setdefault(key if key is not None else f"alone:{c.case_id}", []).append(c)
    return list(units.values())


@dataclass
class Armed:
    """A member ready to be timed: its call, inputs, guard and timed graph, and what arming cost."""

    case: CaseSpec
    spec: object
    first: Optional[CaseRecord]  # its record so far (None: this is its first round)
    fn: object
    sets: list
    n_sets: int
    guard: object
    t0: float
    started_at: str
    before_alloc: int
    prepare_s: float = 0.0
    check_s: float = 0.0
    integrity_s: float = 0.0  # the checks before the timing (round 1: beside the oracle's)
    check: object = None  # round 1's Correctness
    graph: object = None
    built: list = field(default_factory=list)  # [graph] when this round built it
    phases: dict = field(default_factory=dict)  # warmup_s, capture_s


class HeadToHead:
    """Times units of contenders on `runner` (a worker.runner.CaseRunner, whose helpers prepare, check,
    guard and keep). `mark(case, what)` says which case is in flight (the supervisor's file)."""

    def __init__(self, runner, spec_of: Callable, mark: Callable[[CaseSpec, str], None]):
        self.runner, self.spec_of, self.mark = runner, spec_of, mark

    def round(self, members: list[tuple[CaseSpec, Optional[CaseRecord]]], cap: int) -> list[CaseRecord]:
        """One round of every member, timed together: per member its record after this round (an ok record
        with this round joined, `complete` False: the caller decides when a case has had rounds enough), or
        the final record of a member that failed or could not run."""
        out: dict[str, CaseRecord] = {}
        armed: list[Armed] = []
        for case, first in members:
            self.mark(case, "arming for a head-to-head round")
            result = self._arm(case, first)
            if isinstance(result, Armed):
                armed.append(result)
            else:
                out[case.case_id] = result
        if armed:
            self.mark(armed[0].case, "head-to-head with " + ", ".join(a.case.backend for a in armed[1:]))
            for a, rec in zip(armed, self._time(armed, cap)):
                out[a.case.case_id] = rec
        return [out[c.case_id] for c, _ in members]

    # -- arming -------------------------------------------------------------------------------------------
    def _arm(self, case: CaseSpec, first: Optional[CaseRecord]):
        t0, started_at = time.perf_counter(), now_iso()
        checked: list = []  # round 1's verdict, once known: an integrity failure after it is added to it
        try:
            return self.runner._freeing_kept(lambda: self._arm_once(case, first, t0, started_at, checked))
        except IntegrityFailure as exc:
            return self._failed(case, first, t0, started_at, exc, check=checked[-1] if checked else None)
        except Exception as exc:
            return self._failed(case, first, t0, started_at, exc, traceback.format_exc())

    def _arm_once(self, case: CaseSpec, first: Optional[CaseRecord], t0: float, started_at: str, checked: list):
        from .verify import failure_reason

        runner = self.runner
        spec = self.spec_of(case)
        if first is None:
            early = runner.before_measure(case, spec, t0, started_at)
            if early is not None:
                return early
            runner._round_start()
            before = runner._allocated()
            fn, sets, n_sets = runner._prepare(case, spec)
            prepared = time.perf_counter()
            check, integrity_s = runner._check(case, spec, fn, sets[0])
            if check.verdict == "fail":  # a wrong answer is not timed
                return runner.record_of(case, t0, started_at, "failed", failure_reason(check), correctness=check)
            checked.append(check)
            check_end = time.perf_counter()
            guard = runner._guard(case, spec, fn, sets, first_round=True)
            armed = Armed(case, spec, None, fn, sets, n_sets, guard, t0, started_at, before, prepared - t0,
                          check_end - prepared, integrity_s, check)
            opts = case.timing
        else:
            runner._round_start()
            kept = runner.kept.get(case.case_id)
            before = runner._allocated()
            if kept is not None:
                guard = runner._guard(case, spec, kept.fn, kept.sets, first_round=False, watched=kept.watched)
                armed = Armed(case, spec, first, kept.fn, kept.sets, kept.n_sets, guard, t0, started_at, before,
                              graph=kept.graph, phases={"warmup_s": 0.0, "capture_s": 0.0})
            else:
                fn, sets, n_sets = runner._prepare(case, spec)
                guard = runner._guard(case, spec, fn, sets, first_round=False)
                armed = Armed(case, spec, first, fn, sets, n_sets, guard, t0, started_at, before,
                              prepare_s=time.perf_counter() - t0)
            opts = case.timing.model_copy(update={
                "warmup_ms": min(case.timing.warmup_ms, LATER_WARMUP_MS),
                "calls_per_sample": case.timing.calls_per_sample or first.timing.calls_per_sample})
        self._arm_graph(armed, opts)
        return armed

    def _arm_graph(self, a: Armed, opts: TimingOptions) -> None:
        """The checks before a timing, the timed graph (built unless kept), and its one checked sample."""
        import torch

        from . import timing

        a.guard.before_timing()
        if a.graph is None:
            before = torch.cuda.current_stream()
            try:
                a.graph = timing.build_graph(a.guard.watched, a.n_sets, opts, before,
                                             lambda us: self.runner.load_share(a.case, a.spec, us))
            except RuntimeError as exc:
                a.guard.capture_failed(exc)
                raise
            finally:
                if torch.cuda.current_stream() != before:  # a capture that failed leaves its stream current
                    torch.cuda.set_stream(before)
            a.built.append(a.graph)
            a.phases = dict(timing.last_phases)
        a.guard.timed_once(a.graph.replay_once)

    # -- timing -------------------------------------------------------------------------------------------
    def _time(self, armed: list[Armed], cap: int) -> list[CaseRecord]:
        from . import timing
        from .health import assess, cpu_counters, host_reference_us, round_environment
        from .interleave import time_group

        runner = self.runner
        opts = armed[0].case.timing
        probe = runner.probe
        cpu_before = cpu_counters()
        t0 = time.perf_counter()
        before = probe.snapshot() if probe else None

        def settled() -> None:  # health is judged from the end of settling, as for a case timed alone
            nonlocal before
            before = probe.snapshot() if probe else None

        loads = [runner.load_share(a.case, a.spec, a.graph.per_call_s * 1e6) for a in armed]
        heaviest = None if any(v is None for v in loads) else max(loads)
        floor = timing.settle_floor(opts.settle_ms, heaviest)
        t_timing = time.perf_counter()
        group = time_group([a.graph for a in armed], opts, floor, settled, getattr(runner, "clock", None))
        timing_s = time.perf_counter() - t_timing
        after = probe.snapshot() if probe else None
        health = assess(before, after) if before is not None and after is not None else None
        env = round_environment(cpu_before, cpu_counters(), before, after, host_reference_us())
        if probe is not None:
            from .env import gpu_processes

            env["gpu_processes"] = gpu_processes()
        probe_s = time.perf_counter() - t0 - timing_s
        clocks = [m for m in group.cycle_mhz if m is not None]
        mhz = round(statistics.median(clocks), 1) if clocks else None
        pair_id = secrets.token_hex(6) if len(armed) > 1 else None
        share = timing_s / len(armed)  # a member's share of the group's timing
        out = []
        for a, stats in zip(armed, group.stats):
            if opts.mode == "cupti":
                stats = timing._kernel_time(a.graph.graph, a.graph.calls, opts, stats)
            try:
                a.guard.after_timing()
                runner._physics(a.case, stats.median_us)
            except IntegrityFailure as exc:
                out.append(self._failed(a.case, a.first, a.t0, a.started_at, exc, check=a.check))
                continue
            phases = {**a.phases, "settle_s": group.settle_s / len(armed), "samples_s": group.samples_s / len(armed)}
            one = RoundStats(median_us=stats.median_us, n=stats.n, rel_ci=stats.rel_ci, settle_ms=group.settle_ms,
                             timing_s=round(share, 4), probe_s=round(probe_s / len(armed), 4),
                             timing_phases={k: round(v, 4) for k, v in phases.items()},
                             prepare_s=round(a.prepare_s, 4), check_s=round(a.check_s, 4) if a.first is None else None,
                             integrity_s=round(a.integrity_s + a.guard.seconds, 4),
                             sm_clock_stream_mhz=mhz, pair_id=pair_id, **env)
            stats = stats.model_copy(update={"rounds": [one]})
            runner._keep(a.case, a.fn, a.sets, a.n_sets, a.guard, a.built, a.before_alloc)
            seconds = time.perf_counter() - a.t0
            if a.first is None:
                metrics = runner._metrics(a.case, a.spec, stats.median_us)
                notes = "; ".join(dict.fromkeys(timing.last_notes)) if opts.mode == "cupti" else ""
                out.append(runner.record_of(a.case, a.t0, a.started_at, "ok", notes, timing=stats, metrics=metrics,
                                            correctness=a.check, health=health, complete=False))
            else:
                joined = add_rounds(a.first, stats, health, seconds, cap)
                out.append(joined.model_copy(update={"complete": False}))
        return out

    def _failed(self, case: CaseSpec, first: Optional[CaseRecord], t0: float, started_at: str,
                exc: BaseException, tb: str = "", check=None) -> CaseRecord:
        """The final record of a member that failed in this round (its earlier rounds are no result either)."""
        from .verify import failure_reason, with_integrity

        base = (first.correctness if first else None) or check
        if isinstance(exc, IntegrityFailure) and base is not None:
            correctness = with_integrity(base, exc.findings)
            reason = failure_reason(correctness)
            extra = {"correctness": correctness}
        elif isinstance(exc, IntegrityFailure):
            reason, extra = "; ".join(str(f) for f in exc.findings), {}
        else:
            reason = f"{type(exc).__name__}: {exc}"
            extra = {"traceback": tb[-4000:]} if tb else {}
        if first is None:
            return self.runner.record_of(case, t0, started_at, "failed", reason[:500], **extra)
        done = len(first.timing.rounds) + 1 if first.timing else 1
        return first.model_copy(update={"status": "failed", "timing": None, "metrics": None, "complete": True,
                                        "reason": f"round {done} of {case.timing.rounds}: {reason}"[:500], **extra})
