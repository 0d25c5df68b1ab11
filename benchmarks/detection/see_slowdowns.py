#!/usr/bin/env python3
"""Can fleetbench see a real slowdown of 2-5%? (issue 40) Real extra GPU work, never multiplied records:
the user kernel benchmarks/kernels/mm_pad.py is mm.py's bf16 GEMM on operands zero-padded along K
(FLEETBENCH_MM_PAD columns), the same product with more work.

  calibrate  per shape, the columns of K that make mm_pad TARGET slower than mm: a ladder of paddings, each
          timed against mm by an independent replay (two CUDA graphs of ~2 ms, cold L2, replayed in
          alternating pairs ABBA after 100 ms of alternating settle; the median of 20 pair ratios; two passes,
          up and down the ladder; the padding chosen is also read settled apart, each graph replayed 300 ms
          on its own then timed, AB and BA: the smallest padding every reading put at least TARGET slower); writes
          one JSON per target ({"MxNxK": columns}) that FLEETBENCH_MM_PAD names, and a Markdown table.

  h2h     head-to-head in one sweep: mm, mm_again (the same file: A/A) and mm_pad (~+2%: kernels/mm_pad.py) on
          the GLM-5 TP8 shapes, REPEAT sweeps, each a cold CLI process; per shape and sweep the paired
          B/A of mm_again and of mm_pad against mm (worker/contract/pairing.py), flagged when the whole interval
          is beyond ±TIE (the `versus` rule).
  across  diff of separate sweeps: REPEAT sweeps of mm beside an anchor (a second user kernel of mm.py's
          file: user kernels run in a process of their own, so only another user kernel is timed beside
          mm), then REPEAT with mm's file swapped for mm_pad at each PAD; `diff` (orchestrator/analysis/
          diff.py, the default threshold and others) of base i against base j (A/A) and of base i against
          slowed i, counting mm's cells: against the anchor (`diff --anchor anchor`), and on the time alone
          (--anchor none).

    python -m benchmarks.detection.see_slowdowns calibrate --targets 0.02,0.03,0.05 --pad-dir DIR [--out FILE.md]
    python -m benchmarks.detection.see_slowdowns h2h -i HOSTS --runs-dir DIR [--repeat 3] [--pad DIR/pads-2.json]
    python -m benchmarks.detection.see_slowdowns across -i HOSTS --runs-dir DIR [--repeat 3] [--pads DIR/pads-3.json,...]
        [--timing fresh_inputs=false]   (h2h too: a variant's sweeps are named for it and told apart)
    python -m benchmarks.detection.see_slowdowns h2h|across --stored --runs-dir DIR [--set N]
        (judge the runs an earlier h2h / across left in DIR, no GPU; --set N: the Nth set of them)

Run from the repo root (device_check.sh's `slowdowns-h2h` / `slowdowns-across` steps do).
Prints Markdown; --out also writes it.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import yaml

from benchmarks.harness import KERNELS, publish
from benchmarks.harness.coldrun import cold_run

TIMING = {"mode": "graph", "l2": "cold", "target_rel_ci": 0.01, "budget_s": 0.3}  # the seed sweep's


def sweep_file(folder: Path, name: str, backends: list, timing: Optional[dict] = None) -> Path:
    """The sweep `name` (with `timing` over the seed's timing) as a file in `folder`."""
    path = folder / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "backends": backends,
                "shapes": [{"preset": "glm5-tp8"}],
                "timing": {**TIMING, **(timing or {})},
            },
            sort_keys=False,
        )
    )
    return path


def variant_name(name: str, timing: dict) -> str:
    """The sweep name of a variant (its run folders are told apart by it): see-across with fresh_inputs
    false is see-across-fresh-inputs-false."""
    parts = [name] + [f"{k}-{str(v).lower()}".replace("_", "-") for k, v in sorted(timing.items())]
    return "-".join(parts)


