"""`fleetbench versus`: two backends of one run head-to-head, shape by shape, from the samples they were
timed in together."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_OK, InputError
from .common import Streams, opt_format, opt_runs_dir

HELP = "two backends of one run head-to-head: per shape B/A from the samples timed together, and the winner"
EPILOG = textwrap.fill(
    "Per shape and host: A µs, B µs (each case's own median), B/A (> 1: B slower) with its 95% interval "
    "from the pairs of samples the two were timed in together (interleaved, ABBA), the medians' B/A (with a "
    "note where it parts from the paired one as the two sides' own clocks part), pairs×rounds, and the "
    "winner: `B faster` / `A faster` when the whole interval is beyond the tie margin, `tie` when it lies "
    "within it, `unsure` otherwise, `not paired` when the two were timed apart (no ratio is given then). "
    "Over several hosts, a fleet table per shape; the last line sums it up. docs/COMPARING.md says how. "
    "Exit codes: 0 compared, 1 a case of A or B on these hosts is not done (failed, crashed, missing, "
    "incomplete), 2 bad input (an unknown run, backend or host; two backends that share no shape).",
    width=100,
)


def declare(p):
    p.add_argument("run", help="run id (or a unique prefix), run folder or `latest`; RUN:host keeps one host")
    p.add_argument("a", metavar="A", help="the baseline backend (B/A > 1: B is slower than this one)")
    p.add_argument("b", metavar="B", help="the backend set against A")
    p.add_argument(
        "--host",
        metavar="SLOT",
        help="only this host slot (a host name takes all its GPUs; default: every host of the run)",
    )
    p.add_argument(
        "--tie",
        default="0.01",
        metavar="FRACTION",
        help="tie margin: a B/A whose whole 95%% interval lies within 1/(1+FRACTION)..1+FRACTION is a "
        "tie, one wholly beyond it a win; also as a percentage, 1%% (default: 0.01)",
    )
    opt_format(p)
    opt_runs_dir(p)


def parse_tie(text: str) -> float:
    """'0.01' or '1%' -> 0.01; InputError naming --tie and the forms otherwise."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"--tie {text!r}: give a fraction like 0.01 or a percentage like 1%") from None
    if not 0 < value < 0.5:
        raise InputError(f"--tie {text!r}: must be more than 0 and less than 0.5 (50%)")
    return value


def run(args, io: Streams) -> int:
    from ..analysis.diff import resolve_side
    from ..analysis.headtohead import head_to_head, select_slots
    from ..views.output import write
    from ..views.versus import fleet_line, versus_document

    tie = parse_tie(args.tie)
    side = resolve_side(Path(args.runs_dir), args.run)
    slots = select_slots(side.slots, args.host)
    h2h = head_to_head(side.store.run_id, slots, args.a, args.b, tie)
    io.write(write(versus_document(h2h), args.format, io.width()))
    if args.format in ("json", "csv"):  # the table and Markdown end with it; other formats get it here
        io.problem(f"fleet: {fleet_line(h2h)}")
    for c in h2h.not_done():
        io.problem(f"{c.slot}: {c.label} {c.m}x{c.n}x{c.k}: A {c.a_status}, B {c.b_status}")
    return EXIT_FAILED if h2h.not_done() else EXIT_OK
