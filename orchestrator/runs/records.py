"""Parse a host's results.jsonl, of any format version, into current records. A bad line is a recorded
problem, never a crash."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from pydantic import TypeAdapter, ValidationError

from worker.contract.schema import CaseRecord, FactsRecord, Record

from .formats import NewerFormat, upgrade_record

_RECORD = TypeAdapter(Record)


@dataclass
class ParsedResults:
    facts: Optional[FactsRecord] = None
    cases: list[CaseRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    newer: Optional[int] = None  # the newest record format found beyond this reader's (a later fleetbench wrote it)


def parse_line(text: str) -> FactsRecord | CaseRecord:
    """One record; raises ValueError with a message that says what to do."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or "schema_version" not in obj:
        raise ValueError("not a fleetbench record (no schema_version)")
    obj = upgrade_record(obj)
    try:
        return _RECORD.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"invalid record: field '{loc}': {first['msg']}") from None


def parse_results(path: Path, store=None) -> ParsedResults:
    """The records of a results.jsonl (none when it is missing); `store`: the RunStore it belongs to,
    which opens it (never through a link inside the run folder: runs/runfiles.py LinkInRun). An attempt's
    facts are its first facts record, the one its supervisor wrote before any case ran: another, however
    it came, is not the host's (a kernel under test could have written it)."""
    parsed = ParsedResults()
    try:
        f = (store.open if store else open)(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return parsed
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if not line.endswith("\n"):
                parsed.problems.append(f"{Path(path).name} line {lineno}: truncated (the writer died mid-line)")
                continue
            try:
                record = parse_line(line)
            except NewerFormat as exc:
                parsed.newer = max(parsed.newer or 0, exc.version)
                parsed.problems.append(f"{Path(path).name} line {lineno}: {exc}")
                continue
            except ValueError as exc:
                parsed.problems.append(f"{Path(path).name} line {lineno}: {exc}")
                continue
            if isinstance(record, FactsRecord):
                parsed.facts = parsed.facts or record
            else:
                parsed.cases.append(record)
    return parsed
