from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.ci import require
from support.signals import interruptible

from benchmarks.harness.sshfleet import SshFleet, sshd_available, start_fleet

REPO = Path(__file__).resolve().parent.parent
# A correct kernel that fails as FLEETBENCH_TEST_FAULT says (tests/kernels/faulty.py), as a sweep backend.
FAULTY = {"name": "faulty", "file": str(REPO / "tests" / "kernels" / "faulty.py")}
FLEET_SIZE = 4


@pytest.fixture(scope="session", autouse=True)
def private_home_and_locks(tmp_path_factory):
    """Tests write only under their own temporary folders: HOME (where the `local` host's default
    workdir ~/.fleetbench lies) and the GPU lock folder are the session's, never the machine's (local
    hosts inherit this environment; the sshd fleet's inventories name their own lock folder)."""
    values = {
        "HOME": str(tmp_path_factory.mktemp("home")),
        "FLEETBENCH_LOCK_DIR": str(tmp_path_factory.mktemp("gpu-locks")),
    }
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    yield values
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def stored_runs(tmp_path_factory) -> Path:
    """tests/fixtures/runs-v*.tar.gz unpacked: run folders written by earlier fleetbench versions."""
    import tarfile

    root = tmp_path_factory.mktemp("stored-runs")
    for archive in sorted((REPO / "tests" / "fixtures").glob("runs-v*.tar.gz")):
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")
    return root


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory) -> SshFleet:
    """Four real OpenSSH servers on loopback. In CI a missing sshd is a failure, not a skip."""
    require(sshd_available(), "OpenSSH server not installed (apt-get install openssh-server); `make test` installs it")
    fleet = start_fleet(tmp_path_factory.mktemp("fleet"), FLEET_SIZE)
    yield fleet
    fleet.stop()


@pytest.fixture
def fleet(ssh_fleet: SshFleet) -> SshFleet:
    """The session fleet, every host alive and answering at the start of each test."""
    for h in ssh_fleet.hosts:
        h.thaw()
        if h.proc is None or h.proc.poll() is not None:
            h.restart()
    return ssh_fleet


def set_host_field(inv: Path, host: str, **fields) -> None:
    doc = yaml.safe_load(inv.read_text())
    for h in doc["hosts"]:
        if h["name"] == host:
            h.update(fields)
    inv.write_text(yaml.safe_dump(doc))


def start_cli(*argv) -> subprocess.Popen:
    """The CLI started with `argv`, output piped; SIGINT stops it as Ctrl-C would, whatever this test run
    inherited (support.signals)."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *map(str, argv)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )


def cases_ended(runs: Path, slot: str) -> int:
    logs = list(runs.glob(f"*/hosts/{slot}/attempt-1/log.txt"))
    return logs[0].read_text().count('"event":"end"') if logs else 0


def processes_under(path: Path) -> list[int]:
    """Processes whose command line mentions `path` (the remote side of a run lives there)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmdline:
                found.append(int(entry))
    return found


def slow_sweep(path: Path, shapes: int = 8, budget: float = 0.4) -> Path:
    """CPU cases that each take about `budget` seconds (the CI target is unreachable on purpose), in one
    round: a case's record then lands as soon as it is timed."""
    doc = {
        "name": "slow",
        "backends": ["torch-bf16"],
        "shapes": [{"m": [16 * (i + 1) for i in range(shapes)], "n": 64, "k": 128, "label": "slow"}],
        "timing": {
            "budget_s": budget,
            "warmup_ms": 1,
            "min_samples": 3,
            "max_samples": 100000,
            "target_rel_ci": 1e-9,
            "rounds": 1,
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def write_sweep(
    path: Path,
    *,
    label: str = "t",
    backends=("torch-bf16", "reference-nvfp4"),
    ms=(16,),
    n: int = 64,
    k: int = 128,
    extra: str = "",
) -> Path:
    doc = {
        "name": "test",
        "backends": list(backends),
        "shapes": [{"m": list(ms), "n": n, "k": k, "label": label}],
        "timing": {"budget_s": 0.05, "warmup_ms": 1, "min_samples": 3, "max_samples": 20},
    }
    path.write_text(yaml.safe_dump(doc, allow_unicode=True) + extra, encoding="utf-8")
    return path


@pytest.fixture
def sweep_file(tmp_path) -> Path:
    return write_sweep(tmp_path / "sweep.yaml")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real one-node Slurm cluster (munged, slurmctld, slurmd) started for the session, stopped after.
    In CI a missing Slurm is a failure, not a skip."""
    from support.slurmcluster import slurm_available, start_cluster

    why = slurm_available()
    require(not why, f"{why}; `make test` installs it")
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


def kernel_sweep(
    tmp_path: Path,
    kernels: dict,
    *,
    ms=(16,),
    builtins=("torch-bf16",),
    rounds: int = 2,
    timing: dict | None = None,
    extra: dict | None = None,
    name: str = "byo",
) -> Path:
    """A sweep of `builtins` and the user kernels {name: source} (written to kernels/), on M in `ms` x
    64 x 128, timed fast: the file's path."""
    kdir = tmp_path / "kernels"
    kdir.mkdir(exist_ok=True)
    backends: list = list(builtins)
    for kernel, source in kernels.items():
        (kdir / f"{kernel}.py").write_text(source)
        backends.append({"name": kernel, "file": f"kernels/{kernel}.py"})
    doc = {
        "name": name,
        "backends": backends,
        "shapes": [{"m": list(ms), "n": 64, "k": 128}],
        "timing": {
            "budget_s": 0.05,
            "warmup_ms": 1,
            "min_samples": 3,
            "max_samples": 20,
            "rounds": rounds,
            **(timing or {}),
        },
        **(extra or {}),
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
