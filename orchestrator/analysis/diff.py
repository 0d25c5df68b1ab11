"""Compare measurements with statistics: run vs run (or host vs host), and every host vs the fleet.

One statistic per comparison: A µs and B µs are each side's median (of its rounds' medians; of its
samples for records of format < 3), and B/A is exactly B µs / A µs (> 1: B is slower). A case is timed in
independent rounds spread over its run (worker/sweep/runner.py); the ratio's 95% interval comes from how much
each side's rounds differ (the standard error of its log rounds), so it knows how much a case moves from
one run to the next, not only the noise between consecutive samples of one run. (A side timed in one
round: the standard error of its median from its samples, and the note says the interval knows only
the noise within a run.) Sides swapped, the ratio and interval are exactly mirrored, and so is the
verdict against a threshold t (t either way: B at least 1 + t times slower or faster than A):
  SLOWER     the whole interval is above 1 + t        FASTER   the whole interval is below 1 / (1 + t)
  SAME       the whole interval lies within those     AMBIGUOUS  anything else (the effect is near t)
  UNSTABLE   not to be judged on this machine: a side's rounds are too noisy (CI beyond ±NOISE_LIMIT),
             or a change with a side tainted (the GPU throttled), with a CPU-timed case on a busy CPU,
             or with the environment moved as much as the effect (the GPU's SM clock, throttling, other
             processes on it; for CPU-timed cases the CPU's own speed on a fixed loop, its load or
             steal time): is it the kernel, or the machine? Not a regression until a stable re-run
             says so.
The same measurement on both sides (a run against itself) is SAME, whatever its noise. A p-value
(Welch's t on the log medians) is reported beside it. Per backend, its effect over all its cases has an
interval and a verdict of its own (backend_effect): a backend 2-3% slower everywhere is SLOWER even where
no one case's rounds can say so. Only a confirmed SLOWER (a case's, or a backend's) makes `diff` exit 1.

Cases match by case id: what is measured (worker/contract/schema.py IDENTITY_FIELDS), never how it was timed.
Timing options that differ between the sides are listed as settings, beside the host facts that
differ, before any number. Two sides that share no case compared nothing: that is an input error.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
from scipy import stats

from worker.contract.catalog import CATALOG, builtin_family
from worker.contract.pairing import (
    PRIOR_DF,
    log_variance,
    median_prior,
    moderated,
    pair_estimate,
    paired_rounds,
    stream_clock_mhz,
    t95,
    work_per_round,
)
from worker.contract.schema import CaseRecord

from ..errors import InputError
from ..runs.slots import SlotData, load_slots
from ..runs.store import RunStore, resolve_run
from ..runs.workerarchive import worker_code_digest
from .headtohead import pair_prior, shape_of
from .noise import NOISY_REL_CI

FACT_FIELDS = (
    "gpu_name",
    "compute_capability",
    "driver",
    "cuda",
    "torch",
    "flashinfer",
    "sgl_kernel",
    "triton",
    "python",
    "worker_version",
    "device",
    "sm_count",
    "gpu_memory_gb",
    "power_limit_w",
)
MAD_SCALE = 1.4826  # MAD of a normal distribution -> its standard deviation
OUTLIER_Z = 3.5


@dataclass
class Side:
    """One side of a comparison: slots of a run (all, or one host, or one host's GPU)."""

    store: RunStore
    slots: list[SlotData]
    label: str


def resolve_side(runs_dir, ref: str) -> Side:
    """`RUN`, `RUN:host` or `RUN:host:gpu` (RUN may be `latest`, an id prefix or a folder)."""
    run_ref, host, gpu = (ref.split(":") + [None, None])[:3] if ":" in ref else (ref, None, None)
    store = resolve_run(runs_dir, run_ref)
    slots = load_slots(store)
    if host is not None:
        slots = [s for s in slots if s.host == host and (gpu is None or str(s.gpu) == gpu)]
        if not slots:
            raise InputError(f"'{ref}': run {store.run_id} has no host '{host}'" + (f" GPU {gpu}" if gpu else ""))
    return Side(store=store, slots=slots, label=ref if host else store.run_id)


@dataclass
class FactDiff:
    field: str
    a: str
    b: str


# What a case's row notes (CaseDiff.findings, in order); views/diffnotes.py words each into its `note`.
NOTE_ONLY_IN = "only-in"  # side: the one the case is on
NOTE_NOT_RUN = "not-run"  # a, b: each side's status
NOTE_NOT_OK = "not-ok"  # a, b: each side's status; a_integrity, b_integrity: the checks its kernel failed
NOTE_NOT_A_TIME = "not-a-time"  # a time of 0 µs or less on a side
NOTE_SAME_MEASUREMENT = "same-measurement"  # one measurement on both sides (of two runs)
NOTE_SINGLE_SAMPLE = "single-sample"  # no interval
NOTE_TOO_NOISY = "too-noisy"  # a_rel_ci, b_rel_ci: UNSTABLE, a side known too poorly to judge
NOTE_TAINTED_SIDES = "tainted-sides"  # sides: UNSTABLE, a change timed while a GPU throttled
NOTE_ENVIRONMENT = "environment"  # moved (an ENV_* Finding): UNSTABLE, the machine moved as much
NOTE_NOISY = "noisy"  # a_rel_ci, b_rel_ci
NOTE_TAINTED = "tainted"  # side, reason (the record's, or "")
NOTE_INCOMPLETE = "incomplete"  # side, rounds: timed before it stopped
NOTE_ONE_ROUND = "one-round"  # a side of one round: the interval knows only the noise within a run
NOTE_METHODS_DIFFER = "methods-differ"  # timing methods (or L2 states) differ
NOTE_CLOCK_SPLIT = "clock-split"  # ratio, judged_on and the ClockSplit's clock and work (see split_facts)
NOTE_ANCHORED = "anchored"  # anchor, ratio, low, high, judged (on it), agrees (with the time and the work),
# moved_with: the anchor's own B/A where it disagrees by having moved the way the case did (anchor_moved_with)
# How the environment moved (environment_moved; NOTE_ENVIRONMENT's moved).
ENV_SM_CLOCK = "sm-clock"  # a_mhz, b_mhz: NVML's, medians over the rounds
ENV_THROTTLED = "throttled"  # reasons
ENV_GPU_PROCESSES = "gpu-processes"  # processes: at most, on the GPU
ENV_HOST_REF = "host-ref"  # a_us, b_us: the host's reference loop
ENV_CPU_LOAD = "cpu-load"  # a, b: load per core
ENV_CPU_STEAL = "cpu-steal"  # pct
ENV_BUSY_CPU = "busy-cpu"  # load: per core, at most


@dataclass
class Finding:
    """A decision: one of the NOTE_* or ENV_* codes and the facts its words need."""

    code: str
    facts: dict = field(default_factory=dict)


@dataclass
class CaseDiff:
    key: str  # slot/case or case, as matched
    label: str
    backend: str
    m: int
    n: int
    k: int
    a_us: Optional[float]
    b_us: Optional[float]
    ratio: Optional[float]  # b_us / a_us
    ci_low: Optional[float]  # its 95% interval, as computed however wide (views bound what they print)
    ci_high: Optional[float]
    p_value: Optional[float]
    verdict: str  # FASTER SLOWER SAME AMBIGUOUS UNSTABLE; ONLY-A / ONLY-B (on one side only); NOT-OK;
    #               NOT-RUN (unsupported or unavailable on both sides: nothing was asked of the kernel)
    note: str = ""
    host: str = ""  # the slot, when the sides are matched host by host
    a_rel_ci: Optional[float] = None  # each side's own noise: its median's CI half-width, as `show` gives it
    b_rel_ci: Optional[float] = None
    noisy: str = ""  # the sides whose rel_ci is beyond NOISY_REL_CI: "", "A", "B" or "A, B"
    tainted: str = ""  # the sides timed while the GPU throttled (the record's health check), same form
    # The clock split (format >= 9, both sides with the SM clock read in the stream every round): B/A =
    # clock x work, clock = A's MHz / B's MHz (what B's clock alone makes of its time), work = B/A of
    # time x clock (cycles per call) with its interval. clock_bound: time x clock held still where the
    # time moved (its interval at most half as wide), so the work can be judged where clocks wandered.
    clock_a_mhz: Optional[float] = None
    clock_b_mhz: Optional[float] = None
    clock_ratio: Optional[float] = None
    work_ratio: Optional[float] = None
    work_low: Optional[float] = None
    work_high: Optional[float] = None
    clock_bound: Optional[bool] = None
    # Against the anchor (compare_sides' `anchor`, timed beside the case in each run): B/A of the case's
    # paired ratio to it, (X/anchor in B) / (X/anchor in A), with its interval; anchor_agrees: that
    # ratio lies within the case's own time interval (and work interval, where split), as it must if the
    # anchor only cancelled the GPU state the two shared (anchored_interval).
    anchor: str = ""
    anchor_ratio: Optional[float] = None
    anchor_low: Optional[float] = None
    anchor_high: Optional[float] = None
    anchor_agrees: Optional[bool] = None
    judged_on: str = "time"  # "time"; "work" where the verdict is the work's (clock_bound); "anchor"
    findings: list[Finding] = field(default_factory=list)  # what `note` says, as codes (views word it)

    def as_dict(self) -> dict:
        """What is stored and shown: the findings as worded in `note`."""
        out = asdict(self)
        del out["findings"]
        return out


@dataclass
class Comparison:
    a: str
    b: str
    threshold: float
    facts: list[FactDiff] = field(default_factory=list)
    settings: list[FactDiff] = field(default_factory=list)  # timing options that differ between the sides
    cases: list[CaseDiff] = field(default_factory=list)
    same_run: bool = False  # both sides are the same slots of the same run: each case against itself
    anchor: str = ""  # the backend the cases were judged against where it was timed beside them ("" none)
    anchor_refused: list[FactDiff] = field(default_factory=list)  # why no case was: its facts that differ

    @property
    def anchored(self) -> int:
        """How many rows were judged against the anchor (judged_on "anchor")."""
        return sum(c.judged_on == "anchor" for c in self.cases)

    @property
    def regressions(self) -> list[CaseDiff]:
        return [c for c in self.cases if c.verdict == "SLOWER"]

    def counts(self) -> dict[str, int]:
        """Cases per verdict, in the order verdicts are read: changes first, one-sided rows last."""
        order = ("SLOWER", "FASTER", "UNSTABLE", "AMBIGUOUS", "SAME", "NOT-OK", "ONLY-A", "ONLY-B", "NOT-RUN")
        found = {v: sum(c.verdict == v for c in self.cases) for v in order}
        return {v: n for v, n in found.items() if n}

    def by_backend(self) -> list[dict]:
        """Per backend: the cases timed on both sides, the geometric mean of their B/A ratios, how many
        were confirmed slower or faster, and the backend's effect over all its cases (backend_effect):
        the line a release note would quote."""
        out: dict[str, dict] = {}
        logs: dict[str, list[float]] = {}
        on_work: dict[str, int] = {}
        on_anchor: dict[str, int] = {}
        for c in self.cases:
            row = out.setdefault(
                c.backend, {"backend": c.backend, "compared": 0, "log_sum": 0.0, "slower": 0, "faster": 0, "not_ok": 0}
            )
            if c.ratio is not None:
                row["compared"] += 1
                row["log_sum"] += math.log(c.ratio)
            if c.ratio is not None and c.verdict != "UNSTABLE":  # not to be judged here: nor in the sum of them
                anchored = c.anchor_ratio if c.anchor_agrees else None
                work = None if anchored is not None else admissible_work(c, self.threshold)
                logs.setdefault(c.backend, []).append(math.log(anchored or work or c.ratio))
                on_work[c.backend] = on_work.get(c.backend, 0) + (work is not None)
                on_anchor[c.backend] = on_anchor.get(c.backend, 0) + (anchored is not None)
            row["slower"] += c.verdict == "SLOWER"
            row["faster"] += c.verdict == "FASTER"
            row["not_ok"] += c.verdict == "NOT-OK"
        rows = []
        for row in out.values():
            log_sum = row.pop("log_sum")
            row["geomean_ratio"] = math.exp(log_sum / row["compared"]) if row["compared"] else None
            effect = backend_effect(logs.get(row["backend"], []), self.threshold)
            row.update(
                effect_ratio=effect and effect.ratio,
                effect_low=effect and effect.low,
                effect_high=effect and effect.high,
                effect_verdict=effect and effect.verdict,
                effect_on_work=on_work.get(row["backend"], 0),
                effect_on_anchor=on_anchor.get(row["backend"], 0),
            )
            rows.append(row)
        return rows

    @property
    def backend_regressions(self) -> list[dict]:
        """The backends slower over all their cases (backend_effect), whether or not a case is flagged."""
        return [b for b in self.by_backend() if b["effect_verdict"] == "SLOWER"]


# A backend's effect needs this many cases: its interval is by t over them (df = cases - 1).
MIN_EFFECT_CASES = 3


@dataclass
class BackendEffect:
    """A backend's B/A over all its cases compared (geometric mean) with its 95% interval and verdict."""

    ratio: float
    low: float
    high: float
    cases: int
    verdict: str


def admissible_work(c: CaseDiff, threshold: float) -> Optional[float]:
    """A row's work ratio (cycles per call, B/A) where its work may stand for its time (_work_judges: the
    time moved with the clock, or the clocks are within half the threshold), whatever its verdict; None:
    the row counts by its time."""
    if c.work_ratio is None or c.clock_ratio is None or c.clock_bound is None:
        return None
    if c.clock_bound or abs(math.log(c.clock_ratio)) <= math.log1p(threshold) / 2:
        return c.work_ratio
    return None


def backend_effect(log_ratios: list[float], threshold: float) -> Optional[BackendEffect]:
    """What one backend's change is over all its cases: the mean of their log B/A (each row's ratio
    against the anchor where it agrees with the row's own, else its work where admissible_work allows,
    else its time) with a 95% interval by t from their spread over the cases,
    judged against ±threshold as a case is (classify_log). A change of 2-3% everywhere that no single
    case's rounds can resolve is plain over a dozen cases (docs/COMPARING.md); a change in one case
    alone widens the interval rather than moving the verdict. None below MIN_EFFECT_CASES cases."""
    if len(log_ratios) < MIN_EFFECT_CASES:
        return None
    mean, half = mean_interval(log_ratios)
    return BackendEffect(
        _exp(mean),
        _exp(mean - half),
        _exp(mean + half),
        len(log_ratios),
        classify_log(mean - half, mean + half, threshold),
    )


def mean_interval(logs: list[float]) -> tuple[float, float]:
    """The mean of `logs` (at least 2) and its 95% half-width by t over them: a backend's effect over its
    cases (backend_effect), a host's over its cases (hosteffect.estimate)."""
    return statistics.fmean(logs), t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))