def timing_setting(text: str) -> tuple[str, object]:
    """KEY=VALUE of --timing, VALUE read as YAML (false, 0.02, 3)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. fresh_inputs=false")
    return key.strip(), yaml.safe_load(value)


def run(sweep: Path, inventory: Path, runs: Path, env: dict) -> tuple[str, float]:
    """One cold CLI sweep: (its run folder, wall seconds)."""
    done = cold_run(sweep, inventory, runs, env=env)
    if done.run_dir is None:
        raise SystemExit(f"the sweep did not start (exit {done.returncode}): {done.stderr[-2000:]}")
    print(
        f"{sweep.stem}: exit {done.returncode}, {done.wall_s:.1f} s, {done.run_dir.name}", file=sys.stderr, flush=True
    )
    return str(done.run_dir), done.wall_s


def records_of(run_dir: str) -> tuple[dict[tuple, object], object]:
    """(backend, m, n, k) -> the case's record, over the run's one host; and the host's pair prior (the
    median between-round variance of its paired ratios, as `versus` and rounds until sure use it)."""
    from orchestrator.analysis.headtohead import pair_prior
    from orchestrator.runs.slots import load_slots
    from orchestrator.runs.store import resolve_run

    out, prior = {}, None
    for slot in load_slots(resolve_run(Path(run_dir).parent, run_dir)):
        prior = pair_prior(slot)
        for _, rec in slot.records.values():
            out[(rec.case.backend, rec.case.m, rec.case.n, rec.case.k)] = rec
    return out, prior


def sweep_of(run_id: str) -> str:
    """The sweep name in a run id (20261202-131500-glm5-tp8-3fa2: glm5-tp8)."""
    return run_id.split("-", 2)[-1].rsplit("-", 1)[0]


def stored_runs(runs_dir: Path, name: str) -> list[str]:
    """The run folders of sweep `name` (exactly) in runs_dir, oldest first (run ids begin with their time)."""
    return [str(p) for p in sorted(runs_dir.iterdir()) if p.is_dir() and sweep_of(p.name) == name]


def stored_set(found: list[str], size: int, chosen: Optional[int], name: str, runs_dir: Path, what: str) -> list[str]:
    """The stored runs of set `chosen` (1-based; None: every run, for h2h), where the runs come in whole sets
    of `size` in the order they ran; else SystemExit naming what is there."""
    steps = len(found) // size
    if chosen is None and found:
        return found
    if not found or len(found) % size or not 1 <= chosen <= steps:
        raise SystemExit(
            f"--stored: {len(found)} {name} runs in {runs_dir}, expected {size} per {what}"
            + (f", and --set 1..{steps}" if found and not len(found) % size else "")
        )
    return found[(chosen - 1) * size : chosen * size]


def flag(interval, tie: float) -> str:
    if interval is None:
        return "none"
    if interval.low > 1 + tie:
        return "slower"
    if interval.high < 1 / (1 + tie):
        return "faster"
    return "-"


def h2h(args) -> str:
    from worker.contract.pairing import pair_interval, paired_rounds

    folder = Path(tempfile.mkdtemp(prefix="see-h2h-"))
    name = variant_name("see-h2h", args.timing)
    sweep = sweep_file(
        folder,
        name,
        [
            {"name": "mm", "file": str(KERNELS / "mm.py")},
            {"name": "mm_again", "file": str(KERNELS / "mm.py")},
            {"name": "mm_pad", "file": str(KERNELS / "mm_pad.py")},
        ],
        args.timing,
    )
    rows, walls = [], []
    stored = []
    if args.stored:
        stored = stored_set(stored_runs(args.runs_dir, name), args.repeat, args.set, name, args.runs_dir, "set")
    for i in range(len(stored) if args.stored else args.repeat):
        if args.stored:
            run_dir = stored[i]
        else:
            pad = str(Path(args.pad).resolve()) if args.pad.endswith(".json") else args.pad
            run_dir, wall = run(sweep, args.inventory, args.runs_dir, {"FLEETBENCH_MM_PAD": pad})
            walls.append(wall)
        recs, prior = records_of(run_dir)
        for (backend, m, n, k), base in sorted(recs.items()):
            if backend != "mm" or base.status != "ok":
                continue
            row = {
                "sweep": i + 1,
                "m": m,
                "n": n,
                "k": k,
                "mm_us": base.timing.median_us,
                "rounds": len(base.timing.rounds),
                "stop": base.timing.rounds_stop,
            }
            for other in ("mm_again", "mm_pad"):
                rec = recs.get((other, m, n, k))
                ok = rec is not None and rec.status == "ok"
                iv = pair_interval(paired_rounds(base.timing, rec.timing), prior) if ok else None
                row[other] = iv
                row[other + "_flag"] = flag(iv, args.tie) if ok else f"not ok: {rec.status if rec else 'missing'}"
                row[other + "_medians"] = rec.timing.median_us / base.timing.median_us if ok else None
            rows.append(row)
    lines = [
        "## Head-to-head: mm against mm_again (A/A) and mm_pad "
        + ("(K padded as each stored sweep ran it), " if args.stored else f"(K padded: {args.pad}), ")
        + f"{len(stored) if args.stored else args.repeat} sweeps, tie ±{args.tie:.0%}",
        "",
        "| sweep | M×N×K | mm µs | rounds (stop) | A/A B/A [95%] | flag | +pad B/A [95%] | ± | flag | "
        "+pad ratio of medians |",
        "|---|---|---:|---|---|---|---|---:|---|---:|",
    ]
    for r in rows:
        aa, pad, medians = r["mm_again"], r["mm_pad"], r["mm_pad_medians"]
        half = "" if pad is None else f"{pad.half_width:.2%}"
        lines.append(
            f"| {r['sweep']} | {r['m']}×{r['n']}×{r['k']} | {r['mm_us']:.2f} | {r['rounds']} ({r['stop']}) | "
            f"{fmt(aa)} | {r['mm_again_flag']} | {fmt(pad)} | {half} | {r['mm_pad_flag']} | "
            f"{'' if medians is None else f'{medians:.4f}'} |"
        )
    n = len(rows)
    halves = [r["mm_pad"].half_width for r in rows if r["mm_pad"] is not None]
    lines += [
        "",
        f"- +pad flagged slower: **{sum(r['mm_pad_flag'] == 'slower' for r in rows)} of {n}** shape × sweep "
        f"pairs; A/A flagged: **{sum(r['mm_again_flag'] in ('slower', 'faster') for r in rows)} of {n}**",
        f"- interval half-width of +pad: median {statistics.median(halves):.2%}, max {max(halves):.2%}; "
        f"≤ 0.5% in {sum(h <= 0.005 for h in halves)} of {len(halves)}"
        if halves
        else "- no intervals",
        by_copy_size(rows),
        f"- sweep wall: {', '.join(f'{w:.1f}' for w in walls)} s (cold CLI processes)"
        if walls
        else "- judged from stored runs (--stored)",
    ]
    return "\n".join(lines)


COPY_BANDS = (1.02, 1.035)  # a "+2%" copy's size: short of 2%, near it, or well above (a ladder's jump)


def by_copy_size(rows: list[dict]) -> str:
    """The +pad flags by the copy's size at each shape (the median of its paired B/A over the sweeps): where a
    padding ladder jumps, a "+2%" copy is 4-15% at some shapes, and a count over all shapes says little of 2%."""
    size: dict[tuple, list[float]] = {}
    for r in rows:
        if r["mm_pad"] is not None:
            size.setdefault((r["m"], r["n"]), []).append(r["mm_pad"].ratio)
    low, high = COPY_BANDS
    names = (f"< {low:.3f}", f"{low:.3f}–{high:.3f}", f"> {high:.3f}")
    band_of = {}
    for shape, ratios in size.items():
        mid = statistics.median(ratios)
        band_of[shape] = names[0 if mid < low else 1 if mid <= high else 2]
    parts = []
    for name in names:
        flags = [r["mm_pad_flag"] == "slower" for r in rows if band_of.get((r["m"], r["n"])) == name]
        shapes = sum(band == name for band in band_of.values())
        parts.append(f"{name}: {sum(flags)} of {len(flags)} ({shapes} shapes)")
    return "- +pad flagged by the copy's size per shape (median paired B/A over the sweeps): " + "; ".join(parts)


# The across sweeps' anchor: a user kernel of mm.py's file beside mm (diff --anchor anchor).
ACROSS_ANCHOR = "anchor"


def fmt(iv) -> str:
    return "—" if iv is None else f"{iv.ratio:.4f} [{iv.low:.4f}, {iv.high:.4f}]"


def across(args) -> str:
    from orchestrator.analysis.diff import compare_sides, resolve_side
    from orchestrator.commands.common import DEFAULT_THRESHOLD as DEFAULT_WORDS

    DEFAULT_THRESHOLD = float(DEFAULT_WORDS.rstrip("%")) / 100

    folder = Path(tempfile.mkdtemp(prefix="see-across-"))
    name = variant_name("see-across", args.timing)
    anchor = {"name": ACROSS_ANCHOR, "file": str(KERNELS / "mm.py")}
    base = sweep_file(folder, name, [{"name": "mm", "file": str(KERNELS / "mm.py")}, anchor], args.timing)
    (folder / "slowed").mkdir()
    slowed = sweep_file(
        folder / "slowed", name, [{"name": "mm", "file": str(KERNELS / "mm_pad.py")}, anchor], args.timing
    )
    if args.stored:  # the run folders of an earlier `across`, in the order it ran them: base, then each pad
        size = args.repeat * (1 + len(args.pads))
        found = stored_set(
            stored_runs(args.runs_dir, name),
            size,
            args.set or 1,
            name,
            args.runs_dir,
            f"across step ({args.repeat} x {1 + len(args.pads)}: --repeat x settings)",
        )
        runs = {0: found[: args.repeat]}
        for i, pad in enumerate(args.pads, 1):
            runs[pad] = found[i * args.repeat : (i + 1) * args.repeat]
    else:
        runs = {0: [run(base, args.inventory, args.runs_dir, {})[0] for _ in range(args.repeat)]}
        for pad in args.pads:
            runs[pad] = [
                run(
                    slowed,
                    args.inventory,
                    args.runs_dir,
                    {"FLEETBENCH_MM_PAD": str(Path(pad).resolve()) if pad.endswith(".json") else pad},
                )[0]
                for _ in range(args.repeat)
            ]
    pairs = {"A/A": list(itertools.combinations(runs[0], 2))}
    for pad in args.pads:
        pairs[f"+{Path(pad).stem} columns" if pad.endswith(".json") else f"+{pad} columns"] = list(
            zip(runs[0], runs[pad])
        )
    lines = [
        f"## Across runs: diff of separate sweeps of mm beside {ACROSS_ANCHOR} ({args.repeat} per setting), "
        f"mm's cells flagged (against {ACROSS_ANCHOR}: `diff --anchor {ACROSS_ANCHOR}`; and on the time alone)"
        + "".join(f"; timing.{k}: {v}" for k, v in sorted(args.timing.items())),
        "",
        "| comparison | cells | true effect (ratio of medians) | "
        + " | ".join(f"SLOWER at {t:.1%}" for t in args.thresholds)
        + f" | SLOWER at {DEFAULT_THRESHOLD:.1%}, time alone (--anchor none) | FASTER (any) |",
        "|---|---:|---:|" + "---:|" * (len(args.thresholds) + 2),
    ]
    # (comparison, m, n) -> [(verdict at the default, B/A, work B/A, against the anchor, time-alone verdict)]
    per_shape: dict[tuple, list] = {}
    effects: dict[str, list] = {}  # comparison -> per pair, mm's effect over all its cases at the default
    for name, compared in pairs.items():
        cells, slower, faster, ratios, alone = 0, {t: 0 for t in args.thresholds}, 0, [], 0
        for a, b in compared:
            side_a, side_b = resolve_side(args.runs_dir, a), resolve_side(args.runs_dir, b)
            on_time = {c.key: c.verdict for c in compare_sides(side_a, side_b, DEFAULT_THRESHOLD, None).cases}
            for t in args.thresholds:
                cmp = compare_sides(side_a, side_b, t, ACROSS_ANCHOR)
                for c in cmp.cases:
                    if c.backend != "mm" or c.verdict in ("NOT-RUN", "NOT-OK", "ONLY-A", "ONLY-B"):
                        continue
                    slower[t] += c.verdict == "SLOWER"
                    if math.isclose(t, DEFAULT_THRESHOLD):
                        alone += on_time[c.key] == "SLOWER"
                        per_shape.setdefault((name, c.m, c.n), []).append(
                            (c.verdict, c.ratio, c.work_ratio, c.anchor_ratio, on_time[c.key])
                        )
                    if t == args.thresholds[0]:
                        cells += 1
                        faster += c.verdict == "FASTER"
                        ratios.append(c.ratio)
                if math.isclose(t, DEFAULT_THRESHOLD):
                    effects.setdefault(name, []).extend(b for b in cmp.by_backend() if b["backend"] == "mm")
        geo = math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else float("nan")
        lines.append(
            f"| {name} | {cells} | {geo:.4f} | "
            + " | ".join(str(slower[t]) for t in args.thresholds)
            + f" | {alone} | {faster} |"
        )
    lines += [
        "",
        f"mm's effect over all its cases (diff's per-backend line, at {DEFAULT_THRESHOLD:.1%}): per pair, B/A "
        "[95% interval by t over the cases] and its verdict",
        "",
        "| comparison | pairs SLOWER | per pair |",
        "|---|---:|---|",
    ]
    for name, found in effects.items():
        lines.append(
            f"| {name} | {sum(b['effect_verdict'] == 'SLOWER' for b in found)} of {len(found)} | "
            + "; ".join(
                "—"
                if b["effect_ratio"] is None
                else f"{b['effect_ratio']:.4f} [{b['effect_low']:.4f}, {b['effect_high']:.4f}] {b['effect_verdict']}"
                for b in found
            )
            + " |"
        )
    lines += [
        "",
        f"Per shape at the default threshold ({DEFAULT_THRESHOLD:.1%}): each pair's verdict (and on the time "
        f"alone), B/A of the medians, of the work (time × in-stream clock) and against {ACROSS_ANCHOR}",
        "",
        "| comparison | M×N | verdicts | time alone | B/A | work B/A | against the anchor |",
        "|---|---|---|---|---|---|---|",
    ]
    for (name, m, n), found in sorted(per_shape.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        lines.append(
            f"| {name} | {m}×{n} | {' '.join(f[0] for f in found)} | {' '.join(f[4] for f in found)} | "
            + " ".join(f"{f[1]:.4f}" for f in found)
            + " | "
            + " ".join("—" if f[2] is None else f"{f[2]:.4f}" for f in found)
            + " | "
            + " ".join("—" if f[3] is None else f"{f[3]:.4f}" for f in found)
            + " |"
        )
    lines += ["", "Runs: " + "; ".join(f"{k}: {', '.join(Path(r).name for r in v)}" for k, v in runs.items())]
    return "\n".join(lines)


SEED_SHAPES = [(m, 768, 6144) for m in (16, 32, 64, 128, 256)] + [
    (m, 2048, 6144) for m in (16, 32, 64, 128, 256, 512, 1024)
]
LADDER = [64 * i for i in range(1, 25)]  # columns of K tried per shape, until one reads 1.5 × the largest target


def choose_pad(passes: dict[int, list[float]], target: float) -> int:
    """The smallest padding that every pass read at least `target` slower (else the one whose slowest pass read
    the most): a copy "slowed by +2%" is never one the calibration read below 2%, as the mean of two passes
    could choose it (on the H200 the sweeps read copies the mean put at 1.016-1.020 about 1% slower)."""
    floor = {pad: min(v) for pad, v in passes.items()}
    reaching = [p for p in floor if floor[p] >= 1 + target]
    return min(reaching) if reaching else max(floor, key=floor.get)


def choose_confirmed(passes: dict[int, list[float]], target: float, confirm, confirmed: dict[int, float]) -> int:
    """choose_pad, where the padding chosen must also reach `target` by confirm(pad), a reading of another
    kind: one that falls short joins that padding's passes (recorded in `confirmed`) and the choice moves on."""
    pad = choose_pad(passes, target)
    while pad not in confirmed:
        confirmed[pad] = confirm(pad)
        passes[pad].append(confirmed[pad])
        pad = choose_pad(passes, target)
    return pad


