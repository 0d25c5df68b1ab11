"""Stored runs are records for years: runs written by older fleetbench versions (tests/fixtures) show,
diff and rerun with today's code; cases match by what they measure, never by how they were timed; a
comparison of nothing never passes; a format newer than the reader is refused with one clear line."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest
from support.cli_output import cli_json

from orchestrator.analysis.diff import compare_sides, resolve_side
from orchestrator.analysis.merge import merged_rows
from orchestrator.cli import main
from orchestrator.config.inventory import load_inventory
from orchestrator.execution.launch import plan_rerun
from orchestrator.runs.formats import MANIFEST_VERSION, upgrade_manifest, upgrade_record
from orchestrator.runs.records import parse_results
from orchestrator.runs.store import RunStore
from worker.contract.schema import SCHEMA_VERSION

V1_DONE, V1_OTHER_BUDGET, V1_FAILED = (
    "runs-v1/20261203-081621-smoke-a967",
    "runs-v1/20261203-081628-smoke-0d4a",
    "runs-v1/20261203-081637-smoke-18d7",
)
V2_DONE = "runs-v2/20261203-082541-smoke-2f18"
V3_DONE = "runs-v3/20261203-094347-smoke-636e"
V4_USER_KERNELS = "runs-v4/20261203-133700-smoke-byo-4073"
V5_MOE = "runs-v5/20261203-155636-smoke-moe-v5-280c"
V6_DONE = "runs-v6/20261203-213206-smoke-7721"
V7_DONE = "runs-v7/20261204-055638-smoke-0419"
V9_DONE = "runs-v9/20261206-000741-smoke-fe65"
V10_DONE = "runs-v10/20261206-032921-smoke-35f5"


@pytest.fixture
def runs(stored_runs) -> Callable[[str], Path]:
    """The stored run folder named like V1_DONE (read only: tests that change a run use copy_run)."""
    return lambda name: stored_runs / name


def copy_run(run: Path, runs_dir: Path) -> Path:
    """Fixtures are never written to: tests that change a run work on a copy."""
    return Path(shutil.copytree(run, runs_dir / run.name))


@pytest.mark.parametrize("run", [V1_DONE, V1_OTHER_BUDGET, V1_FAILED, V2_DONE, V3_DONE])
def test_every_stored_run_shows_all_its_planned_cases(run, runs, capsys):
    code = main(["show", str(runs(run)), "--format", "json"])
    rows = cli_json(capsys.readouterr().out)
    assert len(rows) == 10 and len({r["case_id"] for r in rows}) == 10
    if run == V1_FAILED:
        assert code == 1 and {r["status"] for r in rows} == {"missing"}
        assert all("interpreter not found" in r["reason"] for r in rows)
    else:
        assert code == 0
        assert [r["status"] for r in rows].count("ok") == 4 and [r["status"] for r in rows].count("unsupported") == 6
        assert all(r["median_us"] > 0 for r in rows if r["status"] == "ok")


def test_format_1_runs_mean_today_what_they_meant_when_written(runs):
    store = RunStore(runs(V1_DONE))
    manifest = store.manifest()
    assert manifest.manifest_version == MANIFEST_VERSION and manifest.written_as == 1
    assert manifest.format_notes == []
    planned = store.planned_cases()
    assert [(c.backend, c.m) for c in planned.values()][:3] == [
        ("torch-bf16", 16),
        ("reference-nvfp4", 16),
        ("torch-fp8", 16),
    ]
    # Its records (format 1 ids hashed timing) are upgraded to the ids of what they measure.
    parsed = parse_results(runs(V1_DONE) / "hosts" / "local" / "attempt-1" / "results.jsonl")
    assert parsed.problems == [] and {r.case_id for r in parsed.cases} == set(planned)
    assert all(r.case.timing.budget_s == 0.2 for r in parsed.cases)  # how it was timed is kept, per case


def test_a_format_1_run_and_a_format_2_run_of_one_sweep_match_case_by_case(runs, capsys):
    assert main(["diff", str(runs(V1_DONE)), str(runs(V2_DONE)), "--format", "json"]) == 1
    report = cli_json(capsys.readouterr().out)
    assert len(report["cases"]) == 10
    assert not {"ONLY-A", "ONLY-B"} & set(report["summary"])
    assert report["settings"] == []  # both were timed with the same options


def test_other_timing_settings_keep_every_case_matched_and_are_shown_as_a_setting(runs, capsys):
    assert main(["diff", str(runs(V1_DONE)), str(runs(V1_OTHER_BUDGET))]) == 0
    out = capsys.readouterr().out
    assert "settings that differ" in out and "timing.budget_s" in out and "0.35" in out
    folder = runs(V1_DONE).parent
    cmp = compare_sides(
        resolve_side(folder, str(runs(V1_DONE))), resolve_side(folder, str(runs(V1_OTHER_BUDGET))), 0.03
    )
    assert [(s.field, s.a, s.b) for s in cmp.settings] == [("timing.budget_s", "0.2", "0.35")]
    assert len(cmp.cases) == 10 and all(c.verdict not in ("ONLY-A", "ONLY-B") for c in cmp.cases)


def test_two_runs_that_share_no_case_exit_2_with_one_line(runs, tmp_path, capsys):
    other = copy_run(runs(V2_DONE), tmp_path)
    manifest = json.loads((other / "manifest.json").read_text())
    results = other / "hosts" / "local" / "attempt-1" / "results.jsonl"
    text = results.read_text()
    for cid in manifest["cases"]:  # the same measurements under other identities: nothing in common
        text = text.replace(cid, "z" + cid[1:])
    manifest["cases"] = {"z" + cid[1:]: case for cid, case in manifest["cases"].items()}
    manifest["jobs"][0]["case_ids"] = ["z" + cid[1:] for cid in manifest["jobs"][0]["case_ids"]]
    (other / "manifest.json").write_text(json.dumps(manifest))
    results.write_text(text)
    assert main(["diff", str(runs(V1_DONE)), str(other)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "share no case" in lines[0]


def test_rows_on_one_side_only_are_listed_and_counted(runs, tmp_path, capsys):
    fewer = copy_run(runs(V2_DONE), tmp_path)
    results = fewer / "hosts" / "local" / "attempt-1" / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines[:-2]) + "\n")  # the last two cases have no result in B
    main(["diff", str(runs(V1_DONE)), str(fewer), "--format", "json"])
    captured = capsys.readouterr()
    report = cli_json(captured.out)
    assert report["summary"]["ONLY-A"] == 2
    assert sum(c["verdict"] == "ONLY-A" for c in report["cases"]) == 2
    assert "2 only in A" in captured.err  # the summary line names them too
    main(["diff", str(runs(V1_DONE)), str(fewer)])
    assert "2 only in A" in capsys.readouterr().out


def test_a_newer_format_is_refused_with_what_to_do(runs, tmp_path, capsys):
    future = copy_run(runs(V2_DONE), tmp_path)
    manifest = json.loads((future / "manifest.json").read_text())
    (future / "manifest.json").write_text(json.dumps({**manifest, "manifest_version": MANIFEST_VERSION + 1}))
    assert main(["show", str(future)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and (
            f"written by a newer fleetbench (format {MANIFEST_VERSION + 1}; this one reads up to "
            f"{MANIFEST_VERSION}): upgrade fleetbench to read it"
        )
        in err[0]
    ), err
    with pytest.raises(ValueError, match="newer than this fleetbench reads"):
        upgrade_record({"kind": "facts", "schema_version": SCHEMA_VERSION + 1})


def test_a_damaged_manifest_is_one_line_not_a_traceback(runs, tmp_path, capsys):
    broken = copy_run(runs(V1_DONE), tmp_path)
    manifest = json.loads((broken / "manifest.json").read_text())
    del manifest["sweep"]
    (broken / "manifest.json").write_text(json.dumps(manifest))
    assert main(["show", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "damaged manifest" in err and "Traceback" not in err


def test_upgrade_is_pure_and_idempotent_on_current_manifests(runs):
    stored = json.loads((runs(V3_DONE) / "manifest.json").read_text())
    kept = json.loads(json.dumps(stored))
    once = upgrade_manifest(stored, "x")
    assert stored == kept  # the stored data is not changed in place
    assert upgrade_manifest(once, "x") == once


def test_a_format_5_run_reads_as_not_settled_and_keeps_its_moe_cases(runs, capsys):
    """Format 6 added timing.settle_ms (default 100 ms today); a format-5 run was timed without it,
    and its records and manifest say 0, not today's default."""
    store = RunStore(runs(V5_MOE))
    assert store.manifest().written_as == 5
    planned = store.planned_cases()
    assert {c.timing.settle_ms for c in planned.values()} == {0.0}
    assert sum(c.workload == "moe" for c in planned.values()) == 2
    parsed = parse_results(runs(V5_MOE) / "hosts" / "local" / "attempt-1" / "results.jsonl")
    assert parsed.problems == [] and {r.case_id for r in parsed.cases} == set(planned)
    assert all(r.case.timing.settle_ms == 0.0 for r in parsed.cases)
    assert main(["show", str(runs(V5_MOE)), "--format", "json"]) == 0
    rows = cli_json(capsys.readouterr().out)
    assert [r["status"] for r in rows].count("ok") == 4 and len(rows) == 5


