"""Profiles kept in their run's folder, as data beside the run's results:

    runs/<id>/profiles/<slot>/profile-<n>/params.json        what the host was asked (data, not code)
                                         /log.txt            the host's output, line by line
                                         /<case_id>.json     the profile (format below): the host's record
                                                             (ncu's CSV inside), its parsed summary, the
                                                             sweep's median of that case on that slot
                                         /<case_id>.ncu-rep  ncu's own report (opens in Nsight Compute)
    runs/<id>/profiles/fleet-<n>.json                        one `diff --across-hosts --profile`: each
                                                             flagged case's counter diff and its cause

The folders, and the file around each record: runs/slotfolders.py.

Stored profile history (STORED_PROFILE_FORMAT; the host's record has its own, worker/tools/profile.py):
  1  first version (issue 32).
  2  the summary's notes as codes and facts (`limits`: [{code, facts}], runs/ncureport.py LIMIT_*), worded
     when shown (views/profile.py); a format 1 summary's `notes`, already words, are shown as stored
     (issue 42).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from worker.contract.profile import PROFILE_FORMAT, ProfileRecord

from .formats import check_version
from .slotfolders import SlotFolders, StoredCase
from .store import RunStore

STORED_PROFILE_FORMAT = 2
FLEET_FORMAT = 1
FOLDERS = SlotFolders("profile", STORED_PROFILE_FORMAT, ProfileRecord, PROFILE_FORMAT)


@dataclass
class StoredProfile(StoredCase):
    record: ProfileRecord
    summary: Optional[dict]  # runs/ncureport.py ProfileSummary.as_dict(); None when not ok or unreadable
    sweep_median_us: Optional[float]  # the run's median of this case on this slot
    report: Optional[Path]  # the local .ncu-rep, when it was fetched
    problem: str = ""  # what went wrong after the host's verdict (parse, fetch)
    sweep_sm_clock_mhz: Optional[float] = None  # NVML's SM clock in the run's rounds of this case (median)


def write_profile(
    store: RunStore,
    slot: str,
    number: int,
    record: ProfileRecord,
    summary: Optional[dict],
    sweep: tuple[Optional[float], Optional[float]],
    report: Optional[Path],
    problem: str = "",
) -> StoredProfile:
    """Store one profile; `sweep`: the run's (median µs, SM clock MHz) of this case on this slot."""
    path = FOLDERS.write_case(
        store,
        slot,
        number,
        record,
        summary=summary,
        sweep_median_us=sweep[0],
        sweep_sm_clock_mhz=sweep[1],
        report_file=report.name if report else "",
        problem=problem,
    )
    return StoredProfile(slot, number, path, record, summary, sweep[0], report, problem, sweep[1])


def read_profile(store: RunStore, path: Path) -> StoredProfile:
    """A stored profile; ValueError saying what is wrong with the file."""

    def build(doc: dict, record: ProfileRecord) -> StoredProfile:
        report = path.with_name(doc["report_file"]) if doc.get("report_file") else None
        return StoredProfile(
            doc["slot"],
            int(doc["profile"]),
            path,
            record,
            doc.get("summary"),
            doc.get("sweep_median_us"),
            report if report and store.exists(report) else None,
            doc.get("problem", ""),
            doc.get("sweep_sm_clock_mhz"),
        )

    return FOLDERS.read_case(store, path, build)


def load_profiles(store: RunStore) -> tuple[list[StoredProfile], list[str]]:
    """Every stored profile of the run, oldest first per slot, and a line per file that cannot be read."""
    by_slot, problems = FOLDERS.load(store, read_profile)
    return [p for of_slot in by_slot.values() for p in of_slot], problems


def write_fleet(store: RunStore, comparisons: list[dict], threshold: float) -> Path:
    """Store one `diff --across-hosts --profile`'s counter diffs; returns the file."""
    base = store.make_dir(FOLDERS.base(store))
    taken = [int(n) for n in _fleet_numbers(store)]
    path = base / f"fleet-{max(taken, default=0) + 1}.json"
    store.write_json(
        path, {"kind": "fleet-profile", "format": FLEET_FORMAT, "threshold": threshold, "comparisons": comparisons}
    )
    return path


def latest_fleet(store: RunStore) -> list[dict]:
    """The counter diffs of the latest `diff --across-hosts --profile` of this run ([] when none, or unreadable)."""
    for number in sorted(_fleet_numbers(store), key=int, reverse=True):
        path = FOLDERS.base(store) / f"fleet-{number}.json"
        try:
            doc = json.loads(store.read_text(path))
            check_version(doc.get("format"), FLEET_FORMAT, f"{path}")
            return list(doc["comparisons"])
        except (OSError, KeyError, TypeError, ValueError):
            continue
    return []


def _fleet_numbers(store: RunStore) -> list[str]:
    """The n of each profiles/fleet-<n>.json."""
    names = [e.name for e in store.entries(FOLDERS.base(store))]
    return [n[6:-5] for n in names if n.startswith("fleet-") and n.endswith(".json") and n[6:-5].isdigit()]
