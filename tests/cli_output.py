"""Reading fleetbench's JSON output in tests: every JSON output is an envelope (orchestrator/views/output.py)."""
from __future__ import annotations

import json

from orchestrator.views.output import JSON_FORMAT


def cli_json(text: str):
    """The payload of a command's JSON output: its `items` for a listing, else the whole envelope.
    Checks the envelope itself on the way (a kind and the current format)."""
    doc = json.loads(text)
    assert isinstance(doc, dict) and doc.get("format") == JSON_FORMAT and doc.get("kind"), str(doc)[:200]
    return doc["items"] if "items" in doc else doc
