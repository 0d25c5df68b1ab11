"""What a crosscheck says, case by case and peer by peer: the raw gap between a peer's timer and
fleetbench's, the gap once the methods match, and the share of each cause. Pure: stored records in,
comparisons out.

A peer's runs form a ladder (worker/tools/crosscheck.py): its default, then one setting after another matched
to fleetbench's. Every ratio is the peer's figure over fleetbench's median of the same case timed in
the same process. A step's share is the previous step's ratio over its own: how much the peer's own
setting of the one factor that step changed moved its figure (+20% launch overhead: per-call launches
made it read 20% higher than graph replay did). So the raw ratio is the matched one times the shares:

    raw = matched x statistic x l2 x launch x clock

The order of the ladder is fixed, so two factors that interact are always split the same way. A factor
the peer already matched (FlashInfer's median, Triton's graph) was not run: its share is 1.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Optional

FACTORS = ("statistic", "l2", "launch", "clock")
TOLERANCE = 0.02  # a matched peer within this of fleetbench agrees with it
GAP = 0.03  # a raw gap beyond this must be attributed
NAMED = 0.01  # a step that moves the ratio by less than this is within the timers' own noise: not named

# Why a peer's verdict is what it is (PeerComparison.why.code); views/crosscheck.py words each.
WHY_NOT_COMPARED = "not-compared"  # reason: the host's, or ""
WHY_NO_RUN = "no-run"  # the peer has no run at all
WHY_CLOCK = "clock"  # clock_share, peer_mhz, fleetbench_mhz, at_clock_ratio: matched, but at another SM clock
WHY_SWEEP = "sweep"  # now_over_sweep, sweep_us, matched_over_sweep: fleetbench strayed from its sweep
WHY_UNEXPLAINED = "unexplained"  # matched_ratio: the gap left with every method matched
WHY_STEPS = "steps"  # the raw gap, attributed to the named causes (none: the steps add up)
WHY_AGREES = "agrees"  # within the gap; the named causes, if any


@dataclass
class Finding:
    """A decision: one of the WHY_* codes and the facts its words need."""

    code: str
    facts: dict = field(default_factory=dict)


@dataclass
class FactorShare:
    """A named cause: a factor of the ladder, its share of the raw gap, and the peer's setting of it before
    and after its step."""

    factor: str  # one of FACTORS
    share: float
    before: str
    after: str


@dataclass
class Unmatched:
    """A factor the ladder could not match: a step without a value (step, the reason it has none) or what
    the host said (step "", its own words in reason)."""

    step: str
    reason: str


@dataclass
class StepView:
    step: str
    call: str
    l2: str
    launch: str
    clock: str
    statistic: str
    value_us: Optional[float]
    ratio: Optional[float]  # value / fleetbench's median
    share: Optional[float]  # the previous step's ratio / this one's: its factor's share of the raw gap
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    sm_clock_mhz: Optional[float] = None


@dataclass
class PeerComparison:
    slot: str
    case_id: str
    backend: str
    m: int
    n: int
    k: int
    label: str
    peer: str
    timer: str
    version: str
    status: str  # the peer's: ok | unavailable | unsupported | failed
    reason: str
    fleetbench_us: Optional[float]
    raw_us: Optional[float] = None  # the peer in its own default settings
    raw_ratio: Optional[float] = None
    matched_us: Optional[float] = None  # the peer with every method matched (its last step)
    matched_ratio: Optional[float] = None
    factors: dict = field(default_factory=dict)  # factor -> its share, None where not measured
    causes: list[str] = field(default_factory=list)  # the named factors, largest first, in words (views)
    verdict: str = ""  # agrees | attributed | unexplained | not compared
    explanation: str = ""  # `why` in words (views)
    unmatched: list[str] = field(default_factory=list)  # factors the ladder could not match, in words (views)
    # The SM clock each ran at (NVML, median while timing) and the matched figure at fleetbench's clock
    # (its time x the peer's clock / fleetbench's: the same cycles), where both were read.
    fleetbench_clock_mhz: Optional[float] = None
    peer_clock_mhz: Optional[float] = None
    at_fleetbench_clock_ratio: Optional[float] = None
    # A matched gap beyond the tolerance that something other than the methods explains: "clock" (the SM
    # clock each ran at) or "sweep" (fleetbench's own reading now strayed from its sweep's median, which
    # the matched peer agrees with); "" otherwise.
    explained_by: str = ""
    sweep_us: Optional[float] = None  # the median the run's sweep stored for the case
    steps: list[StepView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The decisions that views/crosscheck.py words into causes, explanation and unmatched: not stored.
    named: list[FactorShare] = field(default_factory=list)
    why: Optional[Finding] = None
    missing: list[Unmatched] = field(default_factory=list)

    def as_dict(self) -> dict:
        """What is stored and shown: the decisions as worded (causes, explanation, unmatched)."""
        out = asdict(self)
        for decision in ("named", "why", "missing"):
            del out[decision]
        return out


def _ratio(value: Optional[float], base: Optional[float]) -> Optional[float]:
    return value / base if value is not None and base else None


def compare_peer(
    slot: str, record, peer, tolerance: float = TOLERANCE, gap: float = GAP, sweep_us: Optional[float] = None
) -> PeerComparison:
    """One peer of one stored crosscheck record (worker/tools/crosscheck.py CrosscheckRecord, PeerResult);
    `sweep_us`: the case's median in the run's sweep."""
    case = record.case
    ours = record.fleetbench
    base = ours.median_us if ours else None
    out = PeerComparison(
        slot=slot,
        case_id=record.case_id,
        backend=case.backend,
        m=case.m,
        n=case.n,
        k=case.k,
        label=case.label,
        peer=peer.peer,
        timer=peer.timer,
        version=peer.version,
        status=peer.status,
        reason=peer.reason,
        fleetbench_us=base,
        notes=list(peer.notes),
        sweep_us=sweep_us,
    )
    previous: Optional[float] = None
    for run in peer.runs:
        ratio = _ratio(run.value_us, base)
        share = previous / ratio if ratio and previous is not None else None
        out.steps.append(
            StepView(
                run.step,
                run.call,
                run.method.l2,
                run.method.launch,
                run.method.clock,
                run.method.statistic,
                run.value_us,
                ratio,
                share if run.step != "default" else None,
                run.reason,
                list(run.notes),
                run.sm_clock_mhz,
            )
        )
        if run.step != "default" and run.step in FACTORS:
            out.factors[run.step] = share
        if ratio is not None:
            previous = ratio
    if peer.status != "ok" or base is None:
        out.verdict = "not compared"
        out.why = Finding(WHY_NOT_COMPARED, {"reason": peer.reason or (record.reason if ours is None else "")})
        return out
    first = out.steps[0] if out.steps else None
    if first is None or first.ratio is None:
        out.verdict = "not compared"
        out.why = Finding(WHY_NOT_COMPARED, {"reason": first.reason}) if first else Finding(WHY_NO_RUN)
        return out
    out.raw_us, out.raw_ratio = first.value_us, first.ratio
    last = next(s for s in reversed(out.steps) if s.ratio is not None)
    out.matched_us, out.matched_ratio = last.value_us, last.ratio
    out.missing = [Unmatched(s.step, s.reason) for s in out.steps[1:] if s.ratio is None]
    out.missing += [Unmatched("", said) for said in peer.unmatched]
    named = [(f, c) for f, c in out.factors.items() if c is not None and abs(c - 1) >= NAMED]
    named.sort(key=lambda fc: -abs(fc[1] - 1))
    by_factor = {s.step: s for s in out.steps}
    for factor, share in named:
        step = by_factor[factor]
        before = _before(out.steps, factor)
        out.named.append(FactorShare(factor, share, _method_of(before, factor), _method_of(step, factor)))
    raw_off, matched_off = abs(out.raw_ratio - 1), abs(out.matched_ratio - 1)
    out.fleetbench_clock_mhz, out.peer_clock_mhz = ours.sm_clock_mhz, last.sm_clock_mhz
    if out.fleetbench_clock_mhz and out.peer_clock_mhz:
        out.at_fleetbench_clock_ratio = out.matched_ratio * out.peer_clock_mhz / out.fleetbench_clock_mhz
    clock_share = (out.fleetbench_clock_mhz / out.peer_clock_mhz) if out.at_fleetbench_clock_ratio else None
    if (
        matched_off > tolerance
        and clock_share is not None
        and abs(clock_share - 1) >= NAMED
        and abs(out.at_fleetbench_clock_ratio - 1) <= tolerance
    ):
        # Matched in method, not in the clock the GPU held while timing: a timer that idles the GPU right
        # before its samples (a graph capture, a sleep) times a power-limited kernel nearer its burst clock.
        out.verdict, out.explained_by = "attributed", "clock"
        out.why = Finding(
            WHY_CLOCK,
            {
                "clock_share": clock_share,
                "peer_mhz": out.peer_clock_mhz,
                "fleetbench_mhz": out.fleetbench_clock_mhz,
                "at_clock_ratio": out.at_fleetbench_clock_ratio,
            },
        )
    elif (
        matched_off > tolerance
        and sweep_us
        and abs(base / sweep_us - 1) > tolerance
        and abs(out.matched_us / sweep_us - 1) <= tolerance
    ):
        # The peer agrees with what fleetbench's sweep stored; fleetbench's one timing in this process did not:
        # the gap is fleetbench's own round-to-round spread, not the peer's method.
        out.verdict, out.explained_by = "attributed", "sweep"
        out.why = Finding(
            WHY_SWEEP,
            {"now_over_sweep": base / sweep_us, "sweep_us": sweep_us, "matched_over_sweep": out.matched_us / sweep_us},
        )
    elif matched_off > tolerance:
        out.verdict = "unexplained"
        out.why = Finding(WHY_UNEXPLAINED, {"matched_ratio": out.matched_ratio})
    elif raw_off > gap:
        out.verdict = "attributed"
        out.why = Finding(WHY_STEPS)
    else:
        out.verdict = "agrees"
        out.why = Finding(WHY_AGREES)
    return out


def _before(steps: list[StepView], factor: str) -> StepView:
    """The last step before `factor`'s with a value: what its factor was changed from."""
    earlier = steps[: [s.step for s in steps].index(factor)]
    return next((s for s in reversed(earlier) if s.ratio is not None), steps[0])