class NothingCompared(InputError):
    """The two sides share no case: a comparison of nothing never passes."""


def _facts_of(side: Side) -> dict[str, str]:
    """Facts of a side; where its hosts disagree among themselves the values are joined."""
    values: dict[str, set] = {}
    for s in side.slots:
        if s.facts is None:
            continue
        for f in FACT_FIELDS:
            values.setdefault(f, set()).add(str(getattr(s.facts, f)))
    return {f: " | ".join(sorted(v)) for f, v in values.items()}


# Facts a worker before some format did not record (power_limit_w: format 11), written "None": a difference only
# where both sides know them.
FACTS_SINCE = frozenset({"power_limit_w"})


def fact_differences(a: Side, b: Side) -> list[FactDiff]:
    fa, fb = _facts_of(a), _facts_of(b)
    return [
        FactDiff(f, fa.get(f, "?"), fb.get(f, "?"))
        for f in FACT_FIELDS
        if fa.get(f) != fb.get(f) and not (f in FACTS_SINCE and "None" in (fa.get(f), fb.get(f)))
    ]


MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # standard error of a median / that of a mean, normal data


@dataclass
class Spread:
    """How precisely one side knows its median, on the log scale: a standard error and its degrees of
    freedom (inf: from many samples)."""

    log_se: float
    df: float


