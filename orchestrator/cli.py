"""fleetbench command line: the one place that prints and chooses exit codes.

Each command is a pair below: the function that declares its arguments, and the function that runs
it. Options several commands share are declared once (`_SHARED`). A command imports only what it uses:
reading stored runs never imports the SSH stack, and rich is imported only where a table is drawn.

Exit codes: 0 everything ran and every case is ok (or cleanly unsupported/unavailable); 1 some host
or case failed, or a diff found a regression; 2 bad input (nothing was run); 130 interrupted.
"""
from __future__ import annotations

import argparse
import collections
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional, TextIO

from . import __version__, defaults
from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, FleetbenchError, InputError, RunInterrupted

DEFAULT_INVENTORY = "hosts.yaml"
DEFAULT_RUNS_DIR = "runs"
BAD_CASE_STATUSES = {"failed", "crashed", "hung", "missing", "incomplete"}
FORMATS = ("table", "json", "csv", "md")

EPILOG = """exit codes: 0 all ok, 1 some host or case failed, 2 bad input, 130 interrupted.
RUN is a run id (or a unique prefix), a run folder, or `latest`."""


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


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not 0 or more seconds")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


# -- options several commands share, declared once ------------------------------------------------------
INVENTORY_ENV = "FLEETBENCH_INVENTORY"


def _opt_inventory(p, help_text=f"hosts file (default: ${INVENTORY_ENV}, else ./{DEFAULT_INVENTORY})"):
    p.add_argument("-i", "--inventory", help=help_text)


def inventory_path(given: Optional[str]) -> Path:
    """-i, else $FLEETBENCH_INVENTORY, else ./hosts.yaml; InputError naming all three when none is there."""
    if given:
        return Path(given)
    if os.environ.get(INVENTORY_ENV):
        return Path(os.environ[INVENTORY_ENV])
    if Path(DEFAULT_INVENTORY).is_file():
        return Path(DEFAULT_INVENTORY)
    raise InputError(f"no inventory: give -i FILE, set {INVENTORY_ENV}, or create ./{DEFAULT_INVENTORY} "
                     "(`fleetbench init` writes one with the local host)")


def _opt_runs_dir(p):
    p.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, help=f"where runs are stored (default: {DEFAULT_RUNS_DIR})")


def _opt_hosts(p, help_text="comma-separated host names, globs or label:NAME; !TERM leaves those out (default: all)"):
    p.add_argument("-l", "--limit", "--hosts", dest="hosts", metavar="SEL", help=help_text)


def _opt_format(p, formats=FORMATS):
    p.add_argument("--format", choices=formats, default="table", help="output format (default: table)")


def _opt_accept_new(p):
    p.add_argument("--accept-new", action="store_true",
                   help="record unknown host keys in known_hosts (never replaces a changed key)")


def _opt_parallel(p):
    p.add_argument("-f", "--forks", "--parallel", dest="parallel", type=_positive_int, default=64, metavar="N",
                   help="hosts contacted at once (default: 64)")


def _opt_per_gpu(p):
    p.add_argument("--per-gpu", choices=["all", "shard"], default="all",
                   help="hosts with several gpus: run every case on every GPU (all) or split them (shard)")


def _opt_threshold(p):
    p.add_argument("--threshold", default="3%", help="smallest change that counts (default 3%%)")


# -- run ---------------------------------------------------------------------------------------------
def args_run(p):
    p.add_argument("sweep", help="sweep spec (YAML), e.g. sweeps/smoke.yaml")
    for opt in (_opt_inventory, _opt_runs_dir, _opt_hosts, _opt_per_gpu, _opt_parallel, _opt_accept_new):
        opt(p)
    p.add_argument("--lock-timeout", type=_seconds, default=defaults.LOCK_TIMEOUT_S,
                   help="seconds a host waits for its GPU while another sweep holds it (default: 600)")
    _opt_format(p)


def _load(args):
    from .inventory import load_inventory, select_hosts
    from .sweep import load_sweep

    inventory = load_inventory(inventory_path(args.inventory))
    sweep = load_sweep(Path(args.sweep))
    hosts = select_hosts(inventory, args.hosts)
    return inventory, sweep, hosts


