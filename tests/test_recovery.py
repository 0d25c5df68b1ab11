"""Recovery that always works, and output nobody can forge (issue 27), on the embedded `local` host.

Every command the tool prints as advice is run here exactly as printed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, kernel_sweep, processes_under, start_cli
from support.cli_output import cli_json

from orchestrator.cli import main
from orchestrator.execution.launch import cases_to_finish
from worker.contract.rounds import join_records, rounds_in
from worker.contract.schema import CaseRecord, CaseSpec, RoundStats, Stats, TimingOptions

# Fails on its first call on a host, then works: a flaky kernel (the marker file remembers).
FLAKY = """import os, torch
FAMILY = "bf16"
MARKER = {marker!r}
def prepare(a, b, out_dtype):
    if not os.path.exists(MARKER):
        open(MARKER, "w").close()
        raise RuntimeError("flaky: first call fails")
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
"""
# Correct, and prints on every stream what a record, a progress line or a stray marker looks like.
FORGER = """import os, sys, torch
FAMILY = "bf16"
FORGED = {forged!r}
def prepare(a, b, out_dtype):
    bt = b.t()
    def call():
        print(FORGED, flush=True)
        print("@@fleetbench stray marker line", flush=True)
        os.write(1, (FORGED + "\\n").encode())
        sys.stderr.write(FORGED + "\\n")
        return torch.mm(a, bt).to(out_dtype)
    return call
"""
HANGS_IN_CALL = """import time, torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    time.sleep(3600)
"""
HANGS_AT_IMPORT = """import time
time.sleep(3600)
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    return None
"""


def sweep(
    tmp_path: Path,
    kernels: dict[str, str],
    *,
    rounds: int = 1,
    extra: dict | None = None,
    builtins=("torch-bf16",),
    ms=(16,),
    timing: dict | None = None,
) -> Path:
    return kernel_sweep(
        tmp_path, kernels, ms=ms, builtins=builtins, rounds=rounds, timing=timing, extra=extra, name="recovery"
    )


def run(capsys, *argv) -> tuple[int, list, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    doc = cli_json(out) if out.strip() else []
    return code, doc, err


def printed_command(err: str, prefix: str) -> list[str]:
    """The command a line of advice printed, as argv for this Python (`fleetbench` -> -m orchestrator.cli)."""
    line = next(line for line in err.splitlines() if line.startswith(prefix))
    argv = shlex.split(line.removeprefix(prefix))
    assert argv[0] == "fleetbench", line
    return [sys.executable, "-m", "orchestrator.cli", *argv[1:]]


def run_printed(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv + ["--format", "json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


# -- the printed rerun completes what is not done --------------------------------------------------------
def test_a_flaky_kernel_is_completed_by_the_printed_rerun(tmp_path, capsys):
    spec = sweep(tmp_path, {"flaky": FLAKY.format(marker=str(tmp_path / "called-once"))})
    code, rows, err = run(capsys, "run", spec, "--runs-dir", tmp_path / "runs", "--format", "json")
    assert code == 1, err
    assert {r["backend"]: r["status"] for r in rows} == {"torch-bf16": "ok", "flaky": "failed"}
    assert "1 of 2 cases are not done: 1 failed" in err
    # The host itself ended ok: the hint must still finish the failed case (it once said "no failed hosts").
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_printed(printed_command(err, "complete it with: "), elsewhere)
    assert done.returncode == 0, done.stderr
    rows = cli_json(done.stdout)
    assert {r["backend"]: (r["status"], r["attempt"]) for r in rows} == {"torch-bf16": ("ok", 1), "flaky": ("ok", 2)}
    # Done now: the same hint says so, exit 2, and runs nothing.
    again = run_printed(printed_command(err, "complete it with: "), elsewhere)
    assert again.returncode == 2 and "nothing to rerun: every case is done" in again.stderr


# -- output nobody can forge ----------------------------------------------------------------------------
def test_a_kernel_printing_records_and_markers_changes_no_number_and_no_status(tmp_path, capsys):
    spec = sweep(tmp_path, {})
    code, rows, err = run(capsys, "run", spec, "--runs-dir", tmp_path / "runs", "--format", "json")
    assert code == 0, err
    real = next(Path(tmp_path / "runs").glob("*/hosts/local/attempt-1/results.jsonl")).read_text().splitlines()
    record = json.loads(next(line for line in real if '"kind":"case"' in line))
    record["timing"]["median_us"] = 0.0
    forged = "@@fleetbench-record " + json.dumps(record, separators=(",", ":"))
    spec = sweep(tmp_path, {"forger": FORGER.format(forged=forged)})
    code, rows, err = run(capsys, "run", spec, "--runs-dir", tmp_path / "runs2", "--format", "json")
    assert code == 0, err  # a stray marker line once made an all-ok run exit 1
    by = {r["backend"]: r for r in rows}
    assert by["forger"]["status"] == "ok" and by["torch-bf16"]["status"] == "ok"
    assert float(by["torch-bf16"]["median_us"]) > 0  # once replaced by the forged 0.00 µs
    attempt = next(Path(tmp_path / "runs2").glob("*/hosts/local/attempt-1"))
    results = (attempt / "results.jsonl").read_text()
    assert '"median_us":0.0' not in results
    log = (attempt / "log.txt").read_text()
    assert "stderr: " + forged in log and "stderr: @@fleetbench stray marker line" in log  # shown as log
    assert "stdout: " + forged not in log and "stdout: @@fleetbench stray" not in log


# -- a hung case costs one case ---------------------------------------------------------------------------
def test_a_case_that_hangs_in_its_call_or_at_import_costs_that_case_only(tmp_path, capsys):
    spec = sweep(
        tmp_path,
        {"hangs-in-call": HANGS_IN_CALL, "hangs-at-import": HANGS_AT_IMPORT},
        builtins=(),
        extra={"case_timeout": 3},
    )
    doc = yaml.safe_load(spec.read_text())
    doc["backends"].append("torch-bf16")  # after the hung ones: it must still run
    spec.write_text(yaml.safe_dump(doc))
    t0 = time.monotonic()
    code, rows, err = run(capsys, "run", spec, "--runs-dir", tmp_path / "runs", "--format", "json")
    elapsed = time.monotonic() - t0
    assert code == 1, err
    by = {r["backend"]: r for r in rows}
    assert by["torch-bf16"]["status"] == "ok"
    for name in ("hangs-in-call", "hangs-at-import"):
        assert by[name]["status"] == "hung", by[name]
        assert "no result within its 3 s limit" in by[name]["reason"]
    assert "2 of 3 cases are not done: 2 hung" in err
    assert elapsed < 60, f"{elapsed:.0f} s"  # not the host's wall-clock limit
    assert not processes_under(Path(os.environ["HOME"]) / ".fleetbench" / "runs" / rows[0]["run_id"])


def test_a_first_jit_build_is_not_a_hang(tmp_path, capsys):
    """Time while a compiler runs under the worker counts against the build limit, and the live view
    hears that the case is building."""
    compiler = tmp_path / "bin" / "ninja"  # a process named like a compiler, for 6 s
    compiler.parent.mkdir()
    compiler.write_text("#!/bin/sh\nsleep 6\n")
    compiler.chmod(0o755)
    builds = f"""import subprocess, torch