def test_a_format_1_run_reruns_with_its_own_worker_and_merges(runs, tmp_path, monkeypatch, capsys):
    """The failed format-1 run is completed today: its stored worker (0.1.0) reads params in its own
    format, writes format-1 records, and today's reader merges them under format-2 ids."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the local host's workdir (~/.fleetbench) under the test's folder
    run = copy_run(runs(V1_FAILED), tmp_path / "runs")
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(f"hosts: [{{name: nopython, transport: local, python: {json.dumps(sys.executable)}}}]\n")
    plan, _, bundle, tasks = plan_rerun(
        RunStore(run), load_inventory(inventory), failed=True, hosts_selector=None, resume=False
    )
    assert bundle.params_format == 1 and len(tasks) == 1 and len(tasks[0].cases) == 10
    code = main(["rerun", str(run), "--failed", "-i", str(inventory), "--format", "json"])
    rows = cli_json(capsys.readouterr().out)
    assert code == 0, rows
    assert [r["status"] for r in rows].count("ok") == 4 and {r["attempt"] for r in rows} == {2}
    params = json.loads((run / "hosts" / "nopython" / "attempt-2" / "params.json").read_text())
    assert params["schema_version"] == 1 and all("workload" not in c for c in params["cases"])
    written = (run / "hosts" / "nopython" / "attempt-2" / "results.jsonl").read_text()
    assert '"schema_version":1' in written  # the run's own worker wrote its own format
    assert {r.case_id for r in merged_rows(RunStore(run))} == set(RunStore(run).planned_cases())


def test_runs_timed_in_rounds_diff_against_runs_timed_once_case_by_case(runs, capsys):
    assert main(["diff", str(runs(V1_DONE)), str(runs(V3_DONE)), "--format", "json"]) == 0
    report = cli_json(capsys.readouterr().out)
    assert len(report["cases"]) == 10 and not {"ONLY-A", "ONLY-B"} & set(report["summary"])
    # Runs before format 3 were timed once per case, and say so; the interval knows it has one round.
    # (Before format 9 a case had exactly its rounds: min_rounds = rounds, so that differs with them.)
    assert {(s["field"], s["a"], s["b"]) for s in report["settings"]} == {
        ("timing.rounds", "1", "3"),
        ("timing.min_rounds", "1", "3"),
    }
    timed = [c for c in report["cases"] if c["ratio"] is not None]
    assert timed and all("one round" in c["note"] for c in timed)
    assert main(["diff", str(runs(V3_DONE)), str(runs(V3_DONE)), "--format", "json"]) == 0
    same = cli_json(capsys.readouterr().out)
    timed = [c for c in same["cases"] if c["ratio"] is not None]
    assert all(c["ratio"] == pytest.approx(1.0) and c["verdict"] == "SAME" for c in timed)
    assert all("one round" not in c["note"] for c in same["cases"])


def test_format_4_runs_with_user_kernels_read_and_diff_today(runs, capsys):
    """Format 4 named user kernels by hash; today's reader shows them, says the run had no speed-of-light
    calibration, and diffs the correct user kernel's cases against themselves."""
    run = runs(V4_USER_KERNELS)
    manifest = RunStore(run).manifest()
    assert manifest.written_as == 4 and manifest.worker.calibration == "off"
    assert main(["show", str(run), "--format", "json"]) == 1  # the zeros kernel failed
    rows = cli_json(capsys.readouterr().out)
    by = {(r["backend"], r["m"]): r for r in rows}
    assert len(rows) == 12 and by[("my-torch-mm", 16)]["status"] == "ok"
    assert by[("my-zeros", 64)]["status"] == "failed" and "all zeros" in by[("my-zeros", 64)]["reason"]
    assert all(r["pct_sol"] is None for r in rows)  # no calibration then: no speed of light, never a guess
    assert main(["diff", str(run), str(run), "--format", "json"]) == 0
    report = cli_json(capsys.readouterr().out)
    assert not report["settings"] and len(report["cases"]) == 12