def pair_effect(g0, g1, pairs: int = 20, settle_s: float = 0.1) -> float:
    """The median over `pairs` of g1's replay time over g0's, replayed in alternating order (ABBA) after
    settle_s of alternating replays, so both see one GPU state."""
    import torch

    deadline = time.perf_counter() + settle_s
    while time.perf_counter() < deadline:
        g0.replay()
        g1.replay()
        torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    ratios = []
    for i in range(pairs):
        order = (g0, g1) if i % 2 == 0 else (g1, g0)
        ev[0].record()
        order[0].replay()
        ev[1].record()
        order[1].replay()
        ev[2].record()
        ev[2].synchronize()
        first, second = ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2])
        ratios.append(second / first if i % 2 == 0 else first / second)
    return statistics.median(ratios)


def settled_effect(g0, g1, settle_s: float = 0.3, replays: int = 20) -> float:
    """g1's replay time over g0's, each settled apart (settle_s of its own replays, then `replays` timed),
    in the orders AB and BA, the mean of the two ratios: a reading of the copy's cost that no alternation
    shares, as a sweep's settled rounds see it (at the power cap's edge the alternating pairs read a copy
    higher than settled readings do: issue 40's probe)."""
    import torch

    def settled(g) -> float:
        deadline = time.perf_counter() + settle_s
        while time.perf_counter() < deadline:
            g.replay()
            torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    first0, first1 = settled(g0), settled(g1)
    second1, second0 = settled(g1), settled(g0)
    return statistics.fmean([first1 / first0, second1 / second0])


