"""Reading fleetbench's output in tests: every JSON output is an envelope (orchestrator/views/output.py);
Markdown tables are read by their header."""

from __future__ import annotations

import json

from orchestrator.views.output import JSON_FORMAT


def cli_json(text: str):
    """The payload of a command's JSON output: its `items` for a listing, else the whole envelope.
    Checks the envelope itself on the way (a kind and the current format)."""
    doc = json.loads(text)
    assert isinstance(doc, dict) and doc.get("format") == JSON_FORMAT and doc.get("kind"), str(doc)[:200]
    return doc["items"] if "items" in doc else doc


def md_rows(text: str, first_header: str) -> list[dict]:
    """The rows of the Markdown table whose header starts with `first_header`, as header -> cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    headers = [h.strip() for h in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(headers, (c.strip() for c in line.strip("|").split("|")))))
    return rows