def spread_of(timing) -> Optional[Spread]:
    """From the rounds' log medians (>= 2 rounds), else from the samples' log spread (their MAD); None
    when a single sample leaves nothing to estimate."""
    medians = [r.median_us for r in timing.rounds]
    if len(medians) >= 2:
        logs = np.log(np.asarray(medians, dtype=float))
        return Spread(float(logs.std(ddof=1) / math.sqrt(len(logs))), len(logs) - 1.0)
    if len(timing.samples_us) < 2:
        return None
    logs = np.log(np.asarray(timing.samples_us, dtype=float))
    mad = float(np.median(np.abs(logs - np.median(logs)))) * MAD_SCALE
    return Spread(MEDIAN_SE_FACTOR * mad / math.sqrt(len(logs)), math.inf)


@dataclass
class LogInterval:
    """log(B/A) and its 95% interval; p the two-sided p-value of no difference."""

    point: float
    low: float
    high: float
    p: float


def log_ratio_interval(a_median: float, b_median: float, sa: Spread, sb: Spread) -> LogInterval:
    """Welch's t on the two log medians; swapping the sides mirrors it exactly (every term is symmetric
    in the sides and the point only changes sign)."""
    point = math.log(b_median) - math.log(a_median)
    va, vb = sa.log_se**2, sb.log_se**2
    se = math.sqrt(va + vb)
    if se == 0:
        return LogInterval(point, point, point, 1.0 if point == 0 else 0.0)
    parts = (va**2 / sa.df if sa.df < math.inf else 0.0) + (vb**2 / sb.df if sb.df < math.inf else 0.0)
    df = (va + vb) ** 2 / parts if parts > 0 else math.inf
    half = float(stats.t.ppf(0.975, df)) * se
    p = float(2 * stats.t.sf(abs(point) / se, df))
    return LogInterval(point, point - half, point + half, p)


# How far the environment may move before a verdict is UNSTABLE (see environment_moved).
CLOCK_SHARE_OF_EFFECT = 0.5  # a clock (or CPU speed) change this share of the effect (in log terms) explains it
BUSY_LOAD_PER_CORE = 0.75  # a host this loaded (1-minute load average per CPU) is busy ...
LOAD_DIFFERENCE = 0.25  # ... and a difference this large between the sides moves CPU timings
STEAL_PCT = 2.0  # CPU time stolen by the hypervisor during a round
# A side whose median is known no better than this (its rel_ci) cannot confirm or rule out a change of a
# few percent: a busy 2-core CPU gives rounds ±50% apart and more.
NOISE_LIMIT = 0.25


