"""History (issue 18): the SQLite index of stored runs, `fleetbench history`, and step detection."""
from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.index import INDEX_NAME, RunIndex
from orchestrator.steps import detect_steps
from test_compare import make_run
from cli_output import cli_json

REPO = Path(__file__).resolve().parent.parent


def history_json(capsys, runs: Path, *extra) -> tuple[int, dict]:
    code = main(["history", "--runs-dir", str(runs), "--format", "json", *map(str, extra)])
    out, _ = capsys.readouterr()
    return code, cli_json(out)


def _points(doc: dict) -> list[tuple]:
    return sorted((p["series"], p["run_id"], p["median_us"]) for p in doc["points"])


def test_three_smoke_runs_give_three_points_per_case_and_the_index_rebuilds_to_the_same(tmp_path, capsys):
    runs = tmp_path / "runs"
    other_budget = tmp_path / "smoke-b.yaml"
    doc = yaml.safe_load((REPO / "sweeps" / "smoke.yaml").read_text())
    doc["timing"]["budget_s"] = 0.35
    other_budget.write_text(yaml.safe_dump(doc))
    for sweep in (REPO / "sweeps" / "smoke.yaml", REPO / "sweeps" / "smoke.yaml", other_budget):
        assert main(["run", str(sweep), "--runs-dir", str(runs), "--format", "json"]) == 0
        capsys.readouterr()
    assert (runs / INDEX_NAME).is_file()  # each run was indexed as it landed
    code, first = history_json(capsys, runs)
    assert code == 0 and first["kind"] == "history" and first["format"] == 1
    per_series: dict[str, set] = {}
    for p in first["points"]:
        per_series.setdefault(p["series"], set()).add(p["run_id"])
    assert len(per_series) == 4 and all(len(v) == 3 for v in per_series.values())  # the 4 cases that run on a CPU
    assert first["index"]["indexed"] == 0 and first["index"]["total"] == 3  # nothing left to do at query time
    # The run folders are the source of truth: without the index, or with a damaged one, the same answer.
    (runs / INDEX_NAME).unlink()
    code, again = history_json(capsys, runs)
    assert _points(again) == _points(first) and again["index"]["indexed"] == 3
    (runs / INDEX_NAME).write_bytes(b"this is not a database" * 100)
    assert _points(history_json(capsys, runs)[1]) == _points(first)
    # Selections: one backend and M; the other timing budget is still the same case.
    code, one = history_json(capsys, runs, "--backend", "torch-bf16", "--m", 16)
    assert len(one["points"]) == 3 and len({p["series"] for p in one["points"]}) == 1
    assert history_json(capsys, runs, "--version", "torch=0.0.0")[1]["points"] == []
    assert history_json(capsys, runs, "--since", "2999-01-01")[1]["points"] == []


def test_a_run_removed_or_damaged_never_breaks_the_index(tmp_path, capsys):
    for i, run_id in enumerate(["20261201-000000-x-0001", "20261202-000000-x-0002", "20261203-000000-x-0003"]):
        make_run(tmp_path, run_id, {"h": 1.0}, seed=i)
    code, doc = history_json(capsys, tmp_path, "--backend", "torch-bf16", "--m", 16)
    assert code == 0 and len(doc["points"]) == 3
    shutil.rmtree(tmp_path / "20261201-000000-x-0001")
    (tmp_path / "20261203-000000-x-0003" / "manifest.json").write_text("{ not json")
    code, doc = history_json(capsys, tmp_path, "--backend", "torch-bf16", "--m", 16)
    assert code == 0 and [p["run_id"] for p in doc["points"]] == ["20261202-000000-x-0002"]
    index = RunIndex.open(tmp_path)
    try:
        states = {r["run_id"]: (r["state"], r["problem"]) for r in index.runs()}
    finally:
        index.close()
    assert set(states) == {"20261202-000000-x-0002", "20261203-000000-x-0003"}
    assert states["20261203-000000-x-0003"][0] == "unreadable" and states["20261203-000000-x-0003"][1]


def test_a_step_in_a_synthetic_series_is_found_at_its_run_and_a_flat_noisy_one_has_none():
    for seed in range(20):
        rng = random.Random(seed)
        flat = [10.0 * rng.lognormvariate(0, 0.02) for _ in range(30)]
        assert detect_steps(flat, threshold=0.05) == [], seed
        stepped = [10.0 * (1.10 if i >= 12 else 1.0) * rng.lognormvariate(0, 0.01) for i in range(20)]
        steps = detect_steps(stepped, threshold=0.05)
        assert [s.index for s in steps] == [12], seed
        assert 1.07 < steps[0].ratio < 1.13 and steps[0].low < steps[0].ratio < steps[0].high
    # Too small to matter (below the threshold) is not a step, however clear.
    small = [10.0] * 10 + [10.3] * 10
    assert detect_steps(small, threshold=0.05) == [] and len(detect_steps(small, threshold=0.02)) == 1


