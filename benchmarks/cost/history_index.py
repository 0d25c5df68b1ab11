#!/usr/bin/env python3
"""How the history index scales (issue 18): `fleetbench history` for one case over many stored runs,
and what indexing a landed run costs.

  1. N run folders (a manifest each) and an index holding N runs × R result rows (inserted directly:
     writing N × R JSON records first would only measure the disk); then the whole `history` command
     for one case and one host, in a fresh process, brought up to date with the N folders first.
  2. One real run folder of R cases (records as the worker writes them), indexed as a run that
     just landed (`RunIndex.update_run`), against the wall time such a run takes at the default timing
     (R cases × 3 rounds × 0.5 s budget: a lower bound).

    python -m benchmarks.cost.history_index [--runs 10000] [--rows 1000] [--dir DIR]

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.coldrun import cli


def build(runs_dir: Path, n_runs: int, n_rows: int) -> float:
    from orchestrator.runs.index import RunIndex, fingerprint

    t0 = time.perf_counter()
    index = RunIndex.open(runs_dir, rebuild=True)
    rng = random.Random(0)
    case_ids = [f"{i:016x}" for i in range(n_rows)]
    with index.db:
        for r in range(n_runs):
            day, sec = divmod(r, 86400)
            run_id = f"2026{1 + day // 28:02d}{1 + day % 28:02d}-{sec // 3600:02d}{sec // 60 % 60:02d}{sec % 60:02d}-bench-{r:05x}"
            folder = runs_dir / run_id
            folder.mkdir()
            (folder / "manifest.json").write_text('{"manifest_version": 5}')
            created = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:{run_id[11:13]}:{run_id[13:15]}+00:00"
            index.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, "bench", created, "complete", "", fingerprint(folder)),
            )
            index.db.execute(
                "INSERT INTO hosts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, "h1", "h1", "NVIDIA RTX PRO 6000", "580", "13.0", "2.11", "0.7.2", None, "h1", "ok"),
            )
            index.db.executemany(
                "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        "h1",
                        cid,
                        "torch-bf16",
                        "gemm",
                        "bench",
                        16 + i,
                        2048,
                        6144,
                        "ok",
                        10.0 * rng.lognormvariate(0, 0.01),
                        0.01,
                        "[10.0, 10.1, 9.9]",
                        50.0,
                        30.0,
                        0.5,
                    )
                    for i, cid in enumerate(case_ids)
                ],
            )
    index.close()
    return time.perf_counter() - t0


def landed_run_cost(tmp: Path, n_rows: int) -> float:
    """Seconds to index one stored run of n_rows cases as it lands."""
    from orchestrator.runs.index import RunIndex
    from orchestrator.runs.store import RunStore
    from worker.contract.schema import CaseRecord, CaseSpec, FactsRecord
    from worker.contract.stats import summarize

    runs = tmp / "landed"
    store = RunStore.create(runs, "20261203-000000-landed-0001")
    cases = [CaseSpec(backend="torch-bf16", m=16 + i, n=2048, k=6144) for i in range(n_rows)]
    store.write_manifest(
        {
            "run_id": store.run_id,
            "sweep_name": "landed",
            "sweep": {"name": "landed"},
            "hosts": [],
            "dry_run": False,
            "cases": {c.case_id: c.model_dump(mode="json") for c in cases},
            "jobs": [{"slot": "h1", "host": "h1", "gpu": None, "case_ids": [c.case_id for c in cases]}],
        }
    )
    rng = random.Random(1)
    lines = [
        FactsRecord(hostname="h1", python="3.12", platform="linux", worker_version="x", device="cuda").model_dump_json()
    ]
    for c in cases:
        stats = summarize(
            [10 * rng.lognormvariate(0, 0.01) for _ in range(30)], method="cuda-graph", calls_per_sample=100, l2="cold"
        )
        lines.append(
            CaseRecord(
                case_id=c.case_id, case=c, status="ok", timing=stats, started_at="t", duration_s=0.1
            ).model_dump_json()
        )
    attempt = store.attempt_dir("h1", 1)
    attempt.mkdir(parents=True)
    (attempt / "results.jsonl").write_text("\n".join(lines) + "\n")
    (attempt / "outcome.json").write_text(
        json.dumps(
            {"slot": "h1", "host": "h1", "attempt": 1, "outcome": "ok", "cases_total": n_rows, "cases_done": n_rows}
        )
    )
    index = RunIndex.open(runs)
    t0 = time.perf_counter()
    index.update_run(store.dir)
    seconds = time.perf_counter() - t0
    index.close()
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="fleetbench-history-"))
    runs_dir = tmp / "runs"
    shutil.rmtree(runs_dir, ignore_errors=True)
    built = build(runs_dir, args.runs, args.rows)
    size_mb = (runs_dir / ".index.sqlite").stat().st_size / 2**20
    timings = []
    for _ in range(3):
        t0 = time.perf_counter()
        done = cli("history", "--runs-dir", runs_dir, "--case", f"{7:016x}", "--host", "h1", "--format", "json")
        timings.append(time.perf_counter() - t0)
        done.check_returncode()
        points = len(json.loads(done.stdout)["points"])
    landed = landed_run_cost(tmp, args.rows)
    run_floor = args.rows * 3 * 0.5
    print(
        f"| runs | rows per run | index build s | index MB | `history` one case (3 fresh processes) s | points |"
        f" index a landed run of {args.rows} rows s | of that run's wall time (≥ {run_floor:.0f} s) |"
    )
    print("|---:|---:|---:|---:|---|---:|---:|---:|")
    print(
        f"| {args.runs} | {args.rows} | {built:.1f} | {size_mb:.0f} | {', '.join(f'{t:.2f}' for t in timings)} | "
        f"{points} | {landed:.2f} | {100 * landed / run_floor:.3f}% |"
    )
    if args.dir is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
