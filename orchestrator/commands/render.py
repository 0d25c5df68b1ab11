"""`fleetbench render`: dry run: render the scripts and print them with the remote commands."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_OK
from .common import Streams, load_run_inputs, opt_hosts, opt_inventory, opt_per_gpu, opt_runs_dir

HELP = "dry run: render the scripts and print them with the remote commands"


def declare(p):
    p.add_argument("sweep", help="sweep spec (YAML)")
    for opt in (opt_inventory, opt_runs_dir, opt_hosts, opt_per_gpu):
        opt(p)
    p.add_argument("--quiet", action="store_true", help="print the commands but not the scripts")


def run(args, io: Streams) -> int:
    from ..execution.launch import describe_commands, prepare_run
    from ..planning.plan import build_plan, new_run_id

    inventory, sweep, hosts = load_run_inputs(args)
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
