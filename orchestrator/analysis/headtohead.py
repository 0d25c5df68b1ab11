"""Head-to-head: two backends of one run, shape by shape, judged on the samples they were timed in
together (worker/measure/interleave.py). Pure over stored runs; returns facts and codes, never sentences
(orchestrator/views/versus.py words them).

Per slot and shape: A µs and B µs (each case's own median of rounds), and B/A from the paired samples
with its 95% interval (worker/contract/pairing.py: per round the median of its twos' mean log ratios, over rounds
their mean), then a winner code against a tie margin t:
  "B"        B faster: the whole interval is below 1 / (1 + t)
  "A"        A faster: the whole interval is above 1 + t
  "tie"      the whole interval lies within [1 / (1 + t), 1 + t]
  "unsure"   anything else (or too few pairs for an interval)
  "unpaired" the two were not timed together (timed alone, or a record before format 9): no ratio is
             given, never one of separately timed medians dressed as a paired one
  "not-ok"   a side has no ok result on that slot (failed, unsupported, missing ...)
Beside it each side's own SM clock (the median over its rounds of the clock read in its stream), and
`clocks_apart` where the ratio of the two medians parts from the paired one the way those clocks part:
timed apart each held its own clock (at the power cap, two kernels of other power draws hold other
clocks), paired they shared one, so the two ratios answer two questions (docs/COMPARING.md).
Over the fleet, per shape, the slots' paired ratios are rolled up (fleet_interval) and judged alike; one
summary (counts per winner, the range of the winners' effects, the M range of the ties) closes it.

The same paired intervals decide `show --pivot backend`'s BEST (pivot_best): a backend is BEST only when
its interval against every other correct backend of the row says it is faster.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from worker.contract.pairing import (
    Interval,
    median_prior,
    pair_interval,
    pair_round_variance,
    paired_rounds,
    stream_clock_mhz,
    t95,
)
from worker.contract.schema import CaseRecord, CaseSpec

from ..errors import InputError
from ..runs.slots import SlotData

DEFAULT_TIE = 0.01
# Own clocks this far apart (either way) may set the medians' ratio apart from the paired one.
CLOCKS_APART = 0.02
WINNERS = ("B", "A", "tie", "unsure", "unpaired", "not-ok")  # the order a summary counts them in
Z95 = 1.96


def judge(low: Optional[float], high: Optional[float], tie: float) -> str:
    """The winner code of an interval of B/A against the tie margin (module docstring); "unsure" without one."""
    if low is None or high is None:
        return "unsure"
    if high < 1 / (1 + tie):
        return "B"
    if low > 1 + tie:
        return "A"
    if low >= 1 / (1 + tie) and high <= 1 + tie:
        return "tie"
    return "unsure"


def shape_of(case: CaseSpec) -> tuple:
    """What the contenders of a shape share (all a case is but its backend): two cases with the same
    shape_of were timed head-to-head when their rounds share a pair_id."""
    moe = case.moe.model_dump_json() if case.moe is not None else ""
    return (case.workload, case.label, case.m, case.n, case.k, case.out_dtype, case.seed, moe)


def _status(rec: Optional[CaseRecord]) -> str:
    if rec is None:
        return "missing"
    if rec.status == "ok" and not rec.complete:
        return "incomplete"
    return rec.status


def _usable(rec: Optional[CaseRecord]) -> bool:
    return rec is not None and rec.status == "ok" and rec.timing is not None and rec.timing.median_us > 0


def clocks_apart(c: "Contest", tie: float) -> bool:
    """Whether the ratio of a paired contest's own medians parts from its paired ratio by more than the tie
    margin, the same way the two sides' own clocks part (by CLOCKS_APART or more): a lower own clock makes
    a side slower apart than in the shared clock of the pairs."""
    if c.ratio is None or not (c.a_us and c.b_us and c.a_mhz and c.b_mhz):
        return False
    clock = math.log(c.a_mhz / c.b_mhz)  # > 0: B ran at the lower clock, so B reads slower apart
    gap = math.log((c.b_us / c.a_us) / c.ratio)
    return abs(clock) >= math.log1p(CLOCKS_APART) and abs(gap) > math.log1p(tie) and clock * gap > 0


def paired(a: CaseRecord, b: CaseRecord, prior: Optional[float] = None) -> Optional[Interval]:
    """B/A of two ok records from their paired samples with its interval (moderated toward `prior`, the
    slot's pair_prior, as the worker's rounds until sure are); None when no round of theirs was timed
    together (or too few pairs for an interval)."""
    return pair_interval(paired_rounds(a.timing, b.timing), prior)


def _paired_by_shape(slot: SlotData) -> dict[tuple, list[tuple[CaseSpec, CaseRecord]]]:
    """A slot's ok cases that were timed head-to-head in some round, by shape (shape_of)."""
    by_shape: dict[tuple, list[tuple[CaseSpec, CaseRecord]]] = {}
    for case in slot.planned:
        rec = slot.records.get(case.case_id, (None, None))[1]
        if _usable(rec) and any(r.pair_id for r in rec.timing.rounds):
            by_shape.setdefault(shape_of(case), []).append((case, rec))
    return by_shape


