"""Render merged rows as a rich table, JSON, CSV or Markdown. Pure: rows in, text out."""
from __future__ import annotations

import csv
import io
import json
from typing import Iterable, Optional

from rich.console import Console
from rich.table import Table

from .merge import ROW_FIELDS, Row

FORMATS = ("table", "json", "csv", "md")
_STATUS_STYLE = {"ok": "green", "unsupported": "dim", "unavailable": "yellow", "failed": "bold red",
                 "crashed": "bold red", "missing": "red"}


def _num(v: Optional[float], fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def _note(row: Row) -> str:
    parts = []
    if row.reason:
        parts.append(row.reason)
    if row.tainted:
        parts.append("TAINTED: GPU throttled during timing")
    if row.rel_ci is not None and row.rel_ci > 0.05:
        parts.append(f"noisy (CI ±{row.rel_ci:.0%})")
    return "; ".join(parts)


def _cells(row: Row) -> list[str]:
    return [row.slot, row.label, row.backend, str(row.m), str(row.n), str(row.k), row.status,
            _num(row.median_us, ".2f"), _num(row.tflops, ".1f"), _num(row.rel_err, ".2e"),
            row.verdict or "", _note(row)]


HEADERS = ["host", "label", "backend", "M", "N", "K", "status", "median µs", "TFLOPS", "rel_err", "check", "note"]


def rows_table(rows: Iterable[Row], title: str = "") -> Table:
    table = Table(title=title or None, show_lines=False, header_style="bold")
    for h in HEADERS:
        table.add_column(h, justify="right" if h in ("M", "N", "K", "median µs", "TFLOPS", "rel_err") else "left",
                         overflow="fold")
    for row in rows:
        cells = _cells(row)
        style = _STATUS_STYLE.get(row.status)
        cells[6] = f"[{style}]{row.status}[/]" if style else row.status
        table.add_row(*cells)
    return table


def render_rows(rows: list[Row], fmt: str, title: str = "", width: int = 200) -> str:
    if fmt == "json":
        return json.dumps([r.as_dict() for r in rows], indent=1, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(ROW_FIELDS), lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in r.as_dict().items()})
        return buf.getvalue()
    if fmt == "md":
        lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        for r in rows:
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in _cells(r)) + " |")
        return "\n".join(lines) + "\n"
    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=False)
    console.print(rows_table(rows, title))
    return console.export_text()


# -- pivot: backends side by side ---------------------------------------------------------------------
_SHORT = {"unsupported": "unsupp.", "unavailable": "n/a", "failed": "FAILED", "crashed": "CRASHED",
          "missing": "missing"}


def _pivot_cell(row: Optional[Row], speedup: Optional[float]) -> str:
    if row is None:
        return ""
    if row.status != "ok":
        return _SHORT.get(row.status, row.status) + "*"
    text = f"{row.median_us:.2f} µs {row.tflops:.0f} TF"
    if row.verdict == "fail":
        text += " WRONG"
    if speedup is not None:
        text += f" ×{speedup:.2f}"
    return text


def render_pivot(rows: list[Row], fmt: str, baseline: Optional[str] = None, width: int = 200) -> str:
    """Per shape, each backend's median latency and TFLOPS (and speedup over `baseline`) side by side;
    a cell that did not run is marked `*` and explained under the table."""
    from .merge import pivot_by_backend

    backends, pivot = pivot_by_backend(rows)
    if baseline is not None and baseline not in backends:
        from .errors import InputError

        raise InputError(f"--baseline {baseline!r} is not in this run (backends: {', '.join(backends)})")
    if fmt in ("json", "csv"):
        records = []
        for p in pivot:
            rec = {"slot": p.slot, "label": p.label, "m": p.m, "n": p.n, "k": p.k}
            for b in backends:
                cell = p.cells.get(b)
                rec[f"{b}.status"] = cell.status if cell else ""
                rec[f"{b}.median_us"] = cell.median_us if cell else None
                rec[f"{b}.tflops"] = cell.tflops if cell else None
                if baseline:
                    rec[f"{b}.speedup_vs_{baseline}"] = p.speedup(b, baseline)
            records.append(rec)
        if fmt == "json":
            return json.dumps(records, indent=1, ensure_ascii=False) + "\n"
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(records[0]) if records else ["slot"], lineterminator="\n")
        writer.writeheader()
        for rec in records:
            writer.writerow({k: ("" if v is None else v) for k, v in rec.items()})
        return buf.getvalue()
    headers = ["host", "label", "M", "N", "K", *backends]
    body = [[p.slot, p.label, str(p.m), str(p.n), str(p.k),
             *[_pivot_cell(p.cells.get(b), p.speedup(b, baseline) if baseline else None) for b in backends]]
            for p in pivot]
    notes = sorted({f"{r.backend}: {_SHORT.get(r.status, r.status)}* = {r.reason}" for r in rows
                    if r.status != "ok" and r.reason})
    legend = ("cells: median latency, TFLOPS" + (f", speedup over {baseline} (×>1: faster)" if baseline else "")
              + "; WRONG = failed the correctness check")
    if fmt == "md":
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
        return "\n".join(lines + ["", legend, *[f"- {n}" for n in notes]]) + "\n"
    table = Table(header_style="bold", caption=legend)
    for h in headers:
        table.add_column(h, overflow="fold")
    for r in body:
        table.add_row(*r)
    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=False)
    console.print(table)
    for n in notes:
        console.print(n, markup=False, highlight=False, soft_wrap=True)
    return console.export_text()


