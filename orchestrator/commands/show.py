"""`fleetbench show`: print a stored run's merged results."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_OK, InputError
from .common import Streams, opt_format, opt_runs_dir, print_run

HELP = "print a stored run's merged results"


def declare(p):
    p.add_argument("run", help="run id, run folder or `latest`")
    opt_runs_dir(p)
    opt_format(p)
    p.add_argument("--pivot", choices=["backend"], help="one row per shape, backends side by side")
    p.add_argument("--baseline", help="with --pivot: show each backend's speedup over this one")
    p.add_argument(
        "--per-host",
        action="store_true",
        help="with --pivot: one row per host and shape (default: the fleet's median per shape)",
    )


def run(args, io: Streams) -> int:
    from ..runs.store import resolve_run

    if (args.baseline or args.per_host) and not args.pivot:
        raise InputError("--baseline and --per-host need --pivot backend")
    store = resolve_run(Path(args.runs_dir), args.run)
    outcomes = list(store.latest_outcomes().values())
    if not args.pivot:
        return print_run(store, outcomes, args.format, io)
    from ..analysis.headtohead import pair_index
    from ..analysis.merge import merged_rows
    from ..runs.slots import load_slots
    from ..views.output import write
    from ..views.tables import pivot_document

    # BEST only where the head-to-head interval says so (analysis/headtohead.py)
    slots = load_slots(store)
    io.write(
        write(
            pivot_document(merged_rows(store, slots), args.baseline, per_host=args.per_host, pairs=pair_index(slots)),
            args.format,
            io.width(),
        )
    )
    bad = [o for o in outcomes if o.outcome != "ok"]
    for o in bad:
        io.problem(f"{o.slot}: {o.outcome}: {o.error}")
    return EXIT_FAILED if bad else EXIT_OK
