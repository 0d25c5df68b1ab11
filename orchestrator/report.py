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