def environment_moved(ra: CaseRecord, rb: CaseRecord, ratio: float, clock: bool = True) -> Optional[Finding]:
    """Why the machine rather than the kernel may explain the effect between the sides (their environments
    differ as much as the effect, or a CPU-timed case shared a busy CPU), or None. `clock`: whether NVML's
    SM clock counts (not where the clock split, from the clock read in the stream, names its part). The
    Finding is one of the ENV_* codes."""
    rounds_a, rounds_b = ra.timing.rounds, rb.timing.rounds
    effect = abs(float(np.log(ratio)))

    def median_of(rounds, field):
        values = [getattr(r, field) for r in rounds if getattr(r, field) is not None]
        return float(np.median(values)) if values else None

    ca, cb = median_of(rounds_a, "sm_clock_mhz"), median_of(rounds_b, "sm_clock_mhz")
    if clock and ca and cb and abs(float(np.log(cb / ca))) >= CLOCK_SHARE_OF_EFFECT * effect:
        return Finding(ENV_SM_CLOCK, {"a_mhz": ca, "b_mhz": cb})
    throttled = sorted({t for r in [*rounds_a, *rounds_b] for t in r.throttle_reasons})
    if throttled:
        return Finding(ENV_THROTTLED, {"reasons": throttled})
    shared = max((r.gpu_processes or 0 for r in [*rounds_a, *rounds_b]), default=0)
    if shared:
        return Finding(ENV_GPU_PROCESSES, {"processes": shared})
    if ra.timing.method == "cpu-wallclock":  # a GPU timed by graph replay does not wait on the host's CPU
        ha, hb = median_of(rounds_a, "host_ref_us"), median_of(rounds_b, "host_ref_us")
        if ha and hb and abs(float(np.log(hb / ha))) >= CLOCK_SHARE_OF_EFFECT * effect:
            return Finding(ENV_HOST_REF, {"a_us": ha, "b_us": hb})
    la = max((r.load_per_core for r in rounds_a if r.load_per_core is not None), default=None)
    lb = max((r.load_per_core for r in rounds_b if r.load_per_core is not None), default=None)
    if la is not None and lb is not None and max(la, lb) >= BUSY_LOAD_PER_CORE and abs(la - lb) >= LOAD_DIFFERENCE:
        return Finding(ENV_CPU_LOAD, {"a": la, "b": lb})
    steal = max((r.steal_pct for r in [*rounds_a, *rounds_b] if r.steal_pct is not None), default=0.0)
    if steal >= STEAL_PCT:
        return Finding(ENV_CPU_STEAL, {"pct": steal})
    if "cpu-wallclock" in (ra.timing.method, rb.timing.method):  # other processes share its cores
        busy = max((r.load_per_core for r in [*rounds_a, *rounds_b] if r.load_per_core is not None), default=None)
        if busy is not None and busy >= BUSY_LOAD_PER_CORE:
            return Finding(ENV_BUSY_CPU, {"load": busy})
    return None


def _sides(flags: tuple[bool, bool]) -> str:
    return ", ".join(side for side, flagged in zip("AB", flags) if flagged)


def classify(low: float, high: float, threshold: float) -> str:
    """The verdict of an interval of B/A (ratios) against ±threshold."""
    return classify_log(math.log(low), math.log(high), threshold)


def classify_log(low: float, high: float, threshold: float) -> str:
    """The verdict of an interval of log(B/A): the threshold is the same factor either way, so swapping
    the sides swaps SLOWER and FASTER and leaves the others."""
    bound = math.log1p(threshold)
    if low > bound:
        return "SLOWER"
    if high < -bound:
        return "FASTER"
    if low >= -bound and high <= bound:
        return "SAME"
    return "AMBIGUOUS"


# Time x clock "holds still" where its interval is at most this share of the time's (clock_bound).
CLOCK_BOUND_SHARE = 0.5


@dataclass
class ClockSplit:
    """B/A = clock x work for two sides whose every round has its in-stream SM clock (clock_split)."""

    clock_a_mhz: float
    clock_b_mhz: float
    clock_ratio: float
    work: LogInterval
    clock_bound: bool


def clock_split(
    ta, tb, time_interval: LogInterval, priors: tuple[Optional[float], Optional[float]] = (None, None)
) -> Optional[ClockSplit]:
    """The clock split of two sides' timings (worker.contract.schema.Stats), or None where a side has fewer than 2
    rounds or a round without an in-stream clock. `priors`: each side's work_prior, which moderates its
    spread (moderated_spread); None: the case's own rounds alone."""
    wa, wb = work_per_round(ta), work_per_round(tb)
    if len(wa) < 2 or len(wb) < 2:
        return None
    sa, sb = moderated_spread(wa, priors[0]), moderated_spread(wb, priors[1])
    work = log_ratio_interval(float(np.median(wa)), float(np.median(wb)), sa, sb)
    ca, cb = stream_clock_mhz(ta), stream_clock_mhz(tb)  # every round has one: work_per_round said so
    own = log_ratio_interval(float(np.median(wa)), float(np.median(wb)), moderated_spread(wa), moderated_spread(wb))
    bound = (own.high - own.low) <= CLOCK_BOUND_SHARE * (time_interval.high - time_interval.low)
    return ClockSplit(ca, cb, ca / cb, work, bound)


def work_prior(records) -> Optional[float]:
    """A side's prior for its cases' work spread (worker.contract.pairing.moderated): the median variance
    of log work per round over its ok cases that have it; None below 3 such cases."""
    found = [
        log_variance(work_per_round(rec.timing))
        for rec in records
        if rec is not None and rec.status == "ok" and rec.timing is not None
    ]
    return median_prior([v for v in found if v is not None])


# A case whose own work spread is beyond what the run's cases share (its variance against the prior, by F at
# this level: a cell that runs at two levels from round to round) is not moderated, as limma's robust
# empirical Bayes gives hypervariable genes less prior weight (Phipson et al. 2016): the prior would make a
# case that does not know its work look sure of it.
HYPERVARIABLE_LEVEL = 0.99


def hypervariable(values: list[float], prior: Optional[float]) -> bool:
    """Whether the log variance of `values` (>= 2 rounds) is beyond the HYPERVARIABLE_LEVEL point of F with
    (rounds - 1, PRIOR_DF) degrees of freedom times `prior` (no prior: False)."""
    own = log_variance(values)
    if not prior or own is None:
        return False
    return own > prior * float(stats.f.ppf(HYPERVARIABLE_LEVEL, len(values) - 1, PRIOR_DF))


def moderated_spread(values: list[float], prior: Optional[float] = None) -> Spread:
    """The standard error of the log mean of `values` (>= 2 rounds), moderated toward `prior` unless the
    case is hypervariable."""
    var, df = moderated(values, None if hypervariable(values, prior) else prior)
    return Spread(math.sqrt(var), df)


def _work_judges(split: ClockSplit, threshold: float) -> bool:
    """Whether a row may be judged on its work: where its time moved with the clock (clock_bound), or where
    the sides' clocks are within half the threshold, so that time and work cannot part by more than that
    even for a case whose time does not follow the clock (a launch-bound one)."""
    return split.clock_bound or abs(math.log(split.clock_ratio)) <= math.log1p(threshold) / 2


def _split_fields(split: Optional[ClockSplit]) -> dict:
    if split is None:
        return {}
    return dict(
        clock_a_mhz=round(split.clock_a_mhz, 1),
        clock_b_mhz=round(split.clock_b_mhz, 1),
        clock_ratio=split.clock_ratio,
        work_ratio=_exp(split.work.point),
        work_low=_exp(split.work.low),
        work_high=_exp(split.work.high),
        clock_bound=split.clock_bound,
    )


