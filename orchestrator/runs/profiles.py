"""Profiles kept in their run's folder, as data beside the run's results:

    runs/<id>/profiles/<slot>/profile-<n>/params.json        what the host was asked (data, not code)
                                         /log.txt            the host's output, line by line
                                         /<case_id>.json     the profile (format below): the host's record
                                                             (ncu's CSV inside), its parsed summary, the
                                                             sweep's median of that case on that slot
                                         /<case_id>.ncu-rep  ncu's own report (opens in Nsight Compute)
    runs/<id>/profiles/fleet-<n>.json                        one `diff --across-hosts --profile`: each
                                                             flagged case's counter diff and its cause

Stored profile history (STORED_PROFILE_FORMAT; the host's record has its own, worker/profile.py):
  1  first version (issue 32).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from worker.profile import PROFILE_FORMAT, ProfileRecord

from .atomicfile import write_json
from .formats import check_version
from .store import RunStore

STORED_PROFILE_FORMAT = 1
FLEET_FORMAT = 1


@dataclass
class StoredProfile:
    slot: str
    number: int  # profile-<n> of its slot
    path: Path  # <case_id>.json
    record: ProfileRecord
    summary: Optional[dict]  # analysis/profile.py ProfileSummary.as_dict(); None when not ok or unreadable
    sweep_median_us: Optional[float]  # the run's median of this case on this slot
    report: Optional[Path]  # the local .ncu-rep, when it was fetched
    problem: str = ""  # what went wrong after the host's verdict (parse, fetch)
    sweep_sm_clock_mhz: Optional[float] = None  # NVML's SM clock in the run's rounds of this case (median)

    @property
    def case_id(self) -> str:
        return self.record.case_id


def profiles_dir(store: RunStore) -> Path:
    return store.dir / "profiles"


def job_dir(store: RunStore, slot: str, number: int) -> Path:
    return profiles_dir(store) / slot / f"profile-{number}"


def new_job_dir(store: RunStore, slot: str) -> tuple[int, Path]:
    """(n, the folder profile-<n>) of a new profiling of `slot`, created: two commands at once get two."""
    base = profiles_dir(store) / slot
    base.mkdir(parents=True, exist_ok=True)
    number = max((int(p.name[8:]) for p in base.iterdir() if p.name.startswith("profile-") and p.name[8:].isdigit()),
                 default=0) + 1
    while True:
        try:
            (base / f"profile-{number}").mkdir()
            return number, base / f"profile-{number}"
        except FileExistsError:
            number += 1


def write_profile(store: RunStore, slot: str, number: int, record: ProfileRecord, summary: Optional[dict],
                  sweep: tuple[Optional[float], Optional[float]], report: Optional[Path],
                  problem: str = "") -> StoredProfile:
    """Store one profile; `sweep`: the run's (median µs, SM clock MHz) of this case on this slot."""
    path = job_dir(store, slot, number) / f"{record.case_id}.json"
    write_json(path, {"kind": "profile", "format": STORED_PROFILE_FORMAT, "slot": slot, "profile": number,
                      "record": record.model_dump(mode="json"), "summary": summary, "sweep_median_us": sweep[0],
                      "sweep_sm_clock_mhz": sweep[1], "report_file": report.name if report else "",
                      "problem": problem})
    return StoredProfile(slot, number, path, record, summary, sweep[0], report, problem, sweep[1])


def read_profile(path: Path) -> StoredProfile:
    """A stored profile; ValueError saying what is wrong with the file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        check_version(doc.get("format"), STORED_PROFILE_FORMAT, f"{path}: stored profile")
        record = ProfileRecord.model_validate(doc["record"])
        check_version(record.format, PROFILE_FORMAT, f"{path}: profile record")
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable profile: {exc}") from None
    report = path.with_name(doc["report_file"]) if doc.get("report_file") else None
    return StoredProfile(doc["slot"], int(doc["profile"]), path, record, doc.get("summary"), doc.get("sweep_median_us"),
                         report if report and report.exists() else None, doc.get("problem", ""),
                         doc.get("sweep_sm_clock_mhz"))


def load_profiles(store: RunStore) -> tuple[list[StoredProfile], list[str]]:
    """Every stored profile of the run, oldest first per slot, and a line per file that cannot be read."""
    found, problems = [], []
    base = profiles_dir(store)
    if not base.is_dir():
        return found, problems
    for slot_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        numbered = [(int(p.name[8:]), p) for p in slot_dir.iterdir()
                    if p.name.startswith("profile-") and p.name[8:].isdigit()]
        for _, folder in sorted(numbered):
            for path in sorted(folder.glob("*.json")):
                if path.name == "params.json":
                    continue
                try:
                    found.append(read_profile(path))
                except ValueError as exc:
                    problems.append(str(exc))
    return found, problems


def write_fleet(store: RunStore, comparisons: list[dict], threshold: float) -> Path:
    """Store one `diff --across-hosts --profile`'s counter diffs; returns the file."""
    base = profiles_dir(store)
    base.mkdir(parents=True, exist_ok=True)
    taken = [int(p.stem[6:]) for p in base.glob("fleet-*.json") if p.stem[6:].isdigit()]
    path = base / f"fleet-{max(taken, default=0) + 1}.json"
    write_json(path, {"kind": "fleet-profile", "format": FLEET_FORMAT, "threshold": threshold,
                      "comparisons": comparisons})
    return path


def latest_fleet(store: RunStore) -> list[dict]:
    """The counter diffs of the latest `diff --across-hosts --profile` of this run ([] when none, or unreadable)."""
    files = sorted((p for p in profiles_dir(store).glob("fleet-*.json") if p.stem[6:].isdigit()),
                   key=lambda p: int(p.stem[6:]))
    for path in reversed(files):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            check_version(doc.get("format"), FLEET_FORMAT, f"{path}")
            return list(doc["comparisons"])
        except (OSError, KeyError, TypeError, ValueError):
            continue
    return []