def pair_prior(slot: SlotData, rounds_of: Callable = paired_rounds) -> Optional[float]:
    """The median between-round variance of every two contenders' paired ratio on a slot (worker/contract/
    pairing.py pair_interval's prior): what the worker's rounds until sure moderated with, over the whole run.
    `rounds_of(a, b)`: the two timings' pairs per round (default all of them: paired_rounds)."""
    found = []
    for members in _paired_by_shape(slot).values():
        for i, (_, x) in enumerate(members):
            for _, y in members[i + 1 :]:
                v = pair_round_variance(rounds_of(x.timing, y.timing))
                if v is not None:
                    found.append(v)
    return median_prior(found)


def timed_together(a: CaseRecord, b: CaseRecord) -> bool:
    """Whether any round of the two was one interleaved timing (a pair_id they share)."""
    ids = {r.pair_id for r in a.timing.rounds if r.pair_id}
    return any(r.pair_id in ids for r in b.timing.rounds if r.pair_id)


@dataclass
class Contest:
    """One shape on one slot: A against B."""

    slot: str
    label: str
    m: int
    n: int
    k: int
    a_status: str
    b_status: str
    winner: str  # a code of WINNERS
    a_us: Optional[float] = None
    b_us: Optional[float] = None
    ratio: Optional[float] = None  # B/A from the pairs (> 1: B slower); None unless paired
    low: Optional[float] = None  # its 95% interval
    high: Optional[float] = None
    half_width: Optional[float] = None  # relative, of the interval (log scale)
    pairs: int = 0  # pairs behind the interval
    rounds: int = 0  # rounds timed together behind it
    a_mhz: Optional[float] = None  # each side's own SM clock, read in its stream (pairing.stream_clock_mhz)
    b_mhz: Optional[float] = None
    clocks_apart: bool = False  # the medians' B/A parts from the paired one as the own clocks do

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class FleetContest:
    """One shape over the slots that timed both: the geometric mean of their paired B/A and its interval."""

    label: str
    m: int
    n: int
    k: int
    winner: str
    slots: int  # slots with a paired ratio
    compared: int  # slots where both were ok
    a_us: Optional[float] = None  # median over the slots of each side's median
    b_us: Optional[float] = None
    ratio: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    half_width: Optional[float] = None
    pairs: int = 0
    rounds: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TieRange:
    """The Ms of one N, K family (and label) where A and B tie, when they form one contiguous run of the
    family's Ms: from its smallest M (`lowest`) and/or to its largest (`highest`)."""

    label: str
    n: int
    k: int
    m_low: int
    m_high: int
    lowest: bool
    highest: bool


@dataclass
class Summary:
    """What a fleet line says: shapes, how many each winner code got, per winner ("A", "B") the smallest and
    largest effect among its wins (how much faster: the slower one's time / the faster one's - 1), and the
    M ranges of the ties (`ties_scattered`: some family's ties are not one contiguous run)."""

    shapes: int
    counts: dict[str, int]
    effects: dict[str, tuple[float, float]] = field(default_factory=dict)
    tie_ranges: list[TieRange] = field(default_factory=list)
    ties_scattered: bool = False

    def as_dict(self) -> dict:
        return {
            "shapes": self.shapes,
            "counts": self.counts,
            "effects": {w: {"min": lo, "max": hi} for w, (lo, hi) in self.effects.items()},
            "tie_ranges": [asdict(t) for t in self.tie_ranges],
            "ties_scattered": self.ties_scattered,
        }


