"""What `crosscheck` shows, as an output.Document: fleetbench's figure of each case (now, beside the
sweep's, and its kernel time under CUPTI), each peer's raw and matched gap with its causes, and, asked
for, every step of each peer's ladder."""

from __future__ import annotations

from dataclasses import replace

from ..analysis import crosscheck as analysis
from .output import Document, Section
from .tables import US_DIGITS, ratio_text, significant

OURS_HEADERS = [
    "host",
    "case",
    "sweep µs",
    "now µs",
    "now / sweep",
    "SM MHz",
    "CUPTI kernels µs",
    "kernels / replay",
    "kernels",
    "note",
]
PEER_HEADERS = ["host", "case", "peer", "default µs", "default / fb", "matched µs", "matched / fb", "verdict", "why"]
STEP_HEADERS = ["host", "case", "peer", "step", "call", "L2", "launch", "clock", "statistic", "µs", "/ fb", "share"]
_VERDICT_STYLE = {"agrees": "green", "attributed": "cyan", "unexplained": "bold red", "not compared": "yellow"}


def case_text(c) -> str:
    return f"{c['backend']} {c['m']}x{c['n']}x{c['k']}"


def _mhz(x) -> str:
    return "" if not x else f"{x:.0f}"


def _share(x) -> str:
    return "" if x is None else f"{(x - 1) * 100:+.1f}%"


def crosscheck_document(
    ours: list[dict], comparisons: list, summaries: list, tolerance: float, gap: float, steps: bool = False
) -> Document:
    """`ours`: analysis.crosscheck.fleetbench_view of each stored record; `comparisons`: PeerComparison."""
    ours_rows = []
    for o in ours:
        note = (
            o["reason"]
            or o["cupti_reason"]
            or (
                f"{o['kernels_per_call']} activities per call, split by {o['cupti_split_by']}"
                if o["kernels_per_call"]
                else ""
            )
        )
        note = "; ".join(text for text in [note, *o["cupti_notes"]] if text)
        ours_rows.append(
            [
                o["slot"],
                case_text(o),
                significant(o["sweep_median_us"], US_DIGITS),
                significant(o["median_us"], US_DIGITS),
                ratio_text(o["now_over_sweep"]),
                _mhz(o["sm_clock_mhz"]),
                significant(o["kernels_us"], US_DIGITS),
                ratio_text(o["kernels_over_replay"]),
                "" if o["kernels_per_call"] is None else str(o["kernels_per_call"]),
                note,
            ]
        )
    peer_rows, step_rows = [], []
    for c in comparisons:
        d = c.as_dict()
        peer_rows.append(
            [
                c.slot,
                case_text(d),
                c.peer,
                significant(c.raw_us, US_DIGITS),
                ratio_text(c.raw_ratio),
                significant(c.matched_us, US_DIGITS),
                ratio_text(c.matched_ratio),
                c.verdict,
                c.explanation,
            ]
        )
        for s in c.steps:
            clock = s.clock + (f" ({s.sm_clock_mhz:.0f} MHz)" if s.sm_clock_mhz else "")
            step_rows.append(
                [
                    c.slot,
                    case_text(d),
                    c.peer,
                    s.step,
                    s.call,
                    s.l2,
                    s.launch,
                    clock,
                    s.statistic,
                    significant(s.value_us, US_DIGITS),
                    ratio_text(s.ratio),
                    _share(s.share),
                ]
            )
    sections = [
        Section(
            OURS_HEADERS,
            ours_rows,
            title="fleetbench on each case, timed again beside its peers",
            right=("sweep µs", "now µs", "now / sweep", "SM MHz", "CUPTI kernels µs", "kernels / replay", "kernels"),
            optional=("kernels", "kernels / replay", "SM MHz"),
        ),
        Section(
            PEER_HEADERS,
            peer_rows,
            title="each peer in its default settings, then with fleetbench's methods (fb: fleetbench's median now)",
            right=("default µs", "default / fb", "matched µs", "matched / fb"),
            styles={7: _VERDICT_STYLE},
        ),
    ]
    if steps:
        sections.append(
            Section(
                STEP_HEADERS,
                step_rows,
                title="every step: one setting changed to fleetbench's "
                "(share: the previous step's ratio over this one's, its setting's share of the gap)",
                right=("µs", "/ fb", "share"),
                optional=("call",),
            )
        )
    notes = [summary_text(s, tolerance, gap) for s in summaries]
    versions = {(c.peer, c.timer, c.version) for c in comparisons if c.version}
    notes += [f"{peer}: {timer} of {peer} {version}" for peer, timer, version in sorted(versions)]
    notes += list(dict.fromkeys(f"{c.peer}: {n}" for c in comparisons for n in c.notes))
    data = {
        "fleetbench": ours,
        "comparisons": [c.as_dict() for c in comparisons],
        "summary": [s.__dict__ for s in summaries],
        "tolerance": tolerance,
        "gap": gap,
    }
    records = [
        {k: v for k, v in c.as_dict().items() if k not in ("steps", "notes", "factors", "causes", "unmatched")}
        | {f"share_{f}": c.factors.get(f) for f in ("statistic", "l2", "launch", "clock")}
        | {"causes": "; ".join(c.causes)}
        for c in comparisons
    ]
    return Document(sections, data=data, records=records, notes=notes, kind="crosscheck")


