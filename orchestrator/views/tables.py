"""What each command shows, as output.Documents: a run's rows, the pivot, a comparison, the fleet view,
the inventory and the stored runs. Pure: data in, documents out; output.write prints them."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Optional

from ..analysis.noise import NOISY_REL_CI
from .output import Document, Section

if TYPE_CHECKING:  # `history` draws documents without loading the run readers (pydantic)
    from ..analysis.merge import Row

_STATUS_STYLE = {
    "ok": "green",
    "unsupported": "dim",
    "unavailable": "yellow",
    "failed": "bold red",
    "crashed": "bold red",
    "missing": "red",
}
_VERDICT_STYLE = {"SLOWER": "bold red", "FASTER": "green", "AMBIGUOUS": "yellow", "UNSTABLE": "yellow"}


def _num(v: Optional[float], fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def significant(v: Optional[float], digits: int) -> str:
    """`v` in fixed point with `digits` significant digits (every digit before the point kept): 1421,
    57.20, 0.0733, 0.000526; a CPU's 0.0005 TFLOPS is not `0.0`. "" for None."""
    if v is None:
        return ""
    if v == 0 or not math.isfinite(v):
        return format(v, "g")
    return format(v, f".{max(0, digits - 1 - math.floor(math.log10(abs(v))))}f")


US_DIGITS = 4  # a latency: to 0.1% (beyond the noise of a good GPU measurement)
TFLOPS_DIGITS = 3


def ratio_text(v: Optional[float]) -> str:
    """A ratio to 0.1% of 1 (a threshold is a few percent), or three significant digits below 0.1."""
    if v is None:
        return ""
    return f"{v:.3f}" if v >= 0.1 else significant(v, 3)


# An interval whose ends are further apart than this factor is not printed as numbers (JSON keeps them).
READABLE_INTERVAL = 10.0


def interval_text(low: Optional[float], high: Optional[float]) -> str:
    if low is None or high is None:
        return ""
    if not (low > 0 and math.isfinite(high)) or high / low > READABLE_INTERVAL:
        return "too wide to read"
    return f"{ratio_text(low)}–{ratio_text(high)}"


def plus_minus(rel: float, decimals: int = 0) -> str:
    """A CI half-width relative to its median, `±12%`; beyond ±100% the exact width says nothing more
    (the rounds disagree wildly; JSON keeps the number)."""
    return f"±{rel:.{decimals}%}" if rel <= 1 else "wider than ±100%"


# row note code (analysis/merge.py ROW_*) -> its words
ROW_NOTE_WORDS = {
    "not-run": "not run",
    "host-ended": "host {outcome}: {error}",
    "cut-short": "{rounds} of {planned} rounds timed before attempt {attempt} ended{host}",
    "other-software": "attempt {attempt} on other software: {changed}",
    # docs/TIMING.md: a heavy GEMM may hold this state for its first second of load, and reads slower after
    "over-power-limit": "sampled at {watts:.0f} W, over the GPU's {limit_w:.0f} W limit "
    "({rounds} of its rounds): sustained load reads slower",
}


def row_note_text(note) -> str:
    """One note of a row (analysis/merge.py RowNote: a ROW_* code and its facts) in words."""
    f = note.facts
    if note.code == "host-ended":
        return ROW_NOTE_WORDS[note.code].format(**f).rstrip(": ")
    if note.code == "cut-short":
        return ROW_NOTE_WORDS[note.code].format(**f, host=f" (host {f['outcome']})" if f["outcome"] else "")
    return ROW_NOTE_WORDS[note.code].format(**f)


def row_reason(row: Row) -> str:
    """Why a row is what it is, as shown and stored: what the host said, then the row's notes in words."""
    return "; ".join(filter(None, [row.reason, *(row_note_text(n) for n in row.notes)]))


def row_record(row: Row) -> dict:
    """A row as JSON data: its fields, its reason in words (row_reason)."""
    out = row.as_dict()
    out["reason"] = row_reason(row)
    del out["notes"]
    return out