# -- diff and fleet outliers --------------------------------------------------------------------------
def render_comparison(cmp, fmt: str, width: int = 200) -> str:
    if fmt == "json":
        return json.dumps({"a": cmp.a, "b": cmp.b, "threshold": cmp.threshold,
                           "facts": [vars(f) for f in cmp.facts], "cases": [c.as_dict() for c in cmp.cases]},
                          indent=1, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        fields = list(cmp.cases[0].as_dict()) if cmp.cases else ["key"]
        writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for c in cmp.cases:
            writer.writerow({k: ("" if v is None else v) for k, v in c.as_dict().items()})
        return buf.getvalue()
    f = lambda v, p: "" if v is None else format(v, p)  # noqa: E731
    fact_rows = [[d.field, d.a, d.b] for d in cmp.facts]
    case_rows = [[c.key if "/" in c.key else "", c.label, c.backend, str(c.m), str(c.n), str(c.k), f(c.a_us, ".2f"),
                  f(c.b_us, ".2f"), f(c.ratio, ".3f"),
                  "" if c.ci_low is None else f"{c.ci_low:.3f}–{c.ci_high:.3f}", f(c.p_value, ".2g"), c.verdict, c.note]
                 for c in cmp.cases]
    case_headers = ["host/case", "label", "backend", "M", "N", "K", "A µs", "B µs", "B/A", "95% CI", "p", "verdict", "note"]
    summary = {}
    for c in cmp.cases:
        summary[c.verdict] = summary.get(c.verdict, 0) + 1
    summary_line = (f"A = {cmp.a}, B = {cmp.b}, threshold ±{cmp.threshold:.1%}: "
                    + ", ".join(f"{n} {v}" for v, n in sorted(summary.items())))
    if fmt == "md":
        out = [f"**{summary_line}**", ""]
        if fact_rows:
            out += ["Host facts that differ:", "", "| fact | A | B |", "|---|---|---|"]
            out += [f"| {a} | {b} | {c} |" for a, b, c in fact_rows] + [""]
        out += ["| " + " | ".join(case_headers) + " |", "|" + "---|" * len(case_headers)]
        out += ["| " + " | ".join(x.replace("|", "\\|") for x in r) + " |" for r in case_rows]
        return "\n".join(out) + "\n"
    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=False)
    if fact_rows:
        t = Table(title="host facts that differ (numbers below may differ because of these)", header_style="bold")
        for h in ("fact", "A", "B"):
            t.add_column(h, overflow="fold")
        for r in fact_rows:
            t.add_row(*r)
        console.print(t)
    t = Table(title=summary_line, header_style="bold")
    for h in case_headers:
        t.add_column(h, overflow="fold")
    style = {"SLOWER": "bold red", "FASTER": "green", "AMBIGUOUS": "yellow"}
    for r in case_rows:
        s = style.get(r[11])
        r[11] = f"[{s}]{r[11]}[/]" if s else r[11]
        t.add_row(*r)
    console.print(t)
    return console.export_text()


def render_fleet(report, fmt: str, width: int = 200) -> str:
    if fmt == "json":
        return json.dumps({"threshold": report.threshold, "hosts": report.hosts,
                           "deviations": [d.as_dict() for d in report.deviations]}, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["slot", "backend", "m", "n", "k", "median_us", "fleet_median_us", "robust_z"])
        for d in report.deviations:
            writer.writerow([d.slot, d.backend, d.m, d.n, d.k, d.median_us, d.fleet_median_us, d.robust_z])
        return buf.getvalue()
    host_rows = [[slot, str(h["cases"]), str(h["flagged"]), f"{h['score']:.0%}", "OUTLIER" if h["outlier"] else ""]
                 for slot, h in report.hosts.items()]
    dev_rows = [[d.slot, d.backend, str(d.m), str(d.n), str(d.k), f"{d.median_us:.2f}", f"{d.fleet_median_us:.2f}",
                 f"{d.median_us / d.fleet_median_us:.3f}", f"{d.robust_z:+.1f}"] for d in report.deviations]
    if fmt == "md":
        out = ["| host | cases | flagged | score | |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in host_rows] + [""]
        out += ["| host | backend | M | N | K | µs | fleet µs | ratio | robust z |", "|---|---|---|---|---|---|---|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in dev_rows]
        return "\n".join(out) + "\n"
    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=False)
    t = Table(title=f"hosts vs the fleet median (flag: |robust z| > 3.5 and off by > {report.threshold:.0%})",
              header_style="bold")
    for h in ("host", "cases", "flagged", "score", ""):
        t.add_column(h)
    for r in host_rows:
        t.add_row(*r)
    console.print(t)
    if dev_rows:
        t = Table(title="cases that make them so", header_style="bold")
        for h in ("host", "backend", "M", "N", "K", "µs", "fleet µs", "ratio", "robust z"):
            t.add_column(h)
        for r in dev_rows:
            t.add_row(*r)
        console.print(t)
    return console.export_text()
