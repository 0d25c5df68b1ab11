"""`versus` in words: per shape A µs, B µs, B/A [95% interval] from the paired samples, pairs x rounds and
the winner, then the fleet line. Pure: a HeadToHead (orchestrator/analysis/headtohead.py) in, a Document
out; output.write prints it."""

from __future__ import annotations

from typing import Optional

from .output import Document, Section
from .tables import US_DIGITS, interval_text, ratio_text, significant

WINNER_TEXT = {
    "B": "B faster",
    "A": "A faster",
    "tie": "tie",
    "unsure": "unsure",
    "unpaired": "not paired",
    "not-ok": "not compared",
}
_WINNER_STYLE = {
    "B faster": "green",
    "A faster": "green",
    "unsure": "yellow",
    "not paired": "dim",
    "not compared": "red",
}
HEADERS = [
    "host",
    "label",
    "M",
    "N",
    "K",
    "A µs",
    "B µs",
    "B/A",
    "95% CI",
    "medians B/A",
    "pairs×rounds",
    "winner",
    "note",
]
FLEET_HEADERS = ["label", "M", "N", "K", "hosts", "A µs", "B µs", "B/A", "95% CI", "pairs×rounds", "winner"]


def percent(effect: float) -> str:
    """An effect of 0.031 as 3.1, of 0.112 as 11: one decimal below 10%."""
    return f"{effect * 100:.1f}" if effect < 0.1 else f"{effect * 100:.0f}"


def effect_range(lo: float, hi: float) -> str:
    return f"{percent(lo)}%" if percent(lo) == percent(hi) else f"{percent(lo)}–{percent(hi)}%"


def tie_where(summary) -> str:
    """ " at M ≤ 32" when the ties are contiguous M ranges of their families, the same form in each (else
    each family's range named); "" when some are scattered or there are none."""
    if summary.ties_scattered or not summary.tie_ranges:
        return ""

    def form(t) -> str:
        if t.lowest and t.highest:
            return "every M"
        if t.m_low == t.m_high:
            return f"M = {t.m_low}"
        if t.lowest:
            return f"M ≤ {t.m_high}"
        if t.highest:
            return f"M ≥ {t.m_low}"
        return f"{t.m_low} ≤ M ≤ {t.m_high}"

    forms = [form(t) for t in summary.tie_ranges]
    if len(set(forms)) == 1:
        return f" at {forms[0]}"
    return " at " + ", ".join(f"{f} (N={t.n} K={t.k})" for f, t in zip(forms, summary.tie_ranges))


def fleet_line(h2h) -> str:
    """The head-to-head in one line, e.g. `B faster on 9 of 12 shapes by 3.1–11%, tie at M ≤ 32`, with the
    backends' names for A and B."""
    s = h2h.summary
    name = {"A": h2h.a, "B": h2h.b}
    wins = sorted((w for w in ("B", "A") if s.counts.get(w)), key=lambda w: -s.counts[w])
    parts = []
    for i, w in enumerate(wins):
        of = f" of {s.shapes} shapes" if i == 0 else ""
        by = f" by {effect_range(*s.effects[w])}" if w in s.effects else ""
        parts.append(f"{name[w]} faster on {s.counts[w]}{of}{by}")
    ties = s.counts.get("tie", 0)
    if ties:
        where = tie_where(s)
        lead = "" if parts else f" of {s.shapes} shapes"
        parts.append(f"tie{where}" if where and not lead else f"tie on {ties}{lead}{where}")
    for code, words in (("unsure", "unsure"), ("unpaired", "not timed together"), ("not-ok", "not compared")):
        if s.counts.get(code):
            parts.append(f"{words} on {s.counts[code]}" + ("" if parts else f" of {s.shapes} shapes"))
    return ", ".join(parts) or "no shape compared"


def _note(c) -> str:
    if c.winner == "not-ok":
        bad = [f"{side} {status}" for side, status in (("A", c.a_status), ("B", c.b_status)) if status != "ok"]
        return ", ".join(bad)
    if c.winner == "unpaired":
        return "timed apart: no paired ratio"
    if c.winner == "unsure" and c.ratio is None:
        return "too few pairs for an interval"
    notes = [f"{side} incomplete" for side, status in (("A", c.a_status), ("B", c.b_status)) if status == "incomplete"]
    if c.clocks_apart:
        notes.append(clocks_note(c))
    return ", ".join(notes)


