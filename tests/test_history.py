"""History (issue 18): the SQLite index of stored runs, `fleetbench history`, and step detection."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml
from cli_output import cli_json
from support.syntheticruns import make_run

from orchestrator.analysis.steps import detect_steps
from orchestrator.cli import main
from orchestrator.runs.index import INDEX_NAME, RunIndex

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
    data = json.loads(
        re.search(r'<script type="application/json" id="fleetbench-data">(.*?)</script>', text, re.S).group(1)
    )
    trends = [c for c in data["charts"] if c["kind"] == "trend"]
    assert len(trends) == 12 and trends[0]["title"].startswith(
        "History (1 of the 12 cases of this run that moved most over 7 stored runs)"
    )
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
    err = capsys.readouterr().err
    assert f"error: the history index {runs / INDEX_NAME} cannot be used" in err and len(err.splitlines()) == 1
    assert main(["report", "latest", "--history", "-o", str(tmp_path / "r.html"), "--runs-dir", str(runs)]) == 2
    assert "cannot be used" in capsys.readouterr().err


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
    assert (
        main(
            [
                "history",
                "--runs-dir",
                str(tmp_path),
                "--backend",
                "torch-bf16",
                "--m",
                "16",
                "--host",
                "h2",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("series,run_id,created_at,host") and len(lines) == 1 + 3


# -- issue 27: a history you can lean on ---------------------------------------------------------------
def _three_runs(runs: Path) -> list[str]:
    ids = [f"202612{d:02d}-000000-x-{d:04d}" for d in range(1, 4)]
    for d, run_id in enumerate(ids, 1):
        make_run(runs, run_id, {"h": 1.0}, seed=d)
    return ids


def _garble_the_results_table(index: Path) -> None:
    """Overwrite the pages of the results table and its indexes, leaving the runs table readable: the
    damage shows only when a query reads results."""
    db = sqlite3.connect(index)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    roots = [r for (r,) in db.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name = 'results' AND rootpage > 0")]
    db.close()
    with open(index, "r+b") as f:
        for root in roots:
            f.seek((root - 1) * page_size)
            f.write(b"\xff" * page_size)


def _foreign_database(path: Path) -> None:
    """Another program's SQLite file, with a key/value `meta` table as many have."""
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    with db:
        db.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('format', '1');"
            "CREATE TABLE users (name TEXT);"
        )
    db.close()


