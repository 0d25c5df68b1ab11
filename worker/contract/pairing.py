"""Pure statistics of paired timings and of a case's rounds: the head-to-head ratio of two cases timed
interleaved (worker/measure/interleave.py), its 95% interval, and when a case has had rounds enough. Shared by
the worker (which stops a case's rounds on them) and the controller (which shows and judges them).
Stdlib only.

A head-to-head ratio B/A: every cycle of an interleaved timing gives one pair (A's and B's sample, taken
within ~2 ms of each other in the same GPU state), and cycles come in twos in which A and B trade places
(worker/measure/interleave.py): the mean log ratio of a two cancels what a place does. Per round the estimate is
the median of its twos; over rounds, their mean. Its standard error is the larger of two estimates: from how the
rounds' estimates differ (t with R - 1 degrees of freedom: what moves from one round, one GPU state, to
the next), and from the pairs' own scatter within the rounds (the median's standard error, normal):
the first alone is unreliable with 2 rounds, the second alone blind to a state the rounds do not share.
"""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple, Optional

MAD_SCALE = 1.4826  # MAD of a normal distribution -> its standard deviation
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # standard error of a median / that of a mean, normal data
# Two-sided 95% Student t quantiles by degrees of freedom (beyond the table, the normal's 1.96).
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    50: 2.009,
}


def t95(df: float) -> float:
    """The two-sided 95% t quantile for `df` degrees of freedom (the next smaller tabulated df: conservative)."""
    if df < 1:
        return math.inf
    return T95[max(d for d in T95 if d <= df)] if df <= 50 else 1.96


class Interval(NamedTuple):
    """A ratio and its 95% interval (ratios, not logs), from `rounds` rounds and `pairs` pairs in all."""

    ratio: float
    low: float
    high: float
    rounds: int
    pairs: int

    @property
    def half_width(self) -> float:
        """The interval's half-width relative to the ratio (log scale: symmetric)."""
        return math.expm1((math.log(self.high) - math.log(self.low)) / 2)


def paired_rounds(a, b) -> list[list[float]]:
    """log(B/A) of every pair, per round the two Stats were timed head-to-head in (the same pair_id, as
    many paired samples). `a`, `b`: worker.contract.schema.Stats."""
    b_by_pair = {r.pair_id: r.paired_us for r in b.rounds if r.pair_id and r.paired_us}
    out = []
    for r in a.rounds:
        ys = b_by_pair.get(r.pair_id) if r.pair_id else None
        if not ys or not r.paired_us or len(ys) != len(r.paired_us):
            continue
        logs = [math.log(y / x) for x, y in zip(r.paired_us, ys) if x > 0 and y > 0]
        if logs:
            out.append(logs)
    return out


def _median_se(logs: list[float]) -> float:
    med = statistics.median(logs)
    mad = statistics.median(abs(x - med) for x in logs) * MAD_SCALE
    return MEDIAN_SE_FACTOR * mad / math.sqrt(len(logs))


def twos(logs: list[float]) -> list[float]:
    """A round's per-cycle log ratios as the mean of each two (the cycles 0-1, 2-3, ...)."""
    return [(logs[i] + logs[i + 1]) / 2 for i in range(0, len(logs) - 1, 2)]


def _kept_twos(rounds: list[list[float]]) -> list[list[float]]:
    """Each round's twos (`twos`), for the rounds of at least 3 twos: those that estimate B/A."""
    return [t for t in map(twos, rounds) if len(t) >= 3]


def pair_round_variance(rounds: list[list[float]]) -> Optional[float]:
    """The variance between the rounds' estimates of log(B/A) (each the median of its twos); None below 2
    such rounds."""
    per_round = [statistics.median(t) for t in _kept_twos(rounds)]
    return statistics.variance(per_round) if len(per_round) >= 2 else None


class PairEstimate(NamedTuple):
    """log(B/A) of a head-to-head pairing, its standard error and that error's degrees of freedom (inf:
    from the pairs' own scatter), from `rounds` rounds and `pairs` pairs in all."""

    log_ratio: float
    log_se: float
    df: float
    rounds: int
    pairs: int