def _note(row: Row) -> str:
    parts = []
    reason = row_reason(row)
    if reason:
        parts.append(reason)
    if row.tainted:
        parts.append("TAINTED: GPU throttled during timing")
    if row.rel_ci is not None and row.rel_ci > NOISY_REL_CI:
        parts.append(f"noisy (CI {plus_minus(row.rel_ci)})")
    return "; ".join(parts)


ROW_HEADERS = [
    "host",
    "label",
    "backend",
    "M",
    "N",
    "K",
    "status",
    "median µs",
    "rounds",
    "TFLOPS",
    "% SoL",
    "rel_err",
    "check",
    "note",
]
# Why a case got the rounds it got (worker/sweep/runner.py rounds_decision)
ROUNDS_STOP = {"target": "sure", "cap": "cap", "fixed": "fixed"}


def _rounds(row: Row) -> str:
    """e.g. "2 sure" (its intervals narrow enough), "3 cap" (the cap came first), "3 fixed"."""
    if not row.rounds:
        return ""
    return f"{row.rounds} {ROUNDS_STOP.get(row.rounds_stop, '')}".strip()


def _sol(row: Row) -> str:
    """% of speed of light, with the bound that sets it (m: math, b: memory bandwidth)."""
    return "" if row.pct_sol is None else f"{row.pct_sol:.0f}% {'m' if row.sol_bound == 'math' else 'b'}"


def _check(row: Row) -> str:
    """The verdict, with the integrity checks failed when they are why (worker/check/integrity.py)."""
    failed = row.integrity if row.integrity not in (None, "pass") else ""
    return (row.verdict or "") + (f" ({failed})" if failed else "")


def rows_document(rows: list[Row], title: str = "") -> Document:
    cells = [
        [
            r.slot,
            r.label,
            r.backend,
            str(r.m),
            str(r.n),
            str(r.k),
            r.status,
            significant(r.median_us, US_DIGITS),
            _rounds(r),
            significant(r.tflops, TFLOPS_DIGITS),
            _sol(r),
            _num(r.rel_err, ".2e"),
            _check(r),
            _note(r),
        ]
        for r in rows
    ]
    # The shape columns stay: a row without its shape is no result at all.
    section = Section(
        ROW_HEADERS,
        cells,
        title=title,
        right=("M", "N", "K", "median µs", "TFLOPS", "% SoL", "rel_err"),
        styles={6: _STATUS_STYLE},
        optional=("rel_err", "check", "% SoL", "TFLOPS", "label", "rounds"),
        last_resort=("note", "host"),
        caption="% SoL: speed of light (this GPU's measured peaks) / median; "
        "m = math-bound, b = memory-bound; rounds: sure = the interval of its time, or of its work (time × "
        "in-stream clock, judged with the run's spread), narrow enough; cap = the rounds cap came first; "
        "noisy: its time's interval"
        if any(r.pct_sol is not None for r in rows)
        else "",
    )
    data = [row_record(r) for r in rows]
    return Document([section], data=data, records=data, kind="rows")


# -- pivot: backends side by side ---------------------------------------------------------------------
_SHORT = {
    "unsupported": "unsupp.",
    "unavailable": "n/a",
    "failed": "FAILED",
    "crashed": "CRASHED",
    "missing": "missing",
}


def _pivot_cell(row: Optional[Row], speedup: Optional[float], best: bool = False) -> str:
    if row is None:
        return ""
    if row.status != "ok":
        return _SHORT.get(row.status, row.status) + "*"
    text = ("BEST " if best else "") + f"{significant(row.median_us, US_DIGITS)} µs"
    if row.tflops is not None:
        text += f" {significant(row.tflops, TFLOPS_DIGITS)} TF"
    if row.pct_sol is not None:
        text += f" {row.pct_sol:.0f}%SoL"
    if row.verdict == "fail":
        text += " WRONG"
    if speedup is not None:
        text += f" ×{speedup:.2f}"
    return text


def block_text(c) -> str:
    """A fused MoE block against the two projections it replaces (analysis/moe_blocks.py BlockComparison)."""
    return (
        f"{c.slot} {c.label}: {c.fused_backend} block {c.fused_us:.4g} µs against "
        f"{c.composed_backend} w13 ({2 * c.intermediate}x{c.hidden}) {c.w13_us:.4g} µs + "
        f"w2 ({c.hidden}x{c.intermediate}) {c.w2_us:.4g} µs = {c.composed_us:.4g} µs "
        f"(x{c.speedup:.2f}; SwiGLU and requantization not in the composition)"
    )


