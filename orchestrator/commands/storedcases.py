"""What `profile`, `crosscheck` and `diff --across-hosts --profile` share on the command line: naming cases
of a stored run, how a case is profiled (the options `profile` and `diff --profile` share), running a
worker command over them on their own hosts (execution/storedcases.py), and a line per problem. The
execution stack is imported only when something runs."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from ..errors import InputError
from .common import Streams, positive_int, run_inventory, seconds


def declare_selection(p, targets_help: str) -> None:
    """TARGET and the options that name cases of the run."""
    p.add_argument("targets", nargs="+", metavar="TARGET", help=targets_help)
    p.add_argument(
        "--case", action="append", default=[], metavar="ID", help="a case id or a unique prefix (repeatable)"
    )
    p.add_argument("--backend", action="append", default=[], metavar="NAME", help="backend name or glob (repeatable)")
    p.add_argument("--m", type=positive_int, help="cases of this M (an MoE layer's: its tokens)")
    p.add_argument("--n", type=positive_int, help="cases of this N")
    p.add_argument("--k", type=positive_int, help="cases of this K")
    p.add_argument("--label", help="cases whose label contains this")


def declare_profiling(p) -> None:
    """The options of how a case is profiled (shared by `profile` and `diff --profile`)."""
    p.add_argument("--calls", type=positive_int, default=3, help="calls of the case profiled (default: 3)")
    p.add_argument(
        "--kernel",
        metavar="REGEX",
        default="",
        help="only kernels whose function name matches (ncu --kernel-name regex:REGEX; default: every kernel)",
    )
    p.add_argument(
        "--max-kernels",
        type=positive_int,
        default=64,
        help="stop after this many kernel launches (ncu --launch-count; default: 64)",
    )
    p.add_argument(
        "--ncu",
        metavar="PATH",
        default="",
        help="ncu on the hosts (default: $FLEETBENCH_NCU of the host's env, PATH, then where Nsight "
        "Compute installs itself)",
    )
    p.add_argument("--timeout", type=seconds, default=900.0, help="seconds one case may take under ncu (default: 900)")
    p.add_argument("--lock-timeout", type=seconds, help="seconds to wait for a busy GPU (default: the run's)")


def profile_options(args):
    """The ProfileOptions the profiling options ask for (declare_profiling)."""
    from worker.contract.profile import ProfileOptions

    return ProfileOptions(
        calls=args.calls,
        kernel_regex=args.kernel,
        max_kernels=args.max_kernels,
        ncu=args.ncu,
        case_timeout_s=args.timeout,
    )


def one_run(args, command: str, forms: str):
    """(the run every TARGET names, the slots they name, each once). InputError when they name several runs."""
    from ..analysis.diff import resolve_side

    sides = [resolve_side(Path(args.runs_dir), t) for t in args.targets]
    store = sides[0].store
    if any(s.store.dir.resolve() != store.dir.resolve() for s in sides):
        raise InputError(f"{command}: every TARGET must name the same run ({forms})")
    return store, list({s.slot: s for side in sides for s in side.slots}.values())


def _selected(rec, args) -> bool:
    case = rec.case
    return (
        (not args.case or any(case.case_id.startswith(c) for c in args.case))
        and (not args.backend or any(fnmatch.fnmatchcase(case.backend, b) for b in args.backend))
        and all(v is None or getattr(case, f) == v for f, v in (("m", args.m), ("n", args.n), ("k", args.k)))
        and (args.label is None or args.label in case.label)
    )


def select_cases(slots, args, *, verb: str, done: str, cost: str, or_all: bool = False) -> dict[str, list[str]]:
    """slot -> the ids of its ok cases that the selection names (with `or_all`, `--all` names each one).
    InputError, in the command's words (to `verb` a case; it is `done`; what each case `cost`s), when the
    options name no case or the run has none that is ok."""
    named = (
        (or_all and args.all)
        or args.case
        or args.backend
        or args.label is not None
        or any(v is not None for v in (args.m, args.n, args.k))
    )
    if not named:
        raise InputError(
            f"say which cases to {verb}: --case ID, --backend NAME, --m / --n / --k, --label TEXT"
            + (", or --all" if or_all else "")
            + f" ({cost})"
        )
    wanted = {}
    for s in slots:
        ids = [cid for cid, (_, rec) in s.records.items() if rec.status == "ok" and rec.timing and _selected(rec, args)]
        if ids:
            wanted[s.slot] = ids
    if not wanted:
        raise InputError(
            f"no case that is ok on {', '.join(s.slot for s in slots)} matches the selection "
            f"(only cases the run measured can be {done})"
        )
    return wanted


def plan_on_hosts(store, args, wanted: dict[str, list[str]], command):
    """The plan of `command` (execution/storedcases.py WorkerCommand) for `wanted` on the run's hosts, as
    the inventory (-i, else the run's own) names them."""
    from ..config.inventory import load_inventory
    from ..execution.storedcases import plan_cases

    inventory = load_inventory(Path(args.inventory or run_inventory(store)))
    return plan_cases(store, inventory, wanted, command.name)


def run_on_hosts(plan, command, options, args, io: Streams):
    """Run the plan; what each host does now is a line on stderr. One SlotResult per slot."""
    from ..execution.storedcases import run_cases

    return run_cases(
        plan,
        command,
        options,
        parallel=args.parallel,
        accept_new=args.accept_new,
        say=lambda slot, text: io.problem(f"{slot}: {text}"),
        lock_timeout_s=args.lock_timeout,
    )


def report_problems(results, io: Streams) -> bool:
    """One line per slot that failed, per case whose record is not ok and per case stored with a problem
    of its own (a profile's report not fetched); True when a slot failed or a case is not ok."""
    from ..execution.storedcases import case_text

    bad = False
    for r in results:
        if r.error:
            bad = True
            io.problem(f"{r.slot}: {r.error}")
        for s in r.stored:
            if s.record.status != "ok":
                bad = True
                io.problem(f"{r.slot}: {case_text(s.record.case)}: {s.record.status}: {s.record.reason}")
            elif getattr(s, "problem", ""):  # a crosscheck has no problem after its record
                io.problem(f"{r.slot}: {case_text(s.record.case)}: {s.problem}")
    return bad
