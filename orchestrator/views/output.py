"""The one writer of what commands print: a Document as a table, JSON, CSV or Markdown. Pure: data in,
text out. rich is imported only when a table is drawn."""

from __future__ import annotations

import csv
import io
import json
import math
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
    # them (json, csv and md always have every column); `last_resort` ones go only once the table is
    # drawn compact (no borders) and still does not fit.
    optional: tuple[str, ...] = ()
    last_resort: tuple[str, ...] = ()


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
# Cells that are names or single words: never wrapped. In any other column a word is never broken either;
# only the spaces between words wrap.
NAME_COLUMNS = {
    "host",
    "backend",
    "run",
    "slot",
    "fact",
    "setting",
    "peak",
    "status",
    "verdict",
    "check",
    "started (UTC)",
}
TEXT_ROOM = 20  # what a wrapping text column (a note, a reason) needs at least to stay readable


def _finite(value):
    """`value` with every NaN or infinity as None: JSON has no such numbers, and a document a user pipes into
    jq must parse (a ratio of edited records can overflow)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write(doc: Document, fmt: str, width: int = 200) -> str:
    if fmt == "json":
        # Indented for reading; a large document (a long history) compact, which json encodes in C.
        indent = 1 if len(doc.records or ()) <= COMPACT_JSON_ABOVE else None
        return json.dumps(_finite(envelope(doc)), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "csv":
        return _csv(doc.records or [])
    if fmt == "md":
        return _markdown(_shown(doc))
    if fmt == "table":
        return _table(_shown(doc), width)
    raise ValueError(f"unknown output format {fmt!r} (known: {', '.join(FORMATS)})")


def printable(text: str) -> str:
    """`text` with control and format characters (an ANSI escape, a bidi override) written out as escapes:
    what a run stored (a label written before they were refused, a kernel's error text) never drives
    the terminal it is shown on."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text)


def _shown(doc: Document) -> Document:
    """The human forms of `doc`, every cell and note printable."""
    sections = [
        Section(
            **{
                **s.__dict__,
                "rows": [[printable(c) for c in row] for row in s.rows],
                "title": printable(s.title),
                "caption": printable(s.caption),
                "styles": {i: {printable(k): v for k, v in m.items()} for i, m in s.styles.items()},
            }
        )
        for s in doc.sections
    ]
    return Document(
        sections=sections,
        data=doc.data,
        records=doc.records,
        notes=[printable(n) for n in doc.notes],
        kind=doc.kind,
        headline=printable(doc.headline),
    )


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


@dataclass
class _Layout:
    """How a Section is drawn at a width: the columns kept and their widths, the columns said once
    instead (the same value on every row), those left out, and whether it is drawn without borders."""

    keep: list[int]
    widths: dict[int, int]
    folded: list[int]
    dropped: list[int]
    compact: bool


def _table(doc: Document, width: int) -> str:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=False)
    for s in doc.sections:
        layout = _layout(s, width)
        captions = [s.caption] if s.caption else []
        if layout.folded:
            said = [
                f"{s.headers[i]}={s.rows[0][i]}" if s.headers[i] else s.rows[0][i]
                for i in layout.folded
                if s.rows[0][i]
            ]
            empty = [s.headers[i] for i in layout.folded if not s.rows[0][i] and s.headers[i]]
            captions.append(
                "; ".join(
                    ([f"every row: {', '.join(said)}"] if said else [])
                    + ([f"no row has: {', '.join(empty)}"] if empty else [])
                )
            )
        if layout.dropped:
            captions.append(
                f"left out at {width} columns: {', '.join(s.headers[i] for i in layout.dropped)} "
                "(a wider terminal, or --format md|csv|json, has them)"
            )
        caption = "\n".join(captions)
        style = dict(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0)) if layout.compact else {}
        # A title or caption as wide as the table at least as its longest word: never broken either.
        longest = max((len(w) for text in (s.title, caption) for w in text.split()), default=0)
        table = Table(
            title=s.title or None, header_style="bold", caption=caption or None, min_width=min(width, longest), **style
        )
        for i in layout.keep:
            h = s.headers[i]
            # As wide as its longest word at least, so only spaces wrap: a name or number, as wide as its
            # longest cell, never does.
            table.add_column(h, justify="right" if h in s.right else "left", width=layout.widths[i], overflow="fold")
        for row in s.rows:
            cells = [escape(c) for c in row]
            for col, styles in s.styles.items():
                style_of = styles.get(row[col])
                if style_of:
                    cells[col] = f"[{style_of}]{cells[col]}[/]"
            table.add_row(*(cells[i] for i in layout.keep))
        console.print(table)
    for n in doc.notes:
        console.print(n, markup=False, highlight=False)
    return console.export_text()


def _unbreakable(s: Section, i: int) -> bool:
    return s.headers[i] in NAME_COLUMNS or s.headers[i] in s.right


def _cells(s: Section, i: int) -> list[str]:
    return [row[i] for row in s.rows if i < len(row)]


def _min_width(s: Section, i: int) -> int:
    """The narrowest a column can be without breaking a word: a name or a number whole, any other
    column its longest word (and at least TEXT_ROOM, or its longest cell, to stay readable)."""
    words = [len(w) for text in [s.headers[i], *_cells(s, i)] for w in text.split()]
    width = max(words, default=1)
    if _unbreakable(s, i):
        return max([width, *(len(c) for c in _cells(s, i))])
    return max(width, min(TEXT_ROOM, max((len(c) for c in _cells(s, i)), default=0)))


def _layout(s: Section, width: int) -> _Layout:
    """Every column when they fit; else, in turn: columns with one value on every row said once below
    the table, `optional` columns left out, the table drawn without borders, `last_resort` columns left
    out, and finally columns from the right. No column is ever narrower than its _min_width."""
    n = len(s.headers)
    need = [_min_width(s, i) for i in range(n)]
    same = [i for i in range(n) if len(s.rows) > 1 and len({row[i] for row in s.rows}) == 1]

    def room(keep: list[int], compact: bool) -> int:
        borders = len(keep) - 1 if compact else 3 * len(keep) + 1
        return width - borders - sum(need[i] for i in keep)

    def shed(keep: list[int], compact: bool, headers: tuple[str, ...]) -> None:
        for h in headers:
            if room(keep, compact) >= 0:
                return
            if h in s.headers and s.headers.index(h) in keep:
                keep.remove(s.headers.index(h))

    keep = list(range(n))
    compact = False
    if room(keep, compact) < 0:
        keep = [i for i in keep if i not in same]
        shed(keep, compact, s.optional)
        if room(keep, compact) < 0:
            keep, compact = [i for i in range(n) if i not in same], True
            shed(keep, compact, s.optional + s.last_resort)
            while room(keep, compact) < 0 and len(keep) > 1:
                keep.pop()
    widths = {i: need[i] for i in keep}
    # What room is left goes a character at a time to the narrowest column, up to its longest cell or
    # header: headers unwrapped, then notes on fewer lines.
    spare = room(keep, compact)
    longest = {i: max([len(s.headers[i]), *(len(c) for c in _cells(s, i))]) for i in keep}
    while spare > 0:
        short = [i for i in keep if widths[i] < longest[i]]
        if not short:
            break
        widths[min(short, key=lambda i: widths[i])] += 1
        spare -= 1
    folded = [i for i in same if i not in keep]
    return _Layout(
        keep=keep,
        widths=widths,
        folded=folded,
        dropped=[i for i in range(n) if i not in keep and i not in folded],
        compact=compact,
    )
