"""Pure statistics of timed samples: one timing's Stats from its samples, and a case's rounds as one
Stats (the worker joins them as it times, the controller as it merges attempts). Stdlib only."""

from __future__ import annotations

import math
import statistics

from .pairing import t95
from .schema import Stats


def summarize(samples_us: list[float], *, method: str, calls_per_sample: int, l2: str) -> Stats:
    """Statistics over per-call samples; `rel_ci` is the distribution-free CI of the median."""
    ordered = sorted(samples_us)
    n = len(ordered)
    median = statistics.median(ordered)
    lo, hi = median_ci(ordered)
    return Stats(
        method=method,
        median_us=median,
        p10_us=quantile(ordered, 0.10),
        p90_us=quantile(ordered, 0.90),
        mean_us=statistics.fmean(ordered),
        stdev_us=statistics.stdev(ordered) if n > 1 else 0.0,
        n=n,
        rel_ci=((hi - lo) / 2 / median) if median > 0 else math.inf,
        calls_per_sample=calls_per_sample,
        l2=l2,  # type: ignore[arg-type]
        samples_us=[round(s, 4) for s in samples_us],
    )


def combine_rounds(parts: list[Stats]) -> Stats:
    """One case's rounds as one Stats: the median of the round medians; the CI from how the rounds
    differ (t interval of their log medians: each round settled and sampled in its own place of the sweep,
    so their spread is what the next run will see too); the samples and round details of every round. A part may hold
    several rounds already joined (a case resumed after an interruption): the result is over every
    round of every part."""
    if len(parts) == 1:
        return parts[0]
    medians = [r.median_us for p in parts for r in (p.rounds or [p])]
    logs = [math.log(m) for m in medians]
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    samples = [s for p in parts for s in p.samples_us]
    ordered = sorted(samples)
    first = parts[0]
    return Stats(
        method=first.method,
        median_us=statistics.median(medians),
        p10_us=quantile(ordered, 0.10),
        p90_us=quantile(ordered, 0.90),
        mean_us=statistics.fmean(ordered),
        stdev_us=statistics.stdev(ordered),
        n=len(ordered),
        rel_ci=math.expm1(half),
        calls_per_sample=first.calls_per_sample,
        l2=first.l2,
        samples_us=samples,
        rounds=[x for p in parts for x in p.rounds],
        settle_ms=None if any(p.settle_ms is None for p in parts) else sum(p.settle_ms for p in parts),
        replay_median_us=None
        if any(p.replay_median_us is None for p in parts)
        else statistics.median(p.replay_median_us for p in parts),
    )


def quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted data."""
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median_ci(ordered: list[float], z: float = 1.96) -> tuple[float, float]:
    """95% confidence interval of the median from order statistics (binomial, normal approximation)."""
    n = len(ordered)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return ordered[lo], ordered[max(lo, hi)]
