#!/usr/bin/env python3
"""How often does `diff` flag a change between fresh processes that ran the same code, and how often a
real one? (issue 40) Over stored run folders of GPU leases (benchmarks/results/slowdowns-seed-*.runs.tar.xz),
every pair of separate cold CLI sweeps of the same sweep file is an A/A comparison:

  seed     the seed sweeps of a lease (device_check.sh `seed`), each against each
  h2h      the head-to-head sweeps (`slowdowns-h2h`: mm, mm_again, mm_pad), each against each
  across   the first REPEAT sweeps of each `slowdowns-across` step (its base), each against each

and these are the comparisons a flag is wanted in:

  slowed across  base i against slowed i of the same `slowdowns-across` step, for each padding; only mm's
                 rows count
  slowed h2h     head-to-head sweep i against sweep j (i != j), sweep j's mm_pad (~+2%: the same product,
                 more work, timed for real in that separate process) standing in for its mm_again; only
                 that row counts

Each pair is judged by `diff` at HEAD (orchestrator/analysis/diff.py, `compare_sides`) at the threshold
given, twice: on the time alone (`--anchor none`), and as `diff` judges by default, against the anchor
timed beside each case (torch-bf16 in the seed sweeps; the user kernels of the others run in a process
of their own, beside user kernels only: mm in the head-to-head sweeps, `anchor` in the across sweeps since
session 23, none in those before). A false
flag is any A/A cell SLOWER or FASTER. `--anchor-sd` judges against the anchor once per between-process
spread listed instead of diff's own (ANCHOR_PROCESS_SD): how that constant was chosen.

    python -m benchmarks.detection.false_flags benchmarks/results/slowdowns-seed-*.runs.tar.xz [--threshold 0.015]
        [--variant fresh-inputs-false]   (a timing variant's sweeps: see_slowdowns --timing)
        [--anchor-sd 0,0.002,0.003,0.004]
        [--seed-anchor torch-fp8]        (the seed sweeps' fp8 cases against torch-fp8 instead)

Prints Markdown: per lease and judgment the cells and flags of each kind of pair, then every false flag
with its ratio, what it was judged on, and its interval; against the anchor, where the anchor itself moved
the way the case did (the GPU state moved both, and a time's flag stands: docs/COMPARING.md), its own B/A
too, and how many such flags there are.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

from benchmarks.detection.see_slowdowns import ACROSS_ANCHOR, sweep_of
from orchestrator.analysis.diff import (
    ANCHOR_PROCESS_SD,
    DEFAULT_ANCHOR,
    NOTE_ANCHORED,
    Side,
    compare_sides,
    resolve_side,
)
from worker.contract.catalog import CATALOG, ORACLE_BACKENDS

REPEAT = 3  # sweeps per setting in see_slowdowns across
ACROSS_SET = REPEAT * 3  # device_check.sh's slowdowns-across: the base, +3% and +5% (pads-3, pads-5)
FLAGS = ("SLOWER", "FASTER")
KINDS = ("A/A seed", "A/A h2h", "A/A across", "slowed across", "slowed h2h")
# The one row of a slowed pair that is slowed (the across sweeps since session 23 time an anchor beside mm).
SLOWED_ROW = {"slowed across": "mm", "slowed h2h": "mm_again"}
H2H_ANCHOR = "mm"  # the head-to-head sweeps time mm, mm_again and mm_pad only
TIME_ALONE = "time alone"
ANCHOR_MOVED = "moved with it, the anchor's own B/A"


def judgments_of(spreads: list[float]) -> dict[str, float | None]:
    """Judgment label -> the anchor's between-process spread (None: the time alone, no anchor)."""
    out: dict[str, float | None] = {TIME_ALONE: None}
    for sd in spreads:
        out["with anchor" if sd == ANCHOR_PROCESS_SD else f"with anchor, spread {sd:g}"] = sd
    return out


def pairs_of(runs: list[str], variant: str = "") -> dict[str, list[tuple[str, str]]]:
    """The A/A and slowed pairs among a lease's run folders (named by see_slowdowns and device_check.sh);
    `variant`: what a timing variant's sweeps add to their names (see_slowdowns --timing: fresh-inputs-false)."""
    variant = f"-{variant}" if variant else ""
    seed = [r for r in runs if sweep_of(r) == "glm5-tp8" + variant]
    h2h = [r for r in runs if sweep_of(r) == "see-h2h" + variant]
    across = [r for r in runs if sweep_of(r) == "see-across" + variant]
    # one `slowdowns-across` step is a set: REPEAT base sweeps, then REPEAT per padding; a lease may hold several
    sets = [across[i : i + ACROSS_SET] for i in range(0, len(across), ACROSS_SET)]
    aa, slowed = [], []
    for one in sets:
        base = one[:REPEAT]
        aa += itertools.combinations(base, 2)
        slowed += [p for i in range(REPEAT, len(one), REPEAT) for p in zip(base, one[i : i + REPEAT])]
    return {
        "A/A seed": list(itertools.combinations(seed, 2)),
        "A/A h2h": list(itertools.combinations(h2h, 2)),
        "A/A across": aa,
        "slowed across": slowed,
        "slowed h2h": list(itertools.permutations(h2h, 2)),
    }