def _method_of(step: StepView, factor: str) -> str:
    return {"statistic": step.statistic, "l2": step.l2, "launch": step.launch, "clock": step.clock}[factor]


def compare(stored: list, tolerance: float = TOLERANCE, gap: float = GAP) -> list[PeerComparison]:
    """Every peer of every stored crosscheck (runs/crosschecks.py StoredCrosscheck), in order."""
    return [
        compare_peer(s.slot, s.record, p, tolerance, gap, sweep_us=s.sweep_median_us)
        for s in stored
        for p in s.record.peers
    ]


@dataclass
class PeerSummary:
    """A peer's cells counted (views/crosscheck.py words it)."""

    peer: str
    compared: int  # cells with a raw and a matched figure
    agree_matched: int  # ... whose matched figure is within the tolerance
    agree_at_clock: int  # ... beyond it, but within it at fleetbench's SM clock (the same cycles)
    agree_with_sweep: (
        int  # ... beyond it, but within it of fleetbench's sweep median, which fleetbench now strayed from
    )
    raw_gaps: int  # ... whose raw gap is beyond GAP
    raw_gaps_attributed: int
    not_compared: int
    reasons: list[str]  # why not, each once


def summarize(comparisons: list[PeerComparison], gap: float = GAP, tolerance: float = TOLERANCE) -> list[PeerSummary]:
    out = []
    for peer in dict.fromkeys(c.peer for c in comparisons):
        mine = [c for c in comparisons if c.peer == peer]
        done = [c for c in mine if c.verdict != "not compared"]
        gaps = [c for c in done if abs(c.raw_ratio - 1) > gap]
        out.append(
            PeerSummary(
                peer=peer,
                compared=len(done),
                agree_matched=sum(abs(c.matched_ratio - 1) <= tolerance for c in done),
                agree_at_clock=sum(c.explained_by == "clock" for c in done),
                agree_with_sweep=sum(c.explained_by == "sweep" for c in done),
                raw_gaps=len(gaps),
                raw_gaps_attributed=sum(c.verdict == "attributed" for c in gaps),
                not_compared=len(mine) - len(done),
                reasons=list(dict.fromkeys(_not_compared_reason(c) for c in mine if c.verdict == "not compared")),
            )
        )
    return out


