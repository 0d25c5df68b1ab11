"""Crosschecks kept in their run's folder, as data beside the run's results:

    runs/<id>/crosschecks/<slot>/crosscheck-<n>/params.json     what the host was asked (data, not code)
                                               /log.txt         the host's output, line by line
                                               /<case_id>.json  the host's record (worker/crosscheck.py) and
                                                                the sweep's median of that case on that slot

Stored crosscheck history (STORED_CROSSCHECK_FORMAT; the host's record has its own, worker/crosscheck.py):
  1  first version (issue 30).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from worker.crosscheck import CROSSCHECK_FORMAT, CrosscheckRecord

from .atomicfile import write_json
from .formats import check_version
from .store import RunStore

STORED_CROSSCHECK_FORMAT = 1
PREFIX = "crosscheck-"


@dataclass
class StoredCrosscheck:
    slot: str
    number: int  # crosscheck-<n> of its slot
    path: Path  # <case_id>.json
    record: CrosscheckRecord
    sweep_median_us: Optional[float]  # the run's median of this case on this slot

    @property
    def case_id(self) -> str:
        return self.record.case_id


def crosschecks_dir(store: RunStore) -> Path:
    return store.dir / "crosschecks"


def job_dir(store: RunStore, slot: str, number: int) -> Path:
    return crosschecks_dir(store) / slot / f"{PREFIX}{number}"


def _numbered(base: Path) -> list[tuple[int, Path]]:
    if not base.is_dir():
        return []
    return sorted((int(p.name[len(PREFIX):]), p) for p in base.iterdir()
                  if p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit())


def next_number(store: RunStore, slot: str) -> int:
    return max((n for n, _ in _numbered(crosschecks_dir(store) / slot)), default=0) + 1


def write_crosscheck(store: RunStore, slot: str, number: int, record: CrosscheckRecord,
                     sweep_median_us: Optional[float]) -> StoredCrosscheck:
    path = job_dir(store, slot, number) / f"{record.case_id}.json"
    write_json(path, {"kind": "crosscheck", "format": STORED_CROSSCHECK_FORMAT, "slot": slot, "crosscheck": number,
                      "record": record.model_dump(mode="json"), "sweep_median_us": sweep_median_us})
    return StoredCrosscheck(slot, number, path, record, sweep_median_us)


def read_crosscheck(path: Path) -> StoredCrosscheck:
    """A stored crosscheck; ValueError saying what is wrong with the file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        check_version(doc.get("format"), STORED_CROSSCHECK_FORMAT, f"{path}: stored crosscheck")
        record = CrosscheckRecord.model_validate(doc["record"])
        check_version(record.format, CROSSCHECK_FORMAT, f"{path}: crosscheck record")
        return StoredCrosscheck(doc["slot"], int(doc["crosscheck"]), path, record, doc.get("sweep_median_us"))
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable crosscheck: {exc}") from None


def load_crosschecks(store: RunStore, latest_only: bool = False) -> tuple[list[StoredCrosscheck], list[str]]:
    """Every stored crosscheck of the run, oldest first per slot (with `latest_only`, each slot's latest
    crosscheck of each case), and a line per file that cannot be read."""
    found, problems = [], []
    base = crosschecks_dir(store)
    if not base.is_dir():
        return found, problems
    for slot_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        of_slot: list[StoredCrosscheck] = []
        for _, folder in _numbered(slot_dir):
            for path in sorted(folder.glob("*.json")):
                if path.name == "params.json":
                    continue
                try:
                    of_slot.append(read_crosscheck(path))
                except ValueError as exc:
                    problems.append(str(exc))
        found += list({s.case_id: s for s in of_slot}.values()) if latest_only else of_slot
    return found, problems
