"""`fleetbench crosscheck`: cases of a stored run timed on their own hosts beside the timers users hold
fleetbench against (FlashInfer's bench_gpu_time, Triton's do_bench_cudagraph), each first in its default
settings, then matched to fleetbench's method step by step; every gap printed with its causes."""

from __future__ import annotations

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, InputError
from .common import (
    Streams,
    opt_accept_new,
    opt_format,
    opt_inventory,
    opt_parallel,
    opt_runs_dir,
    parse_threshold,
    seconds,
)
from .storedcases import declare_selection, one_run, plan_on_hosts, report_problems, run_on_hosts, select_cases

HELP = "time cases of a stored run beside FlashInfer's and Triton's timers, and say why they differ"
EPILOG = (
    "TARGET: RUN (every host of the run), RUN:host or RUN:host:gpu. Each case is prepared as the sweep prepared "
    "it and timed in one process, on its own host and GPU: by fleetbench (and its graph's kernels under "
    "CUPTI), then by each peer in its default settings and with fleetbench's L2 state, launch, clock state and "
    "statistic matched one after another. Each ratio is the peer over fleetbench; each step's share names one "
    "cause (docs/CROSSCHECK.md). A peer that is not installed is a reason, not a failure. Results are stored in "
    "the run's folder (crosschecks/). Exit 1 when a case or host could not be crosschecked, 2 on bad input, "
    "130 interrupted."
)


def declare(p):
    declare_selection(p, "RUN, RUN:host or RUN:host:gpu")
    p.add_argument("--all", action="store_true", help="every case the run measured (ok)")
    p.add_argument(
        "--peer",
        action="append",
        choices=["flashinfer", "triton"],
        default=[],
        help="only this peer (repeatable; default: both)",
    )
    p.add_argument("--no-cupti", action="store_true", help="leave out fleetbench's kernel time under CUPTI")
    p.add_argument("--tolerance", default="2%", help="a matched peer this close to fleetbench agrees (default 2%%)")
    p.add_argument("--gap", default="3%", help="a raw gap beyond this must be attributed (default 3%%)")
    p.add_argument("--steps", action="store_true", help="show every step of each peer's ladder")
    p.add_argument(
        "--stored", action="store_true", help="show the latest stored crosscheck of each selected case; run nothing"
    )
    p.add_argument("--lock-timeout", type=seconds, help="seconds to wait for a busy GPU (default: the run's)")
    opt_inventory(p, "hosts file (default: the one the run was started with; its hosts must be the run's)")
    opt_runs_dir(p)
    opt_parallel(p)
    opt_accept_new(p)
    opt_format(p)


def run(args, io: Streams) -> int:
    from worker.contract.crosscheck import PEERS, CrosscheckOptions

    from ..analysis.crosscheck import compare, fleetbench_view, summarize
    from ..views.crosscheck import case_text, crosscheck_document
    from ..views.output import write

    tolerance, gap = parse_threshold(args.tolerance), parse_threshold(args.gap)
    store, slots = one_run(args, "crosscheck", "RUN, RUN:host, RUN:host:gpu")
    wanted = select_cases(
        slots,
        args,
        verb="crosscheck",
        done="crosschecked",
        or_all=True,
        cost="each case costs a few seconds of GPU time per peer",
    )
    if args.stored:
        return _show_stored(store, wanted, tolerance, gap, args, io)
    from ..execution.crosscheck import CROSSCHECK

    plan = plan_on_hosts(store, args, wanted, CROSSCHECK)
    options = CrosscheckOptions(peers=list(dict.fromkeys(args.peer)) or list(PEERS), cupti=not args.no_cupti)
    try:
        results = run_on_hosts(plan, CROSSCHECK, options, args, io)
    except KeyboardInterrupt:
        io.problem(f"interrupted: the hosts were stopped; what came back is stored in {store.dir / 'crosschecks'}")
        return EXIT_INTERRUPTED
    checks = [c for r in results for c in r.stored]
    comparisons = compare(checks, tolerance, gap)
    summaries = summarize(comparisons, gap, tolerance)
    io.write(
        write(
            crosscheck_document(
                [fleetbench_view(c) for c in checks], comparisons, summaries, tolerance, gap, steps=args.steps
            ),
            args.format,
            io.width(),
        )
    )
    bad = report_problems(results, io)
    for c in comparisons:
        if c.verdict == "unexplained":
            io.problem(f"{c.slot}: {case_text(c.as_dict())}: {c.peer}: unexplained: {c.explanation}")
    if checks:
        io.problem(f"crosschecks stored in {store.dir / 'crosschecks'}")
    return EXIT_FAILED if bad else EXIT_OK


def _show_stored(store, wanted: dict[str, list[str]], tolerance: float, gap: float, args, io: Streams) -> int:
    """The latest stored crosscheck of each selected case, judged again (with this --tolerance and --gap)."""
    from ..analysis.crosscheck import compare, fleetbench_view, summarize
    from ..runs.crosschecks import load_crosschecks
    from ..views.crosscheck import crosscheck_document
    from ..views.output import write

    found, problems = load_crosschecks(store, latest_only=True)
    checks = [c for c in found if c.case_id in wanted.get(c.slot, ())]
    for line in problems:
        io.problem(line)
    if not checks:
        raise InputError(
            f"run {store.run_id} has no stored crosscheck of the selected cases "
            "(`fleetbench crosscheck` without --stored makes one)"
        )
    comparisons = compare(checks, tolerance, gap)
    summaries = summarize(comparisons, gap, tolerance)
    io.write(
        write(
            crosscheck_document(
                [fleetbench_view(c) for c in checks], comparisons, summaries, tolerance, gap, steps=args.steps
            ),
            args.format,
            io.width(),
        )
    )
    return EXIT_FAILED if problems else EXIT_OK
