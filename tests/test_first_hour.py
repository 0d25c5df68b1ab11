"""A new user's first hour (issue 27): every command they try either does what it says or says, in one
`error:` line with exit 2, why it cannot; the listings count what happened, not what the hosts said."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from support.syntheticruns import make_run

from orchestrator.cli import main


def one_error(capsys) -> str:
    """The single `error:` line a refused command printed (and nothing that looks like a traceback)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def local_inventory(tmp_path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts: [{name: local, transport: local}]\n")
    return path


# -- report ---------------------------------------------------------------------------------------------
def test_report_to_a_folder_or_an_unwritable_place_is_one_error_line(tmp_path, capsys):
    make_run(tmp_path, "r", {"h1": 1.0}, seed=1)
    assert main(["report", "r", "-o", str(tmp_path), "--runs-dir", str(tmp_path)]) == 2
    assert f"-o {tmp_path}: is a folder" in one_error(capsys)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere: a path under a file cannot be written by anyone
        locked = tmp_path / "r" / "manifest.json"
    assert main(["report", "r", "-o", str(locked / "report.html"), "--runs-dir", str(tmp_path)]) == 2
    assert "cannot write the report there" in one_error(capsys)


def test_report_of_a_dry_run_says_nothing_ran(tmp_path, capsys, local_inventory):
    runs = tmp_path / "runs"
    assert (
        main(
            [
                "render",
                str(Path(__file__).parent.parent / "sweeps" / "noop.yaml"),
                "-i",
                str(local_inventory),
                "--runs-dir",
                str(runs),
                "--quiet",
            ]
        )
        == 0
    )
    dry = next(runs.iterdir())
    capsys.readouterr()
    assert main(["report", str(dry), "-o", str(tmp_path / "r.html")]) == 2
    assert "is a dry run of `fleetbench render`: nothing ran" in one_error(capsys)
    make_run(runs, "real", {"h1": 1.0}, seed=2)
    assert main(["report", "real", "--against", dry.name, "-o", str(tmp_path / "r.html"), "--runs-dir", str(runs)]) == 2
    assert "is a dry run" in one_error(capsys)


def test_a_host_that_never_said_what_it_is_gets_blank_facts_in_the_report(tmp_path, capsys):
    store = make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.0}, seed=3)
    for results in store.dir.glob("hosts/h2/attempt-*/results.jsonl"):
        results.write_text("")  # h2 reported nothing at all: no facts record
    assert main(["report", "r", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)]) == 0
    assert "<td>h2</td>" in (tmp_path / "r.html").read_text()


def test_report_history_with_a_broken_index_is_one_error_line_or_a_report(tmp_path, capsys, monkeypatch):
    make_run(tmp_path, "r", {"h1": 1.0}, seed=4)
    (tmp_path / ".index.sqlite").write_bytes(b"this is not a database" * 100)
    code = main(["report", "r", "--history", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)])
    if code == 2:  # an index that is not rebuilt by itself must at least say so in one line
        assert "--history: the history index" in one_error(capsys)
    else:
        assert code == 0 and (tmp_path / "r.html").is_file() and "Traceback" not in capsys.readouterr().err
    from orchestrator.runs.index import RunIndex

    def broken(*args, **kwargs):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(RunIndex, "open", broken)
    assert main(["report", "r", "--history", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)]) == 2
    assert "the history index of" in one_error(capsys)
    assert main(["report", "r", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)]) == 0  # as it says


# -- runs and prune -------------------------------------------------------------------------------------
ZEROS = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    out = torch.zeros((a.shape[0], b.shape[0]), dtype=out_dtype)
    return lambda: out