def split_facts(ratio: float, split: ClockSplit, judged_on: str) -> dict:
    """A row's clock split as NOTE_CLOCK_SPLIT's facts: B/A, the clock's part (its ratio, each side's MHz),
    the work's (its ratio and interval), what the verdict was judged on, whether time × clock held still."""
    return dict(
        ratio=ratio,
        clock_ratio=split.clock_ratio,
        clock_a_mhz=split.clock_a_mhz,
        clock_b_mhz=split.clock_b_mhz,
        work=_exp(split.work.point),
        work_low=_exp(split.work.low),
        work_high=_exp(split.work.high),
        judged_on=judged_on,
        clock_bound=split.clock_bound,
    )


def _status_facts(ra: CaseRecord, rb: CaseRecord) -> dict:
    """Each side's status, with the integrity checks its kernel failed when that is why."""

    def failed(rec: CaseRecord) -> list[str]:
        return list((rec.correctness.integrity if rec.correctness is not None else None) or [])

    return {"a": ra.status, "b": rb.status, "a_integrity": failed(ra), "b_integrity": failed(rb)}


def compare_records(
    key: str,
    ra: Optional[CaseRecord],
    rb: Optional[CaseRecord],
    threshold: float,
    same_run: bool = False,
    priors: tuple[Optional[float], Optional[float]] = (None, None),
    anchored: Optional[tuple[str, LogInterval, float]] = None,
) -> CaseDiff:
    """One case's row. same_run: the sides are known to be one run (its rows need no note of their own).
    priors: each side's work_prior (clock_split). anchored: the anchor's name, the case's B/A against it
    and the anchor's own B/A (anchored_intervals); the second may judge a change the time and work cannot."""
    case = (ra or rb).case
    base = dict(
        key=key,
        label=case.label,
        backend=case.backend,
        m=case.m,
        n=case.n,
        k=case.k,
        host=key.split("/", 1)[0] if "/" in key else "",
    )
    a_us = ra.timing.median_us if ra and ra.timing else None
    b_us = rb.timing.median_us if rb and rb.timing else None
    if ra is None or rb is None:
        return CaseDiff(
            **base,
            a_us=a_us,
            b_us=b_us,
            ratio=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            verdict="ONLY-B" if ra is None else "ONLY-A",
            findings=[Finding(NOTE_ONLY_IN, {"side": "B" if ra is None else "A"})],
        )
    if {ra.status, rb.status} <= {"unsupported", "unavailable"}:
        return CaseDiff(
            **base,
            a_us=None,
            b_us=None,
            ratio=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            verdict="NOT-RUN",
            findings=[Finding(NOTE_NOT_RUN, {"a": ra.status, "b": rb.status})],
        )
    if ra.status != "ok" or rb.status != "ok" or not ra.timing or not rb.timing:
        return CaseDiff(
            **base,
            a_us=a_us,
            b_us=b_us,
            ratio=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            verdict="NOT-OK",
            findings=[Finding(NOTE_NOT_OK, _status_facts(ra, rb))],
        )
    ta, tb = ra.timing, rb.timing
    if min([ta.median_us, tb.median_us, *ta.samples_us, *tb.samples_us]) <= 0:
        return CaseDiff(
            **base,
            a_us=a_us,
            b_us=b_us,
            ratio=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            verdict="NOT-OK",
            findings=[Finding(NOTE_NOT_A_TIME)],
        )
    flags = dict(
        a_rel_ci=ta.rel_ci,
        b_rel_ci=tb.rel_ci,
        noisy=_sides((ta.rel_ci > NOISY_REL_CI, tb.rel_ci > NOISY_REL_CI)),
        tainted=_sides((bool(ra.health and ra.health.tainted), bool(rb.health and rb.health.tainted))),
    )
    ratio = b_us / a_us
    if ta == tb:  # one measurement on both sides: nothing moved, whatever its noise
        return CaseDiff(
            **base,
            a_us=a_us,
            b_us=b_us,
            ratio=ratio,
            ci_low=ratio,
            ci_high=ratio,
            p_value=1.0,
            verdict="SAME",
            findings=[] if same_run else [Finding(NOTE_SAME_MEASUREMENT)],
            **flags,
        )
    notes = []
    sa, sb = spread_of(ta), spread_of(tb)
    if sa is None or sb is None:
        return CaseDiff(
            **base,
            a_us=a_us,
            b_us=b_us,
            ratio=ratio,
            ci_low=None,
            ci_high=None,
            p_value=None,
            verdict="AMBIGUOUS",
            findings=[Finding(NOTE_SINGLE_SAMPLE)],
            **flags,
        )
    interval = log_ratio_interval(a_us, b_us, sa, sb)
    verdict = classify_log(interval.low, interval.high, threshold)
    split = clock_split(ta, tb, interval, priors)
    judged_on = "time"
    if split is not None and _work_judges(split, threshold) and verdict not in ("SLOWER", "FASTER"):
        on_work = classify_log(split.work.low, split.work.high, threshold)
        if on_work in ("SLOWER", "FASTER"):  # the time moved with the clock; its cycles did not
            verdict, judged_on = on_work, "work"
    agrees = None
    if anchored is not None:
        agrees = anchor_agrees(anchored[1], interval, split, threshold)
        if agrees and verdict not in ("SLOWER", "FASTER"):
            on_anchor = classify_log(anchored[1].low, anchored[1].high, threshold)
            if on_anchor in ("SLOWER", "FASTER"):  # what the GPU state did to both, the ratio cancels
                verdict, judged_on = on_anchor, "anchor"
    why_unstable = None
    if verdict != "SAME" and max(ta.rel_ci, tb.rel_ci) > NOISE_LIMIT and judged_on == "time":
        why_unstable = Finding(NOTE_TOO_NOISY, {"a_rel_ci": ta.rel_ci, "b_rel_ci": tb.rel_ci})
    elif verdict in ("SLOWER", "FASTER"):
        if flags["tainted"]:
            why_unstable = Finding(NOTE_TAINTED_SIDES, {"sides": flags["tainted"]})
        else:
            # With the clock read in the stream on both sides the split names the clock's part; a slower
            # clock is still slower (docs/COMPARING.md), so only the rest of the environment can unsettle it.
            moved = environment_moved(ra, rb, ratio, clock=split is None)
            if moved:
                why_unstable = Finding(NOTE_ENVIRONMENT, {"moved": moved})
    if why_unstable:
        verdict = "UNSTABLE"
        notes.append(why_unstable)
        if judged_on == "anchor":  # the anchor judged a change the environment then unsettled: nothing judged
            judged_on = "time"
    elif flags["noisy"]:
        notes.append(Finding(NOTE_NOISY, {"a_rel_ci": ta.rel_ci, "b_rel_ci": tb.rel_ci}))
    for side, rec in zip("AB", (ra, rb)):
        if rec.health and rec.health.tainted:
            notes.append(Finding(NOTE_TAINTED, {"side": side, "reason": rec.health.taint_reason}))
    for side, rec in zip("AB", (ra, rb)):
        if not rec.complete:
            notes.append(Finding(NOTE_INCOMPLETE, {"side": side, "rounds": len(rec.timing.rounds)}))
    if len(ta.rounds) < 2 or len(tb.rounds) < 2:
        notes.append(Finding(NOTE_ONE_ROUND))
    if (ta.method, ta.l2) != (tb.method, tb.l2):
        notes.append(Finding(NOTE_METHODS_DIFFER))
    if split is not None:
        notes.append(Finding(NOTE_CLOCK_SPLIT, split_facts(ratio, split, judged_on)))
    anchor_fields = {}
    if anchored is not None:
        name, rel, own = anchored
        anchor_fields = dict(
            anchor=name,
            anchor_ratio=_exp(rel.point),
            anchor_low=_exp(rel.low),
            anchor_high=_exp(rel.high),
            anchor_agrees=agrees,
        )
        notes.append(
            Finding(
                NOTE_ANCHORED,
                dict(
                    anchor=name,
                    ratio=_exp(rel.point),
                    low=_exp(rel.low),
                    high=_exp(rel.high),
                    judged=judged_on == "anchor",
                    agrees=agrees,
                    moved_with=anchor_moved_with(own, interval) if agrees is False else None,
                ),
            )
        )
    return CaseDiff(
        **base,
        a_us=a_us,
        b_us=b_us,
        ratio=ratio,
        ci_low=_exp(interval.low),
        ci_high=_exp(interval.high),
        p_value=interval.p,
        verdict=verdict,
        findings=notes,
        judged_on=judged_on,
        **_split_fields(split),
        **anchor_fields,
        **flags,
    )