def pivot_document(rows: list[Row], baseline: Optional[str] = None, per_host: bool = False, pairs=None) -> Document:
    """Per shape, each backend's median latency and TFLOPS (and speedup over `baseline`) side by side; by
    default one line per shape for the whole fleet (the median over hosts), with per_host one per host.
    BEST marks the fastest correct backend only where the intervals say it is faster than every other
    (analysis/headtohead.py pivot_best): the paired intervals of backends timed together (`pairs`, a
    headtohead.PairIndex of the rows' slots), else each case's own interval on every host. A cell that
    did not run is marked `*` and explained under the table; a backend that ran nowhere is one note
    instead of a column."""
    from ..analysis.headtohead import PairIndex, pivot_best
    from ..analysis.merge import fleet_rows, pivot_by_backend
    from ..analysis.moe_blocks import block_comparisons
    from ..errors import InputError

    all_backends = list(dict.fromkeys(r.backend for r in rows))
    if baseline is not None and baseline not in all_backends:
        raise InputError(f"--baseline {baseline!r} is not in this run (backends: {', '.join(all_backends)})")
    ran = {r.backend for r in rows if r.status not in ("unsupported", "unavailable")}
    nowhere = sorted({(r.backend, r.status, row_reason(r)) for r in rows if r.backend not in ran})
    rows = [r for r in rows if r.backend in ran]
    backends, pivot = pivot_by_backend(rows if per_host else fleet_rows(rows))
    records = []
    for p in pivot:
        rec = {"slot": p.slot, "label": p.label, "m": p.m, "n": p.n, "k": p.k, "block": p.block}
        for b in backends:
            cell = p.cells.get(b)
            rec[f"{b}.status"] = cell.status if cell else ""
            rec[f"{b}.median_us"] = cell.median_us if cell else None
            rec[f"{b}.tflops"] = cell.tflops if cell else None
            rec[f"{b}.pct_sol"] = cell.pct_sol if cell else None
            if baseline:
                rec[f"{b}.speedup_vs_{baseline}"] = p.speedup(b, baseline)
        records.append(rec)
    pairs = pairs if pairs is not None else PairIndex()
    per_slot: dict[tuple, dict[str, dict[str, Row]]] = {}  # the rows of each pivot row, host by host
    for r in rows:
        key = (r.slot if per_host else "", r.label, r.m, r.n, r.k, r.kernel == "fused")
        per_slot.setdefault(key, {}).setdefault(r.slot, {})[r.backend] = r

    def best_of(p) -> tuple[Optional[str], Optional[str]]:
        shape = (p.label, p.m, p.n, p.k)
        slots = per_slot.get((p.slot if per_host else "", *shape, p.block), {})
        if per_host:
            return pivot_best(p.cells, list(slots.values()), lambda x, y: pairs.between(p.slot, shape, x, y))
        return pivot_best(p.cells, list(slots.values()), lambda x, y: pairs.fleet(shape, x, y))

    body = []
    for p in pivot:
        best, basis = best_of(p)
        body.append(
            [
                p.slot,
                p.label + (" [fused MoE block]" if p.block else ""),
                str(p.m),
                str(p.n),
                str(p.k),
                *[
                    _pivot_cell(p.cells.get(b), p.speedup(b, baseline) if baseline else None, b == best)
                    for b in backends
                ],
            ]
        )
        records[len(body) - 1]["best"] = best
        records[len(body) - 1]["best_by"] = basis
    notes = sorted(
        {
            f"{r.backend}: {_SHORT.get(r.status, r.status)}* = {row_reason(r)}"
            for r in rows
            if r.status != "ok" and row_reason(r)
        }
    )
    # A fused MoE block is compared with its two projections, never with one GEMM (analysis/moe_blocks.py).
    notes += [block_text(c) for c in block_comparisons(rows if per_host else fleet_rows(rows))]
    notes += [
        f"{b}: {status} on every host and shape ({reason}); not shown"
        for b, status, reason in sorted({(b, s, why) for b, s, why in nowhere})
    ]
    legend = (
        "cells: median latency, TFLOPS"
        + (", % of speed of light" if any(r.pct_sol is not None for r in rows) else "")
        + (f", speedup over {baseline} (×>1: faster)" if baseline else "")
        + "; BEST = faster than every other correct backend of the row by the 95% intervals (paired where "
        "timed together), none where too close to call; WRONG = failed the correctness check"
    )
    section = Section(
        ["host", "label", "M", "N", "K", *backends],
        body,
        caption=legend,
        right=("M", "N", "K"),
        optional=("label",),
        last_resort=("host", *backends[:0:-1]),
    )
    return Document([section], data=records, records=records, notes=notes, kind="pivot")


