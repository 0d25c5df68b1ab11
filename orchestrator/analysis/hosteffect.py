"""Each host's effect over all the cases it ran: is this GPU slower across the board, and by how much?

A per-case score (diff.across_hosts) misses a GPU 2% slower everywhere: no single case stands out of its
noise. Over all of a host's cases the same 2% is plain. For each ok case that enough hosts ran (at least
3 when the fleet has 3 or more hosts, else 2), on log medians:

  d_hc = log(x_hc) - ref_hc     ref_hc = median over the other hosts h' that ran c of (log(x_h'c) - a_h')
  a_h  = mean over the host's cases of d_hc   (the host's effect; a_h' the other hosts' own effects)

The effect is found by alternating the two lines (a median polish, each host's effect taken out of the
others' references) until it holds still, then centred so that the fleet's median host has effect 0.
Why not the plain d_hc = log(x_hc) - median over all hosts: in a fleet of 3 that median is pulled toward
the slow host by its own value (the larger of the other two), so a host 2% slower reads about 1.7%,
and its interval, narrower than that bias over 12 cases or more, misses the 2% it is meant to hold
(simulated, per-case noise σ 0.5%: it holds 1.02 in 74% of 12-case fleets and 25% of 40-case ones; this
estimate in 91% of both, and in 95% of 8-host fleets: what remains is the centring on the median host,
in a fleet of 3 the faster of the other two). Taking each host's effect out of the references also means one slow host never pulls the others:
their references are the slow host's times with its effect taken out.

The effect is reported as a ratio exp(a_h) with a 95% interval by t over its cases (df = cases - 1,
worker/pairing.t95), from the spread of its d_hc. A host is named (SLOWER or FASTER) when that interval
lies wholly beyond ±threshold, as diff.classify_log judges a case; the others are SAME or AMBIGUOUS.

The split, as for a case: the same estimate on the work (median_us x the SM clock read in the stream =
cycles per call, worker/pairing.work_per_round; only records whose every round has that clock), and the
clock: the host's median in-stream MHz over its cases' rounds against the fleet's median of those
(clock_factor = fleet MHz / host MHz, the time the clock alone costs: > 1 when the host's clock is lower).
effect ~ clock_factor x work. A host whose GPU runs slower is named slower all the same; the split and the
causes only say why.

Against an anchor (`anchor`, diff's --anchor): the same estimate on each case's log(case / anchor), the
anchor being the backend of the case's shape timed beside it on the host's GPU (head-to-head pairs), so that
what the GPU state each host's process met did to both cancels: a power-capped GEMM whose cases move 3-4%
between processes keeps its ratio to a GEMM beside it. It names a host only where the time and the work
did not, only where its point lies within the host's time interval (and work interval), and never for a
host whose anchor may have moved itself (facts apart from the fleet's majority): judged_on "anchor".
A GPU slower in everything moves the anchor too, and is named on its time.

Causes are codes with facts (never sentences; views word them): the clock in the stream lower (both MHz),
NVML's clock lower, a warmer GPU, throttle reasons seen, power readings apart from the fleet's, rounds
timed tainted, the SM clock locked differently, an enforced power limit apart from the fleet's median, other
processes on the GPU, host facts that differ from the fleet's majority, and the GPU's calibration below the fleet median of its model (diff.calibration_deviations).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

from worker.contract.pairing import work_per_round
from worker.contract.schema import CaseRecord

from .diff import (
    ANCHOR_PROCESS_SD,
    CLOCK_BOUND_SHARE,
    CLOCK_SHARE_OF_EFFECT,
    Side,
    anchor_fact_fields,
    anchor_files,
    calibration_deviations,
    classify_log,
    lies_within,
    mean_interval,
    slot_against_anchor,
)
from .headtohead import Z95

# Host facts that may explain a host apart from its fleet (FactsRecord fields).
FACT_CAUSES = ("gpu_name", "driver", "cuda", "torch", "flashinfer", "sgl_kernel", "triton")
CLOCK_LOWER = 0.01  # a clock this much below the fleet's is a cause whatever the effect
TEMPERATURE_HIGHER_C = 5.0  # a GPU this much warmer than the fleet's median
POWER_APART = 0.05  # power readings this far (either way) from the fleet's median
POWER_LIMIT_APART = 0.01  # an enforced power limit this far from most of the fleet's
POLISH_ROUNDS = 200  # the alternation settles in tens; medians may flip between two values: then it stops here
POLISH_TOLERANCE = 1e-10  # in log: far below any effect worth a digit
MIN_CASES = 2  # an interval by t needs 2 cases at least


@dataclass
class Estimate:
    """A host's ratio against the fleet and its 95% interval, over `cases` cases."""

    ratio: float
    low: float
    high: float
    cases: int