def clocks_note(c) -> str:
    """Why the medians' B/A is not the paired one (headtohead.clocks_apart): apart, B held another clock."""
    lower = c.b_mhz < c.a_mhz
    share = abs(c.b_mhz / c.a_mhz - 1)  # of A's clock
    return (
        f"apart B ran at a {share:.1%} {'lower' if lower else 'higher'} clock ({c.b_mhz:.0f} vs {c.a_mhz:.0f} MHz); "
        "paired, one shared clock"
    )


def _medians(c) -> str:
    """B µs / A µs: each timed in its own state (it differs from the paired B/A where the two hold
    different clocks at the power cap: docs/COMPARING.md)."""
    return ratio_text(c.b_us / c.a_us) if c.a_us and c.b_us else ""


def _pairs(c) -> str:
    return f"{c.pairs}×{c.rounds}" if c.pairs else ""


def versus_document(h2h) -> Document:
    """The per-slot table (and, over several slots, the per-shape fleet table), then the fleet line; JSON
    holds every fact (and the line)."""
    line = fleet_line(h2h)
    title = f"A = {h2h.a}, B = {h2h.b} (run {h2h.run_id}), tie within ±{h2h.tie:.1%}"
    rows = [
        [
            c.slot,
            c.label,
            str(c.m),
            str(c.n),
            str(c.k),
            significant(c.a_us, US_DIGITS),
            significant(c.b_us, US_DIGITS),
            ratio_text(c.ratio),
            interval_text(c.low, c.high),
            _medians(c),
            _pairs(c),
            WINNER_TEXT[c.winner],
            _note(c),
        ]
        for c in h2h.contests
    ]
    sections = [
        Section(
            HEADERS,
            rows,
            title=title,
            styles={11: _WINNER_STYLE},
            right=("M", "N", "K", "A µs", "B µs", "B/A", "medians B/A", "pairs×rounds"),
            optional=("label", "medians B/A", "pairs×rounds", "note"),
            last_resort=("host", "A µs", "B µs"),
            caption="B/A from the samples timed together, in one shared clock (> 1: B slower), 95% "
            "interval; A µs, B µs: each case's own median, in its own clock and power state, "
            "and their ratio (medians B/A)",
        )
    ]
    if len(h2h.slots) > 1:
        fleet_rows = [
            [
                f.label,
                str(f.m),
                str(f.n),
                str(f.k),
                f"{f.slots}/{f.compared}",
                significant(f.a_us, US_DIGITS),
                significant(f.b_us, US_DIGITS),
                ratio_text(f.ratio),
                interval_text(f.low, f.high),
                f"{f.pairs}×{f.rounds}" if f.pairs else "",
                WINNER_TEXT[f.winner],
            ]
            for f in h2h.fleet
        ]
        sections.append(
            Section(
                FLEET_HEADERS,
                fleet_rows,
                styles={10: _WINNER_STYLE},
                title="the fleet, per shape: geometric mean of the hosts' paired B/A",
                right=("M", "N", "K", "hosts", "A µs", "B µs", "B/A", "pairs×rounds"),
                optional=("label", "pairs×rounds"),
                last_resort=("A µs", "B µs"),
            )
        )
    records = [{"scope": "slot", **c.as_dict(), "winner_text": WINNER_TEXT[c.winner]} for c in h2h.contests]
    if len(h2h.slots) > 1:
        records += [
            {"scope": "fleet", "slot": "fleet", **f.as_dict(), "winner_text": WINNER_TEXT[f.winner]} for f in h2h.fleet
        ]
    data = {
        "run": h2h.run_id,
        "a": h2h.a,
        "b": h2h.b,
        "tie": h2h.tie,
        "slots": h2h.slots,
        "shapes": [c.as_dict() for c in h2h.contests],
        "fleet": [f.as_dict() for f in h2h.fleet],
        "summary": h2h.summary.as_dict(),
        "line": line,
    }
    return Document(sections, data=data, records=records, notes=[f"fleet: {line}"], kind="versus")


def winner_text(code: str, a: Optional[str] = None, b: Optional[str] = None) -> str:
    """A winner code in words, with the backends' names when given (the report's tooltips)."""
    if a and b and code in ("A", "B"):
        return f"{a if code == 'A' else b} faster"
    return WINNER_TEXT[code]
