#!/usr/bin/env python3
"""Does a case's number depend on its place in the sweep (issue 21)? The same cases run by the worker
(`python -m worker run`, a fresh process each) forward, reversed and shuffled, `--repeat` times; per case
the median of its rounds and of its first round in every order (the median over repetitions), the
largest relative difference between orders, and (with --repeat > 1) the largest difference between
fresh processes running the same order, which tells process-to-process spread from order.

    python -m benchmarks.gpu_state.order [--sweep sweeps/glm5_tp8.yaml] [--backends torch-bf16,torch-fp8,...]
                               [--repeat 1] [--settle-ms MS] [--out DIR]

--settle-ms overrides the sweep's timing.settle_ms (0: no settling, as before issue 21's fix). Each
process's values keep, per round, the SM clock and temperature at its end and the time it settled.

Prints a Markdown table (and writes DIR/order.md, DIR/order.json). Needs the worker's dependencies; on a
machine without a GPU it times on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import ROOT

ORDERS = ("forward", "reversed", "shuffled")


def cases_of(sweep_path: Path, backends: list[str], settle_ms: float | None = None):
    from orchestrator.config.sweep import load_sweep

    sweep = load_sweep(sweep_path)
    if backends:
        sweep = sweep.model_copy(update={"backends": backends})
    if settle_ms is not None:
        sweep = sweep.model_copy(update={"timing": sweep.timing.model_copy(update={"settle_ms": settle_ms})})
    return sweep.cases()


def run_order(cases, order: str, out: Path, seed: int) -> tuple[dict, float]:
    """One fresh worker process over the cases in this order: case id -> record, wall seconds."""
    from worker.contract.schema import WorkerParams

    todo = list(cases)
    if order == "reversed":
        todo.reverse()
    elif order == "shuffled":
        random.Random(seed).shuffle(todo)
    params = out / f"params-{order}-{seed}.json"
    results = out / f"results-{order}-{seed}.jsonl"
    params.write_text(WorkerParams(run_id=f"order-{order}", host="bench", cases=todo).model_dump_json())
    results.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "worker", "run", "--params", str(params), "--results", str(results)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    records = [json.loads(line) for line in results.read_text().splitlines()]
    return {r["case_id"]: r for r in records if r.get("kind") == "case"}, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "glm5_tp8.yaml")
    ap.add_argument("--backends", default="torch-bf16,torch-fp8,flashinfer-fp8-cublas")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--settle-ms", type=float, default=None, help="override the sweep's timing.settle_ms")
    ap.add_argument("--limit", type=float, default=0.02, help="largest tolerated difference between orders")
    ap.add_argument("--out", type=Path, default=Path("order-out"))
    args = ap.parse_args()
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    args.out.mkdir(parents=True, exist_ok=True)
    cases = cases_of(args.sweep, [b for b in args.backends.split(",") if b], args.settle_ms)
    first_ids = {}
    seen: dict[str, dict[str, list]] = {}  # case id -> order -> [(median, round-1 median, position), ...]
    walls = {}
    for rep in range(args.repeat):
        for order in ORDERS:
            recs, wall = run_order(cases, order, args.out, seed=rep + 1)
            walls[f"{order} {rep + 1}"] = round(wall, 1)
            first = next(iter(recs))
            first_ids.setdefault(order, set()).add(first)
            for position, (cid, r) in enumerate(recs.items()):
                if r["status"] != "ok" or not r.get("timing"):
                    continue
                t = r["timing"]
                r1 = t["rounds"][0]["median_us"] if t.get("rounds") else t["median_us"]
                env = [
                    {k: rd.get(k) for k in ("median_us", "sm_clock_mhz", "temperature_c", "settle_ms")}
                    for rd in t.get("rounds", [])
                ]
                seen.setdefault(cid, {}).setdefault(order, []).append((t["median_us"], r1, position, env))
            print(f"{order} (repeat {rep + 1}): {len(recs)} records, {wall:.1f} s", flush=True)
    by_id = {c.case_id: c for c in cases}
    lines = [
        "| backend | M | N | K | forward µs | reversed µs | shuffled µs | max diff | same order, between processes | round 1: forward / reversed / shuffled | round-1 max diff | any round max diff | first in |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    rows, worst = [], 0.0
    for cid, orders in seen.items():
        c = by_id[cid]
        med = {o: statistics.median(v[0] for v in orders[o]) for o in orders}
        r1 = {o: statistics.median(v[1] for v in orders[o]) for o in orders}
        spread = max(med.values()) / min(med.values()) - 1
        spread1 = max(r1.values()) / min(r1.values()) - 1
        # Every round, not only round 1 and the median: round r of each order against round r of the others.
        n_rounds = min(len(v[3]) for vals in orders.values() for v in vals)
        per_round = [[v[3][r]["median_us"] for vals in orders.values() for v in vals] for r in range(n_rounds)]
        spread_rounds = max((max(x) / min(x) - 1 for x in per_round), default=0.0)
        # With --repeat > 1: how far the same order moves between fresh processes. A case whose
        # difference between orders is no larger than this is process-to-process spread, not order.
        within = max((max(v[0] for v in vals) / min(v[0] for v in vals) - 1 for vals in orders.values()), default=0.0)
        worst = max(worst, spread)
        firsts = [o for o, ids in first_ids.items() if cid in ids]
        rows.append(
            dict(
                case_id=cid,
                backend=c.backend,
                m=c.m,
                n=c.n,
                k=c.k,
                medians=med,
                round1=r1,
                spread=spread,
                round1_spread=spread1,
                rounds_spread=spread_rounds,
                between_processes=within,
                first_in=firsts,
                per_process={
                    o: [dict(median_us=m, round1_us=f, position=i, rounds=e) for m, f, i, e in v]
                    for o, v in orders.items()
                },
            )
        )
        lines.append(
            f"| {c.backend} | {c.m} | {c.n} | {c.k} | "
            + " | ".join(f"{med.get(o, float('nan')):.2f}" for o in ORDERS)
            + f" | {spread * 100:.2f}% | "
            + (f"{within * 100:.2f}%" if args.repeat > 1 else "–")
            + " | "
            + " / ".join(f"{r1.get(o, float('nan')):.2f}" for o in ORDERS)
            + f" | {spread1 * 100:.2f}% | {spread_rounds * 100:.2f}% | {', '.join(firsts)} |"
        )
    over = [r for r in rows if r["spread"] > args.limit]
    rounds_over = [r for r in rows if r["rounds_spread"] > args.limit]
    spread_only = [r for r in over if args.repeat > 1 and r["spread"] <= r["between_processes"]]
    lines += [
        "",
        f"{len(rows)} timed cases; largest difference between orders {worst * 100:.2f}%; "
        f"{len(over)} over {args.limit * 100:.0f}%; {len(rounds_over)} with some round over it"
        + (
            f", {len(spread_only)} of them within their own spread between processes of one order"
            if args.repeat > 1
            else ""
        )
        + ". Wall per process (s): "
        + ", ".join(f"{k} {v}" for k, v in walls.items()),
    ]
    md = "\n".join(lines) + "\n"
    (args.out / "order.md").write_text(md)
    (args.out / "order.json").write_text(json.dumps({"rows": rows, "walls": walls}, indent=1))
    print(md)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