def cmd_run(args, io: Streams) -> int:
    from .launch import start_run
    from .live import LiveView
    from .plan import build_plan, new_run_id

    inventory, sweep, hosts = _load(args)
    plan = build_plan(hosts, sweep, new_run_id(sweep.name), args.per_gpu, args.lock_timeout)
    try:
        with LiveView(io.err, [j.slot for j in plan.jobs], f"fleetbench {sweep.name}") as view:
            result = start_run(plan, sweep, inventory, Path(args.runs_dir), sweep_path=args.sweep,
                               parallel=args.parallel, accept_new=args.accept_new, on_event=view.update)
    except RunInterrupted as stop:
        return _print_interrupted(stop.store, args.format, io)
    _index_landed(result.store, io)
    return _print_run(result.store, result.outcomes, args.format, io)


def _rerun_hint(store) -> str:
    return f"fleetbench rerun {store.dir.resolve()} --failed"


def _print_interrupted(store, fmt: str, io: Streams) -> int:
    """Ctrl-C: the hosts were stopped; show what finished (it is kept) and how to finish the rest."""
    from .merge import merged_rows
    from .output import write
    from .views import rows_document

    _index_landed(store, io)
    rows = merged_rows(store)
    io.write(write(rows_document(rows, title=f"run {store.run_id} (interrupted)"), fmt, io.width()))
    kept = sum(r.status not in BAD_CASE_STATUSES for r in rows)
    partial = sum(r.status == "incomplete" for r in rows)
    io.problem(f"interrupted: remote work was stopped; {kept} of {len(rows)} cases are done"
               + (f", {partial} more kept their finished rounds" if partial else "")
               + f"; run {store.run_id} stored in {store.dir}")
    io.problem(f"finish it with: {_rerun_hint(store)}")
    return EXIT_INTERRUPTED


def _print_run(store, outcomes, fmt: str, io: Streams) -> int:
    from .merge import load_slots, merged_rows
    from .output import write
    from .views import rows_document

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
            io.problem(f"note: {slot.slot}: attempt {attempt} ran on other software than attempt 1 ({change}); "
                       "its results are kept apart, never joined with earlier rounds")
    for slot in slots:  # what reading the stored run found beyond its outcomes (e.g. a record it never planned)
        latest = f"attempt {slot.outcome.attempt}: " if slot.outcome else None
        for problem in slot.problems:
            superseded = problem.startswith("attempt ") and not (latest and problem.startswith(latest))
            if (slot.slot, problem) not in reported and not superseded:
                failed = True
                io.problem(f"{slot.slot}: {problem}")
    bad = collections.Counter(r.status for r in rows if r.status in BAD_CASE_STATUSES)
    if bad:
        failed = True
        io.problem(f"{sum(bad.values())} of {len(rows)} cases are not done: "
                   + ", ".join(f"{n} {status}" for status, n in sorted(bad.items())))
    io.problem(f"run {store.run_id} stored in {store.dir}")
    if bad:  # what `rerun --failed` finishes: every case that is not done, on any host
        io.problem(f"complete it with: {_rerun_hint(store)}")
    return EXIT_FAILED if failed else EXIT_OK


# -- render (dry run) -----------------------------------------------------------------------------------
def args_render(p):
    p.add_argument("sweep", help="sweep spec (YAML)")
    for opt in (_opt_inventory, _opt_runs_dir, _opt_hosts, _opt_per_gpu):
        opt(p)
    p.add_argument("--quiet", action="store_true", help="print the commands but not the scripts")


def cmd_render(args, io: Streams) -> int:
    from .launch import describe_commands, prepare_run
    from .plan import build_plan, new_run_id

    inventory, sweep, hosts = _load(args)
    plan = build_plan(hosts, sweep, new_run_id(sweep.name), args.per_gpu)
    store, scripts, _ = prepare_run(plan, sweep, inventory, Path(args.runs_dir), sweep_path=args.sweep, dry_run=True)
    for s in scripts.values():
        if not args.quiet:
            io.write(f"# ---- {s.path} (sha256 {s.sha256}) ----\n")
            io.write(s.path.read_text(encoding="utf-8"))
    io.write("# ---- commands (environment values masked) ----\n")
    io.write("".join(line + "\n" for line in describe_commands(plan, scripts)))
    io.write(f"# rendered {len(scripts)} scripts, {sum(len(j.cases) for j in plan.jobs)} cases, into {store.dir}\n")
    return EXIT_OK


