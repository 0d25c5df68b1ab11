"""`fleetbench report`: write one self-contained HTML report with plots."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_OK
from .common import Streams, opt_runs_dir, opt_threshold, parse_threshold

HELP = "write one self-contained HTML report with plots"


def declare(p):
    p.add_argument("run", help="run id, run folder or `latest`")
    p.add_argument("--against", help="a second run (or RUN:host) to compare with")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default: report.html)")
    p.add_argument("--baseline", help="the backend speedups are drawn against (default: torch-bf16 when present)")
    p.add_argument(
        "--history",
        action="store_true",
        help="add trend plots: this run's cases over every stored run (the history index), steps marked",
    )
    opt_threshold(p)
    opt_runs_dir(p)


def run(args, io: Streams) -> int:
    from ..views.htmlreport import write_report

    if args.history:  # the trend plots read every run folder: say what among them is not one
        from ..runs.store import links_notes

        for note in links_notes(Path(args.runs_dir)):
            io.problem(f"note: {note}")
    path = write_report(
        Path(args.runs_dir),
        args.run,
        args.against,
        Path(args.output),
        parse_threshold(args.threshold),
        with_history=args.history,
        baseline=args.baseline,
    )
    io.problem(f"wrote {path}")
    return EXIT_OK
