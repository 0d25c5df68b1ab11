"""Issue 41: killing only the worker (the child of the supervisor, not the supervisor) in a case whose
earlier rounds were recorded keeps those rounds: the case is recorded crashed in the round in flight, reads
`incomplete` with its finished rounds, and the printed `rerun --failed` times only the rounds it lacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, kernel_sweep, start_cli
from support.cli_output import cli_json


def worker_children(workdir: Path) -> list[int]:
    """Pids of the case loops (`python -m worker run ...`) whose params live under `workdir`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv and b"run" in argv and any(str(workdir).encode() in a for a in argv):
            found.append(int(entry))
    return found


def test_a_killed_worker_keeps_the_finished_rounds_of_its_case_and_the_rerun_times_the_rest(tmp_path):
    spec = kernel_sweep(
        tmp_path,
        {},
        ms=(16,),
        rounds=3,
        name="killed",
        timing={"budget_s": 0.6, "min_samples": 3, "max_samples": 100000, "target_rel_ci": 1e-9},
    )
    work = tmp_path / "work"
    inv = tmp_path / "hosts.yaml"
    inv.write_text(json.dumps({"hosts": [{"name": "local", "transport": "local", "workdir": str(work)}]}))
    runs = tmp_path / "runs"
    proc = start_cli("run", spec, "-i", inv, "--runs-dir", runs, "--format", "json")
    deadline = time.monotonic() + 120
    killed = []
    while time.monotonic() < deadline and not killed:  # round 1 recorded: round 2 of the one case runs
        found = list(runs.glob("*/hosts/local/attempt-1/results.jsonl"))
        if found and '"complete":false' in found[0].read_text():
            for pid in worker_children(work):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)
    assert killed, "round 1 was never recorded, or no worker was found"
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    [row] = cli_json(out)
    assert row["status"] == "incomplete" and float(row["median_us"]) > 0, row  # its finished round, kept
    assert "1 of 3 rounds timed" in row["reason"], row
    store = next(p for p in runs.iterdir() if p.is_dir())
    lines = [json.loads(l) for l in (store / "hosts/local/attempt-1/results.jsonl").read_text().splitlines()]
    assert any(r.get("status") == "crashed" and "SIGKILL" in r["reason"] for r in lines)  # the round in flight
    log = (store / "hosts/local/attempt-1/log.txt").read_text()
    assert "keeps its 1 finished round(s)" in log

    line = next(l for l in err.splitlines() if l.startswith("complete it with: "))
    argv = line.removeprefix("complete it with: ").split()
    assert argv[:2] == ["fleetbench", "rerun"] and "--failed" in argv
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *argv[1:], "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert done.returncode == 0, done.stderr
    [after] = cli_json(done.stdout)
    assert after["status"] == "ok", after
    second = [json.loads(l) for l in (store / "hosts/local/attempt-2/results.jsonl").read_text().splitlines()]
    final = [r for r in second if r.get("kind") == "case"][-1]
    assert final["case"]["timing"]["rounds"] == 2  # only the rounds that were missing were timed