# -- show ----------------------------------------------------------------------------------------------
def args_show(p):
    p.add_argument("run", help="run id, run folder or `latest`")
    _opt_runs_dir(p)
    _opt_format(p)
    p.add_argument("--pivot", choices=["backend"], help="one row per shape, backends side by side")
    p.add_argument("--baseline", help="with --pivot: show each backend's speedup over this one")
    p.add_argument("--per-host", action="store_true",
                   help="with --pivot: one row per host and shape (default: the fleet's median per shape)")


def cmd_show(args, io: Streams) -> int:
    from .store import resolve_run

    if (args.baseline or args.per_host) and not args.pivot:
        raise InputError("--baseline and --per-host need --pivot backend")
    store = resolve_run(Path(args.runs_dir), args.run)
    outcomes = list(store.latest_outcomes().values())
    if not args.pivot:
        return _print_run(store, outcomes, args.format, io)
    from .merge import merged_rows
    from .output import write
    from .views import pivot_document

    io.write(write(pivot_document(merged_rows(store), args.baseline, per_host=args.per_host), args.format, io.width()))
    bad = [o for o in outcomes if o.outcome != "ok"]
    for o in bad:
        io.problem(f"{o.slot}: {o.outcome}: {o.error}")
    return EXIT_FAILED if bad else EXIT_OK


# -- runs ----------------------------------------------------------------------------------------------
def args_runs(p):
    _opt_runs_dir(p)
    _opt_format(p)


def cmd_runs(args, io: Streams) -> int:
    from .merge import merged_rows
    from .output import write
    from .store import RunStore, existing_runs_dir, list_run_dirs, run_dirs_without_manifest
    from .views import runs_document

    def counted(values) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (kv[0] != "ok", kv[0])))

    def said(counts: dict[str, int]) -> str:
        return ", ".join(f"{n} {k}" for k, n in counts.items())

    runs_dir = existing_runs_dir(Path(args.runs_dir))
    entries = []
    for run_dir in sorted(list_run_dirs(runs_dir) + run_dirs_without_manifest(runs_dir)):
        store = RunStore(run_dir)
        try:
            manifest = store.manifest()
            # A run is its cases: a host can end ok while every case it ran failed.
            cases = {} if manifest.dry_run else counted(r.status for r in merged_rows(store))
        except FleetbenchError as exc:
            entries.append({"run_id": run_dir.name, "sweep": "?", "hosts": 0, "cases": 0,
                            "summary": f"unreadable: {exc}"})
            continue
        hosts = counted(o.outcome for o in store.latest_outcomes().values())
        if manifest.dry_run:
            summary = "rendered only (dry run)"
        else:
            summary = f"cases: {said(cases)}; hosts: {said(hosts)}" if hosts else "not started"
        entries.append({"run_id": store.run_id, "sweep": manifest.sweep_name, "hosts": len(manifest.hosts),
                        "cases": sum(len(j.case_ids) for j in manifest.jobs), "summary": summary,
                        "case_statuses": cases, "host_outcomes": hosts})
    io.write(write(runs_document(entries), args.format, io.width()))
    return EXIT_OK


# -- hosts ---------------------------------------------------------------------------------------------
def args_hosts(p):
    _opt_inventory(p)
    _opt_hosts(p)
    p.add_argument("--check", action="store_true", help="contact every host in parallel")
    _opt_accept_new(p)
    _opt_parallel(p)
    p.add_argument("--strict", action="store_true", help="with --check: version skew also fails")
    _opt_format(p, ("table", "json", "csv", "md"))


def cmd_hosts(args, io: Streams) -> int:
    from .inventory import load_inventory, select_hosts
    from .output import write

    hosts = select_hosts(load_inventory(inventory_path(args.inventory)), args.hosts)
    if not args.check:
        from .views import inventory_document

        io.write(write(inventory_document(hosts), args.format, io.width()))
        return EXIT_OK
    from .hostcheck import check_hosts, version_skew
    from .views import host_check_document

    statuses = check_hosts(hosts, accept_new=args.accept_new, parallel=args.parallel)
    skew = version_skew(statuses)
    io.write(write(host_check_document(statuses, skew), args.format, io.width()))
    for s in statuses:
        if not s.ready:
            io.problem(f"{s.name}: not ready ({s.state}): {s.problem}")
        for note in s.notes:
            io.problem(f"{s.name}: {note}")
    for line in skew:
        io.problem(line)
    failed = any(not s.ready for s in statuses) or (args.strict and skew)
    return EXIT_FAILED if failed else EXIT_OK


# -- provision -----------------------------------------------------------------------------------------
def args_provision(p):
    _opt_inventory(p)
    _opt_hosts(p)
    p.add_argument("--wheelhouse", type=Path, help="a folder of wheels to upload and install from (no internet)")
    p.add_argument("--profile", default="gpu", choices=["minimal", "worker", "gpu"],
                   help="minimal: pydantic only (plumbing); worker: + torch; gpu: + FlashInfer, sgl-kernel, NVML")
    p.add_argument("--base-python", default="python3", help="interpreter that creates missing venvs on the hosts")
    p.add_argument("--dry-run", action="store_true",
                   help="resolve the pinned profile on each host (pip --dry-run) and report it: nothing is installed")
    _opt_accept_new(p)
    _opt_parallel(p)


def cmd_provision(args, io: Streams) -> int:
    from .inventory import load_inventory, select_hosts
    from .provision import provision_hosts

    hosts = select_hosts(load_inventory(inventory_path(args.inventory)), args.hosts)
    results = provision_hosts(hosts, profile=args.profile, wheelhouse=args.wheelhouse, base_python=args.base_python,
                              accept_new=args.accept_new, dry_run=args.dry_run, parallel=args.parallel)
    for r in results:
        line = f"{r.name}: {'ok' if r.ok else 'FAILED'}: {'; '.join(r.actions)}" + (f"; {r.problem}" if r.problem else "")
        if r.ok:
            io.write(line + "\n")
        else:
            io.problem(line)
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


# -- rerun ---------------------------------------------------------------------------------------------
def args_rerun(p):
    p.add_argument("run", help="run id, run folder or `latest`")
    _opt_inventory(p, "hosts file (default: the one the run was started with; its hosts must be the run's)")
    _opt_runs_dir(p)
    p.add_argument("--failed", action="store_true",
                   help="every case that is not done, on any host: failed, crashed, hung or missing cases in "
                        "full, and the rounds still missing of cases cut short (ok, unsupported and "
                        "unavailable cases are done)")
    _opt_hosts(p, "these hosts (names, globs, label:NAME; !TERM leaves those out); alone: all their cases afresh")
    p.add_argument("--resume", action="store_true", help="the same as --failed (kept for scripts written for 0.2)")
    _opt_parallel(p)
    _opt_accept_new(p)
    p.add_argument("--lock-timeout", type=_seconds, help="seconds to wait for a busy GPU (default: the run's)")
    _opt_format(p)


# -- prune ---------------------------------------------------------------------------------------------
def args_prune(p):
    p.add_argument("--keep", type=_positive_int,
                   help="keep the newest N runs, prune the older ones (dry runs of `render` are counted apart: "
                        "the newest N of them stay too)")
    p.add_argument("--older-than", metavar="DATE", help="prune runs created before DATE (2026-11-30[T12:00])")
    _opt_runs_dir(p)
    _opt_inventory(p, "hosts file (default: each run's own)")
    p.add_argument("--local-only", action="store_true", help="remove the run folders here only, not on the hosts")
    p.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    _opt_accept_new(p)
    _opt_parallel(p)


def cmd_prune(args, io: Streams) -> int:
    from .inventory import load_inventory
    from .prune import parse_date, prune_runs

    older_than = parse_date(args.older_than) if args.older_than else None
    loaded: dict[str, object] = {}

    def inventory_of(store):
        path = args.inventory or _run_inventory(store)
        if path not in loaded:
            loaded[path] = load_inventory(Path(path))
        return loaded[path]

    results = prune_runs(Path(args.runs_dir), inventory_of, keep=args.keep, older_than=older_than,
                         dry_run=args.dry_run, local_only=args.local_only, accept_new=args.accept_new,
                         parallel=args.parallel)
    verb = "would prune" if args.dry_run else "pruned"
    for r in results:
        hosts = f" (and on {', '.join(r.hosts_cleaned)})" if r.hosts_cleaned else ""
        if r.removed:
            io.write(f"{verb} {r.run_id}{' (dry run of render)' if r.dry_run else ''}{hosts}\n")
        for problem in r.problems:
            io.problem(f"{r.run_id}: {problem}")
    if not results:
        io.problem("nothing to prune")
    return EXIT_FAILED if any(r.problems for r in results) else EXIT_OK