def _exp(x: float) -> float:
    """exp, held within floats: an interval from wildly edited records must not overflow (JSON has no inf)."""
    return math.exp(max(-700.0, min(700.0, x)))


def compare_sides(
    a: Side, b: Side, threshold: float, anchor: Optional[str] = None, anchor_process_sd: Optional[float] = None
) -> Comparison:
    """Cases matched by (slot, case) when both sides hold the same hosts, else by case alone. `anchor`: a
    backend each case is also judged against where both sides timed it beside the case (anchored_intervals),
    unless a fact it depends on differs between the sides (anchor_refusals). `anchor_process_sd`: the
    between-process spread those intervals add (default ANCHOR_PROCESS_SD; benchmarks try others)."""
    same_slots = {s.slot for s in a.slots} == {s.slot for s in b.slots}
    if not same_slots and (len(a.slots) != 1 or len(b.slots) != 1):
        raise InputError(
            f"cannot match {a.label} ({len(a.slots)} hosts) with {b.label} ({len(b.slots)} hosts): "
            "name one host on each side (RUN:host) or compare runs of the same hosts"
        )

    def index(side: Side) -> dict[str, CaseRecord]:
        out = {}
        for s in side.slots:
            for cid, (_, rec) in s.records.items():
                out[f"{s.slot}/{cid}" if same_slots else cid] = rec
        return out

    ia, ib = index(a), index(b)
    if not set(ia) & set(ib):
        raise NothingCompared(
            f"{a.label} and {b.label} share no case ({len(ia)} and {len(ib)} cases with a result): nothing to compare"
        )
    same_run = a.store.dir.resolve() == b.store.dir.resolve() and [s.slot for s in a.slots] == [s.slot for s in b.slots]
    keys = list(dict.fromkeys([*ia, *ib]))
    priors = (work_prior(ia.values()), work_prior(ib.values()))
    settings = setting_differences(a, b)
    refused = anchor_refusals(a, b, anchor, settings) if anchor and timed_on_both(a, b, anchor) else []
    anchors = {} if not anchor or refused else anchored_intervals(a, b, anchor, same_slots, anchor_process_sd)
    cases = [compare_records(k, ia.get(k), ib.get(k), threshold, same_run, priors, anchors.get(k)) for k in keys]
    return Comparison(
        a=a.label,
        b=b.label,
        threshold=threshold,
        facts=fact_differences(a, b),
        settings=settings,
        cases=cases,
        same_run=same_run,
        anchor=anchor or "",
        anchor_refused=refused,
    )


# -- against an anchor timed beside each case ---------------------------------------------------------
# The backend `diff` judges each case against by default: timed beside every contender of its shape on
# a GPU (worker/sweep/headtohead.py), and a plain cuBLAS GEMM whose own change is seen in its row.
DEFAULT_ANCHOR = "torch-bf16"
# What the anchor's own time depends on, whatever it is: where one of these differs between the sides,
# the anchor may have moved, and no case is judged against it (also its library's version, by the catalog).
ANCHOR_FACTS = ("gpu_name", "compute_capability", "driver", "cuda", "torch")


def anchor_fact_fields(anchor: str) -> tuple[str, ...]:
    """The host facts the anchor's time depends on: ANCHOR_FACTS and its library's version (by the catalog)."""
    spec = CATALOG.get(anchor)
    return tuple(
        dict.fromkeys(ANCHOR_FACTS + ((spec.import_name,) if spec and spec.import_name in FACT_FIELDS else ()))
    )


def anchor_files(slots: list[SlotData], anchor: str) -> tuple[str, ...]:
    """The sha256 of the anchor's kernel file over these slots' records (a user kernel; () for a built-in)."""
    return tuple(
        sorted(
            {
                rec.case.kernel_sha256
                for s in slots
                for _, rec in s.records.values()
                if rec.case.backend == anchor and rec.case.kernel_sha256
            }
        )
    )


def timed_on_both(a: Side, b: Side, anchor: str) -> bool:
    """Whether both sides hold a result of the anchor (else there is nothing to judge against, or refuse)."""
    return all(
        any(rec.case.backend == anchor and rec.status == "ok" for s in side.slots for _, rec in s.records.values())
        for side in (a, b)
    )


