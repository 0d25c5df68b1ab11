"""A case's history over stored runs: its points from the index, and the steps in each series.

A series is one case (its id: what it measures) on one host slot, or on the fleet (`fleet`: per run,
the median over the hosts that ran it), oldest run first. Steps come from orchestrator/analysis/steps.py; a
step at a series' latest run is *new*, and a new step that makes the case slower by more than the
threshold is what `fleetbench history --steps` exits 1 for (a nightly gate).
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from dataclasses import dataclass, field
from typing import Optional

from ..errors import InputError
from ..runs.index import LARGEST_INTEGER, RunIndex
from ..runs.store import runs_folder_links
from .steps import MIN_POINTS, detect_steps


@dataclass
class Selection:
    backend: Optional[str] = None
    m: Optional[int] = None
    n: Optional[int] = None
    k: Optional[int] = None
    label: Optional[str] = None  # substring
    host: Optional[str] = None  # slot name; None: every slot, each its own series
    fleet: bool = False  # one series per case: the median over hosts, per run
    sweep: Optional[str] = None
    since: Optional[str] = None  # an instant in UTC as the index stores it (parse_when), inclusive
    until: Optional[str] = None
    case_id: Optional[str] = None
    versions: dict = field(default_factory=dict)  # library -> version (torch, flashinfer, sgl_kernel, driver, cuda)

    def sql(self) -> tuple[str, tuple]:
        clauses, params = ["r.status = 'ok'", "r.median_us IS NOT NULL"], []
        for column, value in (
            ("r.backend", self.backend),
            ("r.m", self.m),
            ("r.n", self.n),
            ("r.k", self.k),
            ("r.slot", self.host),
            ("runs.sweep", self.sweep),
            ("r.case_id", self.case_id),
        ):
            if isinstance(value, int) and value > LARGEST_INTEGER:
                clauses.append("0")  # SQLite cannot hold it: no stored size is that large
            elif value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.label:
            clauses.append("instr(r.label, ?) > 0")
            params.append(self.label)
        if self.since:
            clauses.append("runs.created_at >= ?")
            params.append(self.since)
        if self.until:
            clauses.append("runs.created_at <= ?")
            params.append(self.until)
        for library, version in self.versions.items():
            clauses.append(f"h.{library} = ?")
            params.append(version)
        return " AND ".join(clauses), tuple(params)


WHEN_FORMS = "a date like 2026-11-30 or a date-time like 2026-11-30T12:00 (UTC unless it names its offset)"


def parse_when(option: str, text: str, *, end_of_day: bool = False) -> str:
    """`text` (an ISO date or date-time) as the index stores a run's start: UTC, to the second. A date
    alone is its first second, or with `end_of_day` its last. InputError naming `option` and the forms
    it takes otherwise: a date that means nothing must not select nothing in silence."""
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"{option} {text!r}: not a date: give {WHEN_FORMS}") from None
    date_only = len(text.strip()) <= 10 and "T" not in text and " " not in text.strip()
    if date_only and end_of_day:
        when = when.replace(hour=23, minute=59, second=59)
    when = when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)
    return when.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Point:
    series: str  # "<case_id>@<slot or fleet>"
    run_id: str
    created_at: str
    host: str
    backend: str
    label: str
    m: int
    n: int
    k: int
    median_us: float
    rel_ci: Optional[float]
    rounds: int
    pct_sol: Optional[float]
    torch: Optional[str]
    flashinfer: Optional[str]
    gpu_name: Optional[str]
    case_id: str
    step_ratio: Optional[float] = None  # on the first point at a new level: the step's ratio (views word it)

    def as_dict(self) -> dict:
        return dict(self.__dict__)  # flat fields: asdict's deep copy cost a second per 10,000 points


# What the history says beside its points (History.notes); views/tables.py words each.
NOTE_INDEX_REBUILT = "index-rebuilt"  # because: why the index was rebuilt from the run folders
NOTE_LINK = "link"  # link, target: a symbolic link in the runs folder, left alone
NOTE_RUN_LEFT_OUT = "run-left-out"  # run_id, problem: a run folder that cannot be read
NOTE_RUN_PROBLEM = "run-problem"  # run_id, problem: a run held only in part
NOTE_NO_STEP = "no-step"  # series: how many series were judged, none with a step
NOTE_TOO_FEW_RUNS = "too-few-runs"  # series, fewest, most, needs: series too short to judge


@dataclass
class Note:
    """One of the NOTE_* codes and the facts its words need."""

    code: str
    facts: dict = field(default_factory=dict)


@dataclass
class SeriesSteps:
    series: str
    backend: str
    label: str
    m: int
    n: int
    k: int
    host: str
    steps: list[dict]  # Step.as_dict() plus run_id
    new_slower: bool  # a step at the latest run, slower by more than the threshold


@dataclass
class History:
    points: list[Point]
    steps: list[SeriesSteps]
    threshold: float
    index: dict  # what refreshing the index did (RunIndex.counts)
    notes: list[Note] = field(default_factory=list)  # runs left out and why; what --steps could not judge

    @property
    def new_regressions(self) -> list[SeriesSteps]:
        return [s for s in self.steps if s.new_slower]


def history(index: RunIndex, sel: Selection, threshold: float, with_steps: bool) -> History:
    index.refresh()
    where, params = sel.sql()
    by_series: dict[str, list[Point]] = {}
    fleet_rows: dict[tuple[str, str], list] = {}
    for row in index.query(where, params):
        rounds = len(json.loads(row["rounds"])) if row["rounds"] else 1
        if sel.fleet:
            fleet_rows.setdefault((row["case_id"], row["run_id"]), []).append((row, rounds))
            continue
        key = f"{row['case_id']}@{row['slot']}"
        by_series.setdefault(key, []).append(_point(key, row, row["slot"], row["median_us"], row["rel_ci"], rounds))
    for (case_id, _), rows in fleet_rows.items():
        first = rows[0][0]
        key = f"{case_id}@fleet"
        median = statistics.median(r["median_us"] for r, _ in rows)
        by_series.setdefault(key, []).append(
            _point(key, first, f"fleet ({len(rows)} hosts)", median, None, sum(n for _, n in rows))
        )
    points, found, lengths = [], [], []
    for key, series in by_series.items():
        if with_steps:
            lengths.append(len(series))
            steps = detect_steps([p.median_us for p in series], threshold)
            for s in steps:
                series[s.index].step_ratio = s.ratio
            if steps:
                last = steps[-1]
                p0 = series[0]
                found.append(
                    SeriesSteps(
                        series=key,
                        backend=p0.backend,
                        label=p0.label,
                        m=p0.m,
                        n=p0.n,
                        k=p0.k,
                        host=p0.host,
                        steps=[{**s.as_dict(), "run_id": series[s.index].run_id} for s in steps],
                        new_slower=last.index == len(series) - 1 and last.ratio > 1 + threshold,
                    )
                )
        points.extend(series)
    notes = index_notes(index)
    if with_steps:
        notes += steps_notes(lengths, len(found))
    return History(points=points, steps=found, threshold=threshold, index=dict(index.counts), notes=notes)


def index_notes(index: RunIndex) -> list[Note]:
    """One note per stored run the history leaves out (or holds only in part), with the reason; and
    whether the index had to be rebuilt."""
    notes = [Note(NOTE_INDEX_REBUILT, {"because": index.rebuilt_because})] if index.rebuilt_because else []
    notes += [Note(NOTE_LINK, {"link": link, "target": target}) for link, target in runs_folder_links(index.runs_dir)]
    for run in index.runs():
        if run["state"] == "unreadable":
            notes.append(Note(NOTE_RUN_LEFT_OUT, {"run_id": run["run_id"], "problem": run["problem"]}))
        elif run["problem"]:
            notes.append(Note(NOTE_RUN_PROBLEM, {"run_id": run["run_id"], "problem": run["problem"]}))
    return notes


def steps_notes(series_lengths: list[int], series_with_steps: int) -> list[Note]:
    """What --steps says beside the steps it found: the series it judged without finding one, and the
    series too short to judge."""
    short = [n for n in series_lengths if n < MIN_POINTS]
    notes = []
    if series_lengths and not series_with_steps:
        notes.append(Note(NOTE_NO_STEP, {"series": len(series_lengths)}))
    if short:
        notes.append(
            Note(
                NOTE_TOO_FEW_RUNS, {"series": len(short), "fewest": min(short), "most": max(short), "needs": MIN_POINTS}
            )
        )
    return notes


def _point(key: str, row, host: str, median: float, rel_ci, rounds: int) -> Point:
    return Point(
        series=key,
        run_id=row["run_id"],
        created_at=row["created_at"] or "",
        host=host,
        backend=row["backend"],
        label=row["label"] or "",
        m=row["m"],
        n=row["n"],
        k=row["k"],
        median_us=median,
        rel_ci=rel_ci,
        rounds=rounds,
        pct_sol=row["pct_sol"],
        torch=row["torch"],
        flashinfer=row["flashinfer"],
        gpu_name=row["gpu_name"],
        case_id=row["case_id"],
    )