def _run_inventory(store) -> str:
    """The inventory file a run was started with; InputError when it is gone."""
    stored = store.manifest().inventory_path
    if not stored or not Path(stored).is_file():
        raise InputError(f"run {store.run_id} was started with inventory {stored or '(not recorded)'}, which is not "
                         "there any more: name one with -i (it must hold the run's hosts)")
    return stored


def cmd_rerun(args, io: Streams) -> int:
    from .inventory import load_inventory
    from .launch import rerun
    from .live import LiveView
    from .store import resolve_run

    if not args.failed and not args.hosts and not args.resume:
        raise InputError("rerun: say what to run again: --failed, --hosts SEL and/or --resume")
    store = resolve_run(Path(args.runs_dir), args.run)
    inventory = load_inventory(Path(args.inventory or _run_inventory(store)))
    # The view gains a row per host as its first event arrives: which hosts rerun is decided in rerun().
    try:
        with LiveView(io.err, [], f"fleetbench rerun {store.run_id}") as view:
            result = rerun(store, inventory, failed=args.failed, hosts_selector=args.hosts, resume=args.resume,
                           parallel=args.parallel, accept_new=args.accept_new, on_event=view.update,
                           lock_timeout_s=args.lock_timeout)
    except RunInterrupted as stop:
        return _print_interrupted(stop.store, args.format, io)
    _index_landed(result.store, io)
    return _print_run(result.store, list(store.latest_outcomes().values()), args.format, io)


# -- diff ----------------------------------------------------------------------------------------------
def args_diff(p):
    p.add_argument("a", help="baseline: RUN[:host[:gpu]]")
    p.add_argument("b", nargs="?", help="candidate: RUN[:host[:gpu]] (omit with --across-hosts)")
    p.add_argument("--across-hosts", action="store_true", help="every host of run A against the fleet median")
    p.add_argument("--only-changed", action="store_true",
                   help="list only cases that are not SAME (and were run on at least one side)")
    _opt_threshold(p)
    _opt_format(p)
    _opt_runs_dir(p)


