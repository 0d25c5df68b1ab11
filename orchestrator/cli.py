"""fleetbench command line: the one place that prints and chooses exit codes.

Exit codes: 0 everything ran and every case is ok (or cleanly unsupported/unavailable); 1 some host
or case failed; 2 bad input (nothing was run); 130 interrupted.
"""
from __future__ import annotations

import argparse
import gc
import logging
import sys
from pathlib import Path
from typing import Optional

from rich.console import Console

from . import __version__
from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, FleetbenchError

DEFAULT_INVENTORY = "hosts.yaml"
DEFAULT_RUNS_DIR = "runs"
BAD_CASE_STATUSES = {"failed", "crashed", "missing"}

EPILOG = """exit codes: 0 all ok, 1 some host or case failed, 2 bad input, 130 interrupted.
RUN is a run id (or a unique prefix), a run folder, or `latest`."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetbench",
        description="Benchmark GEMM kernels across a fleet of GPU hosts over SSH.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"fleetbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp, inventory=True):
        if inventory:
            sp.add_argument("-i", "--inventory", default=DEFAULT_INVENTORY,
                            help=f"hosts file (default: {DEFAULT_INVENTORY})")
        sp.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, help=f"where runs are stored (default: {DEFAULT_RUNS_DIR})")

    run = sub.add_parser("run", help="run a sweep on the selected hosts and print the merged table",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("sweep", help="sweep spec (YAML), e.g. sweeps/smoke.yaml")
    common(run)
    run.add_argument("--hosts", help="comma-separated host names, globs or label:NAME (default: all)")
    run.add_argument("--per-gpu", choices=["all", "shard"], default="all",
                     help="hosts with several gpus: run every case on every GPU (all) or split them (shard)")
    run.add_argument("--parallel", type=int, default=64, help="hosts contacted at once (default: 64)")
    run.add_argument("--accept-new", action="store_true",
                     help="record unknown host keys in known_hosts (never replaces a changed key)")
    run.add_argument("--lock-timeout", type=float, default=600.0,
                     help="seconds a host waits for its GPU while another sweep holds it (default: 600)")
    run.add_argument("--format", choices=["table", "json", "csv", "md"], default="table")

    render = sub.add_parser("render", help="dry run: render the scripts and print them with the remote commands")
    render.add_argument("sweep")
    common(render)
    render.add_argument("--hosts")
    render.add_argument("--per-gpu", choices=["all", "shard"], default="all")
    render.add_argument("--quiet", action="store_true", help="print the commands but not the scripts")

    show = sub.add_parser("show", help="print a stored run's merged results", epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("run", help="run id, run folder or `latest`")
    common(show, inventory=False)
    show.add_argument("--format", choices=["table", "json", "csv", "md"], default="table")
    show.add_argument("--pivot", choices=["backend"], help="one row per shape, backends side by side")
    show.add_argument("--baseline", help="with --pivot: show each backend's speedup over this one")

    diff = sub.add_parser("diff", help="compare two runs or hosts with statistics, or hosts against the fleet",
                          epilog="A and B: RUN, RUN:host or RUN:host:gpu. Exit 1 when B is confirmed SLOWER "
                                 "than A in any case (for CI gates).")
    diff.add_argument("a", help="baseline: RUN[:host[:gpu]]")
    diff.add_argument("b", nargs="?", help="candidate: RUN[:host[:gpu]] (omit with --across-hosts)")
    diff.add_argument("--across-hosts", action="store_true", help="every host of run A against the fleet median")
    diff.add_argument("--threshold", default="3%", help="smallest change that counts (default 3%%)")
    diff.add_argument("--format", choices=["table", "json", "csv", "md"], default="table")
    common(diff, inventory=False)

    report = sub.add_parser("report", help="write one self-contained HTML report with plots")
    report.add_argument("run")
    report.add_argument("--against", help="a second run (or RUN:host) to compare with")
    report.add_argument("-o", "--output", default="report.html")
    report.add_argument("--threshold", default="3%")
    common(report, inventory=False)

    hosts = sub.add_parser("hosts", help="list the inventory; with --check, contact every host and say if it is ready",
                           epilog="exit 1 when --check finds a host that is not ready (or version skew with --strict)")
    hosts.add_argument("-i", "--inventory", default=DEFAULT_INVENTORY)
    hosts.add_argument("--hosts", help="comma-separated host names, globs or label:NAME (default: all)")
    hosts.add_argument("--check", action="store_true", help="contact every host in parallel")
    hosts.add_argument("--accept-new", action="store_true")
    hosts.add_argument("--strict", action="store_true", help="with --check: version skew also fails")
    hosts.add_argument("--format", choices=["table", "json"], default="table")

    prov = sub.add_parser("provision", help="create each host's venv and install the worker's pinned dependencies",
                          epilog="versions: requirements/host-constraints.txt. Idempotent. Exit 1 when a host failed.")
    prov.add_argument("-i", "--inventory", default=DEFAULT_INVENTORY)
    prov.add_argument("--hosts", help="comma-separated host names, globs or label:NAME (default: all)")
    prov.add_argument("--wheelhouse", type=Path, help="a folder of wheels to upload and install from (no internet)")
    prov.add_argument("--profile", default="gpu", choices=["minimal", "worker", "gpu"],
                      help="minimal: pydantic only (plumbing); worker: + torch; gpu: + FlashInfer, sgl-kernel, NVML")
    prov.add_argument("--base-python", default="python3", help="interpreter that creates missing venvs on the hosts")
    prov.add_argument("--accept-new", action="store_true")

    warm = sub.add_parser("warm", help="keep a warm controller: imports done once, one forked process per command",
                          epilog="With it running, `fleetbench` commands skip ~0.35 s of imports each. It stops "
                                 "itself when idle or when fleetbench's source or packages change. By default "
                                 "(FLEETBENCH_WARM=auto) a command that ran cold starts one in the background; "
                                 "FLEETBENCH_WARM=manual uses only one started here, FLEETBENCH_WARM=0 never "
                                 "uses one; with CI set, manual. `serve` runs it in the foreground (e.g. under "
                                 "a service manager). Linux only.")
    warm.add_argument("action", choices=["start", "stop", "status", "serve"])
    warm.add_argument("--idle-minutes", type=float, default=30.0, help="exit after this long unused (default 30)")

    runs = sub.add_parser("runs", help="list stored runs")
    common(runs, inventory=False)

    rerun = sub.add_parser("rerun", help="run hosts of a stored run again (same scripts, new attempt)",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    rerun.add_argument("run", help="run id, run folder or `latest`")
    common(rerun)
    rerun.add_argument("--failed", action="store_true", help="the hosts whose latest attempt did not end ok")
    rerun.add_argument("--hosts", help="these hosts (names, globs, label:NAME)")
    rerun.add_argument("--resume", action="store_true", help="only the cases that have no result yet")
    rerun.add_argument("--parallel", type=int, default=64)
    rerun.add_argument("--accept-new", action="store_true")
    rerun.add_argument("--lock-timeout", type=float, help="seconds to wait for a busy GPU (default: the run's)")
    rerun.add_argument("--format", choices=["table", "json", "csv", "md"], default="table")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    # Importing fabric, paramiko, pydantic and building the models allocates enough to trigger ~120
    # cyclic collections (45 ms of a ~0.35 s start): collect nothing until the work starts (_started).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if gc_was_enabled:
            gc.enable()


def _started(hosts=()) -> None:
    """Startup is over: import the SSH stack now if a host needs it (still without collections), then
    collect normally from here on."""
    if any(h.transport != "local" for h in hosts):
        import fabric  # noqa: F401
    gc.enable()


def _main(argv: Optional[list[str]]) -> int:
    args = _parser().parse_args(argv)
    # paramiko logs connection failures with tracebacks; they become one classified line here instead.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    logging.getLogger("paramiko").propagate = False
    # Piped output (CI logs, files) gets wide tables rather than rich's 80-column default.
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    err = Console(stderr=True, highlight=False, soft_wrap=True)  # one problem, one line: never wrapped
    if args.command not in ("run", "rerun"):  # these end their startup themselves, after planning
        _started()
    try:
        return COMMANDS[args.command](args, out, err)
    except FleetbenchError as exc:
        for line in str(exc).splitlines() or ["error"]:
            err.print(f"error: {line}", markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted: remote work was stopped; the run store is consistent "
                  "(finish it with `fleetbench rerun RUN --failed`)", markup=False)
        return EXIT_INTERRUPTED


def _load(args):
    from .inventory import load_inventory, select_hosts
    from .sweep import load_sweep

    inventory = load_inventory(Path(args.inventory))
    sweep = load_sweep(Path(args.sweep))
    hosts = select_hosts(inventory, args.hosts)
    return inventory, sweep, hosts


def cmd_run(args, out: Console, err: Console) -> int:
    from .live import LiveView
    from .plan import build_plan, new_run_id
    from .runs import start_run

    inventory, sweep, hosts = _load(args)
    preview = build_plan(hosts, sweep, new_run_id(sweep.name), args.per_gpu)
    _started(hosts)
    with LiveView(err, [j.slot for j in preview.jobs], f"fleetbench {sweep.name}") as view:
        result = start_run(inventory, hosts, sweep, Path(args.runs_dir), sweep_path=args.sweep,
                           per_gpu=args.per_gpu, parallel=args.parallel, accept_new=args.accept_new,
                           lock_timeout_s=args.lock_timeout, on_event=view.update)
    return _report(result.store, result.outcomes, args.format, out, err)


def _report(store, outcomes, fmt: str, out: Console, err: Console) -> int:
    from .merge import merged_rows
    from .report import render_rows

    rows = merged_rows(store)
    text = render_rows(rows, fmt, title=f"run {store.run_id}", width=max(out.width, 160))
    out.file.write(text)
    out.file.flush()
    failed = False
    for o in outcomes:
        if o.outcome != "ok":
            failed = True
            err.print(f"{o.slot}: {o.outcome}: {o.error}", markup=False)
        for problem in o.problems:
            failed = True
            err.print(f"{o.slot}: bad result line: {problem}", markup=False)
    bad = [r for r in rows if r.status in BAD_CASE_STATUSES]
    if bad:
        failed = True
        err.print(f"{len(bad)} of {len(rows)} cases failed, crashed or are missing", markup=False)
    err.print(f"run {store.run_id} stored in {store.dir}", markup=False)
    if failed:
        err.print(f"complete it with: fleetbench rerun {store.run_id} --failed", markup=False)
    return EXIT_FAILED if failed else EXIT_OK


def cmd_render(args, out: Console, err: Console) -> int:
    from .runs import describe_commands, prepare_run

    inventory, sweep, hosts = _load(args)
    store, plan, scripts, _ = prepare_run(inventory, hosts, sweep, Path(args.runs_dir), sweep_path=args.sweep,
                                          per_gpu=args.per_gpu, dry_run=True)
    w = out.file.write
    for s in scripts.values():
        if not args.quiet:
            w(f"# ---- {s.path} (sha256 {s.sha256}) ----\n")
            w(s.path.read_text(encoding="utf-8"))
    w("# ---- commands ----\n")
    for line in describe_commands(plan, scripts):
        w(line + "\n")
    w(f"# rendered {len(scripts)} scripts, {sum(len(j.cases) for j in plan.jobs)} cases, into {store.dir}\n")
    return EXIT_OK


def cmd_show(args, out: Console, err: Console) -> int:
    from .store import resolve_run

    store = resolve_run(Path(args.runs_dir), args.run)
    outcomes = list(store.latest_outcomes().values())
    if args.baseline and not args.pivot:
        raise FleetbenchError("--baseline needs --pivot backend")
    if args.pivot:
        from .merge import merged_rows
        from .report import render_pivot

        out.file.write(render_pivot(merged_rows(store), args.format, args.baseline, width=max(out.width, 160)))
        out.file.flush()
        bad = [o for o in outcomes if o.outcome != "ok"]
        for o in bad:
            err.print(f"{o.slot}: {o.outcome}: {o.error}", markup=False)
        return EXIT_FAILED if bad else EXIT_OK
    return _report(store, outcomes, args.format, out, err)


def cmd_hosts(args, out: Console, err: Console) -> int:
    import json

    from rich.table import Table

    from .inventory import load_inventory, select_hosts

    inventory = load_inventory(Path(args.inventory))
    hosts = select_hosts(inventory, args.hosts)
    if not args.check:
        table = Table(header_style="bold")
        for col in ("host", "transport", "address", "python", "workdir", "gpus", "labels"):
            table.add_column(col, overflow="fold")
        for h in hosts:
            table.add_row(h.name, h.transport, h.address, h.python, h.workdir,
                          ",".join(map(str, h.gpus)) if h.gpus else "", ",".join(h.labels))
        out.print(table)
        return EXIT_OK
    from .hostcheck import check_hosts, version_skew

    statuses = check_hosts(hosts, accept_new=args.accept_new)
    skew = version_skew(statuses)
    if args.format == "json":
        out.file.write(json.dumps([vars(s) for s in statuses], indent=1) + "\n")
    else:
        table = Table(header_style="bold")
        cols = ("host", "ready", "python", "venv", "worker", "torch", "flashinfer", "sgl-kernel", "GPU", "CC", "driver", "CUDA",
                "free disk GB", "GPU procs", "problem")
        for col in cols:
            table.add_column(col, overflow="fold")
        for s in statuses:
            f = s.facts
            table.add_row(s.name, "[green]yes[/]" if s.ready else f"[red]no ({s.state})[/]", f.get("python") or "",
                          {True: "yes", False: "no"}.get(f.get("in_venv"), ""),
                          f"{f.get('worker_version', '')} {str(f.get('worker_sha256', ''))[:12]}".strip(),
                          f.get("torch") or "-",
                          f.get("flashinfer") or "-", f.get("sgl_kernel") or "-", f.get("gpu_name") or f.get("device") or "",
                          f.get("compute_capability") or "", f.get("driver") or "", f.get("cuda") or "",
                          str(f.get("free_disk_gb", "")), "" if f.get("gpu_processes") is None else str(f["gpu_processes"]),
                          s.problem)
        out.print(table)
    for s in statuses:
        if not s.ready:
            err.print(f"{s.name}: not ready ({s.state}): {s.problem}", markup=False)
    for line in skew:
        err.print(line, markup=False)
    failed = any(not s.ready for s in statuses) or (args.strict and skew)
    return EXIT_FAILED if failed else EXIT_OK


def cmd_provision(args, out: Console, err: Console) -> int:
    from .inventory import load_inventory, select_hosts
    from .provision import provision_hosts

    hosts = select_hosts(load_inventory(Path(args.inventory)), args.hosts)
    results = provision_hosts(hosts, profile=args.profile, wheelhouse=args.wheelhouse, base_python=args.base_python,
                              accept_new=args.accept_new)
    for r in results:
        line = f"{r.name}: {'ok' if r.ok else 'FAILED'}: {'; '.join(r.actions)}" + (f"; {r.problem}" if r.problem else "")
        (out if r.ok else err).print(line, markup=False, soft_wrap=True)
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def cmd_runs(args, out: Console, err: Console) -> int:
    from rich.table import Table

    from .store import RunStore, list_run_dirs

    table = Table(header_style="bold")
    for col in ("run", "sweep", "hosts", "cases", "outcomes"):
        table.add_column(col)
    for run_dir in list_run_dirs(Path(args.runs_dir)):
        store = RunStore(run_dir)
        try:
            manifest = store.manifest()
        except FleetbenchError as exc:
            table.add_row(run_dir.name, "?", "", "", str(exc))
            continue
        if manifest.get("dry_run"):
            summary = "rendered only (dry run)"
        else:
            counts: dict[str, int] = {}
            for o in store.latest_outcomes().values():
                counts[o.outcome] = counts.get(o.outcome, 0) + 1
            summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "not started"
        cases = sum(len(j["case_ids"]) for j in manifest.get("jobs", []))
        table.add_row(store.run_id, manifest["sweep"]["name"], str(len(manifest.get("hosts", []))), str(cases), summary)
    out.print(table)
    return EXIT_OK


def cmd_rerun(args, out: Console, err: Console) -> int:
    from .inventory import load_inventory
    from .live import LiveView
    from .runs import rerun
    from .store import resolve_run

    if not args.failed and not args.hosts and not args.resume:
        raise FleetbenchError("rerun: say what to run again: --failed, --hosts SEL and/or --resume")
    store = resolve_run(Path(args.runs_dir), args.run)
    inventory_path = args.inventory
    inventory = load_inventory(Path(inventory_path))
    _started(inventory.hosts)
    # The view gains a row per host as its first event arrives: which hosts rerun is decided in rerun().
    with LiveView(err, [], f"fleetbench rerun {store.run_id}") as view:
        result = rerun(store, inventory, failed=args.failed, hosts_selector=args.hosts, resume=args.resume,
                       parallel=args.parallel, accept_new=args.accept_new, on_event=view.update,
                       lock_timeout_s=args.lock_timeout)
    return _report(result.store, list(store.latest_outcomes().values()), args.format, out, err)


def parse_threshold(text: str) -> float:
    """'3%' or '0.03' -> 0.03."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise FleetbenchError(f"--threshold {text!r}: give a percentage like 3% or a fraction like 0.03") from None
    if not 0 < value < 1:
        raise FleetbenchError(f"--threshold {text!r}: must be between 0% and 100%")
    return value


