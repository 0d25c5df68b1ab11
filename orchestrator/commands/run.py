"""`fleetbench run`: run a sweep on the selected hosts and print the merged table."""

from __future__ import annotations

from pathlib import Path

from ..config import defaults
from ..errors import RunInterrupted
from .common import (
    Streams,
    index_landed,
    load_run_inputs,
    opt_accept_new,
    opt_format,
    opt_hosts,
    opt_inventory,
    opt_parallel,
    opt_per_gpu,
    opt_runs_dir,
    print_interrupted,
    print_run,
    seconds,
)

HELP = "run a sweep on the selected hosts and print the merged table"


def declare(p):
    p.add_argument("sweep", help="sweep spec (YAML), e.g. sweeps/smoke.yaml")
    for opt in (opt_inventory, opt_runs_dir, opt_hosts, opt_per_gpu, opt_parallel, opt_accept_new):
        opt(p)
    p.add_argument(
        "--lock-timeout",
        type=seconds,
        default=defaults.LOCK_TIMEOUT_S,
        help="seconds a host waits for its GPU while another sweep holds it (default: 600)",
    )
    opt_format(p)


def run(args, io: Streams) -> int:
    from ..execution.launch import start_run
    from ..planning.plan import build_plan, new_run_id
    from ..views.live import LiveView

    inventory, sweep, hosts = load_run_inputs(args)
    plan = build_plan(hosts, sweep, new_run_id(sweep.name), args.per_gpu, args.lock_timeout)
    try:
        with LiveView(io.err, [j.slot for j in plan.jobs], f"fleetbench {sweep.name}") as view:
            result = start_run(
                plan,
                sweep,
                inventory,
                Path(args.runs_dir),
                sweep_path=args.sweep,
                parallel=args.parallel,
                accept_new=args.accept_new,
                on_event=view.update,
            )
    except RunInterrupted as stop:
        return print_interrupted(stop.store, args.format, io)
    index_landed(result.store, io)
    return print_run(result.store, result.outcomes, args.format, io)
