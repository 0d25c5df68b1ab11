"""The controller's reader of result records (orchestrator/runs/records.py)."""

from __future__ import annotations

from support.files import write

from orchestrator.runs.records import parse_line, parse_results
from worker.contract.schema import SCHEMA_VERSION, CaseSpec, Stats
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


def test_bad_result_lines_are_problems_not_crashes(tmp_path):
    good = '{"kind":"case","schema_version":3}'
    path = write(
        tmp_path / "results.jsonl",
        "\n".join(
            [
                "not json",
                '{"x": 1}',
                '{"kind":"facts","schema_version":99}',
                good,
                '{"kind":"facts","schema_version":1,',
            ]
        ),
    )
    parsed = parse_results(path)
    assert parsed.cases == [] and len(parsed.problems) == 5
    assert "not JSON" in parsed.problems[0]
    assert "no schema_version" in parsed.problems[1]
    assert f"newer than this fleetbench reads ({SCHEMA_VERSION}): upgrade fleetbench" in parsed.problems[2]
    assert "invalid record" in parsed.problems[3]
    assert "truncated" in parsed.problems[4]