@dataclass
class HostEffect:
    slot: str
    cases: int  # cases of the estimate (ok, and run by enough hosts)
    effect: Optional[Estimate]  # None: fewer than MIN_CASES cases
    verdict: Optional[str]  # SLOWER FASTER (named), SAME, AMBIGUOUS; None without an effect
    work: Optional[Estimate] = None  # cycles per call against the fleet (in-stream clock on every round)
    clock_mhz: Optional[float] = None  # median in-stream SM clock over its cases' rounds
    fleet_clock_mhz: Optional[float] = None  # median of the hosts' clock_mhz
    clock_factor: Optional[float] = None  # fleet_clock_mhz / clock_mhz: the time the clock costs (> 1: slower)
    causes: list[dict] = field(default_factory=list)  # {"code": ..., facts}
    # "work" where the verdict is the work's: a host not named on its time whose work is named, where its
    # work interval is at most half as wide as the time's (the time moved with the clock from case to case,
    # the cycles did not; analysis/diff.py clock_split) or its clock is within half the threshold of the
    # fleet's (_work_judges); "anchor" where the verdict is the anchored estimate's (host_effects: where
    # neither named it and the anchored point agrees, _anchor_agrees)
    judged_on: str = "time"
    # Against the anchor timed beside each case on its own GPU (host_effects' anchor): the same estimate on
    # log(case / anchor) of each case, in which the GPU state the two kernels shared cancels; None without
    # an anchor, with fewer than MIN_CASES anchored cases, or where what the anchor depends on differs
    # from the fleet's majority (_anchor_steady)
    anchored: Optional[Estimate] = None
    # Whether the anchored point lies within the host's time interval (and work's) over the same cases:
    # where it does not, the anchored estimate judges nothing; None without one
    anchor_agrees: Optional[bool] = None

    @property
    def named(self) -> bool:
        return self.verdict in ("SLOWER", "FASTER")

    def as_dict(self) -> dict:
        return {**asdict(self), "named": self.named}


@dataclass
class HostEffects:
    threshold: float
    min_hosts: int  # hosts a case needs to count (3 in a fleet of 3 or more, else 2)
    fleet_hosts: int  # hosts with at least one ok case
    cases: int  # cases that count
    hosts: list[HostEffect] = field(default_factory=list)
    anchor: str = ""  # the backend each host was also judged against ("" none)
    # Why nothing could be estimated: "hosts" (fewer than 2 hosts ran ok cases) or "cases" (no host has
    # 2 cases that enough hosts ran); None when there are effects
    nothing: Optional[str] = None

    @property
    def named(self) -> list[HostEffect]:
        return [h for h in self.hosts if h.named]

    def as_dict(self) -> dict:
        return {
            "threshold": self.threshold,
            "min_hosts": self.min_hosts,
            "fleet_hosts": self.fleet_hosts,
            "cases": self.cases,
            "anchor": self.anchor,
            "nothing": self.nothing,
            "hosts": [h.as_dict() for h in self.hosts],
        }


