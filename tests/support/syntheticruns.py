"""Stored runs with known distributions, written as the worker would have written them: the synthetic
runs that the comparison, history, table and report tests read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from orchestrator.config.sweep import Sweep
from orchestrator.runs.store import RunStore
from worker.contract.schema import CaseRecord, FactsRecord, Health, HealthSnapshot, Metrics, RoundStats
from worker.contract.stats import combine_rounds, summarize

MS = [16 * (i + 1) for i in range(100)]  # x 2 backends = 200 cases


def sweep(backends=("torch-bf16", "torch-fp8"), ms=MS) -> Sweep:
    """The synthetic runs' sweep: `backends` on M in `ms` x 2048 x 6144."""
    return Sweep(name="synthetic", backends=list(backends), shapes=[{"m": ms, "n": 2048, "k": 6144, "label": "syn"}])


def in_rounds(round_samples: list[list[float]], *, method: str = "cuda-graph", load: float | None = None):
    """Stats of a case timed in rounds (as worker/sweep/runner.py joins them), each round with its environment."""
    rounds = []
    for xs in round_samples:
        one = summarize(xs, method=method, calls_per_sample=100, l2="cold")
        env = RoundStats(median_us=one.median_us, n=one.n, rel_ci=one.rel_ci, load_per_core=load)
        rounds.append(one.model_copy(update={"rounds": [env]}))
    return combine_rounds(rounds)


TAINT = Health(
    before=HealthSnapshot(),
    after=HealthSnapshot(throttle_reasons=["sw_thermal"]),
    tainted=True,
    taint_reason="GPU throttled (sw_thermal) during timing",
)


def base_us(case) -> float:
    """Where a case's samples centre, in microseconds, on a host that is not slowed."""
    return 5.0 + case.m / 16 + (2.0 if case.backend == "torch-bf16" else 0.0)


def make_run(
    runs_dir: Path,
    run_id: str,
    hosts: dict[str, float],
    *,
    seed: int,
    sigma: float = 0.01,
    samples: int = 40,
    noisy: dict | None = None,
    facts: dict | None = None,
    statuses: dict | None = None,
    calibration: dict | None = None,
    ms=MS,
    rounds: int = 1,
    round_sigma: float = 0.0,
    method: str = "cuda-graph",
    load: float | None = None,
    tainted: set = frozenset(),
) -> RunStore:
    """A stored run: per host a slowdown factor; samples are lognormal around base_us(case) * factor.
    With rounds > 1 each case is timed in rounds whose medians spread lognormally by round_sigma (a busy
    machine), each round of samples // rounds samples with the CPU load `load`; `tainted` holds the
    (host, M) whose GPU throttled."""
    rng = np.random.default_rng(seed)
    sw = sweep(ms=ms)
    cases = sw.cases()
    store = RunStore.create(runs_dir, run_id)
    store.write_manifest(
        {
            "run_id": run_id,
            "sweep_name": sw.name,
            "sweep": sw.model_dump(mode="json"),
            "hosts": [],
            "dry_run": False,
            "cases": {c.case_id: c.model_dump(mode="json") for c in cases},
            "jobs": [{"slot": h, "host": h, "gpu": None, "case_ids": [c.case_id for c in cases]} for h in hosts],
        }
    )
    for host, factor in hosts.items():
        lines = [
            FactsRecord(
                hostname=host,
                python="3.12",
                platform="linux",
                worker_version="0.1.0",
                device="cuda",
                gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                compute_capability="12.0",
                driver=(facts or {}).get(host, "580.1"),
                torch="2.11.0",
                calibration=(calibration or {}).get(host),
            ).model_dump_json()
        ]
        for c in cases:
            status = (statuses or {}).get((host, c.m), "ok")
            if status != "ok":
                lines.append(
                    CaseRecord(
                        case_id=c.case_id,
                        case=c,
                        status=status,
                        reason="needs compute capability >= 10.0",
                        started_at="t",
                        duration_s=0,
                    ).model_dump_json()
                )
                continue
            s = (noisy or {}).get(c.m, sigma)
            if rounds == 1:
                xs = list(base_us(c) * factor * rng.lognormal(0.0, s, samples))
                stats = summarize(xs, method=method, calls_per_sample=100, l2="cold")
            else:
                centres = base_us(c) * factor * rng.lognormal(0.0, round_sigma, rounds)
                stats = in_rounds(
                    [list(x * rng.lognormal(0.0, s, samples // rounds)) for x in centres], method=method, load=load
                )
            flops = 2.0 * c.m * c.n * c.k
            lines.append(
                CaseRecord(
                    case_id=c.case_id,
                    case=c,
                    status="ok",
                    timing=stats,
                    started_at="t",
                    duration_s=0.1,
                    health=TAINT if (host, c.m) in tainted else None,
                    metrics=Metrics(
                        flops=flops, bytes=1.0, tflops=flops / stats.median_us / 1e6, tb_per_s=0.1, pct_peak_flops=10.0
                    ),
                ).model_dump_json()
            )
        d = store.attempt_dir(host, 1)
        d.mkdir(parents=True)
        (d / "results.jsonl").write_text("\n".join(lines) + "\n")
        (d / "outcome.json").write_text(
            json.dumps(
                {
                    "slot": host,
                    "host": host,
                    "attempt": 1,
                    "outcome": "ok",
                    "cases_total": len(cases),
                    "cases_done": len(cases),
                }
            )
        )
    return store
