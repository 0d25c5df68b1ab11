"""`fleetbench crosscheck`: cases of a stored run timed on their own hosts beside the timers users hold
fleetbench against (FlashInfer's bench_gpu_time, Triton's do_bench_cudagraph), each first in its default
settings, then matched to fleetbench's method step by step; every gap printed with its causes."""
from __future__ import annotations

import fnmatch
from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, InputError
from .common import (Streams, opt_accept_new, opt_format, opt_inventory, opt_parallel, opt_runs_dir,
                     parse_threshold, run_inventory, seconds)

HELP = "time cases of a stored run beside FlashInfer's and Triton's timers, and say why they differ"
EPILOG = ("TARGET: RUN (every host of the run), RUN:host or RUN:host:gpu. Each case is prepared as the sweep prepared "
          "it and timed in one process, on its own host and GPU: by fleetbench (and its graph's kernels under "
          "CUPTI), then by each peer in its default settings and with fleetbench's L2 state, launch, clock state and "
          "statistic matched one after another. Each ratio is the peer over fleetbench; each step's share names one "
          "cause (docs/CROSSCHECK.md). A peer that is not installed is a reason, not a failure. Results are stored in "
          "the run's folder (crosschecks/). Exit 1 when a case or host could not be crosschecked, 2 on bad input, "
          "130 interrupted.")


def declare(p):
    p.add_argument("targets", nargs="+", metavar="TARGET", help="RUN, RUN:host or RUN:host:gpu")
    p.add_argument("--case", action="append", default=[], metavar="ID", help="a case id or a unique prefix (repeatable)")
    p.add_argument("--backend", action="append", default=[], metavar="NAME", help="backend name or glob (repeatable)")
    p.add_argument("--m", type=int)
    p.add_argument("--n", type=int)
    p.add_argument("--k", type=int)
    p.add_argument("--label", help="cases whose label contains this")
    p.add_argument("--all", action="store_true", help="every case the run measured (ok)")
    p.add_argument("--peer", action="append", choices=["flashinfer", "triton"], default=[],
                   help="only this peer (repeatable; default: both)")
    p.add_argument("--no-cupti", action="store_true", help="leave out fleetbench's kernel time under CUPTI")
    p.add_argument("--tolerance", default="2%", help="a matched peer this close to fleetbench agrees (default 2%%)")
    p.add_argument("--gap", default="3%", help="a raw gap beyond this must be attributed (default 3%%)")
    p.add_argument("--steps", action="store_true", help="show every step of each peer's ladder")
    p.add_argument("--stored", action="store_true",
                   help="show the latest stored crosscheck of each selected case; run nothing")
    p.add_argument("--lock-timeout", type=seconds, help="seconds to wait for a busy GPU (default: the run's)")
    opt_inventory(p, "hosts file (default: the one the run was started with; its hosts must be the run's)")
    opt_runs_dir(p)
    opt_parallel(p)
    opt_accept_new(p)
    opt_format(p)


def _selected(rec, args) -> bool:
    case = rec.case
    return ((not args.case or any(case.case_id.startswith(c) for c in args.case))
            and (not args.backend or any(fnmatch.fnmatchcase(case.backend, b) for b in args.backend))
            and all(v is None or getattr(case, f) == v for f, v in (("m", args.m), ("n", args.n), ("k", args.k)))
            and (args.label is None or args.label in case.label))


def select_cases(slots, args) -> dict[str, list[str]]:
    """slot -> the ids of its ok cases that the selection names. InputError when it names none."""
    if not (args.all or args.case or args.backend or args.label is not None
            or any(v is not None for v in (args.m, args.n, args.k))):
        raise InputError("say which cases to crosscheck: --case ID, --backend NAME, --m / --n / --k, --label TEXT, "
                         "or --all (each case costs a few seconds of GPU time per peer)")
    wanted = {}
    for s in slots:
        ids = [cid for cid, (_, rec) in s.records.items() if rec.status == "ok" and rec.timing and _selected(rec, args)]
        if ids:
            wanted[s.slot] = ids
    if not wanted:
        raise InputError(f"no case that is ok on {', '.join(s.slot for s in slots)} matches the selection "
                         "(only cases the run measured can be crosschecked)")
    return wanted


def run(args, io: Streams) -> int:
    from worker.crosscheck import PEERS, CrosscheckOptions

    from ..analysis.crosscheck import compare, fleetbench_view, summarize
    from ..analysis.diff import resolve_side
    from ..views.crosscheck import case_text, crosscheck_document
    from ..views.output import write

    tolerance, gap = parse_threshold(args.tolerance), parse_threshold(args.gap)
    sides = [resolve_side(Path(args.runs_dir), t) for t in args.targets]
    store = sides[0].store
    if any(s.store.dir.resolve() != store.dir.resolve() for s in sides):
        raise InputError("crosscheck: every TARGET must name the same run (RUN, RUN:host, RUN:host:gpu)")
    slots = list({s.slot: s for side in sides for s in side.slots}.values())
    wanted = select_cases(slots, args)
    if args.stored:
        return _show_stored(store, wanted, tolerance, gap, args, io)
    from ..config.inventory import load_inventory
    from ..execution.crosscheck import plan_crosschecks, run_crosschecks

    inventory = load_inventory(Path(args.inventory or run_inventory(store)))
    plan = plan_crosschecks(store, inventory, wanted)
    options = CrosscheckOptions(peers=list(dict.fromkeys(args.peer)) or list(PEERS), cupti=not args.no_cupti)
    try:
        results = run_crosschecks(plan, options, parallel=args.parallel, accept_new=args.accept_new,
                                  say=lambda slot, text: io.problem(f"{slot}: {text}"), lock_timeout_s=args.lock_timeout)
    except KeyboardInterrupt:
        io.problem(f"interrupted: the hosts were stopped; what came back is stored in {store.dir / 'crosschecks'}")
        return EXIT_INTERRUPTED
    checks = [c for r in results for c in r.checks]
    comparisons = compare(checks, tolerance, gap)
    summaries = summarize(comparisons, gap)
    io.write(write(crosscheck_document([fleetbench_view(c) for c in checks], comparisons, summaries, tolerance, gap,
                                       steps=args.steps), args.format, io.width()))
    bad = False
    for r in results:
        if r.error:
            bad = True
            io.problem(f"{r.slot}: {r.error}")
        for c in r.checks:
            if c.record.status != "ok":
                bad = True
                io.problem(f"{r.slot}: {case_text(c.record.case.model_dump())}: {c.record.status}: {c.record.reason}")
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
        raise InputError(f"run {store.run_id} has no stored crosscheck of the selected cases "
                         "(`fleetbench crosscheck` without --stored makes one)")
    comparisons = compare(checks, tolerance, gap)
    io.write(write(crosscheck_document([fleetbench_view(c) for c in checks], comparisons, summarize(comparisons, gap),
                                       tolerance, gap, steps=args.steps), args.format, io.width()))
    return EXIT_FAILED if problems else EXIT_OK