def test_a_format_4_run_reruns_with_its_own_worker(runs, tmp_path, monkeypatch, capsys):
    """Format 5 added calibration and the MoE workload; a format-4 run's own worker must get params
    without them, and its records (format 4) merge with today's reader."""
    monkeypatch.setenv("HOME", str(tmp_path))
    run = copy_run(runs(V4_USER_KERNELS), tmp_path / "runs")
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        f"hosts: [{{name: local, transport: local, workdir: ~/.fleetbench/local, "
        f"python: {json.dumps(sys.executable)}}}]\n"
    )
    assert main(["rerun", str(run), "--hosts", "local", "-i", str(inventory), "--format", "json"]) == 1  # zeros fail
    rows = cli_json(capsys.readouterr().out)
    assert {r["attempt"] for r in rows if r["backend"] == "my-zeros"} == {2}
    assert all(r["status"] == "failed" for r in rows if r["backend"] == "my-zeros")
    params = json.loads((run / "hosts" / "local" / "attempt-2" / "params.json").read_text())
    assert params["schema_version"] == 4 and "calibration" not in params
    assert all("moe" not in c for c in params["cases"])
    written = (run / "hosts" / "local" / "attempt-2" / "results.jsonl").read_text()
    assert '"schema_version":4' in written


def rerun_local_host(stored: Path, tmp_path: Path, monkeypatch, capsys) -> Path:
    """A copy of a stored smoke run with 4 timed cases, rerun on the `local` host with its own worker;
    the copy's folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    run = copy_run(stored, tmp_path / "runs")
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        f"hosts: [{{name: local, transport: local, workdir: ~/.fleetbench/local, "
        f"python: {json.dumps(sys.executable)}}}]\n"
    )
    assert main(["rerun", str(run), "--hosts", "local", "-i", str(inventory), "--format", "json"]) == 0
    rows = cli_json(capsys.readouterr().out)
    assert {r["attempt"] for r in rows} == {2} and [r["status"] for r in rows].count("ok") == 4
    return run


def test_a_format_5_run_reruns_with_its_own_worker(runs, tmp_path, monkeypatch, capsys):
    """Format 6 added timing.settle_ms; a format-5 run's own worker gets params without it (it would
    reject the field), keeps its MoE cases, and its records (format 5) merge with today's reader."""
    run = rerun_local_host(runs(V5_MOE), tmp_path, monkeypatch, capsys)
    params = json.loads((run / "hosts" / "local" / "attempt-2" / "params.json").read_text())
    assert params["schema_version"] == 5 and params["calibration"] == "cached"
    assert all("settle_ms" not in c["timing"] for c in params["cases"])
    assert sum(c.get("moe") is not None for c in params["cases"]) == 2
    written = (run / "hosts" / "local" / "attempt-2" / "results.jsonl").read_text()
    assert '"schema_version":5' in written