def _median(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


def _ok(rec: CaseRecord) -> bool:
    return rec.status == "ok" and rec.timing is not None and rec.timing.median_us > 0


def _record_work(rec: CaseRecord) -> Optional[float]:
    work = work_per_round(rec.timing)
    return statistics.median(work) if work else None


def polish(table: dict[str, dict[str, float]], min_hosts: int) -> dict[str, list[float]]:
    """Per host, its d_hc over the cases of `table` (case -> host -> log value) that at least `min_hosts`
    hosts have, with every host's effect taken out of the references (module docstring).

    Each step moves the effects halfway to what the references they give imply: undamped, two hosts
    would swap their difference back and forth for ever."""
    rows = [row for row in table.values() if len(row) >= min_hosts]
    hosts = sorted({h for row in rows for h in row})
    if not rows:
        return {}
    x = np.array([[row.get(h, np.nan) for h in hosts] for row in rows])
    others = [np.delete(np.arange(len(hosts)), i) for i in range(len(hosts))]
    effect = np.zeros(len(hosts))

    def deviations(effect: np.ndarray) -> np.ndarray:
        y = x - effect
        refs = np.column_stack([np.nanmedian(y[:, o], axis=1) for o in others])
        return x - refs  # NaN where the host did not run the case

    for _ in range(POLISH_ROUNDS):
        means = np.nanmean(deviations(effect), axis=0)
        new = (effect + means - np.median(means)) / 2
        settled = np.max(np.abs(new - effect)) < POLISH_TOLERANCE
        effect = new
        if settled:
            break
    d = deviations(effect)
    d -= np.median(np.nanmean(d, axis=0))
    return {h: [float(v) for v in d[:, i] if not np.isnan(v)] for i, h in enumerate(hosts)}


def estimate(ds: list[float], shared_sd: float = 0.0) -> Optional[Estimate]:
    """exp(mean d) and its 95% interval by t over the cases; None below MIN_CASES. `shared_sd`: a log
    spread every case shares (one process timed them all), which their spread cannot show: added to the
    half-width in quadrature, at the normal 95% point."""
    if len(ds) < MIN_CASES:
        return None
    mean, half = mean_interval(ds)
    half = math.hypot(half, Z95 * shared_sd)
    return Estimate(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(ds))


def host_effects(side: Side, threshold: float, anchor: Optional[str] = None) -> HostEffects:
    """Each host's effect over its cases against the fleet, its split into clock and work, its verdict
    against ±threshold and its likely causes (module docstring); with `anchor`, also its effect against
    the anchor timed beside each case on its GPU (_anchored_effects), which may name a host the time and
    the work did not."""
    by_case: dict[str, dict[str, CaseRecord]] = {}
    for s in side.slots:
        for cid, (_, rec) in s.records.items():
            if _ok(rec):
                by_case.setdefault(cid, {})[s.slot] = rec
    ran = {h for row in by_case.values() for h in row}
    fleet = [s.slot for s in side.slots if s.slot in ran]  # in the run's order of slots
    min_hosts = 3 if len(fleet) >= 3 else 2
    used = {c: row for c, row in by_case.items() if len(row) >= min_hosts}
    out = HostEffects(
        threshold=threshold, min_hosts=min_hosts, fleet_hosts=len(fleet), cases=len(used), anchor=anchor or ""
    )
    if len(fleet) < 2:
        out.nothing = "hosts"
        return out
    time_table = {c: {h: math.log(r.timing.median_us) for h, r in row.items()} for c, row in used.items()}
    work_table = {c: {h: math.log(w) for h, r in row.items() if (w := _record_work(r))} for c, row in used.items()}
    times, works = polish(time_table, min_hosts), polish(work_table, min_hosts)
    rows = {
        h: HostEffect(
            slot=h,
            cases=len(times.get(h, [])),
            effect=estimate(times.get(h, [])),
            verdict=None,
            work=estimate(works.get(h, [])),
        )
        for h in fleet
    }
    _split_clock(rows, used)
    if anchor:
        anchored, cases = _anchored_effects(side, anchor, used, min_hosts)
        # what the anchored point must lie within: the host's time (and work) over those same cases, not
        # over all of them: the anchor's own cases, which it leaves out, would pull the time toward 1
        same_time = polish({c: time_table[c] for c in cases}, min_hosts)
        same_work = polish({c: work_table[c] for c in cases}, min_hosts)
        for h in rows.values():
            h.anchored = anchored.get(h.slot)
            if h.anchored is not None:
                work = estimate(same_work.get(h.slot, [])) if _work_may_judge(h, threshold) else None
                h.anchor_agrees = _anchor_agrees(h.anchored, estimate(same_time.get(h.slot, [])), work)
    for h in rows.values():
        if h.effect is not None:
            h.verdict = host_verdict(h.effect, threshold)
        if not h.named and _work_may_judge(h, threshold):
            on_work = host_verdict(h.work, threshold)
            if on_work in ("SLOWER", "FASTER"):
                h.verdict, h.judged_on = on_work, "work"
        if h.effect is not None and h.anchored is not None and not h.named and h.anchor_agrees:
            on_anchor = host_verdict(h.anchored, threshold)
            if on_anchor in ("SLOWER", "FASTER"):
                h.verdict, h.judged_on = on_anchor, "anchor"
    if not any(h.effect for h in rows.values()):
        out.nothing = "cases"
    _find_causes(rows, used, side, threshold)
    out.hosts = list(rows.values())
    return out


def host_verdict(e: Estimate, threshold: float) -> str:
    """A host's effect against the fleet: SLOWER / FASTER (named) when its interval excludes no effect and
    the effect itself is beyond ±threshold; SAME when the whole interval lies within ±threshold;
    AMBIGUOUS otherwise. Unlike a case's diff (whole interval beyond the threshold), a host is named on
    all its cases at once: a GPU 2% slower at a 1.5% threshold is named once its interval leaves 1."""
    low, point, high = math.log(e.low), math.log(e.ratio), math.log(e.high)
    bound = math.log1p(threshold)
    if low > 0 and point > bound:
        return "SLOWER"
    if high < 0 and point < -bound:
        return "FASTER"
    return "SAME" if classify_log(low, high, threshold) == "SAME" else "AMBIGUOUS"


def _width(e: Estimate) -> float:
    return math.log(e.high) - math.log(e.low)


def _work_judges(h: HostEffect, threshold: float) -> bool:
    """Whether a host not named on its time may be named on its work, as a case may (diff._work_judges):
    where its work held still as its time moved with the clock (the work's interval at most
    CLOCK_BOUND_SHARE of the time's), or where its clock is within half the threshold of the fleet's, so
    that time and work cannot part by more than that. A host named on its time stays named."""
    if _width(h.work) <= CLOCK_BOUND_SHARE * _width(h.effect):
        return True
    return h.clock_factor is not None and abs(math.log(h.clock_factor)) <= math.log1p(threshold) / 2


def _work_may_judge(h: HostEffect, threshold: float) -> bool:
    """Whether the host has a time and a work estimate and its work may judge it (_work_judges)."""
    return h.effect is not None and h.work is not None and _work_judges(h, threshold)


def _anchored_effects(
    side: Side, anchor: str, used: dict[str, dict[str, CaseRecord]], min_hosts: int
) -> tuple[dict[str, Estimate], set[str]]:
    """Host -> its Estimate against the fleet on log(case / anchor), the pair estimate of each used case
    (the anchor's own cases aside) against the anchor of its shape timed beside it on the host's slot
    (diff.slot_against_anchor), polished as the times are. Only the hosts whose anchor stands where the
    fleet's does (_anchor_steady) take part, so that a host whose anchor moved pulls no reference. Also
    the cases the estimates are over.

    What moves each case's ratio apart from one process to the next is in the spread of the host's
    values over its cases; what moves them all together is not (one process timed them all), so the spread
    of a ratio between processes (diff.ANCHOR_PROCESS_SD) is added to the interval (estimate's shared_sd)."""
    steady = _anchor_steady(side, anchor)
    table: dict[str, dict[str, float]] = {}
    for s in side.slots:
        if s.slot not in steady:
            continue
        for cid, (found, _) in slot_against_anchor(s, anchor).items():
            if cid in used and s.slot in used[cid]:
                table.setdefault(cid, {})[s.slot] = found.log_ratio
    # as many hosts per case as the time asks, unless fewer are steady: in a fleet of 3 with one anchor
    # apart, the other two are still judged against each other, as a fleet of 2 is on its time
    need = min(min_hosts, max(2, len(steady & {h for row in table.values() for h in row})))
    estimates = {h: e for h, ds in polish(table, need).items() if (e := estimate(ds, ANCHOR_PROCESS_SD)) is not None}
    return estimates, {c for c, row in table.items() if len(row) >= need}


def _anchor_steady(side: Side, anchor: str) -> set[str]:
    """The slots whose anchor may be taken as the fleet's: every fact its time depends on (diff.
    anchor_fact_fields: GPU, driver, CUDA, torch, its library), the worker's version and the anchor's file
    (a user kernel) are what most of the fleet's hosts have. A slot without facts, and every slot of a
    fact on which the fleet has no majority, is not steady: its anchor may have moved with it."""
    fields = (*anchor_fact_fields(anchor), "worker_version")
    values = {}
    for s in side.slots:
        if s.facts is None:
            continue
        values[s.slot] = (*(getattr(s.facts, f) for f in fields), anchor_files([s], anchor))
    if not values:
        return set()
    majority = [_majority([v[i] for v in values.values()]) for i in range(len(fields) + 1)]
    return {slot for slot, v in values.items() if all(m is not NO_MAJORITY and x == m for x, m in zip(v, majority))}


def _anchor_agrees(anchored: Estimate, time: Optional[Estimate], work: Optional[Estimate]) -> bool:
    """Whether the host's anchored point lies within its time interval over the same cases and, where its
    work may judge it (_work_judges), its work's (as diff.anchor_agrees for a case): it must, if the
    anchor only took out the GPU state each case met. (A host named on its time or work is never judged
    on the anchor: a slow GPU stays named on its time.)"""
    return time is not None and lies_within(anchored.ratio, time, work)


def _rounds_of(used: dict[str, dict[str, CaseRecord]], host: str):
    return [r for row in used.values() if host in row for r in row[host].timing.rounds]


def _split_clock(rows: dict[str, HostEffect], used) -> None:
    for h in rows.values():
        h.clock_mhz = _median(r.sm_clock_stream_mhz for r in _rounds_of(used, h.slot))
    fleet = _median(h.clock_mhz for h in rows.values())
    for h in rows.values():
        if h.clock_mhz and fleet:
            h.fleet_clock_mhz = fleet
            h.clock_factor = fleet / h.clock_mhz


NO_MAJORITY = object()  # no value is held by more than half of the hosts (None may be one: "not installed")


def _majority(values: list):
    """The value more than half of the hosts have (None included), or NO_MAJORITY."""
    if not values:
        return NO_MAJORITY
    value, n = Counter(values).most_common(1)[0]
    return value if n * 2 > len(values) else NO_MAJORITY


def _find_causes(rows: dict[str, HostEffect], used, side: Side, threshold: float) -> None:
    env = {
        h: _environment(_rounds_of(used, h), [r for row in used.values() if h in row for r in [row[h]]]) for h in rows
    }
    fleet_env = {k: _median(e[k] for e in env.values()) for k in ("nvml_mhz", "temperature_c", "power_w")}
    facts = {s.slot: s.facts for s in side.slots if s.slot in rows and s.facts is not None}
    majority = {f: _majority([getattr(x, f) for x in facts.values()]) for f in (*FACT_CAUSES, "sm_clock_locked_mhz")}
    # Power limits are numbers a few watts apart: the fleet's is their median, not a majority's value.
    majority["power_limit_w"] = _median(x.power_limit_w for x in facts.values())
    slow_gpus = {}
    for c in calibration_deviations(side, threshold):
        if c["flagged"]:
            slow_gpus.setdefault(c["slot"], []).append(c)
    for h in rows.values():
        e = env[h.slot]
        h.causes = [
            *_clock_causes(h, e, fleet_env),
            *_environment_causes(e, fleet_env),
            *_fact_causes(facts.get(h.slot), majority),
            *(
                {
                    "code": "calibration",
                    "peak": c["peak"],
                    "value": c["value"],
                    "fleet_median": c["fleet_median"],
                    "ratio": c["ratio"],
                    "gpu_name": c["gpu_name"],
                }
                for c in slow_gpus.get(h.slot, [])
            ),
        ]


def _environment(rounds, records: list[CaseRecord]) -> dict:
    snapshots = [s for r in records if r.health for s in (r.health.before, r.health.after)]
    return {
        "nvml_mhz": _median(r.sm_clock_mhz for r in rounds),
        "temperature_c": _median(r.temperature_c for r in rounds),
        "power_w": _median(s.power_w for s in snapshots),
        "throttle": sorted(
            {t for r in rounds for t in r.throttle_reasons} | {t for s in snapshots for t in s.throttle_reasons}
        ),
        "throttled_rounds": sum(bool(r.throttle_reasons) for r in rounds),
        "tainted": sum(bool(r.health and r.health.tainted) for r in records),
        "processes": max((r.gpu_processes or 0 for r in rounds), default=0),
        "busy_rounds": sum(bool(r.gpu_processes) for r in rounds),
    }


def _clock_causes(h: HostEffect, e: dict, fleet: dict) -> list[dict]:
    out = []
    if h.clock_factor and h.clock_factor > 1:
        share = (
            h.effect is not None
            and h.effect.ratio > 1
            and math.log(h.clock_factor) >= CLOCK_SHARE_OF_EFFECT * math.log(h.effect.ratio)
        )
        if h.clock_factor - 1 >= CLOCK_LOWER or (share and h.verdict == "SLOWER"):
            out.append(
                {"code": "clock-lower", "mhz": h.clock_mhz, "fleet_mhz": h.fleet_clock_mhz, "factor": h.clock_factor}
            )
    if e["nvml_mhz"] and fleet["nvml_mhz"] and e["nvml_mhz"] < fleet["nvml_mhz"] * (1 - CLOCK_LOWER):
        out.append({"code": "nvml-clock-lower", "mhz": e["nvml_mhz"], "fleet_mhz": fleet["nvml_mhz"]})
    return out


def _environment_causes(e: dict, fleet: dict) -> list[dict]:
    out = []
    if (
        e["temperature_c"] is not None
        and fleet["temperature_c"] is not None
        and e["temperature_c"] - fleet["temperature_c"] >= TEMPERATURE_HIGHER_C
    ):
        out.append({"code": "temperature-higher", "c": e["temperature_c"], "fleet_c": fleet["temperature_c"]})
    if e["throttle"] and e["throttled_rounds"]:  # the power cap alone, in no round's samples, is no cause
        out.append({"code": "throttled", "reasons": e["throttle"], "rounds": e["throttled_rounds"]})
    if e["power_w"] and fleet["power_w"] and abs(e["power_w"] / fleet["power_w"] - 1) >= POWER_APART:
        out.append({"code": "power", "w": e["power_w"], "fleet_w": fleet["power_w"]})
    if e["tainted"]:
        out.append({"code": "tainted", "cases": e["tainted"]})
    if e["processes"]:
        out.append({"code": "gpu-processes", "max": e["processes"], "rounds": e["busy_rounds"]})
    return out


def _fact_causes(facts, majority: dict) -> list[dict]:
    """Facts of the host that differ from the value most of the fleet has (a fleet without a majority for
    a fact names no host for it); sm_clock_locked_mhz None is a GPU left to manage its own clock; the
    power limit against the fleet's median limit."""
    if facts is None:
        return []
    out = []
    fleet_lock = majority["sm_clock_locked_mhz"]
    if fleet_lock is not NO_MAJORITY and facts.sm_clock_locked_mhz != fleet_lock:
        out.append({"code": "clock-lock", "mhz": facts.sm_clock_locked_mhz, "fleet_mhz": fleet_lock})
    # A power limit set lower (nvidia-smi -pl) caps the heavy GEMMs' clock; None is a worker before format 11.
    fleet_limit, limit = majority["power_limit_w"], facts.power_limit_w
    if fleet_limit and limit is not None and abs(limit / fleet_limit - 1) >= POWER_LIMIT_APART:
        out.append({"code": "power-limit", "w": limit, "fleet_w": fleet_limit})
    for f in FACT_CAUSES:
        if majority[f] is not NO_MAJORITY and getattr(facts, f) != majority[f]:
            out.append({"code": "fact", "field": f, "value": getattr(facts, f), "fleet": majority[f]})
    return out