def parse_threshold(text: str) -> float:
    """'3%' or '0.03' -> 0.03."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"--threshold {text!r}: give a percentage like 3% or a fraction like 0.03") from None
    if not 0 < value < 1:
        raise InputError(f"--threshold {text!r}: must be between 0% and 100%")
    return value


def cmd_diff(args, io: Streams) -> int:
    from .diff import across_hosts, compare_sides, resolve_side
    from .output import write
    from .views import comparison_document, comparison_summary, fleet_document, interval_text, ratio_text

    threshold = parse_threshold(args.threshold)
    side_a = resolve_side(Path(args.runs_dir), args.a)
    if args.across_hosts:
        if args.b:
            raise InputError("--across-hosts compares the hosts of one run: give one RUN")
        report = across_hosts(side_a, threshold)
        io.write(write(fleet_document(report), args.format, io.width()))
        for s, h in report.hosts.items():
            if h["outlier"]:
                io.problem(f"{s}: outlier in {h['flagged']} of {h['cases']} cases")
        for c in report.calibration:
            if c["flagged"]:
                io.problem(f"{c['slot']}: slow GPU: calibration {c['peak']} {c['value']:.2f}, "
                           f"{1 - c['ratio']:.0%} below the fleet median {c['fleet_median']:.2f} ({c['gpu_name']})")
        return EXIT_OK
    if not args.b:
        raise InputError("diff needs two sides (A B), or one run with --across-hosts")
    cmp = compare_sides(side_a, resolve_side(Path(args.runs_dir), args.b), threshold)
    io.write(write(comparison_document(cmp, only_changed=args.only_changed), args.format, io.width()))
    for c in cmp.regressions:
        io.problem(f"regression: {c.backend} {c.m}x{c.n}x{c.k} ({c.label}) B/A {ratio_text(c.ratio)} "
                   f"(95% CI {interval_text(c.ci_low, c.ci_high)})")
    if args.format != "table":  # the table carries it as its title; other formats get it on stderr
        io.problem(comparison_summary(cmp))
    return EXIT_FAILED if cmp.regressions else EXIT_OK


# -- report --------------------------------------------------------------------------------------------
def args_report(p):
    p.add_argument("run", help="run id, run folder or `latest`")
    p.add_argument("--against", help="a second run (or RUN:host) to compare with")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default: report.html)")
    p.add_argument("--baseline", help="the backend speedups are drawn against (default: torch-bf16 when present)")
    p.add_argument("--history", action="store_true",
                   help="add trend plots: this run's cases over every stored run (the history index), steps marked")
    _opt_threshold(p)
    _opt_runs_dir(p)


def cmd_report(args, io: Streams) -> int:
    from .htmlreport import write_report

    path = write_report(Path(args.runs_dir), args.run, args.against, Path(args.output), parse_threshold(args.threshold),
                        with_history=args.history, baseline=args.baseline)
    io.problem(f"wrote {path}")
    return EXIT_OK


# -- init ----------------------------------------------------------------------------------------------
def args_init(p):
    p.add_argument("folder", nargs="?", default=".", help="where to write them (default: here)")


def cmd_init(args, io: Streams) -> int:
    from .starter import write_starter

    for w in write_starter(Path(args.folder)):
        io.write(f"{'wrote' if w.created else 'kept (exists)'} {w.path}\n")
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        # The `local` host runs the worker with this interpreter, and the controller never carries torch.
        # A laptop wants the small CPU torch (the Makefile's TORCH_SPEC): installed first, the extra keeps it.
        io.write("the `local` host runs the worker with this Python, which has no torch. On a laptop, first "
                 "the CPU torch: pip install torch==2.13.0\nthen the worker's other needs: "
                 "pip install 'fleetbench[worker]' (alone, on a CUDA machine, it brings a multi-GB CUDA torch)\n")
    io.write(f"next: cd {args.folder} && fleetbench run sweeps/smoke.yaml   (the `local` host; edit hosts.yaml "
             "for a fleet)\n")
    return EXIT_OK


# -- history ---------------------------------------------------------------------------------------------
def args_history(p):
    _opt_runs_dir(p)
    p.add_argument("--backend", help="one backend")
    p.add_argument("--m", type=_positive_int, help="M (for an MoE layer: its tokens)")
    p.add_argument("--n", type=_positive_int)
    p.add_argument("--k", type=_positive_int)
    p.add_argument("--label", help="cases whose label contains this text")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--host", help="one host slot (default: every host, each its own series)")
    where.add_argument("--fleet", action="store_true", help="one series per case: the median over hosts per run")
    p.add_argument("--sweep", help="runs of this sweep (its name)")
    p.add_argument("--since", help="runs started at or after this date/time (ISO, UTC)")
    p.add_argument("--until", help="runs started at or before this date/time (ISO, UTC)")
    p.add_argument("--case", dest="case_id", help="one case id")
    p.add_argument("--version", dest="versions", action="append", default=[], metavar="LIB=VERSION",
                   help="runs whose host had this version (torch, flashinfer, sgl_kernel, driver, cuda); repeatable")
    p.add_argument("--steps", action="store_true",
                   help="find steps in each series; exit 1 when one at the latest run is slower beyond the threshold")
    p.add_argument("--threshold", default="5%", help="smallest step that counts (default 5%%)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the index from the run folders first")
    _opt_format(p)


_VERSIONED = ("torch", "flashinfer", "sgl_kernel", "driver", "cuda")


def cmd_history(args, io: Streams) -> int:
    from .history import Selection, history
    from .index import RunIndex
    from .output import write
    from .views import history_document

    versions = {}
    for item in args.versions:
        lib, sep, version = item.partition("=")
        lib = lib.strip().replace("-", "_")
        if not sep or lib not in _VERSIONED or not version:
            raise InputError(f"--version {item!r}: expected LIB=VERSION with LIB one of {', '.join(_VERSIONED)}")
        versions[lib] = version.strip()
    sel = Selection(backend=args.backend, m=args.m, n=args.n, k=args.k, label=args.label, host=args.host,
                    fleet=args.fleet, sweep=args.sweep, since=args.since, until=args.until, case_id=args.case_id,
                    versions=versions)
    runs_dir = Path(args.runs_dir)
    if not runs_dir.is_dir():
        raise InputError(f"no runs folder {runs_dir} (give --runs-dir)")
    threshold = parse_threshold(args.threshold)
    index = RunIndex.open(runs_dir, rebuild=args.rebuild)
    try:
        hist = history(index, sel, threshold, args.steps)
    finally:
        index.close()
    io.write(write(history_document(hist), args.format, io.width()))
    for note in hist.notes:
        io.problem(f"note: {note}")
    for s in hist.new_regressions:
        last = s.steps[-1]
        io.problem(f"new step: {s.backend} {s.m}x{s.n}x{s.k} ({s.label}) on {s.host} at run {last['run_id']}: "
                   f"×{last['ratio']:.3f} [{last['low']:.3f}, {last['high']:.3f}]")
    return EXIT_FAILED if hist.new_regressions else EXIT_OK


def _index_landed(store, io: Streams) -> None:
    """Add a run that just landed to the history index; the run is stored whatever happens here."""
    from .index import RunIndex

    try:
        index = RunIndex.open(store.dir.parent)
        try:
            index.update_run(store.dir)
        finally:
            index.close()
    except InputError as exc:  # a damaged index was rebuilt; this one cannot be written at all
        io.problem(f"note: {exc}; `fleetbench history` adds this run once the index can be written")


# name -> (help, declare arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "init": ("write a starter hosts.yaml (the local host, a commented fleet) and the shipped sweeps", args_init,
             cmd_init),
    "run": ("run a sweep on the selected hosts and print the merged table", args_run, cmd_run),
    "render": ("dry run: render the scripts and print them with the remote commands", args_render, cmd_render),
    "show": ("print a stored run's merged results", args_show, cmd_show),
    "runs": ("list stored runs", args_runs, cmd_runs),
    "rerun": ("run hosts of a stored run again (same scripts, new attempt)", args_rerun, cmd_rerun),
    "diff": ("compare two runs or hosts with statistics, or hosts against the fleet", args_diff, cmd_diff),
    "report": ("write one self-contained HTML report with plots", args_report, cmd_report),
    "history": ("a case's results over stored runs, and the steps in them", args_history, cmd_history),
    "hosts": ("list the inventory; with --check, contact every host and say if it is ready", args_hosts, cmd_hosts),
    "prune": ("remove old runs here and on their hosts (never one in progress)", args_prune, cmd_prune),
    "provision": ("create each host's venv and install the worker's pinned dependencies", args_provision,
                  cmd_provision),
}
_EPILOGS = {
    "diff": "A and B: RUN, RUN:host or RUN:host:gpu. Cases match by what they measure, whatever the timing "
            "settings (those that differ are listed). Exit 1 when B is confirmed SLOWER than A in any case "
            "(for CI gates); UNSTABLE rows (too noisy, tainted, a busy CPU) exit 0, and a run against itself is SAME; "
            "exit 2 when the two sides share no case.",
    "hosts": "exit 1 when --check finds a host that is not ready (or version skew with --strict)",
    "history": "Reads the index RUNS_DIR/.index.sqlite, brought up to date with the run folders first (they are "
               "the source of truth; a missing or damaged index is rebuilt). Exit 1 with --steps when a step at "
               "a series' latest run makes a case slower beyond the threshold (a nightly gate).",
    "provision": "versions: requirements/host-constraints.txt. Idempotent. Exit 1 when a host failed.",
    "prune": "A run's folders on its hosts go first; the local folder goes only when they are gone (or with "
             "--local-only). Exit 1 when a run had to be kept (unreachable host, run in progress).",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleetbench", description="Benchmark GEMM kernels across a fleet of GPU hosts over SSH.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"fleetbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, declare, _) in COMMANDS.items():
        declare(sub.add_parser(name, help=help_text, description=help_text, epilog=_EPILOGS.get(name, EPILOG),
                               formatter_class=argparse.RawDescriptionHelpFormatter))
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    # paramiko logs connection failures with tracebacks; they become one classified line here instead.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    logging.getLogger("paramiko").propagate = False
    io = Streams(sys.stdout, sys.stderr)
    try:
        return COMMANDS[args.command][2](args, io)
    except FleetbenchError as exc:
        for line in str(exc).splitlines() or ["error"]:
            io.problem(f"error: {line}")
        return exc.exit_code
    except KeyboardInterrupt:  # run and rerun say what was kept and how to finish (RunInterrupted)
        io.problem("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `fleetbench show ... | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