# -- a peer's judgement in words ------------------------------------------------------------------------
FACTOR_WORDS = {"statistic": "statistic", "l2": "L2 state", "launch": "launch overhead", "clock": "clock state"}
# why code -> its words; {causes}: the named causes, "; " before each where the words lead with their own.
WHY_WORDS = {
    analysis.WHY_NOT_COMPARED: "{reason}",
    analysis.WHY_NO_RUN: "no run",
    analysis.WHY_CLOCK: "clock while timing {clock_pct} (the peer's samples at {peer_mhz:.0f} MHz vs fleetbench's "
    "{fleetbench_mhz:.0f} MHz; at fleetbench's clock it reads {at_clock_pct}){then_causes}",
    analysis.WHY_SWEEP: "fleetbench now {now_pct} off its sweep's median ({sweep_us:.4g} µs), which the matched peer "
    "is within {matched_pct} of{then_causes}",
    analysis.WHY_UNEXPLAINED: "{matched_pct} with every method matched{not_matched}",
    analysis.WHY_STEPS: "{causes}",
    analysis.WHY_AGREES: "{causes}",
}
STEPS_ADD_UP = "no single step moved it by 1%: the steps add up"  # a raw gap no single step names


def summary_text(s, tolerance: float, gap: float) -> str:
    """A peer's cells counted (analysis.crosscheck.PeerSummary) in one line: how many agree once the methods
    match, and how many raw gaps were attributed."""
    if not s.compared:
        return f"{s.peer}: not compared ({'; '.join(s.reasons) or 'no record'})"
    share = 100.0 * s.agree_matched / s.compared
    at_clock = f", {s.agree_at_clock} more at fleetbench's SM clock (the same cycles)" if s.agree_at_clock else ""
    if s.agree_with_sweep:
        at_clock += (
            f", {s.agree_with_sweep} more within it of fleetbench's sweep median (fleetbench's own "
            "timing now strayed from it)"
        )
    text = (
        f"{s.peer}: {s.agree_matched} of {s.compared} cells ({share:.0f}%) within "
        f"{tolerance:.0%} of fleetbench once the methods match{at_clock}; {s.raw_gaps} raw gaps beyond "
        f"{gap:.0%}, {s.raw_gaps_attributed} of them attributed"
    )
    return text + (f"; {s.not_compared} not compared" if s.not_compared else "")


def _pct(x: float) -> str:
    return f"{(x - 1) * 100:+.1f}%"


def factor_text(f) -> str:
    """A named cause (analysis.crosscheck.FactorShare): `launch overhead +20.8% (per-call ... vs graph ...)`."""
    return f"{FACTOR_WORDS[f.factor]} {_pct(f.share)} ({f.before} vs {f.after})"


def unmatched_text(u) -> str:
    """A factor the ladder could not match (analysis.crosscheck.Unmatched)."""
    if not u.step:
        return u.reason
    return f"{FACTOR_WORDS.get(u.step, u.step)} ({u.reason or 'no value'})"


def why_text(why, causes: list[str], unmatched: list[str]) -> str:
    """A peer's explanation: its why (a WHY_* code and its facts) with its named causes and unmatched factors
    in words."""
    f = why.facts
    words = dict(f, causes="; ".join(causes), then_causes="".join(f"; {c}" for c in causes))
    if why.code == analysis.WHY_CLOCK:
        words.update(clock_pct=_pct(f["clock_share"]), at_clock_pct=_pct(f["at_clock_ratio"]))
    if why.code == analysis.WHY_SWEEP:
        words.update(now_pct=_pct(f["now_over_sweep"]), matched_pct=_pct(f["matched_over_sweep"]))
    if why.code == analysis.WHY_UNEXPLAINED:
        words.update(
            matched_pct=_pct(f["matched_ratio"]),
            not_matched=f" (not matched: {', '.join(unmatched)})" if unmatched else "",
        )
    if why.code == analysis.WHY_STEPS and not causes:
        return STEPS_ADD_UP
    return WHY_WORDS[why.code].format(**words)


def worded(c):
    """A PeerComparison (analysis.crosscheck.compare_peer) with its causes, explanation and unmatched
    factors in words, as stored and shown."""
    causes = [factor_text(f) for f in c.named]
    unmatched = [unmatched_text(u) for u in c.missing]
    explanation = why_text(c.why, causes, unmatched) if c.why is not None else ""
    return replace(c, causes=causes, unmatched=unmatched, explanation=explanation)


def compare_peer(
    slot: str, record, peer, tolerance: float = analysis.TOLERANCE, gap: float = analysis.GAP, sweep_us=None
):
    """One peer of one stored crosscheck record, judged (analysis.crosscheck.compare_peer) and worded."""
    return worded(analysis.compare_peer(slot, record, peer, tolerance, gap, sweep_us=sweep_us))


def compare(stored: list, tolerance: float = analysis.TOLERANCE, gap: float = analysis.GAP) -> list:
    """Every peer of every stored crosscheck, judged (analysis.crosscheck.compare) and worded."""
    return [worded(c) for c in analysis.compare(stored, tolerance, gap)]