def test_a_format_6_run_shows_and_diffs_with_one_record_per_case(runs, capsys):
    """Format 7 writes a record per round (`complete: false` until the last); a format-6 run wrote one
    record per case, and every one of them is that case's final word."""
    store = RunStore(runs(V6_DONE))
    assert store.manifest().written_as == 6
    parsed = parse_results(runs(V6_DONE) / "hosts" / "local" / "attempt-1" / "results.jsonl")
    assert parsed.problems == [] and all(r.complete for r in parsed.cases) and len(parsed.cases) == 10
    assert main(["show", str(runs(V6_DONE)), "--format", "json"]) == 0
    rows = cli_json(capsys.readouterr().out)
    assert len(rows) == 10 and "incomplete" not in {r["status"] for r in rows}
    assert main(["diff", str(runs(V6_DONE)), str(runs(V6_DONE)), "--format", "json"]) == 0
    timed = [c for c in cli_json(capsys.readouterr().out)["cases"] if c["ratio"] is not None]
    assert timed and all(c["verdict"] == "SAME" for c in timed)


def test_a_format_6_run_reruns_with_its_own_worker(runs, tmp_path, monkeypatch, capsys):
    """Format 7 added the case limits; a format-6 run's own worker gets params without them (it would
    reject the fields), speaks the old protocol on stdout, and its records merge with today's reader."""
    run = rerun_local_host(runs(V6_DONE), tmp_path, monkeypatch, capsys)
    params = json.loads((run / "hosts" / "local" / "attempt-2" / "params.json").read_text())
    assert params["schema_version"] == 6 and "case_timeout_s" not in params
    written = (run / "hosts" / "local" / "attempt-2" / "results.jsonl").read_text()
    assert '"schema_version":6' in written and '"complete"' not in written