def pad_as_again(side: Side) -> Side:
    """The side with its mm_pad measurements standing as mm_again's (mm_again's own left out): the same
    timings, renamed, so that `diff` matches the +pad kernel of this process with mm_again of another."""

    def renamed(case):
        return case.model_copy(update={"backend": "mm_again"})

    slots = []
    for s in side.slots:
        records = {}
        for _, (attempt, rec) in s.records.items():
            if rec.case.backend == "mm_again":
                continue
            if rec.case.backend == "mm_pad":
                case = renamed(rec.case)
                rec = rec.model_copy(update={"case": case, "case_id": case.case_id})
            records[rec.case_id] = (attempt, rec)
        planned = [renamed(c) if c.backend == "mm_pad" else c for c in s.planned if c.backend != "mm_again"]
        slots.append(dataclasses.replace(s, records=records, planned=planned))
    return dataclasses.replace(side, slots=slots)


def judge(
    folder: Path,
    threshold: float,
    variant: str = "",
    spreads: tuple[float, ...] = (ANCHOR_PROCESS_SD,),
    seed_anchor: str = DEFAULT_ANCHOR,
) -> tuple[dict[str, dict[str, dict[str, int]]], list[str]]:
    """Per judgment and kind of pair: cells compared and flagged SLOWER / FASTER; and a line per false flag.
    `seed_anchor`: the built-in the seed sweeps' cases are judged against (only those of its family)."""
    runs = sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / "manifest.json").exists())
    judgments = judgments_of(list(spreads))
    counts: dict[str, dict[str, dict[str, int]]] = {j: {} for j in judgments}
    false = []
    for kind, pairs in pairs_of(runs, variant).items():
        for a, b in pairs:
            side_a, side_b = resolve_side(folder, a), resolve_side(folder, b)
            if kind == "slowed h2h":
                side_b = pad_as_again(side_b)
            anchored = H2H_ANCHOR if "h2h" in kind else ACROSS_ANCHOR if "across" in kind else seed_anchor
            for judgment, sd in judgments.items():
                c = counts[judgment].setdefault(kind, {"cells": 0, "SLOWER": 0, "FASTER": 0})
                anchor = None if judgment == TIME_ALONE else anchored
                for row in compare_sides(side_a, side_b, threshold, anchor, sd).cases:
                    if row.ratio is None or row.backend != SLOWED_ROW.get(kind, row.backend):
                        continue
                    c["cells"] += 1
                    if row.verdict not in FLAGS:
                        continue
                    c[row.verdict] += 1
                    if kind.startswith("A/A"):
                        false.append(
                            f"| {judgment} | {kind} | {row.backend} | {row.m}×{row.n} | {row.verdict} | "
                            f"{row.ratio:.4f} [{row.ci_low:.4f}, {row.ci_high:.4f}] | {row.judged_on} | "
                            + (
                                f"{row.work_ratio:.4f} [{row.work_low:.4f}, {row.work_high:.4f}], clock {row.clock_ratio:.4f}"
                                if row.work_ratio is not None
                                else "-"
                            )
                            + f" | {anchor_cell(row)} | {a} / {b} |"
                        )
    return counts, false


def anchor_cell(row) -> str:
    """A flagged row's ratio against the anchor, and the anchor's own B/A where diff found it moved the way
    the case did (the GPU state moved both: NOTE_ANCHORED's moved_with)."""
    if row.anchor_ratio is None:
        return "-"
    moved = next((f.facts.get("moved_with") for f in row.findings if f.code == NOTE_ANCHORED), None)
    return f"{row.anchor_ratio:.4f} [{row.anchor_low:.4f}, {row.anchor_high:.4f}]" + (
        f"; {ANCHOR_MOVED} {moved:.4f}" if moved else ""
    )


