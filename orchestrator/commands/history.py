"""`fleetbench history`: a case's results over stored runs, and the steps in them."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_OK, InputError
from .common import Streams, opt_format, opt_runs_dir, parse_threshold, positive_int

HELP = "a case's results over stored runs, and the steps in them"
EPILOG = (
    "Reads the index RUNS_DIR/.index.sqlite, brought up to date with the run folders first (they are "
    "the source of truth; a missing or damaged index is rebuilt). Exit 1 with --steps when a step at "
    "a series' latest run makes a case slower beyond the threshold (a nightly gate)."
)


def declare(p):
    opt_runs_dir(p)
    p.add_argument("--backend", help="one backend")
    p.add_argument(
        "--m", type=positive_int, help="cases of this M: rows of A and of the output (for an MoE layer: its tokens)"
    )
    p.add_argument(
        "--n", type=positive_int, help="cases of this N: rows of B, columns of the output (MoE: each expert's)"
    )
    p.add_argument(
        "--k", type=positive_int, help="cases of this K: the reduced dimension, A is MxK (MoE: each expert's)"
    )
    p.add_argument("--label", help="cases whose label contains this text")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--host", help="one host slot (default: every host, each its own series)")
    where.add_argument("--fleet", action="store_true", help="one series per case: the median over hosts per run")
    p.add_argument("--sweep", help="runs of this sweep (its name)")
    p.add_argument(
        "--since",
        metavar="DATE",
        help="runs started at or after this date or date-time (2026-11-30, 2026-11-30T12:00; UTC)",
    )
    p.add_argument(
        "--until", metavar="DATE", help="runs started at or before this date (all of that day) or date-time (UTC)"
    )
    p.add_argument("--case", dest="case_id", help="one case id")
    p.add_argument(
        "--version",
        dest="versions",
        action="append",
        default=[],
        metavar="LIB=VERSION",
        help="runs whose host had this version (torch, flashinfer, sgl_kernel, driver, cuda); repeatable",
    )
    p.add_argument(
        "--steps",
        action="store_true",
        help="find steps in each series; exit 1 when one at the latest run is slower beyond the threshold",
    )
    p.add_argument("--threshold", default="5%", help="smallest step that counts (default 5%%)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the index from the run folders first")
    opt_format(p)


_VERSIONED = ("torch", "flashinfer", "sgl_kernel", "driver", "cuda")


def run(args, io: Streams) -> int:
    from ..analysis.history import Selection, history, parse_when
    from ..runs.index import RunIndex
    from ..views.output import write
    from ..views.tables import history_document, history_notes

    versions = {}
    for item in args.versions:
        lib, sep, version = item.partition("=")
        lib = lib.strip().replace("-", "_")
        if not sep or lib not in _VERSIONED or not version:
            raise InputError(f"--version {item!r}: expected LIB=VERSION with LIB one of {', '.join(_VERSIONED)}")
        versions[lib] = version.strip()
    sel = Selection(
        backend=args.backend,
        m=args.m,
        n=args.n,
        k=args.k,
        label=args.label,
        host=args.host,
        fleet=args.fleet,
        sweep=args.sweep,
        case_id=args.case_id,
        since=None if args.since is None else parse_when("--since", args.since),
        until=None if args.until is None else parse_when("--until", args.until, end_of_day=True),
        versions=versions,
    )
    runs_dir = Path(args.runs_dir)
    if not runs_dir.is_dir():
        raise InputError(f"no runs folder {runs_dir} (give --runs-dir)")
    threshold = parse_threshold(args.threshold)
    index = RunIndex.open(runs_dir, rebuild=args.rebuild)
    try:
        hist = history(index, sel, threshold, args.steps)
    finally:
        index.close()
    io.write(write(history_document(hist), args.format, io.width()))
    for note in history_notes(hist):
        io.problem(f"note: {note}")
    for s in hist.new_regressions:
        last = s.steps[-1]
        io.problem(
            f"new step: {s.backend} {s.m}x{s.n}x{s.k} ({s.label}) on {s.host} at run {last['run_id']}: "
            f"×{last['ratio']:.3f} [{last['low']:.3f}, {last['high']:.3f}]"
        )
    return EXIT_FAILED if hist.new_regressions else EXIT_OK