def _not_compared_reason(c: PeerComparison) -> str:
    """Why a peer was not compared: the host's reason (a peer with no run says so)."""
    return c.why.facts.get("reason", "no run")


def fleetbench_view(stored) -> dict:
    """fleetbench's own figures of one stored crosscheck: its median now beside the sweep's, and its
    graph's kernel time (CUPTI) beside its replay time."""
    rec, ours = stored.record, stored.record.fleetbench
    case = rec.case
    view = {
        "slot": stored.slot,
        "case_id": rec.case_id,
        "backend": case.backend,
        "m": case.m,
        "n": case.n,
        "k": case.k,
        "label": case.label,
        "status": rec.status,
        "reason": rec.reason,
        "sweep_median_us": stored.sweep_median_us,
        "median_us": None,
        "now_over_sweep": None,
        "kernels_us": None,
        "span_us": None,
        "kernels_over_replay": None,
        "kernels_per_call": None,
        "kernels": [],
        "cupti_split_by": "",
        "cupti_reason": "",
        "cupti_notes": [],
        "method": None,
        "settle_ms": None,
        "gpu_name": rec.gpu_name,
        "sm_clock_locked_mhz": rec.sm_clock_locked_mhz,
        "sm_clock_mhz": None,
    }
    if ours is None:
        return view
    view.update(
        median_us=ours.median_us,
        now_over_sweep=_ratio(ours.median_us, stored.sweep_median_us),
        kernels_us=ours.kernels_us,
        span_us=ours.span_us,
        kernels_over_replay=_ratio(ours.kernels_us, ours.median_us),
        kernels_per_call=len(ours.kernels) if ours.kernels_us is not None else None,
        kernels=ours.kernels,
        cupti_split_by=ours.cupti_split_by,
        cupti_reason=ours.cupti_reason,
        cupti_notes=ours.cupti_notes,
        method=ours.method.model_dump(mode="json"),
        settle_ms=ours.settle_ms,
        sm_clock_mhz=ours.sm_clock_mhz,
        spread=statistics.pstdev(ours.samples_us) / ours.median_us if len(ours.samples_us) > 1 else None,
    )
    return view
