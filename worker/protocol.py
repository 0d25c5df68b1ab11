"""What the worker says while it runs, stdlib only: progress lines on stdout, result lines on disk.

The supervisor and the controller's live view need these and nothing heavier; importing pydantic (or
torch) just to print a progress line costs ~0.1 s of CPU per process, and a fleet pays it per host.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path

PROGRESS_PREFIX = "@@fleetbench-progress "


def emit_progress(**event) -> None:
    """One machine-readable line on stdout; the controller turns these into its live view."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def append_line(path: Path, line: str) -> None:
    """Append one record line durably: a host that dies right after loses nothing already written."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line if line.endswith("\n") else line + "\n")
        f.flush()
        os.fsync(f.fileno())


def done_case_ids(path: Path) -> set[str]:
    """Ids of cases that already have a record (bad lines are skipped; the controller reports them)."""
    done: set[str] = set()
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("kind") == "case" and isinstance(obj.get("case_id"), str):
            done.add(obj["case_id"])
    return done


def has_facts(path: Path) -> bool:
    if not path.exists():
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return any('"kind":"facts"' in line for line in f)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