def test_a_format_7_run_reruns_with_its_own_worker_and_diffs_with_itself(runs, tmp_path, monkeypatch, capsys):
    """Format 8 added timing.state and timing.cooldown_ms (burst timing); a format-7 run's own worker gets
    params without them (it would reject the fields) but with its case limits, its rounds' records
    (complete: false, then true) merge with today's reader, and its cases read as settled."""
    store = RunStore(runs(V7_DONE))
    assert store.manifest().written_as == 7
    parsed = parse_results(runs(V7_DONE) / "hosts" / "local" / "attempt-1" / "results.jsonl")
    assert parsed.problems == [] and all(r.case.timing.state == "settled" for r in parsed.cases)
    assert main(["diff", str(runs(V7_DONE)), str(runs(V7_DONE)), "--format", "json"]) == 0
    capsys.readouterr()
    run = rerun_local_host(runs(V7_DONE), tmp_path, monkeypatch, capsys)
    params = json.loads((run / "hosts" / "local" / "attempt-2" / "params.json").read_text())
    assert params["schema_version"] == 7 and "case_timeout_s" in params
    assert all("state" not in c["timing"] and "cooldown_ms" not in c["timing"] for c in params["cases"])
    written = (run / "hosts" / "local" / "attempt-2" / "results.jsonl").read_text()
    assert '"schema_version":7' in written


def test_a_format_9_run_reads_as_replaying_its_first_graph_and_reruns_with_its_own_worker(
    runs, tmp_path, monkeypatch, capsys
):
    """Format 10 added timing.fresh_inputs (a later round builds on inputs allocated afresh); a format-9
    run's cases read as replaying round 1's graph, and its own worker gets params without the field (it
    would reject it) and writes records of its own format."""
    store = RunStore(runs(V9_DONE))
    assert store.manifest().written_as == 9
    assert all(c.timing.fresh_inputs is False for c in store.planned_cases().values())
    parsed = parse_results(runs(V9_DONE) / "hosts" / "local" / "attempt-1" / "results.jsonl")
    assert parsed.problems == [] and parsed.cases and all(r.case.timing.fresh_inputs is False for r in parsed.cases)
    run = rerun_local_host(runs(V9_DONE), tmp_path, monkeypatch, capsys)
    params = json.loads((run / "hosts" / "local" / "attempt-2" / "params.json").read_text())
    assert params["schema_version"] == 9 and params["cases"]
    assert all("fresh_inputs" not in c["timing"] and "head_to_head" in c["timing"] for c in params["cases"])
    written = (run / "hosts" / "local" / "attempt-2" / "results.jsonl").read_text()
    assert '"schema_version":9' in written


def test_a_format_10_run_reads_without_power_and_reruns_with_its_own_worker(runs, tmp_path, monkeypatch, capsys):
    """Format 11 added the GPU's power against its limit (RoundStats.power_w, FactsRecord.power_limit_w);
    a format-10 run reads with none of them, and its own worker gets params of its format and writes records
    of its own format."""
    store = RunStore(runs(V10_DONE))
    assert store.manifest().written_as == 10
    parsed = parse_results(runs(V10_DONE) / "hosts" / "local" / "attempt-1" / "results.jsonl")
    assert parsed.problems == [] and parsed.cases
    assert all(r.power_w is None for rec in parsed.cases if rec.timing for r in rec.timing.rounds)
    assert parsed.facts is not None and parsed.facts.power_limit_w is None
    run = rerun_local_host(runs(V10_DONE), tmp_path, monkeypatch, capsys)
    params = json.loads((run / "hosts" / "local" / "attempt-2" / "params.json").read_text())
    assert params["schema_version"] == 10 and params["cases"]
    written = (run / "hosts" / "local" / "attempt-2" / "results.jsonl").read_text()
    assert '"schema_version":10' in written and "power_limit_w" not in written
