"""Clock locking (issue 30), against a stand-in `nvidia-smi` only: the lent GPU's clocks are never touched.
A host with `clocks: lock` gets its SM clock held at the GPU's default applications clock for the sweep
and reset after, however the sweep ends; without it, nothing is changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_output import cli_json
from conftest import REPO, kernel_sweep
from support.signals import interruptible

FAKE_GPU = "GPU-00000000-fake-0000-0000-000000000000"


def stand_in(tmp_path: Path, lock_s: float = 0.0) -> tuple[Path, Path]:
    """A `nvidia-smi` that logs every call, answers the default-clock query with 1755 MHz, and takes
    `lock_s` seconds to lock."""
    bindir, calls = tmp_path / "bin", tmp_path / "nvidia-smi.calls"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(
        f"#!{sys.executable}\nimport sys, time\nopen({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if any(a.startswith('--query-gpu=clocks.default_applications') for a in sys.argv):\n"
        "    print('1755')\n"
        f"if any(a.startswith('--lock-gpu-clocks') for a in sys.argv):\n    time.sleep({lock_s})\n"
    )
    smi.chmod(0o755)
    return bindir, calls


def inventory(tmp_path: Path, bindir: Path, clocks: str) -> Path:
    # FLASHINFER_WORKSPACE_BASE: the host's caches (and its clock-lock records) in this test's folder
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "CUDA_VISIBLE_DEVICES": FAKE_GPU,
        "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "cache"),
    }
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        json.dumps(
            {
                "hosts": [
                    {
                        "name": "local",
                        "transport": "local",
                        "clocks": clocks,
                        "env": env,
                        "workdir": str(tmp_path / "work"),
                    }
                ]
            }
        )
    )
    return inv


def cli(*argv) -> subprocess.Popen:
    """The CLI as a user starts it; SIGINT at its default whatever this run inherited (a test stops it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *map(str, argv)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )


def test_a_host_with_clocks_lock_runs_its_sweep_locked_then_reset_and_says_so(tmp_path):
    bindir, calls = stand_in(tmp_path)
    sweep = kernel_sweep(tmp_path, {}, rounds=1)
    proc = cli(
        "run", sweep, "-i", inventory(tmp_path, bindir, "lock"), "--runs-dir", tmp_path / "runs", "--format", "json"
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    lines = calls.read_text().splitlines()
    assert f"-i {FAKE_GPU} --lock-gpu-clocks=1755,1755" in lines
    assert lines[-1] == f"-i {FAKE_GPU} --reset-gpu-clocks"
    facts = json.loads(
        next((tmp_path / "runs").glob("*/hosts/local/attempt-1/results.jsonl")).read_text().splitlines()[0]
    )
    assert facts["sm_clock_locked_mhz"] == 1755
    assert {r["status"] for r in cli_json(out)} == {"ok"}


@pytest.mark.parametrize("lock_s", [0.0, 2.0])
def test_the_clock_is_given_back_after_ctrl_c(tmp_path, lock_s):
    """Ctrl-C while the sweep runs locked, or while nvidia-smi is still locking (lock_s: a stop that came
    before the supervisor's SIGTERM handler was in place left the clock locked)."""
    bindir, calls = stand_in(tmp_path, lock_s)
    sweep = kernel_sweep(
        tmp_path,
        {},
        ms=(16, 32, 48, 64, 80, 96),
        rounds=3,
        timing={"budget_s": 0.4, "max_samples": 100000, "target_rel_ci": 1e-9},
    )
    proc = cli("run", sweep, "-i", inventory(tmp_path, bindir, "lock"), "--runs-dir", tmp_path / "runs")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (calls.exists() and "--lock-gpu-clocks" in calls.read_text()):
        time.sleep(0.1)
    assert "--lock-gpu-clocks" in calls.read_text(), "the clock was never locked"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not calls.read_text().rstrip().endswith("--reset-gpu-clocks"):
        time.sleep(0.1)
    assert calls.read_text().splitlines()[-1] == f"-i {FAKE_GPU} --reset-gpu-clocks"


def test_without_clocks_lock_nvidia_smi_changes_nothing(tmp_path):
    bindir, calls = stand_in(tmp_path)
    proc = cli(
        "run",
        kernel_sweep(tmp_path, {}, rounds=1),
        "-i",
        inventory(tmp_path, bindir, "leave"),
        "--runs-dir",
        tmp_path / "runs",
        "--format",
        "json",
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert not calls.exists() or not any("lock" in c or "reset" in c for c in calls.read_text().splitlines())


def supervisors_of(tmp_path: Path) -> list[int]:
    """Pids of this test's worker supervisors (their command line names the test's workdir)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"supervise" in argv and any(str(tmp_path).encode() in a for a in argv):
            found.append(int(proc.name))
    return found


def test_a_clock_left_locked_by_a_killed_supervisor_is_reset_by_the_next_sweep_on_that_gpu(tmp_path):
    """SIGKILL cannot be caught, so a supervisor killed while it holds the clock locked cannot give it back;
    the record it left names it, and the next sweep on that GPU (here one that does not lock) resets it
    before it measures anything, and says so."""
    bindir, calls = stand_in(tmp_path)
    inv = inventory(tmp_path, bindir, "lock")
    sweep = kernel_sweep(
        tmp_path,
        {},
        ms=(16, 32, 48, 64, 80, 96),
        rounds=3,
        timing={"budget_s": 0.4, "max_samples": 100000, "target_rel_ci": 1e-9},
    )
    proc = cli("run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (calls.exists() and "--lock-gpu-clocks" in calls.read_text()):
        time.sleep(0.1)
    assert "--lock-gpu-clocks" in calls.read_text(), "the clock was never locked"
    for pid in supervisors_of(tmp_path):
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    records = list((tmp_path / "cache").glob(".cache/fleetbench/clock-lock-*.json"))
    assert len(records) == 1 and not calls.read_text().rstrip().endswith("--reset-gpu-clocks")  # left locked

    again = cli(
        "run",
        kernel_sweep(tmp_path, {}, rounds=1),
        "-i",
        inventory(tmp_path, bindir, "leave"),
        "--runs-dir",
        tmp_path / "runs",
        "--format",
        "json",
    )
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    lines = calls.read_text().splitlines()
    assert lines[-1] == f"-i {FAKE_GPU} --reset-gpu-clocks" and not records[0].exists()
    log = next(
        p
        for p in sorted((tmp_path / "runs").glob("*/hosts/local/attempt-1/log.txt"))
        if "was left locked" in p.read_text()
    )
    assert "by a sweep that was killed" in log.read_text()


# -- issue 41: a lock that cannot apply is said on the console and by `hosts --check` ----------------------
def refusing_stand_in(tmp_path: Path, default: str = "1755") -> tuple[Path, Path]:
    """A `nvidia-smi` that answers the default-clock query with `default` and refuses to lock, as it does
    for a user who is not root."""
    bindir, calls = tmp_path / "bin", tmp_path / "nvidia-smi.calls"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(
        f"#!{sys.executable}\nimport sys\nopen({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if any(a.startswith('--query-gpu=clocks.default_applications') for a in sys.argv):\n"
        f"    print({default!r})\n"
        "if any(a.startswith('--lock-gpu-clocks') for a in sys.argv):\n"
        "    print('Insufficient Permissions'); sys.exit(4)\n"
    )
    smi.chmod(0o755)
    return bindir, calls


def test_a_host_that_cannot_lock_its_clock_says_so_on_the_console(tmp_path):
    bindir, calls = refusing_stand_in(tmp_path)
    sweep = kernel_sweep(tmp_path, {}, rounds=1)
    proc = cli("run", sweep, "-i", inventory(tmp_path, bindir, "lock"), "--runs-dir", tmp_path / "runs")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err  # the cases ran, unlocked: the numbers are valid, the facts say so
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if "clocks" in line]
    assert said == [
        f"local: clocks: lock was asked, but the clock was not locked: nvidia-smi could not lock GPU "
        f"{FAKE_GPU} at 1755 MHz (Insufficient Permissions): not locked (locking needs root)"
    ], err


def test_a_cpu_host_asked_to_lock_says_there_is_nothing_to_lock(tmp_path):
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        json.dumps(
            {"hosts": [{"name": "local", "transport": "local", "clocks": "lock", "workdir": str(tmp_path / "work")}]}
        )
    )
    sweep = kernel_sweep(tmp_path, {}, rounds=1)
    proc = cli("run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert [line for line in err.splitlines() if "clocks" in line] == [
        "local: clocks: lock was asked, but the clock was not locked: lock was asked, but this host times on its "
        "CPU: nothing to lock"
    ], err


@pytest.mark.parametrize(
    "default, ready, said",
    [
        ("1755", True, f"local: clocks: lock: can lock GPU {FAKE_GPU} at 1755 MHz"),
        (
            "[N/A]",
            False,
            f"local: not ready (ok): clocks: lock cannot apply here: the default clock of GPU {FAKE_GPU} "
            "cannot be read, so it cannot be locked (sweeps run with the clock unlocked; set clocks: "
            "leave, or run the worker as root)",
        ),
    ],
)
def test_hosts_check_says_whether_a_host_with_clocks_lock_can_lock(tmp_path, default, ready, said):
    if os.geteuid() != 0 and ready:
        pytest.skip("locking needs root: this test's user cannot")
    bindir, calls = refusing_stand_in(tmp_path, default)
    proc = cli("hosts", "-i", inventory(tmp_path, bindir, "lock"), "--check", "--format", "json")
    out, err = proc.communicate(timeout=300)
    assert "Traceback" not in err
    assert said in err.splitlines(), err
    assert (proc.returncode == 0) == ready, err
    assert (
        "--lock-gpu-clocks" not in calls.read_text() and "--reset-gpu-clocks" not in calls.read_text()
    )  # nothing changed


def test_the_lock_probe_names_root_when_the_worker_is_not_root(monkeypatch, tmp_path):
    from worker.host import clocks

    bindir, _ = refusing_stand_in(tmp_path)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert clocks.lock_readiness([FAKE_GPU]) == (False, "locking needs root and the worker runs as uid 1000")
