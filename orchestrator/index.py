"""The history index: every stored run, its hosts' facts and one row per case result, in SQLite.

The run folders stay the source of truth. The index (`RUNS_DIR/.index.sqlite`) is a cache of them:
updated for a run when it lands (run, rerun), brought up to date before every query (runs that are new,
changed or gone since; a run's fingerprint is its manifest's and its attempts' modification times), and
rebuilt from the folders when it is missing, unreadable or of another INDEX_FORMAT. A run that cannot
be read (a damaged manifest, a newer format) is indexed with that problem and no results; it never
breaks the index.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Iterator, Optional

INDEX_FORMAT = 1
INDEX_NAME = ".index.sqlite"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
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


def index_path(runs_dir: Path) -> Path:
    return Path(runs_dir) / INDEX_NAME


def fingerprint(run_dir: Path) -> str:
    """Changes when the run's manifest or any of its attempts changes (an attempt's folder changes when
    its outcome lands)."""
    parts = []
    try:
        parts.append(str((run_dir / "manifest.json").stat().st_mtime_ns))
        hosts = run_dir / "hosts"
        if hosts.is_dir():
            for slot in sorted(os.scandir(hosts), key=lambda e: e.name):
                if slot.is_dir():
                    for attempt in sorted(os.scandir(slot.path), key=lambda e: e.name):
                        parts.append(f"{slot.name}/{attempt.name}:{attempt.stat().st_mtime_ns}")
    except OSError as exc:
        parts.append(f"error {exc.errno}")
    return "|".join(parts)


class RunIndex:
    """Open with `RunIndex.open(runs_dir)`; `refresh()` brings it up to date with the folders."""

    def __init__(self, runs_dir: Path, db: sqlite3.Connection):
        self.runs_dir = Path(runs_dir)
        self.db = db

    @classmethod
    def open(cls, runs_dir: Path, rebuild: bool = False) -> "RunIndex":
        path = index_path(runs_dir)
        Path(runs_dir).mkdir(parents=True, exist_ok=True)
        if rebuild:
            path.unlink(missing_ok=True)
        db = _connect(path)
        if db is None:  # unreadable, corrupt or another format: the folders have everything
            path.unlink(missing_ok=True)
            db = _connect(path)
        return cls(runs_dir, db)

    def close(self) -> None:
        self.db.close()

    def refresh(self) -> dict[str, int]:
        """Index new and changed runs, drop vanished ones. Returns counts {indexed, removed, total}."""
        known = dict(self.db.execute("SELECT run_id, fingerprint FROM runs"))
        seen, indexed = set(), 0
        # The run folders as store.list_run_dirs finds them, listed here without importing the run
        # readers (pydantic), which a query that changes nothing never needs.
        for run_dir in sorted(Path(e.path) for e in os.scandir(self.runs_dir)
                              if e.is_dir() and os.path.isfile(os.path.join(e.path, "manifest.json"))):
            seen.add(run_dir.name)
            fp = fingerprint(run_dir)
            if known.get(run_dir.name) != fp:
                self._index_run(run_dir, fp)
                indexed += 1
        gone = set(known) - seen
        with self.db:
            for run_id in gone:
                self._delete(run_id)
        return {"indexed": indexed, "removed": len(gone), "total": len(seen)}

    def update_run(self, run_dir: Path) -> None:
        """Index one run now (a run that just landed)."""
        self._index_run(Path(run_dir), fingerprint(Path(run_dir)))

    def _delete(self, run_id: str) -> None:
        for table in ("results", "hosts", "runs"):
            self.db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    def _index_run(self, run_dir: Path, fp: str) -> None:
        from .errors import FleetbenchError
        from .merge import load_slots
        from .store import RunStore

        store = RunStore(run_dir)
        try:
            manifest = store.manifest()
            slots = [] if manifest.get("dry_run") else load_slots(store)
        except (FleetbenchError, OSError, ValueError, KeyError, TypeError) as exc:
            with self.db:
                self._delete(run_dir.name)
                self.db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                                (run_dir.name, None, _created_at(run_dir.name, {}), "unreadable", str(exc)[:500], fp))
            return
        outcomes = [s.outcome.outcome if s.outcome else "not run" for s in slots]
        state = ("dry-run" if manifest.get("dry_run") else "complete" if outcomes and all(o == "ok" for o in outcomes)
                 else "partial" if any(o == "ok" for o in outcomes) else "failed")
        hosts, results = [], []
        for s in slots:
            f = s.facts
            hosts.append((run_dir.name, s.slot, s.host, f.gpu_name if f else None, f.driver if f else None,
                          f.cuda if f else None, f.torch if f else None, f.flashinfer if f else None,
                          f.sgl_kernel if f else None, f.hostname if f else None,
                          s.outcome.outcome if s.outcome else "not run"))
            for case_id, (_, rec) in s.records.items():
                t, mt, c = rec.timing, rec.metrics, rec.case
                rounds = json.dumps([r.median_us for r in t.rounds]) if t and t.rounds else None
                results.append((run_dir.name, s.slot, case_id, c.backend, c.workload, c.label, c.m, c.n, c.k,
                                rec.status, t.median_us if t else None, t.rel_ci if t else None, rounds,
                                mt.pct_sol if mt else None, mt.tflops if mt else None, c.timing.budget_s))
        with self.db:
            self._delete(run_dir.name)
            self.db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                            (run_dir.name, manifest.get("sweep_name"), _created_at(run_dir.name, manifest), state, "", fp))
            self.db.executemany("INSERT INTO hosts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", hosts)
            self.db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                results)

    def query(self, where: str = "", params: tuple = ()) -> Iterator[sqlite3.Row]:
        """Result rows joined with their run and host, oldest run first."""
        sql = ("SELECT r.*, runs.sweep, runs.created_at, runs.state, h.host, h.gpu_name, h.driver, h.torch, "
               "h.flashinfer, h.sgl_kernel, h.cuda FROM results r JOIN runs USING (run_id) "
               "LEFT JOIN hosts h ON h.run_id = r.run_id AND h.slot = r.slot")
        if where:
            sql += " WHERE " + where
        sql += " ORDER BY runs.created_at, r.run_id, r.slot"
        return self.db.execute(sql, params)

    def runs(self) -> list[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM runs ORDER BY created_at, run_id"))


def _connect(path: Path) -> Optional[sqlite3.Connection]:
    """A connection to an index of the current format (created when missing), or None."""
    fresh = not path.exists()
    try:
        db = sqlite3.connect(path)
        db.row_factory = sqlite3.Row
        if fresh:
            with db:
                db.executescript(_SCHEMA)
                db.execute("INSERT INTO meta VALUES ('format', ?)", (str(INDEX_FORMAT),))
            return db
        row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        if row is None or row[0] != str(INDEX_FORMAT):
            db.close()
            return None
        return db
    except sqlite3.DatabaseError:
        with contextlib.suppress(Exception):
            db.close()
        return None


def _created_at(run_id: str, manifest: dict) -> str:
    """When the run started: the manifest says so (format 2 on); a run id starts with its UTC time."""
    if manifest.get("created_at"):
        return str(manifest["created_at"])
    stamp = run_id[:15]  # 20261203-081621
    if len(stamp) == 15 and stamp[8] == "-" and stamp.replace("-", "").isdigit():
        return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}+00:00"
    return ""