@dataclass
class HeadToHead:
    run_id: str
    a: str
    b: str
    tie: float
    slots: list[str]
    contests: list[Contest]  # per slot, per shape (the run's order)
    fleet: list[FleetContest]  # per shape over the slots
    summary: Summary

    def not_done(self) -> list[Contest]:
        """Contests where a side was planned but did not finish ok (what makes `versus` exit 1)."""
        bad = {"failed", "crashed", "hung", "missing", "incomplete"}
        return [c for c in self.contests if c.a_status in bad or c.b_status in bad]


def backends_of(slots: list[SlotData]) -> list[str]:
    """The backends the slots planned, in the sweep's order."""
    return list(dict.fromkeys(c.backend for s in slots for c in s.planned))


def contests_of(slot: SlotData, a: str, b: str, tie: float) -> list[Contest]:
    """A against B on every shape this slot planned both for."""
    by_shape: dict[tuple, dict[str, CaseSpec]] = {}
    for case in slot.planned:
        if case.backend in (a, b):
            by_shape.setdefault(shape_of(case), {})[case.backend] = case
    out = []
    prior = pair_prior(slot)
    for cases in by_shape.values():
        if len(cases) < 2:
            continue
        ca, cb = cases[a], cases[b]
        ra, rb = (slot.records.get(c.case_id, (None, None))[1] for c in (ca, cb))
        contest = Contest(
            slot=slot.slot,
            label=ca.label,
            m=ca.m,
            n=ca.n,
            k=ca.k,
            a_status=_status(ra),
            b_status=_status(rb),
            winner="not-ok",
            a_us=ra.timing.median_us if _usable(ra) else None,
            b_us=rb.timing.median_us if _usable(rb) else None,
        )
        if _usable(ra) and _usable(rb):
            if not timed_together(ra, rb):
                contest.winner = "unpaired"
            else:
                iv = paired(ra, rb, prior)
                contest.winner = judge(iv.low if iv else None, iv.high if iv else None, tie)
                if iv is not None:
                    contest.ratio, contest.low, contest.high = iv.ratio, iv.low, iv.high
                    contest.half_width, contest.pairs, contest.rounds = iv.half_width, iv.pairs, iv.rounds
            contest.a_mhz, contest.b_mhz = stream_clock_mhz(ra.timing), stream_clock_mhz(rb.timing)
            contest.clocks_apart = clocks_apart(contest, tie)
        out.append(contest)
    return out


def fleet_interval(intervals: list[Interval]) -> Optional[Interval]:
    """The geometric mean of several slots' paired ratios with its 95% interval: the wider of t over the
    slots' log ratios (S - 1 degrees of freedom: how much hosts differ) and the slots' own intervals
    combined (their standard errors, read back from their half-widths as normal ones: conservative where a
    slot's came from t). One slot: its own. None for none."""
    if not intervals:
        return None
    if len(intervals) == 1:
        return intervals[0]
    logs = [math.log(i.ratio) for i in intervals]
    point = statistics.fmean(logs)
    between = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    within = (
        Z95 * math.sqrt(sum(((math.log(i.high) - math.log(i.low)) / (2 * Z95)) ** 2 for i in intervals)) / len(logs)
    )
    half = max(between, within)
    return Interval(
        math.exp(point),
        math.exp(point - half),
        math.exp(point + half),
        sum(i.rounds for i in intervals),
        sum(i.pairs for i in intervals),
    )


