"""The history index: every stored run, its hosts' facts and one row per case result, in SQLite.

The run folders stay the source of truth. The index (`RUNS_DIR/.index.sqlite`) is a cache of them:
updated for a run when it lands (run, rerun), brought up to date before every query (runs that are new,
changed or gone since; a run's fingerprint is the size and modification time of its manifest and of
each attempt's results and outcome, so a file edited in place is seen), and rebuilt from the folders
when it is missing, damaged, another program's database or of another INDEX_FORMAT, whenever that
shows (on opening, or in the middle of a query). A run that cannot be read (a damaged or missing
manifest, a newer format) is indexed with that problem and no results; a result whose values cannot be
a measurement (a size beyond SQLite's integers, a median that is not a time) is left out and named in
its run's problem. Neither ever breaks the index.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Callable, Optional, TypeVar

from ..errors import InputError

INDEX_FORMAT = 2  # 2: identified by application_id and user_version, fingerprints with file sizes
INDEX_NAME = ".index.sqlite"
APPLICATION_ID = 0x46424958  # "FBIX": tells our index from any other SQLite file at that path
LARGEST_INTEGER = 2**63 - 1  # SQLite's
# A median outside this range (µs) is not a timing of a kernel call: a forged or broken record.
PLAUSIBLE_MEDIAN_US = (1e-6, 1e12)

_SCHEMA = f"""
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {INDEX_FORMAT};
CREATE TABLE runs (run_id TEXT PRIMARY KEY, sweep TEXT, created_at TEXT, state TEXT NOT NULL,
                   problem TEXT NOT NULL DEFAULT '', fingerprint TEXT NOT NULL);
CREATE TABLE hosts (run_id TEXT NOT NULL, slot TEXT NOT NULL, host TEXT, gpu_name TEXT, driver TEXT,
                    cuda TEXT, torch TEXT, flashinfer TEXT, sgl_kernel TEXT, hostname TEXT, outcome TEXT,
                    PRIMARY KEY (run_id, slot));
CREATE TABLE results (run_id TEXT NOT NULL, slot TEXT NOT NULL, case_id TEXT NOT NULL, backend TEXT,
                      workload TEXT, label TEXT, m INTEGER, n INTEGER, k INTEGER, status TEXT,
                      median_us REAL, rel_ci REAL, rounds TEXT, pct_sol REAL, tflops REAL, budget_s REAL,
                      PRIMARY KEY (run_id, slot, case_id));