@pytest.mark.parametrize("damage", ["garbled results", "truncated", "foreign database"])
def test_a_damaged_or_foreign_index_is_rebuilt_without_being_asked_by_history_and_report(tmp_path, capsys, damage):
    runs = tmp_path / "runs"
    ids = _three_runs(runs)
    code, first = history_json(capsys, runs)
    assert code == 0 and len({p["run_id"] for p in first["points"]}) == 3
    index = runs / INDEX_NAME
    for command in ("history", "report"):
        if damage == "garbled results":
            _garble_the_results_table(index)
        elif damage == "truncated":
            with open(index, "r+b") as f:
                f.truncate(index.stat().st_size // 3)
        else:
            _foreign_database(index)
        if command == "history":
            code = main(["history", "--runs-dir", str(runs), "--format", "json"])
            out, err = capsys.readouterr()
            assert code == 0 and _points(cli_json(out)) == _points(first)
            assert "note: the history index was rebuilt from the run folders" in err and "error" not in err
        else:
            html = tmp_path / "r.html"
            code = main(["report", ids[-1], "--history", "-o", str(html), "--runs-dir", str(runs)])
            assert code == 0 and '"kind":"trend"' in html.read_text(), capsys.readouterr().err
    code, again = history_json(capsys, runs)
    assert code == 0 and again["index"]["indexed"] == 0 and not again["notes"]  # sound again: nothing to redo


def test_a_results_file_edited_in_place_is_reindexed(tmp_path, capsys):
    runs = tmp_path / "runs"
    ids = _three_runs(runs)
    code, before = history_json(capsys, runs, "--backend", "torch-bf16", "--m", 16)
    assert code == 0 and len(before["points"]) == 3
    results = next((runs / ids[1] / "hosts").glob("*/attempt-1/results.jsonl"))
    lines = results.read_text().splitlines(keepends=True)
    edited = []
    for line in lines:  # the m=16 torch-bf16 record made three times slower, written into the same file
        record = json.loads(line)
        if record.get("kind") == "case" and record["case"]["m"] == 16 and record["case"]["backend"] == "torch-bf16":
            record["timing"]["median_us"] *= 3
            line = json.dumps(record) + "\n"
        edited.append(line)
    with open(results, "r+", encoding="utf-8") as f:  # in place: same file, same folder
        f.write("".join(edited))
        f.truncate()
    code, after = history_json(capsys, runs, "--backend", "torch-bf16", "--m", 16)
    assert code == 0 and after["index"]["indexed"] == 1
    medians = {p["run_id"]: p["median_us"] for p in after["points"]}
    old = {p["run_id"]: p["median_us"] for p in before["points"]}
    assert medians[ids[1]] == pytest.approx(3 * old[ids[1]]) and medians[ids[0]] == old[ids[0]]


def _set_in_run(run_dir: Path, backend: str, m: int, change) -> None:
    """change(case_spec_dict, record_dict_or_None) on one case, in the manifest and the results."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for spec in manifest["cases"].values():
        if spec["backend"] == backend and spec["m"] == m:
            change(spec, None)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    for results in (run_dir / "hosts").glob("*/attempt-*/results.jsonl"):
        lines = []
        for line in results.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "case" and record["case"]["backend"] == backend and record["case"]["m"] == m:
                change(record["case"], record)
            lines.append(json.dumps(record) + "\n")
        results.write_text("".join(lines))


def test_odd_stored_values_never_crash_history_and_are_named(tmp_path, capsys):
    """A run from elsewhere may hold any number its format allows: a K beyond SQLite's integers (what a
    sweep with k: 1e23 stored), a median that is no time at all."""
    runs = tmp_path / "runs"
    ids = _three_runs(runs)

    def huge_k(spec, record):
        spec["k"] = 10**23

    def absurd_median(spec, record):
        if record is not None:
            record["timing"]["median_us"] = 1e300

    def infinite_median(spec, record):
        if record is not None:
            record["timing"]["median_us"] = math.inf

    _set_in_run(runs / ids[2], "torch-bf16", 16, huge_k)
    _set_in_run(runs / ids[2], "torch-bf16", 32, absurd_median)
    _set_in_run(runs / ids[1], "torch-bf16", 32, infinite_median)
    code = main(["history", "--runs-dir", str(runs), "--backend", "torch-bf16", "--steps", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = cli_json(out)
    assert len(doc["points"]) == 3 * 100 - 3  # everything else is there
    assert f"note: run {ids[2]}: 2 result(s) left out" in err and "K 100000000000000000000000 is out of range" in err
    assert f"note: run {ids[1]}: 1 result(s) left out" in err and "median inf µs is not a kernel's time" in err
    code, doc = history_json(capsys, runs, "--k", 10**23)  # asking for such a size finds nothing
    assert code == 0 and doc["points"] == []


def test_history_names_the_run_folders_it_cannot_read(tmp_path, capsys):
    runs = tmp_path / "runs"
    ids = _three_runs(runs)
    (runs / ids[0] / "manifest.json").unlink()
    (runs / ids[1] / "manifest.json").write_text("{ not json")
    code = main(["history", "--runs-dir", str(runs), "--backend", "torch-bf16", "--m", "16"])
    out, err = capsys.readouterr()
    assert code == 0 and ids[2] in out and ids[0] not in out
    notes = [line for line in err.splitlines() if line.startswith("note: run folder")]
    assert notes == [
        f"note: run folder {ids[0]} left out: no manifest.json (the run's plan and cases are lost)",
        f"note: run folder {ids[1]} left out: {runs / ids[1] / 'manifest.json'}: unreadable manifest: "
        "Expecting property name enclosed in double quotes: line 1 column 3 (char 2)",
    ]


def test_history_steps_says_when_it_finds_no_step_and_when_runs_are_too_few(tmp_path, capsys):
    for d in (1, 2):
        make_run(tmp_path, f"202612{d:02d}-000000-x-{d:04d}", {"h1": 1.0, "h2": 1.0}, seed=d)
    code = main(["history", "--runs-dir", str(tmp_path), "--backend", "torch-bf16", "--m", "16", "--steps"])
    err = capsys.readouterr().err
    assert code == 0
    assert err.splitlines() == [
        "note: no step found in 2 series",
        "note: 2 series have too few runs to judge (2; a step needs at least 3)",
    ]
    make_run(tmp_path, "20261203-000000-x-0003", {"h1": 1.0}, seed=3)
    code = main(
        ["history", "--runs-dir", str(tmp_path), "--backend", "torch-bf16", "--m", "16", "--steps", "--format", "json"]
    )
    out, err = capsys.readouterr()
    assert code == 0 and cli_json(out)["notes"] == [
        "no step found in 2 series",
        "1 series has too few runs to judge (2; a step needs at least 3)",
    ]
    assert err.splitlines() == [f"note: {n}" for n in cli_json(out)["notes"]]


def test_every_history_note_the_analysis_returns_has_its_words():
    from orchestrator.analysis import history as analysis
    from orchestrator.views.tables import HISTORY_NOTE_WORDS, history_note_text

    codes = {v for k, v in vars(analysis).items() if k.startswith("NOTE_")}
    assert codes == set(HISTORY_NOTE_WORDS) | {analysis.NOTE_LINK}
    assert history_note_text(analysis.Note(analysis.NOTE_LINK, {"link": Path("runs/x"), "target": "/y"})) == (
        "runs/x is a symbolic link (to /y), not a run folder: left alone"
    )
    too_few = analysis.Note(analysis.NOTE_TOO_FEW_RUNS, {"series": 3, "fewest": 1, "most": 2, "needs": 3})
    assert history_note_text(too_few) == "3 series have too few runs to judge (1 to 2; a step needs at least 3)"