def anchor_refusals(a: Side, b: Side, anchor: str, settings: list[FactDiff]) -> list[FactDiff]:
    """Why the anchor cannot stand still between the sides: the facts it depends on that differ (its
    library's version, a user kernel's file, the worker that ran a built-in one), and the timing settings
    that differ (the ratio of two kernels depends on how both were timed); [] when nothing does."""
    fa, fb = _facts_of(a), _facts_of(b)
    refused = [
        FactDiff(f, fa.get(f, "?"), fb.get(f, "?")) for f in anchor_fact_fields(anchor) if fa.get(f) != fb.get(f)
    ]
    files = [" | ".join(sorted({sha[:16] for sha in anchor_files(side.slots, anchor)})) for side in (a, b)]
    if files[0] != files[1]:
        refused.append(FactDiff(f"kernel {anchor} sha256", files[0] or "?", files[1] or "?"))
    # the anchor was timed by the worker's code (and a built-in one is that code): compared without the
    # user kernels the archive carries, where both runs kept theirs, so that a changed kernel beside an
    # unchanged anchor leaves the anchor standing
    codes = [_worker_code(side) for side in (a, b)]
    if None not in codes:
        if codes[0] != codes[1]:
            refused.append(FactDiff("worker code sha256", codes[0][:12], codes[1][:12]))
    else:
        workers = [side.store.manifest().worker_sha256[:12] for side in (a, b)]
        if workers[0] != workers[1]:
            refused.append(FactDiff("worker_sha256", workers[0] or "?", workers[1] or "?"))
    return refused + [d for d in settings if d.field.startswith("timing.")]


def _worker_code(side: Side) -> Optional[str]:
    """The digest of the worker code in the side's stored archive, its user kernels aside
    (runs/workerarchive.py); None where the run kept no readable archive."""
    folder = getattr(side.store, "dir", None)
    if folder is None:
        return None
    try:
        return worker_code_digest(side.store.read_bytes(folder / "worker.tar.gz"))
    except (OSError, ValueError):  # ValueError: a path out of the run folder (RunStore.read_bytes)
        return None


def same_family(case, anchor_case) -> bool:
    """Whether a case may be judged against this anchor: both of one operand family, or either's family
    unknown (a user kernel: builtin_family). At the power cap GEMMs of another family draw other power: in their pairs they share one
    clock, apart each holds its own, so their ratio moves between processes with the state the anchor is
    there to cancel (benchmarks/RESULTS.md, "Judged against an anchor": fp8 cases against torch-bf16)."""
    fc, fa = builtin_family(case), builtin_family(anchor_case)
    return fc is None or fa is None or fc == fa


def slot_against_anchor(slot: SlotData, anchor: str) -> dict:
    """Case id -> (its pair_estimate against the anchor on one slot, log(case / anchor) from the rounds the
    two were timed in together; the anchor's record it was paired with); the anchor's own cases, cases
    never paired with it and cases of another operand family (same_family) are absent."""
    usable = {
        cid: rec
        for cid, (_, rec) in slot.records.items()
        if rec.status == "ok" and rec.timing is not None and rec.timing.median_us > 0
    }
    anchors = {shape_of(rec.case): rec for rec in usable.values() if rec.case.backend == anchor}
    if not anchors:
        return {}
    prior = pair_prior(slot)
    out = {}
    for cid, rec in usable.items():
        base = anchors.get(shape_of(rec.case))
        if base is None or rec.case.backend == anchor or not same_family(rec.case, base.case):
            continue
        found = pair_estimate(paired_rounds(base.timing, rec.timing), prior)
        if found is not None:
            out[cid] = (found, base)
    return out


def _against_anchor(side: Side, anchor: str, same_slots: bool) -> dict:
    """Case key (as compare_sides matches them) -> (its pair_estimate against the anchor on its slot, the
    anchor's record it was paired with) (slot_against_anchor); cases never paired with it are absent."""
    return {
        (f"{s.slot}/{cid}" if same_slots else cid): found
        for s in side.slots
        for cid, found in slot_against_anchor(s, anchor).items()
    }


def anchored_intervals(
    a: Side, b: Side, anchor: str, same_slots: bool, process_sd: Optional[float] = None
) -> dict[str, tuple[str, LogInterval, float]]:
    """Case key -> (anchor, log B/A of the case's ratio to the anchor with its interval (Welch's t over
    the two sides' pair estimates), the anchor's own B/A there (its medians, as its own row gives it)),
    for the cases both sides timed beside the anchor. The two kernels ran in one GPU state on each side,
    so their ratio cancels what that state did to both: a power-capped GEMM whose rounds move 5% between
    runs keeps its ratio to a GEMM beside it within a few tenths."""
    ea, eb = _against_anchor(a, anchor, same_slots), _against_anchor(b, anchor, same_slots)
    sd = ANCHOR_PROCESS_SD if process_sd is None else process_sd
    out = {}
    for key in ea.keys() & eb.keys():
        (x, anchor_a), (y, anchor_b) = ea[key], eb[key]
        out[key] = (
            anchor,
            log_ratio_interval(
                math.exp(x.log_ratio), math.exp(y.log_ratio), _process_spread(x, sd), _process_spread(y, sd)
            ),
            anchor_b.timing.median_us / anchor_a.timing.median_us,
        )
    return out


# A pair's rounds share one process: its ratio also moves from one fresh process to the next, by more than
# their spread says (the GPU state each process meets, where its buffers lie). The log standard deviation
# added to each side's, from stored A/A sweeps (benchmarks/RESULTS.md, "Judged against an anchor").
ANCHOR_PROCESS_SD = 0.003


def _process_spread(found, sd: float) -> Spread:
    """A side's pair estimate as a Spread of its ratio between processes: its own standard error with the
    process spread `sd` added (in quadrature; the degrees of freedom its own error has)."""
    return Spread(math.sqrt(found.log_se**2 + sd**2), found.df)


def anchor_agrees(anchored: LogInterval, time: LogInterval, split: Optional[ClockSplit], threshold: float) -> bool:
    """Whether the ratio against the anchor lies within the case's own time interval, and its work's where
    the work may judge the row (_work_judges): it must, if the anchor only took out the GPU state the two
    shared. It does not where the two kernels answer that state differently (two fp8 GEMMs of other
    power draws at the power cap): then the anchor is shown but judges nothing. A work
    interval the row may not be judged on (the clocks parted and the time did not follow them) is no
    measure of the kernel's cycles, so it vetoes nothing either."""
    work = split.work if split is not None and _work_judges(split, threshold) else None
    return lies_within(anchored.point, time, work)


def anchor_moved_with(anchor_ratio: float, time: LogInterval) -> Optional[float]:
    """Where an anchored ratio does not agree with the case's time: the anchor's own B/A (its row's) when
    its time moved the way the case's did, or None. Then the GPU state moved both kernels (a process that
    ran everything at one shape slower), not the two answering it differently; a time flag stands, as a
    GPU slower in everything is slower, and the note names why."""
    return anchor_ratio if math.log(anchor_ratio) * time.point > 0 else None