CREATE INDEX results_by_case ON results (case_id, slot);
CREATE INDEX results_by_shape ON results (backend, m, n, k);
"""

T = TypeVar("T")


def index_path(runs_dir: Path) -> Path:
    return Path(runs_dir) / INDEX_NAME


def fingerprint(run_dir: Path) -> str:
    """Changes when the run's manifest, or any attempt's results or outcome, is written, replaced or
    edited in place. Nothing is followed through a link (runs/runfiles.py): a link is fingerprinted as
    itself, and reading the run refuses it."""
    parts = [_stat(run_dir / "manifest.json")]
    try:
        hosts = run_dir / "hosts"
        if hosts.is_symlink():
            parts.append("hosts: a link")
        elif hosts.is_dir():
            for slot in sorted(os.scandir(hosts), key=lambda e: e.name):
                if slot.is_symlink():
                    parts.append(f"{slot.name}: a link")
                elif slot.is_dir():
                    for attempt in sorted(os.scandir(slot.path), key=lambda e: e.name):
                        parts.append(
                            f"{slot.name}/{attempt.name}:"
                            + ",".join(_stat(Path(attempt.path) / name) for name in ("results.jsonl", "outcome.json"))
                        )
    except OSError as exc:
        parts.append(f"error {exc.errno}")
    return "|".join(parts)


def _stat(path: Path) -> str:
    try:
        st = path.lstat()
    except OSError:
        return "-"
    return f"{st.st_size}.{st.st_mtime_ns}.{st.st_ino}"


class RunIndex:
    """Open with `RunIndex.open(runs_dir)`; `refresh()` brings it up to date with the folders. Every
    method raises InputError (naming the file) when the index cannot be used even after a rebuild (a
    read-only folder, a folder where the file belongs)."""

    def __init__(self, runs_dir: Path, db: sqlite3.Connection, rebuilt_because: str = ""):
        self.runs_dir = Path(runs_dir)
        self.db = db
        self.rebuilt_because = rebuilt_because  # why the index file was started over, "" when it was not
        self.counts = {"indexed": 0, "removed": 0, "total": 0}  # what refreshing did since the file was started

    @classmethod
    def open(cls, runs_dir: Path, rebuild: bool = False) -> "RunIndex":
        path = index_path(runs_dir)
        try:
            Path(runs_dir).mkdir(parents=True, exist_ok=True)
            if rebuild:
                _remove(path)
            db, unusable = _connect(path)
            if db is None:  # damaged, foreign or another format: the folders have everything
                _remove(path)
                db = _create(path)
        except (sqlite3.Error, OSError) as exc:
            raise _unusable(path, exc) from None
        return cls(runs_dir, db, unusable)

    def close(self) -> None:
        self.db.close()

    def refresh(self) -> dict[str, int]:
        """Index new and changed runs, drop vanished ones. Returns `counts`: runs indexed and removed since
        this was opened (or since a rebuild), and the runs there are."""
        self._healing(self._refresh)
        return dict(self.counts)

    def update_run(self, run_dir: Path) -> None:
        """Index one run now (a run that just landed)."""
        self._healing(lambda: self._index_run(Path(run_dir), fingerprint(Path(run_dir))))

    def query(self, where: str = "", params: tuple = ()) -> list[sqlite3.Row]:
        """Result rows joined with their run and host, oldest run first."""
        sql = (
            "SELECT r.*, runs.sweep, runs.created_at, runs.state, h.host, h.gpu_name, h.driver, h.torch, "
            "h.flashinfer, h.sgl_kernel, h.cuda FROM results r JOIN runs USING (run_id) "
            "LEFT JOIN hosts h ON h.run_id = r.run_id AND h.slot = r.slot"
        )
        if where:
            sql += " WHERE " + where
        sql += " ORDER BY runs.created_at, r.run_id, r.slot"
        return self._healing(lambda: self.db.execute(sql, params).fetchall())

    def runs(self) -> list[sqlite3.Row]:
        return self._healing(lambda: self.db.execute("SELECT * FROM runs ORDER BY created_at, run_id").fetchall())

    def _healing(self, work: Callable[[], T]) -> T:
        """work(); when the index file turns out damaged or not ours on the way, it is rebuilt from the
        run folders and work() runs again."""
        try:
            try:
                return work()
            except sqlite3.DatabaseError as exc:
                if not _damaged(exc):
                    raise
                self.rebuilt_because = f"it was damaged ({exc})"
            self.db.close()
            path = index_path(self.runs_dir)
            _remove(path)
            self.db = _create(path)
            self.counts = {"indexed": 0, "removed": 0, "total": 0}
            self._refresh()
            return work()
        except (sqlite3.Error, OSError) as exc:
            raise _unusable(index_path(self.runs_dir), exc) from None

    def _refresh(self) -> None:
        known = dict(self.db.execute("SELECT run_id, fingerprint FROM runs"))
        seen, indexed = set(), 0
        for run_dir in _run_dirs(self.runs_dir):
            seen.add(run_dir.name)
            fp = fingerprint(run_dir)
            if known.get(run_dir.name) != fp:
                self._index_run(run_dir, fp)
                indexed += 1
        gone = set(known) - seen
        with self.db:
            for run_id in gone:
                self._delete(run_id)
        self.counts = {
            "indexed": self.counts["indexed"] + indexed,
            "removed": self.counts["removed"] + len(gone),
            "total": len(seen),
        }

    def _delete(self, run_id: str) -> None:
        for table in ("results", "hosts", "runs"):
            self.db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    def _unreadable(self, run_dir: Path, fp: str, problem: str) -> None:
        with self.db:
            self._delete(run_dir.name)
            self.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                (run_dir.name, None, _created_at(run_dir.name, None), "unreadable", problem[:500], fp),
            )

    def _index_run(self, run_dir: Path, fp: str) -> None:
        from ..errors import FleetbenchError
        from .slots import load_slots
        from .store import RunStore

        if not os.path.lexists(run_dir / "manifest.json"):
            self._unreadable(run_dir, fp, "no manifest.json (the run's plan and cases are lost)")
            return
        store = RunStore(run_dir)
        try:
            manifest = store.manifest()
            slots = [] if manifest.dry_run else load_slots(store)
        except (FleetbenchError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self._unreadable(run_dir, fp, str(exc))
            return
        outcomes = [s.outcome.outcome if s.outcome else "not run" for s in slots]
        state = (
            "dry-run"
            if manifest.dry_run
            else "complete"
            if outcomes and all(o == "ok" for o in outcomes)
            else "partial"
            if any(o == "ok" for o in outcomes)
            else "failed"
        )
        hosts, results, left_out = [], [], []
        for s in slots:
            f = s.facts
            hosts.append(
                (
                    run_dir.name,
                    s.slot,
                    s.host,
                    f.gpu_name if f else None,
                    f.driver if f else None,
                    f.cuda if f else None,
                    f.torch if f else None,
                    f.flashinfer if f else None,
                    f.sgl_kernel if f else None,
                    f.hostname if f else None,
                    s.outcome.outcome if s.outcome else "not run",
                )
            )
            for case_id, (_, rec) in s.records.items():
                t, mt, c = rec.timing, rec.metrics, rec.case
                odd = _odd_values(c, t)
                if odd:
                    left_out.append(f"{s.slot} {c.backend}: {odd}")
                    continue
                rounds = json.dumps([r.median_us for r in t.rounds]) if t and t.rounds else None
                results.append(
                    (
                        run_dir.name,
                        s.slot,
                        case_id,
                        c.backend,
                        c.workload,
                        c.label,
                        c.m,
                        c.n,
                        c.k,
                        rec.status,
                        t.median_us if t else None,
                        t.rel_ci if t else None,
                        rounds,
                        mt.pct_sol if mt else None,
                        mt.tflops if mt else None,
                        c.timing.budget_s,
                    )
                )
        problem = (
            (
                f"{len(left_out)} result(s) left out, their values cannot be a measurement: "
                + "; ".join(left_out[:3])
                + ("; ..." if len(left_out) > 3 else "")
            )
            if left_out
            else ""
        )
        sweep = manifest.sweep_name or None
        with self.db:
            self._delete(run_dir.name)
            self.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                (
                    run_dir.name,
                    sweep if isinstance(sweep, str) else None,
                    _created_at(run_dir.name, manifest.created_at),
                    state,
                    problem[:500],
                    fp,
                ),
            )
            self.db.executemany("INSERT INTO hosts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", hosts)
            self.db.executemany(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", results
            )


def _odd_values(case, timing) -> str:
    """What makes a stored result impossible to index or to chart ("" when nothing): a record from
    elsewhere may hold any number its format allows."""
    for name in ("m", "n", "k"):
        value = getattr(case, name)
        if not 0 < value <= LARGEST_INTEGER:
            return f"{name.upper()} {value} is out of range"
    if timing is not None and timing.median_us is not None:
        low, high = PLAUSIBLE_MEDIAN_US
        if not low <= timing.median_us <= high:  # NaN fails too
            return f"median {timing.median_us!r} µs is not a kernel's time"
    return ""


def _run_dirs(runs_dir: Path) -> list[Path]:
    """The run folders as store.list_run_dirs finds them, and those that lost their manifest (they still
    hold hosts/ or scripts/), listed here without importing the run readers (pydantic), which a query
    that changes nothing never needs. A symbolic link is never followed (store.runs_folder_links)."""
    found = []
    for entry in os.scandir(runs_dir):
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_dir(follow_symlinks=False) and any(
            os.path.lexists(os.path.join(entry.path, name)) for name in ("manifest.json", "hosts", "scripts")
        ):
            found.append(Path(entry.path))
    return sorted(found)


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """Whether the error says the file is not a sound index of ours (malformed, not a database, tables
    that are not ours), as opposed to a locked, read-only or full one, which a rebuild would not mend."""
    return type(exc) is sqlite3.DatabaseError or str(exc).startswith(("no such table", "no such column"))


def _connect(path: Path) -> tuple[Optional[sqlite3.Connection], str]:
    """A connection to the index at `path` when one of the current format is there; else (None, why);
    (None, "") when there is no file."""
    if not path.exists():
        return None, ""
    db = None
    try:
        db = sqlite3.connect(path)
        db.row_factory = sqlite3.Row
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if app_id == APPLICATION_ID and version == INDEX_FORMAT:
            db.execute("SELECT 1 FROM runs LIMIT 1").fetchone()  # its tables are there and readable
            return db, ""
        why = (
            f"it was of index format {version}, this fleetbench writes {INDEX_FORMAT}"
            if app_id == APPLICATION_ID
            else "the file there was not a fleetbench index of this version"
        )
    except sqlite3.DatabaseError as exc:
        why = f"it was damaged ({exc})" if _damaged(exc) else ""
        if not why:
            raise
    with contextlib.suppress(sqlite3.Error):
        db.close()
    return None, why


def _create(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    with db:
        db.executescript(_SCHEMA)
    return db


def _remove(path: Path) -> None:
    """The index file and what SQLite keeps beside it: a journal left next to a new file would be
    replayed into it."""
    for name in (path.name, path.name + "-journal", path.name + "-wal", path.name + "-shm"):
        path.with_name(name).unlink(missing_ok=True)


def _unusable(path: Path, exc: Exception) -> InputError:
    return InputError(f"the history index {path} cannot be used: {exc}")


def _created_at(run_id: str, created_at: Optional[str]) -> str:
    """When the run started: the manifest says so (format 2 on); a run id starts with its UTC time."""
    if created_at:
        return str(created_at)
    stamp = run_id[:15]  # 20261203-081621
    if len(stamp) == 15 and stamp[8] == "-" and stamp.replace("-", "").isdigit():
        return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}+00:00"
    return ""
