"""`fleetbench hosts`: list the inventory; with --check, contact every host and say if it is ready."""

from __future__ import annotations

from ..errors import EXIT_FAILED, EXIT_OK
from .common import Streams, inventory_path, opt_accept_new, opt_format, opt_hosts, opt_inventory, opt_parallel

HELP = "list the inventory; with --check, contact every host and say if it is ready"
EPILOG = "exit 1 when --check finds a host that is not ready (or version skew with --strict)"


def declare(p):
    opt_inventory(p)
    opt_hosts(p)
    p.add_argument("--check", action="store_true", help="contact every host in parallel")
    opt_accept_new(p)
    opt_parallel(p)
    p.add_argument("--strict", action="store_true", help="with --check: version skew also fails")
    opt_format(p, ("table", "json", "csv", "md"))


def run(args, io: Streams) -> int:
    from ..config.inventory import load_inventory, select_hosts
    from ..views.output import write

    hosts = select_hosts(load_inventory(inventory_path(args.inventory)), args.hosts)
    if not args.check:
        from ..views.tables import inventory_document

        io.write(write(inventory_document(hosts), args.format, io.width()))
        return EXIT_OK
    from ..ops.hostcheck import check_hosts, version_skew
    from ..views.tables import host_check_document

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