def pair_estimate(rounds: list[list[float]], prior: Optional[float] = None) -> Optional[PairEstimate]:
    """log(B/A) and its standard error from the log ratios of each round's cycles (module docstring); None
    without a round of at least 3 twos. `prior`: the run's median pair_round_variance, toward which the
    between-round variance is moderated (`moderate`): two rounds alone give t with 1 degree of freedom."""
    pairs = sum(len(r) for r in rounds)
    rounds = _kept_twos(rounds)
    if not rounds:
        return None
    per_round = [statistics.median(r) for r in rounds]
    point = statistics.fmean(per_round)
    within = math.sqrt(sum(_median_se(r) ** 2 for r in rounds)) / len(rounds)
    own = statistics.variance(per_round) if len(per_round) >= 2 else None
    if own is None and prior is None:  # one round and nothing to borrow: its pairs' own scatter alone
        between, df = 0.0, 0.0
    else:
        var, df = moderate(own, len(rounds), prior)
        between = math.sqrt(var)
    if between > within:
        return PairEstimate(point, between, df, len(rounds), pairs)
    return PairEstimate(point, within, math.inf, len(rounds), pairs)


def pair_interval(rounds: list[list[float]], prior: Optional[float] = None) -> Optional[Interval]:
    """B/A and its 95% interval (pair_estimate's, by t where the rounds' spread sets it, else normal); None
    without a round of at least 3 twos."""
    found = pair_estimate(rounds, prior)
    if found is None:
        return None
    half = t95(found.df) * found.log_se
    point = found.log_ratio
    return Interval(math.exp(point), math.exp(point - half), math.exp(point + half), found.rounds, found.pairs)


# The cases of one run share one GPU, and their work per round (time x in-stream clock) moves from round
# to round by similar shares: a case's variance of log work is moderated toward the run's median,
# worth PRIOR_DF rounds (empirical Bayes, as limma moderates per-gene variances; docs/COMPARING.md).
PRIOR_DF = 4.0


def log_variance(values: list[float]) -> Optional[float]:
    """The sample variance of the logs of `values`; None below 2 values or with one not positive."""
    if len(values) < 2 or min(values) <= 0:
        return None
    return statistics.variance([math.log(v) for v in values])


def moderate(own: Optional[float], n: int, prior: Optional[float]) -> tuple[float, float]:
    """(the variance of a mean of n rounds, its degrees of freedom) from their own variance `own` (None: a
    single round), moderated toward `prior` with PRIOR_DF degrees of freedom where there is one."""
    d = n - 1.0
    if prior is None:
        return own / n, d
    return (PRIOR_DF * prior + d * (own or 0.0)) / (PRIOR_DF + d) / n, PRIOR_DF + d


def moderated(values: list[float], prior: Optional[float] = None) -> Optional[tuple[float, float]]:
    """(the variance of the mean of the logs of `values`, its degrees of freedom), the case's own variance
    moderated toward `prior` (`moderate`); None below 2 values."""
    own = log_variance(values)
    return None if own is None else moderate(own, len(values), prior)


def median_prior(variances: list[float]) -> Optional[float]:
    """The prior of `moderated`: the median of a run's (or a side's) variances; None below 3 of them (too
    few to stand for the run)."""
    return statistics.median(variances) if len(variances) >= 3 else None


def rounds_interval(values: list[float], prior: Optional[float] = None) -> Optional[float]:
    """The relative half-width of the 95% interval of a case's rounds (t on their logs, moderated toward
    `prior` where there is one); None below 2."""
    found = moderated(values, prior)
    if found is None:
        return None
    var, df = found
    return math.expm1(t95(df) * math.sqrt(var))


def stream_clock_mhz(timing) -> Optional[float]:
    """The SM clock a case's own timings ran at: the median over its rounds of the clock read in its
    stream; None unless every round has one (CPU, records before format 9)."""
    clocks = [r.sm_clock_stream_mhz for r in timing.rounds]
    if not clocks or any(c is None or c <= 0 for c in clocks):
        return None
    return statistics.median(clocks)


def work_per_round(timing) -> list[float]:
    """Each round's median time x its in-stream SM clock (µs x MHz = cycles per call); [] unless every
    round has a clock read in the stream."""
    clocks = [r.sm_clock_stream_mhz for r in timing.rounds]
    if not timing.rounds or any(c is None or c <= 0 for c in clocks):
        return []
    return [r.median_us * c for r, c in zip(timing.rounds, clocks)]


def case_is_sure(timing, target: float, work_prior: Optional[float] = None) -> bool:
    """Whether a case's rounds know its time, or its work (time x in-stream clock, its spread moderated
    toward `work_prior`: the run's median log-work variance), within ±target: a power-capped GEMM's time
    moves with the clock the power controller holds in each round, its cycles do not
    (docs/COMPARING.md). The time is not moderated: power-capped cases' rounds move ten times more than
    light ones', and one prior would understate them."""
    for values, prior in (([r.median_us for r in timing.rounds], None), (work_per_round(timing), work_prior)):
        half = rounds_interval(values, prior)
        if half is not None and half <= target:
            return True
    return False