def lies_within(point: float, *intervals) -> bool:
    """Whether `point` lies within each interval (anything with .low and .high on its scale; None: no
    interval to lie within): the anchor's agreement rule, a case's here and a host's in hosteffect."""
    return all(i is None or i.low <= point <= i.high for i in intervals)


def _settings_of(side: Side) -> dict[str, str]:
    """`timing.<option>` (and a user kernel's file hash) -> value(s) over a side's results (joined where
    its cases differ)."""
    values: dict[str, set] = {}
    for s in side.slots:
        for _, rec in s.records.values():
            for option, value in rec.case.timing.model_dump().items():
                values.setdefault(f"timing.{option}", set()).add(str(value))
            if rec.case.kernel_sha256:  # a user kernel: its code is a setting too
                values.setdefault(f"kernel {rec.case.backend} sha256", set()).add(rec.case.kernel_sha256[:16])
    return {f: " | ".join(sorted(v)) for f, v in values.items()}


def setting_differences(a: Side, b: Side) -> list[FactDiff]:
    """How the two sides were timed, where it differs: a setting, like a host fact, not another case."""
    sa, sb = _settings_of(a), _settings_of(b)
    return [FactDiff(f, sa.get(f, "?"), sb.get(f, "?")) for f in dict.fromkeys([*sa, *sb]) if sa.get(f) != sb.get(f)]


# -- every host against the fleet ---------------------------------------------------------------------
@dataclass
class HostDeviation:
    slot: str
    case_key: str
    backend: str
    m: int
    n: int
    k: int
    median_us: float
    fleet_median_us: float
    robust_z: float

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class FleetReport:
    threshold: float
    hosts: dict[str, dict] = field(default_factory=dict)  # slot -> {cases, flagged, score, outlier}
    deviations: list[HostDeviation] = field(default_factory=list)
    # Each host's calibration (measured peaks) against the fleet's median: a GPU slow at a plain large
    # GEMM or copy is the machine, not the kernel. {slot, peak, value, fleet_median, ratio, flagged}
    calibration: list[dict] = field(default_factory=list)


def across_hosts(side: Side, threshold: float, z_limit: float = OUTLIER_Z) -> FleetReport:
    """Per case, each host's median against the fleet median, scored by median / MAD.

    A case flags a host when |robust z| > z_limit and the host is also more than `threshold` away from
    the fleet median (a tiny MAD alone must not flag a 0.5% difference). A host is an outlier when it
    is flagged in at least 10% of the cases it ran (and at least one).
    """
    by_case: dict[str, dict[str, CaseRecord]] = {}
    for s in side.slots:
        for cid, (_, rec) in s.records.items():
            if rec.status == "ok" and rec.timing:
                by_case.setdefault(cid, {})[s.slot] = rec
    report = FleetReport(threshold=threshold)
    counts = {s.slot: [0, 0] for s in side.slots}
    for cid, per_host in by_case.items():
        if len(per_host) < 3:
            continue  # no fleet to speak of
        values = np.array([r.timing.median_us for r in per_host.values()])
        med = float(np.median(values))
        mad = float(np.median(np.abs(values - med))) * MAD_SCALE
        for slot, rec in per_host.items():
            counts[slot][0] += 1
            x = rec.timing.median_us
            z = (x - med) / mad if mad > 0 else (0.0 if x == med else float("inf") * np.sign(x - med))
            if abs(z) > z_limit and abs(x / med - 1) > threshold:
                counts[slot][1] += 1
                c = rec.case
                report.deviations.append(HostDeviation(slot, cid, c.backend, c.m, c.n, c.k, x, med, float(z)))
    for slot, (n_cases, flagged) in counts.items():
        score = flagged / n_cases if n_cases else 0.0
        report.hosts[slot] = {
            "cases": n_cases,
            "flagged": flagged,
            "score": score,
            "outlier": flagged >= 1 and score >= 0.10,
        }
    report.deviations.sort(key=lambda d: -abs(d.robust_z))
    report.calibration = calibration_deviations(side, threshold)
    return report


def reference_slot(side: Side, case_id: str, fleet_median_us: float, outlier: str) -> Optional[str]:
    """The slot whose median of `case_id` is closest to the fleet median (not the outlier), or None."""
    best = None
    for s in side.slots:
        found = s.records.get(case_id)
        rec = found[1] if found else None
        if s.slot == outlier or rec is None or rec.status != "ok" or not rec.timing or rec.timing.median_us <= 0:
            continue
        distance = abs(math.log(rec.timing.median_us / fleet_median_us))
        if best is None or distance < best[0]:
            best = (distance, s.slot)
    return best[1] if best else None


def slowdowns_to_profile(side: Side, report: FleetReport, limit: int) -> list[tuple[HostDeviation, Optional[str]]]:
    """What `diff --across-hosts --profile` profiles: the outlier hosts' cases slower than the fleet (a
    slowdown is what is to be explained), furthest first, at most `limit`; each with the slot closest to
    the fleet median in that case (reference_slot; None when no other host ran it)."""
    outliers = {slot for slot, h in report.hosts.items() if h["outlier"]}
    flagged = [d for d in report.deviations if d.slot in outliers and d.robust_z > 0][:limit]
    return [(d, reference_slot(side, d.case_key, d.fleet_median_us, d.slot)) for d in flagged]


def calibration_deviations(side: Side, threshold: float) -> list[dict]:
    """Per measured peak (TFLOPS per operand family, copy TB/s), each calibrated host against the fleet
    median of that peak over the hosts with the same GPU model; flagged when more than `threshold` below
    (a fast GPU is not a problem to explain)."""
    peaks: dict[tuple[str, str], dict[str, float]] = {}  # (gpu model, peak name) -> slot -> value
    for s in side.slots:
        cal = s.facts.calibration if s.facts is not None else None
        if cal is None:
            continue
        model = s.facts.gpu_name or "?"
        for fam, value in cal.tflops.items():
            peaks.setdefault((model, f"{fam} TFLOPS"), {})[s.slot] = value
        if cal.tb_s:
            peaks.setdefault((model, "copy TB/s"), {})[s.slot] = cal.tb_s
    out = []
    for (model, name), per_slot in peaks.items():
        if len(per_slot) < 2:
            continue  # one GPU of a model: nothing to compare it with
        med = float(np.median(list(per_slot.values())))
        for slot, value in sorted(per_slot.items()):
            ratio = value / med
            out.append(
                {
                    "slot": slot,
                    "gpu_name": model,
                    "peak": name,
                    "value": value,
                    "fleet_median": med,
                    "ratio": ratio,
                    "flagged": ratio < 1 - threshold,
                }
            )
    return out