def cmd_diff(args, out: Console, err: Console) -> int:
    from .diff import across_hosts, compare_sides, resolve_side
    from .report import render_comparison, render_fleet

    threshold = parse_threshold(args.threshold)
    side_a = resolve_side(Path(args.runs_dir), args.a)
    width = max(out.width, 160)
    if args.across_hosts:
        if args.b:
            raise FleetbenchError("--across-hosts compares the hosts of one run: give one RUN")
        report = across_hosts(side_a, threshold)
        out.file.write(render_fleet(report, args.format, width))
        outliers = [s for s, h in report.hosts.items() if h["outlier"]]
        for s in outliers:
            err.print(f"{s}: outlier in {report.hosts[s]['flagged']} of {report.hosts[s]['cases']} cases", markup=False)
        return EXIT_OK
    if not args.b:
        raise FleetbenchError("diff needs two sides (A B), or one run with --across-hosts")
    cmp = compare_sides(side_a, resolve_side(Path(args.runs_dir), args.b), threshold)
    out.file.write(render_comparison(cmp, args.format, width))
    for c in cmp.regressions:
        err.print(f"regression: {c.backend} {c.m}x{c.n}x{c.k} ({c.label}) B/A {c.ratio:.3f} "
                  f"[{c.ci_low:.3f}, {c.ci_high:.3f}]", markup=False)
    return EXIT_FAILED if cmp.regressions else EXIT_OK


def cmd_report(args, out: Console, err: Console) -> int:
    from .htmlreport import write_report

    path = write_report(Path(args.runs_dir), args.run, args.against, Path(args.output),
                        parse_threshold(args.threshold))
    err.print(f"wrote {path}", markup=False)
    return EXIT_OK


def cmd_warm(args, out: Console, err: Console) -> int:
    from . import warm

    if args.action == "start":
        ok, message = warm.start_background(args.idle_minutes * 60)
        (out if ok else err).print(message, markup=False)
        return 0 if ok or message.startswith("already running") else 1
    if args.action == "stop":
        out.print("stopped" if warm.stop() else "not running", markup=False)
        return 0
    if args.action == "serve":
        return warm.serve(args.idle_minutes * 60)
    up, pid = warm.status()
    out.print(f"running (pid {pid}) on {warm.socket_path()}" if up else "not running", markup=False)
    return 0


COMMANDS = {"warm": cmd_warm, "provision": cmd_provision, "hosts": cmd_hosts, "diff": cmd_diff, "report": cmd_report, "run": cmd_run, "render": cmd_render, "show": cmd_show, "runs": cmd_runs, "rerun": cmd_rerun}


if __name__ == "__main__":
    sys.exit(main())