def roll_up(contests: list[Contest], tie: float) -> list[FleetContest]:
    """Per shape (label, M, N, K; the order first seen), the slots' contests as one."""
    by_shape: dict[tuple, list[Contest]] = {}
    for c in contests:
        by_shape.setdefault((c.label, c.m, c.n, c.k), []).append(c)
    out = []
    for (label, m, n, k), group in by_shape.items():
        ok = [c for c in group if c.winner != "not-ok"]
        with_ratio = [c for c in ok if c.ratio is not None]
        iv = fleet_interval([Interval(c.ratio, c.low, c.high, c.rounds, c.pairs) for c in with_ratio])
        if not ok:
            winner = "not-ok"
        elif iv is None:
            winner = "unpaired" if all(c.winner == "unpaired" for c in ok) else "unsure"
        else:
            winner = judge(iv.low, iv.high, tie)
        fc = FleetContest(
            label=label,
            m=m,
            n=n,
            k=k,
            winner=winner,
            slots=len(with_ratio),
            compared=len(ok),
            a_us=statistics.median(c.a_us for c in ok) if ok else None,
            b_us=statistics.median(c.b_us for c in ok) if ok else None,
        )
        if iv is not None:
            fc.ratio, fc.low, fc.high, fc.half_width = iv.ratio, iv.low, iv.high, iv.half_width
            fc.pairs, fc.rounds = iv.pairs, iv.rounds
        out.append(fc)
    return out


def effect(ratio: float) -> float:
    """How much faster the winner is: the slower one's time over the faster one's, minus 1."""
    return max(ratio, 1 / ratio) - 1


def tie_ranges(shapes: list[FleetContest]) -> tuple[list[TieRange], bool]:
    """Per N, K family (and label) with ties, their M range when the ties are one contiguous run of the
    family's Ms; and whether some family's ties are not."""
    families: dict[tuple, list[FleetContest]] = {}
    for s in shapes:
        families.setdefault((s.label, s.n, s.k), []).append(s)
    ranges, scattered = [], False
    for (label, n, k), group in families.items():
        ms = sorted({s.m for s in group})
        tied = sorted({s.m for s in group if s.winner == "tie"})
        if not tied:
            continue
        first, last = ms.index(tied[0]), ms.index(tied[-1])
        if ms[first : last + 1] != tied:  # another verdict between two ties
            scattered = True
            continue
        ranges.append(
            TieRange(
                label=label, n=n, k=k, m_low=tied[0], m_high=tied[-1], lowest=first == 0, highest=last == len(ms) - 1
            )
        )
    return ranges, scattered


def summarize(shapes: list[FleetContest]) -> Summary:
    counts = {w: sum(s.winner == w for s in shapes) for w in WINNERS}
    effects = {}
    for w in ("B", "A"):
        wins = [effect(s.ratio) for s in shapes if s.winner == w and s.ratio is not None]
        if wins:
            effects[w] = (min(wins), max(wins))
    ranges, scattered = tie_ranges(shapes)
    return Summary(
        shapes=len(shapes),
        counts={w: n for w, n in counts.items() if n},
        effects=effects,
        tie_ranges=ranges,
        ties_scattered=scattered,
    )


def select_slots(slots: list[SlotData], host: Optional[str]) -> list[SlotData]:
    """The slots `--host` names (a slot, or a host with all its slots); all without it. InputError naming
    the slots when none matches."""
    if host is None:
        return slots
    chosen = [s for s in slots if host in (s.slot, s.host)]
    if not chosen:
        raise InputError(
            f"--host {host!r} is not a host of this run (slots: {', '.join(s.slot for s in slots) or 'none'})"
        )
    return chosen


def head_to_head(run_id: str, slots: list[SlotData], a: str, b: str, tie: float = DEFAULT_TIE) -> HeadToHead:
    """A against B on every shape of `slots` that planned both. InputError for a backend the slots do not
    have (naming those they do), A == B, or two backends that share no shape."""
    known = backends_of(slots)
    for role, name in (("A", a), ("B", b)):
        if name not in known:
            raise InputError(f"backend {role} {name!r} is not in run {run_id} (backends: {', '.join(known) or 'none'})")
    if a == b:
        raise InputError(f"A and B are both {a!r}: name two backends (backends: {', '.join(known)})")
    contests = [c for s in slots for c in contests_of(s, a, b, tie)]
    if not contests:
        raise InputError(f"{a} and {b} share no shape in run {run_id}: nothing to compare")
    fleet = roll_up(contests, tie)
    return HeadToHead(
        run_id=run_id,
        a=a,
        b=b,
        tie=tie,
        slots=[s.slot for s in slots],
        contests=contests,
        fleet=fleet,
        summary=summarize(fleet),
    )