@contextlib.contextmanager
def lease_folder(path: Path) -> Iterator[Path]:
    """A stored lease's run folders: the folder given, or its archive extracted into a temporary one."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(path)
        if folder.is_file():
            with tarfile.open(folder) as tar:
                tar.extractall(tmp, filter="data")
            folder = Path(tmp)
        yield folder


def lease_name(path: Path) -> str:
    name = path.name
    for suffix in (".runs.tar.xz", ".runs.tar.gz", ".tar.xz", ".tar.gz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def report(
    paths: list[Path],
    threshold: float,
    variant: str = "",
    spreads: tuple[float, ...] = (ANCHOR_PROCESS_SD,),
    seed_anchor: str = DEFAULT_ANCHOR,
) -> str:
    judgments = judgments_of(list(spreads))
    head = "| lease | judgment | " + " | ".join(f"{k}: cells, SLOWER, FASTER" for k in KINDS) + " |"
    lines = [
        f"## Fresh processes: flags of `diff` at {threshold:.1%} (judged at HEAD), on the time alone and "
        f"against the anchor timed beside each case ({seed_anchor} in the seed sweeps; {H2H_ANCHOR} in the head-to-head sweeps, "
        f"the user kernel {ACROSS_ANCHOR} in the across sweeps since session 23)"
        + (f"; the sweeps of variant {variant}" if variant else "")
        + (f"; the anchor's between-process spread diff adds: {ANCHOR_PROCESS_SD:g}" if len(judgments) > 1 else ""),
        "",
        head,
        "|---|---|" + "---|" * len(KINDS),
    ]
    empty = {"cells": 0, "SLOWER": 0, "FASTER": 0}
    totals = {j: {k: dict(empty) for k in KINDS} for j in judgments}
    flagged = []
    for path in paths:
        with lease_folder(path) as folder:
            counts, false = judge(folder, threshold, variant, spreads, seed_anchor)
        for judgment in judgments:
            cells = []
            for k in KINDS:
                c = counts[judgment].get(k, empty)
                for f in c:
                    totals[judgment][k][f] += c[f]
                cells.append(f"{c['cells']}, {c['SLOWER']}, {c['FASTER']}")
            lines.append(f"| {lease_name(Path(path))} | {judgment} | " + " | ".join(cells) + " |")
        flagged += [f"| {lease_name(Path(path))} " + line for line in false]
    for judgment in judgments:
        lines.append(
            f"| **all** | {judgment} | "
            + " | ".join(f"{t['cells']}, {t['SLOWER']}, {t['FASTER']}" for t in totals[judgment].values())
            + " |"
        )
    lines += [
        "",
        "Every A/A cell flagged:",
        "",
        "| lease | judgment | pair | backend | M×N | verdict | B/A [95%] | judged on | work B/A [95%], clock A/B | "
        "against the anchor [95%] | runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *flagged,
    ]
    if not flagged:
        lines.append("| (none) ||||||||||||")
    moved = {j: [line for line in flagged if f"| {j} |" in line] for j in judgments}
    counts = {j: sum(ANCHOR_MOVED in line for line in mine) for j, mine in moved.items()}
    lines += [""] if any(counts.values()) else []
    lines += [
        f"- {j}: {n} of its {len(moved[j])} flags, the anchor itself moved the same way (its own B/A shown)"
        for j, n in counts.items()
        if n
    ]
    return "\n".join(lines) + "\n"


def spread_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if any(not 0 <= v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"each spread is a log SD in [0, 1): {text!r}")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("leases", nargs="+", type=Path, help="run folders' archives (.runs.tar.xz) or folders")
    parser.add_argument("--threshold", type=float, default=0.015, help="diff's threshold (default 0.015)")
    parser.add_argument(
        "--variant",
        default="",
        help="judge a timing variant's sweeps: the suffix see_slowdowns --timing gave their names "
        "(e.g. fresh-inputs-false; default: the sweeps as the steps name them)",
    )
    parser.add_argument(
        "--anchor-sd",
        type=spread_list,
        default=(ANCHOR_PROCESS_SD,),
        help="judge against the anchor once per between-process spread (log SD) in this comma-separated "
        f"list (default: diff's own, {ANCHOR_PROCESS_SD:g})",
    )
    parser.add_argument(
        "--seed-anchor",
        default=DEFAULT_ANCHOR,
        choices=sorted(b for b in CATALOG if b not in ORACLE_BACKENDS),
        metavar="BACKEND",
        help=f"the built-in the seed sweeps' cases are judged against (default diff's, {DEFAULT_ANCHOR}); "
        "diff judges only cases of its operand family against it (e.g. torch-fp8: the fp8 ones)",
    )
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    missing = [p for p in args.leases if not p.exists()]
    if missing:
        print(f"false_flags: no such file or folder: {missing[0]}", file=sys.stderr)
        return 2
    text = report(args.leases, args.threshold, args.variant, args.anchor_sd, args.seed_anchor)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