# -- diff and fleet outliers --------------------------------------------------------------------------
def comparison_summary(cmp) -> str:
    """The closing count: every verdict, rows on one side only included, and the rows to read with care
    (noisy: a side's CI beyond ±5%; tainted: a side timed while the GPU throttled)."""
    names = {"ONLY-A": "only in A", "ONLY-B": "only in B", "NOT-RUN": "not run on either side"}
    text = f"A = {cmp.a}, B = {cmp.b}, threshold ±{cmp.threshold:.1%}: " + ", ".join(
        f"{n} {names.get(v, v)}" for v, n in cmp.counts().items()
    )
    if cmp.same_run:
        text += " (A and B are the same run: each case against itself)"
    noisy, tainted = sum(bool(c.noisy) for c in cmp.cases), sum(bool(c.tainted) for c in cmp.cases)
    if noisy:
        text += f"; {noisy} noisy (a side's CI beyond ±{NOISY_REL_CI:.0%})"
    if tainted:
        text += f"; {tainted} tainted (the GPU throttled while timing)"
    if cmp.anchored:
        text += f"; {cmp.anchored} judged against {cmp.anchor} timed beside them"
    changed = [b for b in cmp.by_backend() if b["effect_verdict"] in ("SLOWER", "FASTER")]
    if changed:
        text += "; over all cases: " + ", ".join(
            f"{b['backend']} {b['effect_verdict']} {ratio_text(b['effect_ratio'])}" for b in changed
        )
    return text


UNCHANGED = ("SAME", "NOT-RUN")