# -- the pivot's BEST -------------------------------------------------------------------------------------
@dataclass
class PairIndex:
    """Paired intervals of every two backends timed together, per slot and shape (label, m, n, k), to ask
    `between(slot, shape, x, y)` (y/x) or, over the slots, `fleet(shape, x, y)`."""

    by_slot: dict[tuple, Interval] = field(default_factory=dict)  # (slot, shape, x, y) -> y/x
    slots_of: dict[tuple, list[str]] = field(default_factory=dict)  # (shape, {x, y}) -> the slots that paired them

    def add(self, slot: str, shape: tuple, x: str, y: str, interval: Interval) -> None:
        self.by_slot[(slot, shape, x, y)] = interval
        self.slots_of.setdefault((shape, frozenset((x, y))), []).append(slot)

    def between(self, slot: str, shape: tuple, x: str, y: str) -> Optional[Interval]:
        iv = self.by_slot.get((slot, shape, x, y))
        if iv is not None:
            return iv
        back = self.by_slot.get((slot, shape, y, x))
        return None if back is None else Interval(1 / back.ratio, 1 / back.high, 1 / back.low, back.rounds, back.pairs)

    def fleet(self, shape: tuple, x: str, y: str) -> Optional[Interval]:
        slots = self.slots_of.get((shape, frozenset((x, y))), [])
        return fleet_interval([iv for s in slots if (iv := self.between(s, shape, x, y)) is not None])


def pair_index(slots: list[SlotData]) -> PairIndex:
    """Every two ok cases of a shape on a slot that were timed together, with their paired interval."""
    index = PairIndex()
    for slot in slots:
        prior = pair_prior(slot)
        for members in _paired_by_shape(slot).values():
            for i, (cx, rx) in enumerate(members):
                for cy, ry in members[i + 1 :]:
                    iv = paired(rx, ry, prior)
                    if iv is not None:
                        index.add(slot.slot, (cx.label, cx.m, cx.n, cx.k), cx.backend, cy.backend, iv)
    return index


def _apart(fast, slow) -> bool:
    """Whether `fast`'s per-case interval (median ± rel_ci) lies wholly below `slow`'s."""
    if fast.rel_ci is None or slow.rel_ci is None:
        return False
    return fast.median_us * (1 + fast.rel_ci) < slow.median_us * (1 - slow.rel_ci)


def pivot_best(
    cells: dict, per_slot: list[dict], paired_of: Callable[[str, str], Optional[Interval]]
) -> tuple[Optional[str], Optional[str]]:
    """(the backend a pivot row marks BEST, on what basis: "paired", "intervals" or "paired+intervals"),
    or (None, None).

    `cells`: backend -> the row's Row (status, median_us, verdict); `per_slot`: per slot of the row, backend
    -> that slot's Row (rel_ci); `paired_of(x, y)`: the paired interval of y/x for the row, or None where
    the two were not timed together. The fastest correct backend is BEST only if, against every other
    correct one, its paired interval says it is faster (y/x wholly above 1) or, where the two were never
    timed together, its per-case interval lies wholly below the other's on every slot where both ran;
    never on the bare medians."""
    ok = {b: c for b, c in cells.items() if c.status == "ok" and c.median_us and c.verdict != "fail"}
    if len(ok) < 2:
        return None, None
    best = min(ok, key=lambda b: ok[b].median_us)
    bases = set()
    for other in ok:
        if other == best:
            continue
        iv = paired_of(best, other)
        if iv is not None:
            if iv.low <= 1:
                return None, None
            bases.add("paired")
            continue
        both = [s for s in per_slot if _usable_row(s.get(best)) and _usable_row(s.get(other))]
        if not both or not all(_apart(s[best], s[other]) for s in both):
            return None, None
        bases.add("intervals")
    return best, "+".join(b for b in ("paired", "intervals") if b in bases)


def _usable_row(row) -> bool:
    return row is not None and row.status == "ok" and bool(row.median_us)
