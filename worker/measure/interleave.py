"""Head-to-head timing: the contenders of one shape timed in the same breath.

Two backends timed one after the other each meet the GPU in their own clock and power state: under the
power cap a heavy GEMM's rounds move 5-13% with the clock the controller holds, so a 2% difference
between them drowns (issue 40). Timed interleaved, they share that state: the group's graphs are
replayed in turn, one sample (a ~2 ms replay) of each per cycle. Cycles come in twos, the second the
first reversed (A B C, C B A), and each two rotated from the last (B C A, A C B, ...): over a two every
pair of members trades places, so a place that reads fast or slow (first after a host sync, say)
cancels in the two's mean; worker/contract/pairing.py estimates per two. Settling runs the same cycles until the
group's per-cycle GPU time stops drifting, so the samples are taken in the state the group holds the
GPU in; sampling ends on whole twos.

Between cycles a stamp kernel in the same stream (worker/measure/streamclock.py) reads the SM clock each cycle
really ran at, so a round's time can be split into its clock and its cycles (the work).

Each member still gets its own median, CI and samples (its samples are its cycle readings, in order),
so every figure that a case shows alone means what it meant before.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Optional

from ..contract.schema import Stats, TimingOptions
from ..contract.stats import summarize
from .timing import SETTLE_MAX_FACTOR, TimedGraph, _enough, drifting


class GroupTiming(NamedTuple):
    """What one interleaved timing gave: per member (in the order given) its Stats, the SM clock of each
    sample cycle from the stream (None where no stamp could be read), the GPU ms the group settled, and
    wall seconds of settling and sampling."""

    stats: list[Stats]
    cycle_mhz: list[Optional[float]]
    settle_ms: float
    settle_s: float
    samples_s: float


def cycle_order(members: int, cycle: int) -> list[int]:
    """The members' order in a cycle (module docstring): two by two, rotated by one each two, the second
    of a two the first reversed."""
    shift = (cycle // 2) % members
    order = list(range(shift, members)) + list(range(shift))
    return order if cycle % 2 == 0 else order[::-1]


def time_group(
    graphs: list[TimedGraph],
    opts: TimingOptions,
    floor_ms: float,
    settled: Optional[Callable[[], None]] = None,
    clock=None,
    cycles: Optional[int] = None,
) -> GroupTiming:
    """Settle the group (at least `floor_ms` of GPU time, then until no member drifts; at most
    SETTLE_MAX_FACTOR x settle_ms), tell `settled()`, then sample cycle by cycle until every member has
    enough samples by its own rule (timing._enough, the budget shared: `budget_s` per member). The
    settled tail (the latest third of the settling cycles, judged drift-free) is the first of the samples.
    `clock`: a streamclock.StreamClock, stamped between cycles; None: no cycle clocks. `cycles`: sample
    exactly that many cycles (rounded up to whole twos) instead of the members' own rule."""
    k = len(graphs)
    series: list[list[float]] = [[] for _ in graphs]
    stamps: list[Optional[int]] = []
    began: list[float] = []

    def one_cycle(c: int) -> None:
        began.append(time.perf_counter())
        stamps.append(clock.stamp() if clock is not None else None)
        for i in cycle_order(k, c):
            series[i].append(graphs[i].replay_us())

    def cycle_ms(c: int) -> float:
        return sum(series[i][c] * graphs[i].calls for i in range(k)) / 1e3

    if clock is not None:
        clock.reset()
    t0 = time.perf_counter()
    totals: list[float] = []  # each cycle's GPU ms
    tail_from = None
    limit_ms = SETTLE_MAX_FACTOR * opts.settle_ms
    if floor_ms > 0 or opts.settle_ms > 0:
        while sum(totals) < max(limit_ms, floor_ms):
            one_cycle(len(began))
            totals.append(cycle_ms(len(began) - 1))
            if sum(totals) >= floor_ms and len(began) >= 6 and len(began) % 2 == 0 and not drifting(totals):
                tail_from = len(began) - len(began) // 3
                tail_from += tail_from % 2  # the samples begin on a whole two
                break
    if settled is not None:
        settled()
    first = tail_from if tail_from is not None else len(began)
    if first % 2:  # settling ended on half a two: that half is settling too
        one_cycle(len(began))
        first += 1
    settle_ms = sum(cycle_ms(c) for c in range(first))
    started = began[first] if tail_from is not None and first < len(began) else time.perf_counter()
    settle_s = started - t0
    budget = opts.model_copy(update={"budget_s": opts.budget_s * k})

    def more() -> bool:
        taken = len(began) - first
        if cycles is not None:
            return taken < cycles + cycles % 2
        return bool(taken % 2) or not all(_enough(s[first:], budget, started) for s in series)

    while more():
        one_cycle(len(began))
    end = clock.stamp() if clock is not None else None
    samples_s = time.perf_counter() - started
    cycle_mhz: list[Optional[float]] = []
    if clock is not None:
        import torch

        torch.cuda.synchronize()
        bounds = stamps[first:] + [end]
        cycle_mhz = [clock.mhz(a, b) for a, b in zip(bounds, bounds[1:])]
    stats = [
        summarize(s[first:], method="cuda-graph", calls_per_sample=g.calls, l2=opts.l2).model_copy(
            update={"settle_ms": round(settle_ms, 1)}
        )
        for s, g in zip(series, graphs)
    ]
    return GroupTiming(stats, cycle_mhz, round(settle_ms, 1), settle_s, samples_s)
