"""What the commands share: where they write (Streams), the options several declare, the inventory and
runs-folder defaults, and how a run's outcome is printed (its table, one line per problem, the command
that completes it)."""

from __future__ import annotations

import argparse
import collections
import os
import shutil
from pathlib import Path
from typing import Optional, TextIO

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, InputError

DEFAULT_INVENTORY = "hosts.yaml"
DEFAULT_RUNS_DIR = "runs"
BAD_CASE_STATUSES = {"failed", "crashed", "hung", "missing", "incomplete"}
FORMATS = ("table", "json", "csv", "md")


class Streams:
    """Where a command writes: results on `out`, one line per problem or notice on `err`."""

    def __init__(self, out: TextIO, err: TextIO):
        self.out, self.err = out, err

    def width(self) -> int:
        # $COLUMNS when set (a caller asking for a width, piped or not); else a terminal's own width; piped
        # output (CI logs, files) gets wide tables, not an 80-column default.
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return int(columns)
        return shutil.get_terminal_size((200, 24)).columns if self.out.isatty() else 200

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def problem(self, line: str) -> None:
        self.err.write(line + "\n")
        self.err.flush()


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not 0 or more seconds")
    if value == float("inf"):  # no wait is endless, and JSON (the run's manifest) cannot hold one
        raise argparse.ArgumentTypeError(f"{text} is not a finite number of seconds")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


INVENTORY_ENV = "FLEETBENCH_INVENTORY"


def opt_inventory(p, help_text=f"hosts file (default: ${INVENTORY_ENV}, else ./{DEFAULT_INVENTORY})"):
    p.add_argument("-i", "--inventory", help=help_text)


def inventory_path(given: Optional[str]) -> Path:
    """-i, else $FLEETBENCH_INVENTORY, else ./hosts.yaml; InputError naming all three when none is there."""
    if given:
        return Path(given)
    if os.environ.get(INVENTORY_ENV):
        return Path(os.environ[INVENTORY_ENV])
    if Path(DEFAULT_INVENTORY).is_file():
        return Path(DEFAULT_INVENTORY)
    raise InputError(
        f"no inventory: give -i FILE, set {INVENTORY_ENV}, or create ./{DEFAULT_INVENTORY} "
        "(`fleetbench init` writes one with the local host)"
    )


def opt_runs_dir(p):
    p.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, help=f"where runs are stored (default: {DEFAULT_RUNS_DIR})")


def opt_hosts(p, help_text="comma-separated host names, globs or label:NAME; !TERM leaves those out (default: all)"):
    p.add_argument("-l", "--limit", "--hosts", dest="hosts", metavar="SEL", help=help_text)


def opt_format(p, formats=FORMATS):
    p.add_argument("--format", choices=formats, default="table", help="output format (default: table)")


def opt_accept_new(p):
    p.add_argument(
        "--accept-new",
        action="store_true",
        help="record unknown host keys in known_hosts (never replaces a changed key)",
    )


def opt_parallel(p):
    p.add_argument(
        "-f",
        "--forks",
        "--parallel",
        dest="parallel",
        type=positive_int,
        default=64,
        metavar="N",
        help="hosts contacted at once (default: 64)",
    )


def opt_per_gpu(p):
    p.add_argument(
        "--per-gpu",
        choices=["all", "shard"],
        default="all",
        help="hosts with several gpus: run every case on every GPU (all, the default) or split them (shard)",
    )


DEFAULT_THRESHOLD = "1.5%"


def opt_threshold(p):
    # 1.5%: the smallest threshold at which diffs of separate A/A sweeps on the H200 flagged nothing
    # (benchmarks/RESULTS.md, issue 40, "Seeing 2%"); at 1% one cell of 36 was flagged.
    p.add_argument(
        "--threshold",
        default=DEFAULT_THRESHOLD,
        help="smallest change that counts, e.g. 1.5%% or 0.015 (default %(default)s: the smallest at which "
        "separate identical sweeps were never flagged, docs/COMPARING.md)",
    )


def rerun_hint(store) -> str:
    return f"fleetbench rerun {store.dir.resolve()} --failed"


# What the worker says when the host's Python lacks what it needs (worker/sweep/runner.py, worker/__main__.py).
CANNOT_START = "the worker cannot start with"


def provision_hint(store, host: str) -> str:
    """The provision command for one host of a run: its profile is chosen for it (a CPU host, the local
    one included, gets torch's CPU build, never the CUDA stack)."""
    import shlex

    inventory = store.manifest().inventory_path
    where = f"-i {shlex.quote(str(Path(inventory).resolve()))} " if inventory else ""
    return f"fleetbench provision {where}-l {shlex.quote(host)}"


def clocks_not_locked(store, slot) -> str:
    """Why a slot whose host asks `clocks: lock` timed with its clock unlocked (as its log says), or ""
    when it held it locked, was not asked to, or never started."""
    host = store.manifest().stored_host(slot.host) or {}
    if host.get("clocks") != "lock" or slot.facts is None or slot.facts.sm_clock_locked_mhz is not None:
        return ""
    for attempt in sorted(store.attempts(slot.slot), reverse=True):
        log = store.attempt_dir(slot.slot, attempt) / "log.txt"
        try:
            said = [
                line.split("fleetbench: clocks: ", 1)[1].strip()
                for line in store.read_text(log).splitlines()
                if "fleetbench: clocks: " in line
            ]
        except OSError:
            continue
        refused = [s for s in said if "not locked" in s or "nothing to lock" in s]
        if refused:
            return refused[-1]
    return "its log gives no reason"


