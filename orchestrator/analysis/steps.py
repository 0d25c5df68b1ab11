"""Step detection over a case's history: where did its level move, by how much, how sure are we.

A series is one number per run (a case's median, oldest first). Like asv's regression detection it
looks for a piecewise-constant level, here by binary segmentation on the logs of the values: the split
that best explains the segment as two levels is a step when its two sides' medians differ both beyond
the series' own noise (z > Z_STEP) and beyond the threshold the user cares about; each side is then
searched again. The noise is estimated from differences between consecutive runs (their median
absolute value), which a few steps barely move. Pure Python: series are short.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

Z_STEP = 4.0  # a step must stand this many standard errors above the series' noise
MIN_POINTS = 3  # fewer values than this have no steps to speak of
MIN_NOISE = 0.002  # 0.2%: below this, timing noise is not credible (identical values, a synthetic series)


@dataclass(frozen=True)
class Step:
    index: int  # the first point at the new level
    before: float  # median of the values before (down to the previous step)
    after: float  # median of the values after (up to the next step)
    ratio: float  # after / before (> 1: slower when the values are times)
    low: float  # 95% interval of the ratio
    high: float
    z: float

    def as_dict(self) -> dict:
        return asdict(self)


def noise(logs: list[float]) -> float:
    """Robust standard deviation of one point (log scale), from consecutive differences."""
    diffs = [abs(b - a) for a, b in zip(logs, logs[1:])]
    if not diffs:
        return MIN_NOISE
    return max(MIN_NOISE, statistics.median(diffs) * 1.4826 / math.sqrt(2))


def detect_steps(values: list[float], threshold: float, z_limit: float = Z_STEP) -> list[Step]:
    """Steps in `values` (positive numbers, oldest first), in order; a step is larger than `threshold`
    (relative) and z_limit standard errors. Fewer than MIN_POINTS values, or any value that is not a
    positive finite number, give none."""
    if len(values) < MIN_POINTS or not all(0 < v < math.inf for v in values):
        return []
    logs = [math.log(v) for v in values]
    sigma = noise(logs)
    found: list[Step] = []

    n = len(logs)

    def search(lo: int, hi: int) -> None:
        # Where to split: the largest drop in squared deviations (binary segmentation's CUSUM gain on
        # the means), over splits leaving at least 2 points a side; one point may stand alone only at
        # the end of the series, where a new level has had one run so far.
        best = None
        for k in range(lo + 1, hi):
            if (k - lo < 2) or (hi - k < 2 and hi != n):
                continue
            left_mean = statistics.fmean(logs[lo:k])
            right_mean = statistics.fmean(logs[k:hi])
            gain = (k - lo) * (hi - k) / (hi - lo) * (right_mean - left_mean) ** 2
            if best is None or gain > best[0]:
                best = (gain, k)
        if best is None:
            return
        k = best[1]
        # Whether it is a step: the medians of the two sides, against the noise and the threshold.
        left, right = statistics.median(logs[lo:k]), statistics.median(logs[k:hi])
        se = sigma * math.sqrt(1 / (k - lo) + 1 / (hi - k))
        z = abs(right - left) / se
        if z <= z_limit or abs(math.exp(right - left) - 1) <= threshold:
            return
        found.append(
            Step(
                index=k,
                before=math.exp(left),
                after=math.exp(right),
                ratio=math.exp(right - left),
                low=math.exp(right - left - 1.96 * se),
                high=math.exp(right - left + 1.96 * se),
                z=z,
            )
        )
        search(lo, k)
        search(k, hi)

    search(0, len(logs))
    return sorted(found, key=lambda s: s.index)
