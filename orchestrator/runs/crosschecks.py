"""Crosschecks kept in their run's folder, as data beside the run's results:

    runs/<id>/crosschecks/<slot>/crosscheck-<n>/params.json     what the host was asked (data, not code)
                                               /log.txt         the host's output, line by line
                                               /<case_id>.json  the host's record (worker/tools/crosscheck.py) and
                                                                the sweep's median of that case on that slot

The folders, and the file around each record: runs/slotfolders.py.

Stored crosscheck history (STORED_CROSSCHECK_FORMAT; the host's record has its own, worker/tools/crosscheck.py):
  1  first version (issue 30).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from worker.contract.crosscheck import CROSSCHECK_FORMAT, CrosscheckRecord

from .slotfolders import SlotFolders, StoredCase
from .store import RunStore

STORED_CROSSCHECK_FORMAT = 1
FOLDERS = SlotFolders("crosscheck", STORED_CROSSCHECK_FORMAT, CrosscheckRecord, CROSSCHECK_FORMAT)


@dataclass
class StoredCrosscheck(StoredCase):
    record: CrosscheckRecord
    sweep_median_us: Optional[float]  # the run's median of this case on this slot


def write_crosscheck(
    store: RunStore, slot: str, number: int, record: CrosscheckRecord, sweep_median_us: Optional[float]
) -> StoredCrosscheck:
    path = FOLDERS.write_case(store, slot, number, record, sweep_median_us=sweep_median_us)
    return StoredCrosscheck(slot, number, path, record, sweep_median_us)


def read_crosscheck(store: RunStore, path: Path) -> StoredCrosscheck:
    """A stored crosscheck; ValueError saying what is wrong with the file."""
    return FOLDERS.read_case(
        store,
        path,
        lambda doc, record: StoredCrosscheck(
            doc["slot"], int(doc["crosscheck"]), path, record, doc.get("sweep_median_us")
        ),
    )


def load_crosschecks(store: RunStore, latest_only: bool = False) -> tuple[list[StoredCrosscheck], list[str]]:
    """Every stored crosscheck of the run, oldest first per slot (with `latest_only`, each slot's latest
    crosscheck of each case), and a line per file that cannot be read."""
    by_slot, problems = FOLDERS.load(store, read_crosscheck)
    found = []
    for of_slot in by_slot.values():
        found += list({s.case_id: s for s in of_slot}.values()) if latest_only else of_slot
    return found, problems
