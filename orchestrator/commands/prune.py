"""`fleetbench prune`: remove old runs here and on their hosts (never one in progress)."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_OK
from .common import Streams, opt_accept_new, opt_inventory, opt_parallel, opt_runs_dir, positive_int, run_inventory

HELP = "remove old runs here and on their hosts (never one in progress)"
EPILOG = (
    "A run's folders on its hosts go first; the local folder goes only when they are gone (or with "
    "--local-only). Exit 1 when a run had to be kept (unreachable host, run in progress)."
)


def declare(p):
    p.add_argument(
        "--keep",
        type=positive_int,
        help="keep the newest N runs, prune the older ones (dry runs of `render` are counted apart: "
        "the newest N of them stay too)",
    )
    p.add_argument("--older-than", metavar="DATE", help="prune runs created before DATE (2026-11-30[T12:00])")
    opt_runs_dir(p)
    opt_inventory(p, "hosts file (default: each run's own)")
    p.add_argument("--local-only", action="store_true", help="remove the run folders here only, not on the hosts")
    p.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    opt_accept_new(p)
    opt_parallel(p)


def run(args, io: Streams) -> int:
    from ..config.inventory import load_inventory
    from ..ops.prune import parse_date, prune_runs
    from ..runs.store import existing_runs_dir, links_notes

    older_than = parse_date(args.older_than) if args.older_than else None
    loaded: dict[str, object] = {}

    def inventory_of(store):
        path = args.inventory or run_inventory(store)
        if path not in loaded:
            loaded[path] = load_inventory(Path(path))
        return loaded[path]

    for note in links_notes(existing_runs_dir(Path(args.runs_dir))):
        io.problem(f"note: {note}")
    results = prune_runs(
        Path(args.runs_dir),
        inventory_of,
        keep=args.keep,
        older_than=older_than,
        dry_run=args.dry_run,
        local_only=args.local_only,
        accept_new=args.accept_new,
        parallel=args.parallel,
    )
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