def test_history_steps_gate_a_nightly_job_only_on_a_new_slowdown(tmp_path, capsys):
    ids = [f"202612{d:02d}-000000-nightly-{d:04d}" for d in range(1, 14)]
    for d, run_id in enumerate(ids[:12], 1):
        make_run(tmp_path, run_id, {"h": 1.10 if d >= 9 else 1.0}, seed=d)
    code, doc = history_json(capsys, tmp_path, "--backend", "torch-bf16", "--steps")
    assert code == 0  # a step, but an old one: run 9 of 12
    steps = [s for s in doc["steps"] if s["steps"]]
    assert steps and all(s["steps"][0]["run_id"] == ids[8] and not s["new_slower"] for s in steps)
    make_run(tmp_path, ids[12], {"h": 1.25}, seed=13)
    code = main(["history", "--runs-dir", str(tmp_path), "--backend", "torch-bf16", "--steps"])
    out, err = capsys.readouterr()
    assert code == 1 and "new step: torch-bf16" in err and ids[12] in err
    assert "NEW, SLOWER" in out


def test_bad_history_arguments_are_input_errors(tmp_path, capsys):
    assert main(["history", "--runs-dir", str(tmp_path), "--version", "numpy=1"]) == 2
    assert "expected LIB=VERSION" in capsys.readouterr().err
    assert main(["history", "--runs-dir", str(tmp_path), "--threshold", "abc"]) == 2


def test_the_report_draws_this_runs_cases_over_their_history(tmp_path, capsys):
    ids = [f"202612{d:02d}-000000-nightly-{d:04d}" for d in range(1, 8)]
    for d, run_id in enumerate(ids, 1):
        make_run(tmp_path, run_id, {"h1": 1.2 if d >= 5 else 1.0, "h2": 1.0}, seed=d)
    html = tmp_path / "r.html"
    assert main(["report", ids[-1], "--history", "-o", str(html), "--runs-dir", str(tmp_path)]) == 0
    text = html.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="fleetbench-data">(.*?)</script>', text, re.S).group(1))
    trends = [c for c in data["charts"] if c["kind"] == "trend"]
    assert len(trends) == 12 and trends[0]["title"].startswith("History (1 of the 12 cases of this run that moved most "
                                                                "over 7 stored runs)")
    moved = trends[0]
    assert moved["runs"] == ids and {s["name"] for s in moved["series"]} == {"h1", "h2"}
    h1 = next(s for s in moved["series"] if s["name"] == "h1")
    assert [p["x"] for p in h1["points"]] == list(range(7)) and any(p["step"] for p in h1["points"])  # the 20% step


def test_history_of_a_missing_runs_folder_or_an_unusable_index_is_one_clear_line(tmp_path, capsys):
    assert main(["history", "--runs-dir", str(tmp_path / "typo")]) == 2
    assert "no runs folder" in capsys.readouterr().err and not (tmp_path / "typo").exists()
    runs = tmp_path / "runs"
    make_run(runs, "20261201-000000-x-0001", {"h": 1.0}, seed=1)
    (runs / INDEX_NAME).mkdir()  # something that is not a database where the index belongs
    (runs / INDEX_NAME / "keep").write_text("x")
    assert main(["history", "--runs-dir", str(runs)]) == 2
    assert "the history index in" in capsys.readouterr().err


def test_fleet_history_is_the_median_over_hosts_per_run_and_csv_has_every_point(tmp_path, capsys):
    ids = [f"202612{d:02d}-000000-fleet-{d:04d}" for d in range(1, 4)]
    for d, run_id in enumerate(ids, 1):
        make_run(tmp_path, run_id, {"h1": 1.0, "h2": 1.5, "h3": 2.0}, seed=d)
    code, per_host = history_json(capsys, tmp_path, "--backend", "torch-bf16", "--m", 16)
    code, fleet = history_json(capsys, tmp_path, "--backend", "torch-bf16", "--m", 16, "--fleet")
    assert code == 0 and len(per_host["points"]) == 9 and len(fleet["points"]) == 3
    for run_id in ids:
        hosts = sorted(p["median_us"] for p in per_host["points"] if p["run_id"] == run_id)
        point = next(p for p in fleet["points"] if p["run_id"] == run_id)
        assert point["median_us"] == hosts[1] and point["host"] == "fleet (3 hosts)"
    assert main(["history", "--runs-dir", str(tmp_path), "--backend", "torch-bf16", "--m", "16", "--host", "h2",
                 "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("series,run_id,created_at,host") and len(lines) == 1 + 3
