"""`fleetbench rerun`: run hosts of a stored run again (same scripts, new attempt)."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, RunInterrupted
from .common import (
    Streams,
    index_landed,
    opt_accept_new,
    opt_format,
    opt_hosts,
    opt_inventory,
    opt_parallel,
    opt_runs_dir,
    print_interrupted,
    print_run,
    run_inventory,
    seconds,
)

HELP = "run hosts of a stored run again (same scripts, new attempt)"


def declare(p):
    p.add_argument("run", help="run id, run folder or `latest`")
    opt_inventory(p, "hosts file (default: the one the run was started with; its hosts must be the run's)")
    opt_runs_dir(p)
    p.add_argument(
        "--failed",
        action="store_true",
        help="every case that is not done, on any host: failed, crashed, hung or missing cases in "
        "full, and the rounds still missing of cases cut short (ok, unsupported and "
        "unavailable cases are done)",
    )
    opt_hosts(p, "these hosts (names, globs, label:NAME; !TERM leaves those out); alone: all their cases afresh")
    p.add_argument("--resume", action="store_true", help="the same as --failed (kept for scripts written for 0.2)")
    opt_parallel(p)
    opt_accept_new(p)
    p.add_argument("--lock-timeout", type=seconds, help="seconds to wait for a busy GPU (default: the run's)")
    opt_format(p)


def run(args, io: Streams) -> int:
    from ..config.inventory import load_inventory
    from ..execution.launch import rerun
    from ..runs.store import resolve_run
    from ..views.live import LiveView

    if not args.failed and not args.hosts and not args.resume:
        raise InputError("rerun: say what to run again: --failed, --hosts SEL and/or --resume")
    store = resolve_run(Path(args.runs_dir), args.run)
    inventory = load_inventory(Path(args.inventory or run_inventory(store)))
    # The view gains a row per host as its first event arrives: which hosts rerun is decided in rerun().
    try:
        with LiveView(io.err, [], f"fleetbench rerun {store.run_id}") as view:
            result = rerun(
                store,
                inventory,
                failed=args.failed,
                hosts_selector=args.hosts,
                resume=args.resume,
                parallel=args.parallel,
                accept_new=args.accept_new,
                on_event=view.update,
                lock_timeout_s=args.lock_timeout,
            )
    except RunInterrupted as stop:
        return print_interrupted(stop.store, args.format, io)
    index_landed(result.store, io)
    return print_run(result.store, list(store.latest_outcomes().values()), args.format, io)
