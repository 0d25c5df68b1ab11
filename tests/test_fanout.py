"""The one fan-out (orchestrator/execution/fanout.py): bounded, one result per host, and Ctrl-C that leaves nothing
running, for every multi-host command."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import processes_under, start_cli
from support.signals import interruptible, sigint_raises

from benchmarks.harness.polling import wait_until
from orchestrator.execution.fanout import Cancelled, fan_out


def test_at_most_parallel_hosts_work_at_once_and_every_host_gets_its_result_in_order():
    lock, now, peak = threading.Lock(), [0], [0]

    def work(n: int) -> int:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        if n == 3:
            raise RuntimeError("host 3 broke")
        return n * n

    results = fan_out(list(range(8)), work, parallel=3, name_of=str)
    assert peak[0] == 3
    assert [r.name for r in results] == [str(n) for n in range(8)]
    assert [r.value for r in results if r.ok] == [0, 1, 4, 16, 25, 36, 49]
    assert not results[3].ok and results[3].describe_error() == "RuntimeError: host 3 broke"


def test_ctrl_c_stops_the_fan_out_runs_the_stop_hook_and_starts_no_new_host():
    started, stopped = [], threading.Event()
    cancel = threading.Event()

    def work(n: int) -> None:
        started.append(n)
        if n == 0:  # the first host gets the interrupt to the main thread, as Ctrl-C would
            signal.raise_signal(signal.SIGINT)
        cancel.wait(5)
        if cancel.is_set():
            return

    with sigint_raises(), pytest.raises(KeyboardInterrupt):
        fan_out(list(range(6)), work, parallel=2, name_of=str, cancel=cancel, on_interrupt=stopped.set)
    assert stopped.is_set() and cancel.is_set()
    assert len(started) <= 3  # the hosts that had started, and none after the interrupt
    assert Cancelled.__doc__


def test_ctrl_c_during_hosts_check_stops_every_probe_on_the_hosts(fleet, tmp_path):
    """A probe that takes long (here torch's import) is stopped through its process group."""
    slow = tmp_path / "slow-torch"
    (slow / "torch").mkdir(parents=True)
    (slow / "torch" / "__init__.py").write_text("import time\ntime.sleep(120)\n")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0", "ssh1"], env={"PYTHONPATH": str(slow)})
    proc = start_cli("hosts", "--check", "-i", inv, "--accept-new")
    workdirs = [fleet.host(name).workdir for name in ("ssh0", "ssh1")]
    started = time.time() - 1

    def probing(workdir: Path) -> bool:  # its probe runs and has written its process group (earlier checks left theirs)
        fresh = [p for p in workdir.glob("runs/hostcheck/check-*/pid") if p.stat().st_mtime >= started]
        return bool(fresh and processes_under(workdir))

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(probing(w) for w in workdirs):
        time.sleep(0.1)
    assert all(probing(w) for w in workdirs), "the probes did not start"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 30
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(processes_under(w) for w in workdirs):
        time.sleep(0.1)
    assert not any(processes_under(w) for w in workdirs)


def _slow_program(path: Path) -> Path:
    """A program that says it started (a file beside it), then takes two minutes; its command line names it."""
    import sys

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\nimport pathlib, time\npathlib.Path({str(path) + '.started'!r}).touch()\ntime.sleep(120)\n"
    )
    path.chmod(0o755)
    return path


def _interrupt_when_running(proc, slow: Path, timeout: float = 60) -> str:
    started = Path(str(slow) + ".started")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not started.exists():
        time.sleep(0.1)
    assert started.exists(), "the slow command never started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return err


def test_ctrl_c_during_provision_stops_what_it_runs(tmp_path):
    slow = _slow_program(tmp_path / "bin" / "python3")  # creates the venv: here, for two minutes
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        f"hosts: [{{name: local, transport: local, python: {tmp_path}/venv/bin/python3, workdir: {tmp_path}/work}}]\n"
    )
    proc = start_cli("provision", "-i", inv, "--profile", "minimal", "--base-python", slow)
    err = _interrupt_when_running(proc, slow)
    assert proc.returncode == 130, err
    assert wait_until(lambda: not processes_under(slow), 10), processes_under(slow)


def test_ctrl_c_during_prune_stops_what_it_runs(tmp_path):
    import os
    import subprocess
    import sys

    from conftest import REPO

    runs = tmp_path / "runs"
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts: [{{name: local, transport: local, workdir: {tmp_path}/work}}]\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(REPO / "sweeps" / "noop.yaml"),
            "-i",
            str(inv),
            "--runs-dir",
            str(runs),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    slow = _slow_program(tmp_path / "bin" / "rm")  # removing the run's folder on the host: two minutes
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "prune", "--older-than", "2999-01-01", "--runs-dir", str(runs)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PATH=f"{slow.parent}:{os.environ['PATH']}"),
        preexec_fn=interruptible,
    )
    err = _interrupt_when_running(proc, slow)
    assert proc.returncode == 130, err
    assert wait_until(lambda: not processes_under(slow), 10), processes_under(slow)
    assert list(runs.iterdir())  # interrupted: the run is kept