def comparison_document(cmp, only_changed: bool = False) -> Document:
    """Facts and settings that differ, then one row per case (with only_changed, none that is SAME or
    was run on neither side), then per backend the geometric mean of B/A and its effect over all cases. A µs and B µs are the medians
    B/A is the ratio of."""
    summary = comparison_summary(cmp)
    shown = [c for c in cmp.cases if not (only_changed and c.verdict in UNCHANGED)]
    case_rows = [
        [
            c.host,
            c.label,
            c.backend,
            str(c.m),
            str(c.n),
            str(c.k),
            significant(c.a_us, US_DIGITS),
            significant(c.b_us, US_DIGITS),
            ratio_text(c.ratio),
            interval_text(c.ci_low, c.ci_high),
            _num(c.p_value, ".2g"),
            c.verdict,
            c.note,
        ]
        for c in shown
    ]
    sections = []
    if cmp.facts:
        sections.append(
            Section(
                ["fact", "A", "B"],
                [[d.field, d.a, d.b] for d in cmp.facts],
                title="host facts that differ (numbers below may differ because of these)",
            )
        )
    if cmp.settings:
        sections.append(
            Section(
                ["setting", "A", "B"],
                [[d.field, d.a, d.b] for d in cmp.settings],
                title="settings that differ (cases match across them)",
            )
        )
    title = summary + (f" (showing the {len(shown)} that changed or did not compare)" if only_changed else "")
    sections.append(
        Section(
            ["host", "label", "backend", "M", "N", "K", "A µs", "B µs", "B/A", "95% CI", "p", "verdict", "note"],
            case_rows,
            title=title,
            styles={11: _VERDICT_STYLE},
            right=("M", "N", "K", "A µs", "B µs", "B/A", "p"),
            optional=("p", "label", "95% CI"),
            last_resort=("note", "A µs", "B µs", "host"),
        )
    )
    backends = cmp.by_backend()
    sections.append(
        Section(
            [
                "backend",
                "cases compared",
                "geomean B/A",
                "over all cases",
                "95% CI",
                "verdict",
                "slower",
                "faster",
                "not ok",
            ],
            [
                [
                    b["backend"],
                    str(b["compared"]),
                    ratio_text(b["geomean_ratio"]),
                    ratio_text(b["effect_ratio"]) if b["effect_ratio"] is not None else "-",
                    interval_text(b["effect_low"], b["effect_high"]) if b["effect_ratio"] is not None else "-",
                    b["effect_verdict"] or "-",
                    str(b["slower"]),
                    str(b["faster"]),
                    str(b["not_ok"]),
                ]
                for b in backends
            ],
            title=(
                "per backend (geometric mean of B/A over the cases timed on both sides; over all cases: the same "
                "with each row's ratio against the anchor where it agrees, else its work where its clock split "
                "allows, its 95% interval over the cases, and its verdict)"
            ),
            styles={5: _VERDICT_STYLE},
            right=("cases compared", "geomean B/A", "over all cases", "slower", "faster", "not ok"),
            optional=("95% CI",),
        )
    )
    data = {
        "a": cmp.a,
        "b": cmp.b,
        "threshold": cmp.threshold,
        "same_run": cmp.same_run,
        "summary": cmp.counts(),
        "noisy": sum(bool(c.noisy) for c in shown),
        "tainted": sum(bool(c.tainted) for c in shown),
        "facts": [vars(x) for x in cmp.facts],
        "settings": [vars(x) for x in cmp.settings],
        "anchor": cmp.anchor,
        "anchor_refused": [vars(x) for x in cmp.anchor_refused],
        "anchored": cmp.anchored,
        "cases": [c.as_dict() for c in shown],
        "backends": backends,
    }
    notes = [anchor_refused_text(cmp)] if cmp.anchor_refused else []
    return Document(
        sections, data=data, records=[c.as_dict() for c in shown], notes=notes, headline=summary, kind="diff"
    )


def anchor_refused_text(cmp) -> str:
    """Why no case was judged against the anchor: what it depends on differs between the sides."""
    moved = "; ".join(f"{d.field} {d.a} vs {d.b}" for d in cmp.anchor_refused)
    return f"no case judged against {cmp.anchor}: it may have moved itself ({moved})"


def fleet_document(report) -> Document:
    host_rows = [
        [slot, str(h["cases"]), str(h["flagged"]), f"{h['score']:.0%}", "OUTLIER" if h["outlier"] else ""]
        for slot, h in report.hosts.items()
    ]
    dev_rows = [
        [
            d.slot,
            d.backend,
            str(d.m),
            str(d.n),
            str(d.k),
            significant(d.median_us, US_DIGITS),
            significant(d.fleet_median_us, US_DIGITS),
            f"{d.median_us / d.fleet_median_us:.3f}",
            f"{d.robust_z:+.1f}",
        ]
        for d in report.deviations
    ]
    sections = [
        Section(
            ["host", "cases", "flagged", "score", "verdict"],
            host_rows,
            title=f"hosts vs the fleet median (flag: |robust z| > 3.5 and off by > {report.threshold:.0%})",
        )
    ]
    if dev_rows:
        sections.append(
            Section(
                ["host", "backend", "M", "N", "K", "µs", "fleet µs", "ratio", "robust z"],
                dev_rows,
                title="cases that make them so",
                right=("M", "N", "K", "µs", "fleet µs", "ratio", "robust z"),
            )
        )
    if report.calibration:
        sections.append(
            Section(
                ["host", "GPU", "peak", "measured", "fleet median", "ratio", "verdict"],
                [
                    [
                        c["slot"],
                        c["gpu_name"],
                        c["peak"],
                        f"{c['value']:.2f}",
                        f"{c['fleet_median']:.2f}",
                        f"{c['ratio']:.3f}",
                        "SLOW GPU" if c["flagged"] else "",
                    ]
                    for c in report.calibration
                ],
                title="calibration (each GPU's own measured peaks): a host slow here is the machine, not the kernel",
            )
        )
    records = [
        {
            "slot": d.slot,
            "backend": d.backend,
            "m": d.m,
            "n": d.n,
            "k": d.k,
            "median_us": d.median_us,
            "fleet_median_us": d.fleet_median_us,
            "robust_z": d.robust_z,
        }
        for d in report.deviations
    ]
    data = {
        "threshold": report.threshold,
        "hosts": report.hosts,
        "deviations": [d.as_dict() for d in report.deviations],
        "calibration": report.calibration,
    }
    return Document(sections, data=data, records=records, kind="fleet")