def padded_graph(sets, pad: int, calls: int):
    import torch

    padded = [(torch.nn.functional.pad(a, (0, pad)), torch.nn.functional.pad(b, (0, pad)).t()) for a, b in sets]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for a, bt in padded:
            torch.mm(a, bt)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(calls):
            a, bt = padded[i % len(padded)]
            torch.mm(a, bt)
    torch.cuda.synchronize()
    return graph, padded


def calibrate(args) -> str:
    import json

    import torch

    args.pad_dir.mkdir(parents=True, exist_ok=True)
    chosen = {t: {} for t in args.targets}
    lines = [
        "## Calibrated slowdowns: columns of K per shape for each target (mm_pad against mm, independent replay)",
        "",
        "| M×N×K | mm µs | "
        + " | ".join(f"+{t:.0%}: columns (alternating mean, settled apart, least)" for t in args.targets)
        + " | ladder |",
        "|---|---:|" + "---|" * (len(args.targets) + 1),
    ]
    for m, n, k in SEED_SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(m * n)
        sets = [
            (
                torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16),
                torch.randn((n, k), generator=gen, device="cuda").to(torch.bfloat16),
            )
            for _ in range(8)
        ]
        probe, _ = padded_graph(sets, 0, 16)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe.replay()
        start.record()
        probe.replay()
        end.record()
        end.synchronize()
        one_us = start.elapsed_time(end) * 1e3 / 16
        calls = max(8, int(2000 / one_us) // 8 * 8)
        base, keep = padded_graph(sets, 0, calls)
        # Two passes over the ladder, up then down, each padding's effect their mean: one pass read
        # neighbouring paddings up to 1% out of order.
        graphs, passes = {}, {}
        for pad in LADDER:
            graphs[pad] = padded_graph(sets, pad, calls)
            passes[pad] = [pair_effect(base, graphs[pad][0])]
            if passes[pad][0] > 1 + 1.5 * max(args.targets):
                break
        for pad in reversed(list(graphs)):
            passes[pad].append(pair_effect(base, graphs[pad][0]))
        effects = {pad: statistics.fmean(v) for pad, v in passes.items()}
        # A padding chosen for a target is also read settled apart; where that reading falls short, it
        # joins the padding's passes and the choice moves on up the ladder.
        settled = {}
        cells = []
        for t in args.targets:
            pad = choose_confirmed(passes, t, lambda p, g0=base, g=graphs: settled_effect(g0, g[p][0]), settled)
            chosen[t][f"{m}x{n}x{k}"] = pad
            cells.append(f"{pad} ({effects[pad]:.4f}, settled {settled[pad]:.4f}, least {min(passes[pad]):.4f})")
        del graphs
        ladder = ", ".join(f"{p}: {e:.3f}" for p, e in effects.items())
        lines.append(f"| {m}×{n}×{k} | {one_us:.2f} | " + " | ".join(cells) + f" | {ladder} |")
        print(lines[-1], file=sys.stderr, flush=True)
        del base, keep, probe, sets
        torch.cuda.empty_cache()
    for t in args.targets:
        path = args.pad_dir / f"pads-{round(t * 100)}.json"
        path.write_text(json.dumps(chosen[t], indent=1) + "\n")
        lines.append(f"\n- +{t:.0%}: `{path.name}`")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["calibrate", "h2h", "across"])
    parser.add_argument("-i", "--inventory", type=Path, help="hosts.yaml with the one GPU host (h2h, across)")
    parser.add_argument("--runs-dir", type=Path, help="where the sweeps' run folders go (h2h, across)")
    parser.add_argument(
        "--targets",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.02, 0.03, 0.05],
        help="calibrate: the slowdowns to find columns for (default 0.02,0.03,0.05)",
    )
    parser.add_argument("--pad-dir", type=Path, help="calibrate: where pads-N.json go")
    parser.add_argument("--repeat", type=int, default=3, help="sweeps per setting (default 3)")
    parser.add_argument(
        "--pad",
        default="auto",
        help="h2h: FLEETBENCH_MM_PAD for mm_pad: columns, a calibrated pads-N.json, or auto (256 at M <= 64, else 128)",
    )
    parser.add_argument("--tie", type=float, default=0.01, help="h2h: the tie margin (default 0.01)")
    parser.add_argument(
        "--pads",
        type=lambda s: s.split(","),
        default=["192", "320"],
        help="across: the slowed settings, each FLEETBENCH_MM_PAD: columns or a pads-N.json (default 192,320)",
    )
    parser.add_argument(
        "--thresholds",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.01, 0.015, 0.02, 0.03],  # 0.015: diff's default (commands/common.py DEFAULT_THRESHOLD)
        help="across: diff thresholds to count at",
    )
    parser.add_argument(
        "--stored",
        action="store_true",
        help="h2h, across: judge the run folders an earlier run left in --runs-dir instead of sweeping "
        "(no GPU; --repeat and --pads say how `across` ran)",
    )
    parser.add_argument(
        "--set",
        type=int,
        default=None,
        help="with --stored: which of the stored sets to judge, in the order they ran: an across step "
        "(default 1), or --repeat head-to-head sweeps (default: every stored h2h sweep)",
    )
    parser.add_argument(
        "--timing",
        type=timing_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="h2h, across: a timing option of the sweeps (repeatable), e.g. fresh_inputs=false; the sweep "
        "is then named for it (see-across-fresh-inputs-false), so its runs are told apart",
    )
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    args.timing = dict(args.timing)
    if args.what == "calibrate":
        if args.pad_dir is None:
            parser.error("calibrate needs --pad-dir")
        text = calibrate(args)
    else:
        if args.runs_dir is None or (args.inventory is None and not args.stored):
            parser.error(f"{args.what} needs -i/--inventory and --runs-dir")
        if args.set is not None and not args.stored:
            parser.error("--set picks among stored runs: it needs --stored")
        args.runs_dir.mkdir(parents=True, exist_ok=True)
        text = h2h(args) if args.what == "h2h" else across(args)
    return publish([text], args.out)


if __name__ == "__main__":
    sys.exit(main())