"""


def test_runs_counts_cases_by_status_and_names_a_run_whose_manifest_is_gone(tmp_path, capsys, local_inventory):
    import yaml
    from cli_output import cli_json

    (tmp_path / "zeros.py").write_text(ZEROS)
    sweep = tmp_path / "one.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "one",
                "backends": [{"name": "zeros", "file": "zeros.py"}],
                "shapes": [{"m": 16, "n": 64, "k": 128}],
                "timing": {"budget_s": 0.05, "warmup_ms": 1, "min_samples": 3},
            }
        )
    )
    runs = tmp_path / "runs"
    assert main(["run", str(sweep), "-i", str(local_inventory), "--runs-dir", str(runs), "--format", "json"]) == 1
    assert main(["run", str(sweep), "-i", str(local_inventory), "--runs-dir", str(runs), "--format", "json"]) == 1
    capsys.readouterr()
    first, second = sorted(p for p in runs.iterdir() if p.is_dir())
    assert main(["runs", "--runs-dir", str(runs), "--format", "json"]) == 0
    listed = {e["run_id"]: e for e in cli_json(capsys.readouterr().out)}
    assert listed[first.name]["summary"] == "cases: 1 failed; hosts: 1 ok"  # the host ended ok, its case did not
    assert listed[first.name]["case_statuses"] == {"failed": 1}
    (second / "manifest.json").unlink()
    assert main(["runs", "--runs-dir", str(runs), "--format", "json"]) == 0
    listed = {e["run_id"]: e for e in cli_json(capsys.readouterr().out)}
    assert set(listed) == {first.name, second.name}
    assert (
        listed[second.name]["summary"].startswith("unreadable: ")
        and "no manifest.json" in listed[second.name]["summary"]
    )


def test_runs_and_prune_on_a_missing_folder_or_a_file_are_errors(tmp_path, capsys):
    for command in (["runs"], ["prune", "--keep", "1"]):
        assert main([*command, "--runs-dir", str(tmp_path / "nowhere")]) == 2
        assert f"--runs-dir {tmp_path / 'nowhere'}: does not exist" in one_error(capsys)
        (tmp_path / "a-file").write_text("")
        assert main([*command, "--runs-dir", str(tmp_path / "a-file")]) == 2
        assert "is a file, not a folder of runs" in one_error(capsys)


def test_dry_runs_do_not_count_toward_prune_keep(tmp_path, capsys, local_inventory):
    runs = tmp_path / "runs"
    make_run(runs, "20260101-000000-old", {"h": 1.0}, seed=5)
    make_run(runs, "20260102-000000-new", {"h": 1.0}, seed=6)
    noop = str(Path(__file__).parent.parent / "sweeps" / "noop.yaml")
    for _ in range(2):  # dry runs, newer than both runs
        assert main(["render", noop, "-i", str(local_inventory), "--runs-dir", str(runs), "--quiet"]) == 0
    dry = sorted(p.name for p in runs.iterdir() if p.name.startswith("2026") and "noop" in p.name)
    capsys.readouterr()
    assert main(["prune", "--keep", "1", "--runs-dir", str(runs), "--dry-run", "--local-only"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["would prune 20260101-000000-old", f"would prune {dry[0]} (dry run of render)"]


# -- two runs at once on a CPU host ----------------------------------------------------------------------
def test_a_cpu_host_is_locked_like_a_gpu_and_a_second_run_waits_for_it(tmp_path, local_inventory):
    """Two sweeps timing on one CPU measure each other: the second waits for the first (and says so), as
    on a GPU, and gives up after --lock-timeout naming the holder."""
    import time

    from conftest import start_cli, write_sweep

    from worker.host.gpulock import CPU, gpu_lock

    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    runs = tmp_path / "runs"
    with gpu_lock("the-other-run", "local", 0, ids=[CPU]):
        proc = start_cli("run", sweep, "-i", local_inventory, "--runs-dir", runs, "--lock-timeout", "1")
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert any("waiting" in line and "the-other-run" in line for line in err.splitlines()), err
    assert "the CPU of host local is busy: locked by run the-other-run (host local" in err

    runs = tmp_path / "waited"
    held = gpu_lock("the-other-run", "local", 0, ids=[CPU])
    held.__enter__()
    try:
        proc = start_cli("run", sweep, "-i", local_inventory, "--runs-dir", runs, "--lock-timeout", "120")
        deadline = time.monotonic() + 60
        while not any('"event":"lock-wait"' in log.read_text() for log in runs.glob("*/hosts/local/attempt-*/log.txt")):
            assert proc.poll() is None and time.monotonic() < deadline, "the second run never waited for the lock"
            time.sleep(0.1)
    finally:
        held.__exit__(None, None, None)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


# -- what the report says ---------------------------------------------------------------------------------
def test_the_report_says_median_of_rounds_and_gives_cpu_numbers_their_digits(tmp_path, capsys, local_inventory):
    import re

    runs = tmp_path / "runs"
    sweep = Path(__file__).parent.parent / "sweeps" / "smoke.yaml"
    assert main(["run", str(sweep), "-i", str(local_inventory), "--runs-dir", str(runs), "--format", "json"]) == 0
    page = tmp_path / "r.html"
    assert main(["report", "latest", "-o", str(page), "--runs-dir", str(runs)]) == 0
    text = page.read_text()
    assert "medians of raw samples" not in text and "median of rounds" in text
    table = text[text.index("<h2>Results and verdicts</h2>") :]
    header = re.findall(r"<th>(.*?)</th>", table.split("</tr>")[0])
    at = {name: i for i, name in enumerate(header)}
    ok_rows = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in table.split("</tr>")[1:] if ">ok<" in row]
    assert ok_rows
    for cells in ok_rows:  # a CPU's TFLOPS are small, never "0.0"; three significant digits each
        tflops, us = cells[at["TFLOPS"]], cells[at["µs (median of rounds)"]]
        assert float(tflops) > 0 and len(tflops.lstrip("0.").replace(".", "")) >= 3, tflops
        assert float(us) > 0 and len(us.lstrip("0.").replace(".", "")) >= 4, us


def test_the_forest_plot_draws_ratios_on_a_log_axis(tmp_path):
    """B 4x slower on one host, the same on another: 1, 2 and 4 are evenly spaced on the axis (a linear
    axis put 4 twice as far from 2 as 2 from 1)."""
    import html as htmlmod
    import json
    import re

    from support.browser import chromium, headless

    browser = chromium()
    make_run(tmp_path, "a", {"h1": 1.0, "h2": 1.0}, seed=61)
    make_run(tmp_path, "b", {"h1": 4.0, "h2": 1.0}, seed=62)
    page = tmp_path / "r.html"
    assert main(["report", "b", "--against", "a", "-o", str(page), "--runs-dir", str(tmp_path)]) == 0
    probe = """<script>(function () {
      var ticks = {};
      document.querySelectorAll('figure.chart[data-kind="forest"] g.axis text').forEach(function (t) {
        if (t.getAttribute("x") && /^[0-9.\\/]+$/.test(t.textContent)) ticks[t.textContent] = +t.getAttribute("x"); });
      var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(ticks);
      document.body.appendChild(pre); })();</script>"""
    (tmp_path / "probe.html").write_text(page.read_text().replace("</body>", probe + "</body>"))
    proc = headless(browser, tmp_path / "probe.html", tmp_path, "--dump-dom")
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    x = json.loads(htmlmod.unescape(found.group(1)))
    assert {"1", "2", "4"} <= set(x), x
    assert abs((x["4"] - x["2"]) - (x["2"] - x["1"])) < 1.0, x