# -- inventory and stored runs --------------------------------------------------------------------------
def inventory_document(hosts) -> Document:
    def gpus(h) -> str:
        from ..launchers import launcher_for

        per_job = launcher_for(h).gpus_per_job()  # a scheduler picks them: how many each job asks for
        if per_job is not None:
            return f"{per_job} per job" if per_job else ""
        return ",".join(map(str, h.gpus)) if h.gpus else ""

    rows = [
        [h.name, h.transport, h.launcher, h.address, h.python, h.workdir, gpus(h), ",".join(h.labels)] for h in hosts
    ]
    data = [h.public_view() for h in hosts]
    return Document(
        [
            Section(
                ["host", "transport", "launcher", "address", "python", "workdir", "gpus", "labels"],
                rows,
                optional=("labels", "python", "gpus", "launcher"),
                last_resort=("workdir", "transport"),
            )
        ],
        data=data,
        records=[{**d, "env": ",".join(d["env"])} for d in data],
        kind="inventory",
    )


CHECK_COLUMNS = (
    "host",
    "ready",
    "python",
    "venv",
    "worker",
    "torch",
    "flashinfer",
    "sgl-kernel",
    "GPU",
    "CC",
    "driver",
    "CUDA",
    "free disk GB",
    "GPU procs",
    "problem",
)


# Left out first at narrow widths: what `--format json` has in full and a problem line names anyway.
CHECK_OPTIONAL = (
    "free disk GB",
    "GPU procs",
    "sgl-kernel",
    "flashinfer",
    "torch",
    "worker",
    "CUDA",
    "driver",
    "venv",
    "CC",
)


def host_check_document(statuses, skew: list[str]) -> Document:
    rows = []
    for s in statuses:
        f = s.facts
        rows.append(
            [
                s.name,
                "yes" if s.ready else f"no ({s.state})",
                f.get("python") or "",
                {True: "yes", False: "no"}.get(f.get("in_venv"), ""),
                f"{f.get('worker_version', '')} {str(f.get('worker_sha256', ''))[:12]}".strip(),
                f.get("torch") or "-",
                f.get("flashinfer") or "-",
                f.get("sgl_kernel") or "-",
                f.get("gpu_name") or f.get("device") or "",
                f.get("compute_capability") or "",
                f.get("driver") or "",
                f.get("cuda") or "",
                str(f.get("free_disk_gb", "")),
                "" if f.get("gpu_processes") is None else str(f["gpu_processes"]),
                s.problem,
            ]
        )
    styles = {1: {r[1]: ("green" if r[1] == "yes" else "red") for r in rows}}
    data = [vars(s) for s in statuses]
    records = [
        {
            "host": s.name,
            "ready": s.ready,
            "state": s.state,
            "problem": s.problem,
            **{k: v for k, v in s.facts.items() if not isinstance(v, (dict, list))},
        }
        for s in statuses
    ]
    return Document(
        [Section(list(CHECK_COLUMNS), rows, styles=styles, optional=CHECK_OPTIONAL, last_resort=("GPU", "python"))],
        data=data,
        records=records,
        kind="host-check",
    )


# history note code (analysis/history.py NOTE_*, named here as strings: `show` and `diff` draw their tables
# without importing the history index) -> its words; NOTE_LINK's are the runs folder's own (runs/store.py).
HISTORY_NOTE_WORDS = {
    "index-rebuilt": "the history index was rebuilt from the run folders: {because}",
    "run-left-out": "run folder {run_id} left out: {problem}",
    "run-problem": "run {run_id}: {problem}",
    "no-step": "no step found in {series} series",
    "too-few-runs": "{series} series {has} too few runs to judge ({runs}; a step needs at least {needs})",
}