def print_interrupted(store, fmt: str, io: Streams) -> int:
    """Ctrl-C: the hosts were stopped; show what finished (it is kept) and how to finish the rest."""
    from ..analysis.merge import merged_rows
    from ..views.output import write
    from ..views.tables import rows_document

    index_landed(store, io)
    rows = merged_rows(store)
    io.write(write(rows_document(rows, title=f"run {store.run_id} (interrupted)"), fmt, io.width()))
    kept = sum(r.status not in BAD_CASE_STATUSES for r in rows)
    partial = sum(r.status == "incomplete" for r in rows)
    io.problem(
        f"interrupted: remote work was stopped; {kept} of {len(rows)} cases are done"
        + (f", {partial} more kept their finished rounds" if partial else "")
        + f"; run {store.run_id} stored in {store.dir}"
    )
    io.problem(f"finish it with: {rerun_hint(store)}")
    return EXIT_INTERRUPTED


def print_run(store, outcomes, fmt: str, io: Streams) -> int:
    from ..analysis.merge import merged_rows
    from ..runs.slots import load_slots
    from ..views.output import write
    from ..views.tables import rows_document

    slots = load_slots(store)
    rows = merged_rows(store, slots)
    io.write(write(rows_document(rows, title=f"run {store.run_id}"), fmt, io.width()))
    failed = False
    reported = set()
    for o in outcomes:
        if o.outcome != "ok":
            failed = True
            io.problem(f"{o.slot}: {o.outcome}: {o.error}")
        for problem in o.problems:
            failed = True
            reported.add((o.slot, f"attempt {o.attempt}: {problem}"))
            io.problem(f"{o.slot}: bad result line: {problem}")
    for slot in slots:
        for attempt, change in slot.changed.items():
            io.problem(
                f"note: {slot.slot}: attempt {attempt} ran on other software than attempt 1 ({change}); "
                "its results are kept apart, never joined with earlier rounds"
            )
    for slot in slots:  # what reading the stored run found beyond its outcomes (e.g. a record it never planned)
        latest = f"attempt {slot.outcome.attempt}: " if slot.outcome else None
        for problem in slot.problems:
            superseded = problem.startswith("attempt ") and not (latest and problem.startswith(latest))
            if (slot.slot, problem) not in reported and not superseded:
                failed = True
                io.problem(f"{slot.slot}: {problem}")
    for slot in slots:  # a setting that could not apply is said here, not only in the host's log
        why = clocks_not_locked(store, slot)
        if why:
            io.problem(f"{slot.slot}: clocks: lock was asked, but the clock was not locked: {why}")
    for host in sorted({o.host for o in outcomes if CANNOT_START in o.error}):
        io.problem(f"install what {host} lacks with: {provision_hint(store, host)}")
    bad = collections.Counter(r.status for r in rows if r.status in BAD_CASE_STATUSES)
    if bad:
        failed = True
        io.problem(
            f"{sum(bad.values())} of {len(rows)} cases are not done: "
            + ", ".join(f"{n} {status}" for status, n in sorted(bad.items()))
        )
    io.problem(f"run {store.run_id} stored in {store.dir}")
    if bad:  # what `rerun --failed` finishes: every case that is not done, on any host
        io.problem(f"complete it with: {rerun_hint(store)}")
    return EXIT_FAILED if failed else EXIT_OK


def index_landed(store, io: Streams) -> None:
    """Add a run that just landed to the history index; the run is stored whatever happens here."""
    from ..runs.index import RunIndex

    try:
        index = RunIndex.open(store.dir.parent)
        try:
            index.update_run(store.dir)
        finally:
            index.close()
    except InputError as exc:  # a damaged index was rebuilt; this one cannot be written at all
        io.problem(f"note: {exc}; `fleetbench history` adds this run once the index can be written")


def parse_threshold(text: str) -> float:
    """'3%' or '0.03' -> 0.03."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"--threshold {text!r}: give a percentage like 3% or a fraction like 0.03") from None
    if not 0 < value < 1:
        raise InputError(f"--threshold {text!r}: must be between 0% and 100%")
    return value


def run_inventory(store) -> str:
    """The inventory file a run was started with; InputError when it is gone."""
    stored = store.manifest().inventory_path
    if not stored or not Path(stored).is_file():
        raise InputError(
            f"run {store.run_id} was started with inventory {stored or '(not recorded)'}, which is not "
            "there any more: name one with -i (it must hold the run's hosts)"
        )
    return stored


def load_run_inputs(args):
    """(inventory, sweep, selected hosts) of `run` and `render`."""
    from ..config.inventory import load_inventory, select_hosts
    from ..config.sweep import load_sweep

    inventory = load_inventory(inventory_path(args.inventory))
    sweep = load_sweep(Path(args.sweep))
    hosts = select_hosts(inventory, args.hosts)
    return inventory, sweep, hosts
