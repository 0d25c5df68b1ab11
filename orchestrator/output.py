"""The one writer of what commands print: a Document as a table, JSON, CSV or Markdown. Pure: data in,
text out. rich is imported only when a table is drawn."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any, Optional

FORMATS = ("table", "json", "csv", "md")
# Every JSON output is an envelope {"kind": ..., "format": JSON_FORMAT, ...}: a list goes under "items",
# a mapping's keys sit beside kind and format. Bump on any change a reader of the JSON must know about.
JSON_FORMAT = 1


@dataclass
class Section:
    """One titled grid of display cells. `styles` maps a column index to {cell text: rich style}."""

    headers: list[str]
    rows: list[list[str]]
    title: str = ""
    right: tuple[str, ...] = ()  # headers whose column is right-aligned
    styles: dict[int, dict[str, str]] = field(default_factory=dict)
    caption: str = ""
    # Headers a table may leave out, first to go first, when the terminal is too narrow for all of
    # them (json, csv and md always have every column).
    optional: tuple[str, ...] = ()


@dataclass
class Document:
    """What one command prints. `data` is the JSON form; `records` the CSV rows (one dict per row);
    `sections` and `notes` the human forms (table and Markdown)."""

    sections: list[Section]
    data: Any = None
    records: Optional[list[dict]] = None
    notes: list[str] = field(default_factory=list)
    kind: str = "output"  # names the JSON document: rows, pivot, diff, fleet, history, inventory, ...
    headline: str = ""  # Markdown's first line (a table shows it as a section title instead)


COMPACT_JSON_ABOVE = 2000  # records
# Cells that are names or single words: never broken.
NAME_COLUMNS = {"host", "backend", "run", "slot", "fact", "setting", "peak", "status", "verdict", "check"}
TEXT_ROOM = 20  # what a wrapping text column (a note, a reason) needs at least to stay readable


def write(doc: Document, fmt: str, width: int = 200) -> str:
    if fmt == "json":
        # Indented for reading; a large document (a long history) compact, which json encodes in C.
        indent = 1 if len(doc.records or ()) <= COMPACT_JSON_ABOVE else None
        return json.dumps(envelope(doc), indent=indent, ensure_ascii=False) + "\n"
    if fmt == "csv":
        return _csv(doc.records or [])
    if fmt == "md":
        return _markdown(doc)
    if fmt == "table":
        return _table(doc, width)
    raise ValueError(f"unknown output format {fmt!r} (known: {', '.join(FORMATS)})")


def envelope(doc: Document) -> dict:
    out: dict = {"kind": doc.kind, "format": JSON_FORMAT}
    if isinstance(doc.data, dict):
        out.update({k: v for k, v in doc.data.items() if k not in out})
    else:
        out["items"] = doc.data
    return out


def _csv(records: list[dict]) -> str:
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in records for k in r)) or ["empty"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown(doc: Document) -> str:
    out = [f"**{doc.headline}**", ""] if doc.headline else []
    for s in doc.sections:
        if s.title:
            out += [s.title + ":", ""]
        out += ["| " + " | ".join(s.headers) + " |", "|" + "---|" * len(s.headers)]
        out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in s.rows]
        if s.caption:
            out += ["", s.caption]
        out.append("")
    out += [f"- {n}" for n in doc.notes]
    return "\n".join(out).rstrip("\n") + "\n"


def _table(doc: Document, width: int) -> str:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=False)
    for s in doc.sections:
        keep = _columns_that_fit(s, width)
        dropped = [h for i, h in enumerate(s.headers) if i not in keep]
        caption = s.caption
        if dropped:
            caption = (caption + "\n" if caption else "") + (f"left out at {width} columns: {', '.join(dropped)} "
                                                              "(a wider terminal, or --format md|csv|json, has them)")
        table = Table(title=s.title or None, header_style="bold", caption=caption or None)
        for i in keep:
            h = s.headers[i]
            table.add_column(h, justify="right" if h in s.right else "left", overflow="fold",
                             min_width=_min_width(s, i), no_wrap=h in NAME_COLUMNS or h in s.right)
        for row in s.rows:
            cells = [escape(c) for c in row]
            for col, styles in s.styles.items():
                style = styles.get(row[col])
                if style:
                    cells[col] = f"[{style}]{cells[col]}[/]"
            table.add_row(*(cells[i] for i in keep))
        console.print(table)
    for n in doc.notes:
        console.print(n, markup=False, highlight=False)
    return console.export_text()


def _min_width(s: Section, i: int) -> int:
    """Names and numbers are never broken: such a column is as wide as its longest value; any column
    at least as wide as its header's longest word (text between words wraps)."""
    h = s.headers[i]
    width = max((len(w) for w in h.split()), default=1)
    if h in NAME_COLUMNS or h in s.right:
        width = max([width, *(len(row[i]) for row in s.rows if i < len(row))])
    return width


def _columns_that_fit(s: Section, width: int) -> list[int]:
    """Indexes of the columns to draw: all, less optional ones (in their order) while the unbreakable
    minimum (widths + 3 per column for borders and padding) exceeds the width."""
    def needs(i: int) -> int:
        h = s.headers[i]
        if h in NAME_COLUMNS or h in s.right:
            return _min_width(s, i)
        return max(_min_width(s, i), min(TEXT_ROOM, max((len(row[i]) for row in s.rows if i < len(row)), default=0)))

    keep = list(range(len(s.headers)))
    for h in s.optional:
        if sum(needs(i) + 3 for i in keep) + 1 <= width:
            break
        if h in s.headers:
            keep.remove(s.headers.index(h))
    return keep