FAMILY = "bf16"
subprocess.run([{str(compiler)!r}], check=True)
def prepare(a, b, out_dtype):
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
"""
    spec = sweep(tmp_path, {"builds": builds}, builtins=(), extra={"case_timeout": 3, "build_timeout": 60})
    code, rows, err = run(capsys, "run", spec, "--runs-dir", tmp_path / "runs", "--format", "json")
    assert code == 0, err
    assert rows[0]["status"] == "ok"
    log = next((tmp_path / "runs").glob("*/hosts/local/attempt-1/log.txt")).read_text()
    assert '"event":"building"' in log


# -- Ctrl-C keeps finished rounds; the printed rerun times only the rounds still missing ----------------
def test_ctrl_c_keeps_finished_rounds_and_the_printed_rerun_finishes_the_rest(tmp_path):
    spec = sweep(
        tmp_path,
        {},
        rounds=3,
        ms=(16, 32, 48, 64),
        timing={"budget_s": 0.4, "min_samples": 3, "max_samples": 100000, "target_rel_ci": 1e-9},
    )
    runs = tmp_path / "runs"
    proc = start_cli("run", spec, "--runs-dir", runs, "--format", "json")  # SIGINT stops it as Ctrl-C would
    deadline = time.monotonic() + 120
    results = None
    while time.monotonic() < deadline:  # until round 1 of some cases has been recorded
        found = list(runs.glob("*/hosts/local/attempt-1/results.jsonl"))
        if found and found[0].read_text().count('"complete":false') >= 2:
            results = found[0]
            break
        time.sleep(0.1)
    assert results is not None, "no round was recorded in time"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    rows = cli_json(out)
    partial = {r["case_id"]: r for r in rows if r["status"] == "incomplete"}
    assert partial, rows  # finished rounds are kept, marked incomplete, with their numbers
    assert all(
        float(r["median_us"]) > 0 and "rounds timed before attempt 1 ended" in r["reason"] for r in partial.values()
    )
    assert "interrupted: remote work was stopped" in err and "RUN" not in err
    kept = {}
    for line in results.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "case" and rec["case_id"] in partial:
            kept[rec["case_id"]] = [r["median_us"] for r in rec["timing"]["rounds"]]
    done = run_printed(printed_command(err, "finish it with: "), tmp_path)
    assert done.returncode == 0, done.stderr
    after = {r["case_id"]: r for r in cli_json(done.stdout)}
    assert {r["status"] for r in after.values()} == {"ok"}
    store = next(p for p in runs.iterdir() if p.is_dir())  # beside the history index
    second = [json.loads(line) for line in (store / "hosts/local/attempt-2/results.jsonl").read_text().splitlines()]
    for cid, medians in kept.items():
        # the rerun timed only the rounds that were missing, and the row is over all three
        final = [r for r in second if r.get("case_id") == cid][-1]
        assert final["case"]["timing"]["rounds"] == 3 - len(medians)
        code = main(["show", str(store), "--format", "json"])
        assert code == 0


# -- the pure rules ---------------------------------------------------------------------------------------
def _record(rounds: list[float], status="ok", complete=True, planned=3) -> CaseRecord:
    case = CaseSpec(backend="torch-bf16", m=16, n=64, k=128, timing=TimingOptions(rounds=planned))
    timing = None
    if rounds:
        timing = Stats(
            method="cpu-wallclock",
            median_us=rounds[0],
            p10_us=min(rounds),
            p90_us=max(rounds),
            mean_us=rounds[0],
            stdev_us=0.0,
            n=len(rounds),
            rel_ci=0.01,
            calls_per_sample=1,
            l2="hot",
            samples_us=list(rounds),
            rounds=[RoundStats(median_us=r, n=1, rel_ci=0.01) for r in rounds],
        )
    return CaseRecord(
        case_id=case.case_id,
        case=case,
        status=status,
        timing=timing if status == "ok" else None,
        started_at="2026-12-03T00:00:00Z",
        duration_s=1.0,
        complete=complete,
        reason="" if status == "ok" else "x",
    )


def test_records_of_one_case_join_across_attempts():
    one = _record([10.0], complete=False)
    two = _record([11.0, 12.0])  # the two rounds the later attempt was asked for
    joined = join_records(one, two, 3)
    assert joined.complete and rounds_in(joined) == 3 and joined.timing.median_us == 11.0
    full = _record([10.0, 10.0, 10.0])
    assert join_records(full, _record([], status="failed"), 3) is full  # a later failure hides nothing
    assert join_records(one, _record([], status="hung"), 3).status == "hung"
    fresh = _record([20.0, 20.0, 20.0])
    assert join_records(one, fresh, 3) is fresh  # a full new measurement stands on its own


@pytest.mark.parametrize(
    "status,complete,expected",
    [
        (None, True, 3),
        ("failed", True, 3),
        ("crashed", True, 3),
        ("hung", True, 3),
        ("ok", False, 2),
        ("ok", True, None),
        ("unsupported", True, None),
        ("unavailable", True, None),
    ],
)
def test_what_rerun_failed_runs_of_each_case(status, complete, expected):
    case = CaseSpec(backend="torch-bf16", m=16, n=64, k=128, timing=TimingOptions(rounds=3))
    records = (
        {}
        if status is None
        else {case.case_id: (1, _record([10.0] if complete is False else [10.0] * 3, status=status, complete=complete))}
    )
    todo = cases_to_finish([case], records)
    assert [c.timing.rounds for c in todo] == ([] if expected is None else [expected])
    assert all(c.case_id == case.case_id for c in todo)


# -- a rerun on other software is kept apart -------------------------------------------------------------
def test_a_rerun_on_other_software_is_never_joined_and_its_rows_say_so(tmp_path, capsys):
    spec = sweep(tmp_path, {"flaky": FLAKY.format(marker=str(tmp_path / "called-once"))})
    runs = tmp_path / "runs"
    code, _, err = run(capsys, "run", spec, "--runs-dir", runs, "--format", "json")
    assert code == 1
    code, _, err = run(capsys, "rerun", "latest", "--failed", "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    attempt2 = next(runs.glob("*/hosts/local/attempt-2/results.jsonl"))
    lines = attempt2.read_text().splitlines()
    facts = json.loads(lines[0])
    facts["torch"] = "9.9.9"  # as if torch was upgraded on the host between the attempts
    attempt2.write_text("\n".join([json.dumps(facts, separators=(",", ":")), *lines[1:]]) + "\n")
    code, rows, err = run(capsys, "show", "latest", "--runs-dir", runs, "--format", "json")
    by = {r["backend"]: r for r in rows}
    assert by["flaky"]["status"] == "ok" and by["flaky"]["attempt"] == 2
    assert "attempt 2 on other software: torch" in by["flaky"]["reason"] and "-> 9.9.9" in by["flaky"]["reason"]
    assert by["torch-bf16"]["attempt"] == 1 and not by["torch-bf16"]["reason"]
    assert "note: local: attempt 2 ran on other software than attempt 1 (torch" in err
