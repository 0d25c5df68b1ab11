"""Results of a command over cases of a stored run, kept per slot in numbered folders of the run's folder
(the layout and the file around each record; what a kind adds: runs/profiles.py, runs/crosschecks.py):

    runs/<id>/<kind>s/<slot>/<kind>-<n>/params.json     what the host was asked (data, not code)
                                       /log.txt         the host's output, line by line
                                       /<case_id>.json  {"kind", "format", "slot", <kind>: n, "record": the
                                                        host's record, and what the kind adds}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from pydantic import BaseModel

from .formats import NewerFormat, check_version, written_by_newer
from .store import RunStore

Stored = TypeVar("Stored")


@dataclass
class StoredCase:
    """One case's stored result; each kind's own type adds what it keeps beside the host's record."""

    slot: str
    number: int  # <kind>-<n> of its slot
    path: Path  # <case_id>.json
    record: Any  # the host's record (its kind's record type)

    @property
    def case_id(self) -> str:
        return self.record.case_id


@dataclass(frozen=True)
class SlotFolders:
    kind: str  # "profile": profiles/<slot>/profile-<n>/
    stored_format: int  # of the file around the record (the kind's module has its history)
    record_type: type[BaseModel]
    record_format: int  # the newest version of the host's record this reader reads

    @property
    def prefix(self) -> str:
        return f"{self.kind}-"

    def base(self, store: RunStore) -> Path:
        return store.dir / f"{self.kind}s"

    def job_dir(self, store: RunStore, slot: str, number: int) -> Path:
        return self.base(store) / slot / f"{self.prefix}{number}"

    def new_job_dir(self, store: RunStore, slot: str) -> tuple[int, Path]:
        """(n, the folder <kind>-<n>) of a new run of the command on `slot`, created: two commands at once
        get two."""
        base = store.make_dir(self.base(store) / slot)
        number = max((n for n, _ in self._numbered(store, base)), default=0) + 1
        while True:
            try:
                (base / f"{self.prefix}{number}").mkdir()
                return number, base / f"{self.prefix}{number}"
            except FileExistsError:
                number += 1

    def write_case(self, store: RunStore, slot: str, number: int, record: BaseModel, **fields) -> Path:
        """Store one case's record, with what the kind keeps beside it (`fields`); returns the file."""
        path = self.job_dir(store, slot, number) / f"{record.case_id}.json"
        store.write_json(
            path,
            {
                "kind": self.kind,
                "format": self.stored_format,
                "slot": slot,
                self.kind: number,
                "record": record.model_dump(mode="json"),
                **fields,
            },
        )
        return path

    def read_case(self, store: RunStore, path: Path, build: Callable[[dict, Any], Stored]) -> Stored:
        """`build(the file's document, its record)`; ValueError saying what is wrong with the file,
        LinkInRun when it is a link (runs/runfiles.py)."""
        try:
            doc = json.loads(store.read_text(path))
            check_version(doc.get("format"), self.stored_format, f"{path}: stored {self.kind}")
            record = self.record_type.model_validate(doc["record"])
            check_version(record.format, self.record_format, f"{path}: {self.kind} record")
            return build(doc, record)
        except NewerFormat as exc:
            raise ValueError(f"{path}: {self.kind} {written_by_newer(exc.version, exc.current)}") from None
        except (OSError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable {self.kind}: {exc}") from None

    def load(
        self, store: RunStore, read: Callable[[RunStore, Path], Stored]
    ) -> tuple[dict[str, list[Stored]], list[str]]:
        """slot -> each stored result `read` gives, oldest <kind>-<n> first; and a line per file `read`
        refused (ValueError). LinkInRun for a link among them (runs/runfiles.py)."""
        found: dict[str, list[Stored]] = {}
        problems: list[str] = []
        for slot_dir in store.subfolders(self.base(store)):
            of_slot = found.setdefault(slot_dir.name, [])
            for _, folder in self._numbered(store, slot_dir):
                for entry in store.entries(folder):
                    if not entry.name.endswith(".json") or entry.name == "params.json":
                        continue
                    try:
                        of_slot.append(read(store, Path(entry.path)))
                    except ValueError as exc:
                        problems.append(str(exc))
        return found, problems

    def _numbered(self, store: RunStore, slot_dir: Path) -> list[tuple[int, Path]]:
        return sorted(
            (int(p.name[len(self.prefix) :]), p)
            for p in store.subfolders(slot_dir)
            if p.name.startswith(self.prefix) and p.name[len(self.prefix) :].isdigit()
        )