def history_note_text(note) -> str:
    """One note of a history (analysis/history.py Note: a NOTE_* code and its facts) in words."""
    from ..runs.store import link_note

    f = note.facts
    if note.code == "link":
        return link_note(f["link"], f["target"])
    words = dict(f)
    if note.code == "too-few-runs":
        words["has"] = "has" if f["series"] == 1 else "have"
        words["runs"] = f"{f['fewest']}" if f["fewest"] == f["most"] else f"{f['fewest']} to {f['most']}"
    return HISTORY_NOTE_WORDS[note.code].format(**words)


def history_notes(hist) -> list[str]:
    """A history's notes (runs left out and why; what --steps could not judge) in words."""
    return [history_note_text(n) for n in hist.notes]


def step_text(point) -> str:
    """A history point's step mark: `step ×1.100` on the first point at a new level, else ""."""
    return "" if point.step_ratio is None else f"step ×{point.step_ratio:.3f}"


def point_record(point) -> dict:
    """A history point as JSON data: its fields with its step mark in words."""
    out = point.as_dict()
    del out["step_ratio"]
    out["step"] = step_text(point)
    return out


def history_document(hist) -> Document:
    """Points oldest first per series; steps marked on the first point at a new level and listed."""
    rows = [
        [
            p.run_id,
            p.created_at[:16].replace("T", " "),
            p.host,
            p.backend,
            p.label,
            str(p.m),
            str(p.n),
            str(p.k),
            significant(p.median_us, US_DIGITS),
            "" if p.rel_ci is None else plus_minus(p.rel_ci, 1),
            "" if p.pct_sol is None else f"{p.pct_sol:.0f}%",
            p.torch or "",
            p.flashinfer or "",
            step_text(p),
        ]
        for p in hist.points
    ]
    sections = [
        Section(
            [
                "run",
                "started (UTC)",
                "host",
                "backend",
                "label",
                "M",
                "N",
                "K",
                "median µs",
                "CI",
                "% SoL",
                "torch",
                "flashinfer",
                "step",
            ],
            rows,
            right=("M", "N", "K", "median µs", "CI", "% SoL"),
            optional=("flashinfer", "torch", "% SoL", "label", "CI"),
            last_resort=("host", "step", "run", "started (UTC)"),
        )
    ]
    step_rows = [
        [
            s.host,
            s.backend,
            s.label,
            str(s.m),
            str(s.n),
            str(s.k),
            st["run_id"],
            significant(st["before"], US_DIGITS),
            significant(st["after"], US_DIGITS),
            f"×{ratio_text(st['ratio'])}",
            interval_text(st["low"], st["high"]),
            "NEW, SLOWER" if s.new_slower and st is s.steps[-1] else "",
        ]
        for s in hist.steps
        for st in s.steps
    ]
    if step_rows:
        sections.append(
            Section(
                [
                    "host",
                    "backend",
                    "label",
                    "M",
                    "N",
                    "K",
                    "at run",
                    "before µs",
                    "after µs",
                    "ratio",
                    "95% interval",
                    "verdict",
                ],
                step_rows,
                right=("M", "N", "K", "before µs", "after µs", "ratio"),
                optional=("label", "95% interval", "host"),
                last_resort=("before µs", "after µs"),
                title=f"steps (beyond ±{hist.threshold:.0%} and 4 standard errors of the series' noise)",
            )
        )
    notes = [] if hist.points else ["no stored result matches this selection"]
    points = [point_record(p) for p in hist.points]
    data = {
        "threshold": hist.threshold,
        "index": hist.index,
        "points": points,
        "steps": [asdict(s) for s in hist.steps],
        "notes": history_notes(hist),
    }
    return Document(sections, data=data, records=points, notes=notes, kind="history")


def runs_document(entries: list[dict]) -> Document:
    rows = [[e["run_id"], e["sweep"], str(e["hosts"]), str(e["cases"]), e["summary"]] for e in entries]
    return Document(
        [Section(["run", "sweep", "hosts", "cases", "outcomes"], rows)], data=entries, records=entries, kind="runs"
    )
