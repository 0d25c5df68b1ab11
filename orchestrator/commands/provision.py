"""`fleetbench provision`: create each host's venv and install the worker's pinned dependencies."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_OK
from .common import Streams, inventory_path, opt_accept_new, opt_hosts, opt_inventory, opt_parallel

HELP = "create each host's venv and install the worker's pinned dependencies"
EPILOG = (
    "versions: requirements/host-constraints.txt. Idempotent; on the controller's own Python, what it "
    "already imports is kept as it is. Exit 1 when a host failed."
)


def declare(p):
    opt_inventory(p)
    opt_hosts(p)
    p.add_argument("--wheelhouse", type=Path, help="a folder of wheels to upload and install from (no internet)")
    p.add_argument(
        "--profile",
        default="auto",
        choices=["auto", "minimal", "cpu", "worker", "gpu"],
        help="what to install (default: auto: per host, gpu where the NVIDIA driver is loaded and on "
        "hosts whose launcher starts jobs on a cluster's nodes; cpu elsewhere and on the local host "
        "that runs the controller's own Python, never the CUDA stack there). minimal: pydantic only "
        "(plumbing); cpu: + numpy and torch's CPU build; worker: + numpy and torch as the index "
        "builds it (CUDA on Linux); gpu: + FlashInfer, sgl-kernel, NVML",
    )
    p.add_argument(
        "--base-python",
        default="python3",
        help="interpreter that creates missing venvs on the hosts (default: python3)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="resolve the pinned profile on each host (pip --dry-run) and report it: nothing is installed",
    )
    opt_accept_new(p)
    opt_parallel(p)


def run(args, io: Streams) -> int:
    from ..config.inventory import load_inventory, select_hosts
    from ..ops.provision import provision_hosts

    hosts = select_hosts(load_inventory(inventory_path(args.inventory)), args.hosts)
    results = provision_hosts(
        hosts,
        profile=args.profile,
        wheelhouse=args.wheelhouse,
        base_python=args.base_python,
        accept_new=args.accept_new,
        dry_run=args.dry_run,
        parallel=args.parallel,
    )
    for r in results:
        line = f"{r.name}: {'ok' if r.ok else 'FAILED'}: {'; '.join(r.actions)}" + (
            f"; {r.problem}" if r.problem else ""
        )
        if r.ok:
            io.write(line + "\n")
        else:
            io.problem(line)
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED
