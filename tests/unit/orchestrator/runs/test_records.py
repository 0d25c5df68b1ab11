"""The controller's reader of result records (orchestrator/runs/records.py)."""

from __future__ import annotations

from orchestrator.runs.records import parse_line
from worker.contract.schema import CaseSpec, Stats
from worker.sweep import runner as runner_mod


def test_records_round_trip_through_the_controller_parser():
    rec = runner_mod.crashed_record(CaseSpec(backend="torch-bf16", m=1, n=2, k=16), "worker process killed by SIGSEGV")
    back = parse_line(rec.model_dump_json())
    assert back == rec
    stats = Stats(
        method="m",
        median_us=1,
        p10_us=1,
        p90_us=1,
        mean_us=1,
        stdev_us=0,
        n=1,
        rel_ci=0,
        calls_per_sample=1,
        l2="hot",
        samples_us=[1.0],
    )
    assert Stats.model_validate_json(stats.model_dump_json()) == stats
