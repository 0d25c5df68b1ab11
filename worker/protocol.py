"""What the worker says while it runs, stdlib only: progress and record lines on stdout, records on disk.

Every record is appended to results.jsonl (fsynced: the host's file is the durable copy) and then
echoed on stdout, so the controller usually has all results when the command ends and fetches the
file only when the stream was cut short. The supervisor and the controller need these and nothing
heavier: importing pydantic (or torch) just to print a line costs ~0.1 s of CPU per process, and a
fleet pays it per host.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path

PROGRESS_PREFIX = "@@fleetbench-progress "
RECORD_PREFIX = "@@fleetbench-record "
# The rendered launcher's exit status when this host lacks its worker version (the controller then
# uploads it and runs again). Distinct from the supervisor's 3 and 4 and from argparse's 2.
EXIT_NEEDS_SYNC = 5


def emit_progress(**event) -> None:
    """One machine-readable line on stdout; the controller turns these into its live view."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def append_line(path: Path, line: str) -> None:
    """Append one record line durably (a host that dies right after loses nothing already written),
    then echo it for the controller."""
    line = line.rstrip("\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    sys.stdout.write(RECORD_PREFIX + line + "\n")
    sys.stdout.flush()


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
