"""A real Slurm cluster of one node on this machine, for tests: munged, slurmctld and slurmd from
Debian's packages, configured in a temporary folder and started without systemd (own ports, own munge
key and socket, state and logs under the folder). Commands reach it through SLURM_CONF."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "srun", "squeue", "scancel", "sinfo")
DAEMON_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _which(name: str) -> str | None:
    return shutil.which(name) or next((f"{d}/{name}" for d in DAEMON_DIRS if os.path.exists(f"{d}/{name}")), None)


def slurm_available() -> str:
    """Why a cluster cannot start here ('' when it can)."""
    missing = [b for b in BINARIES if _which(b) is None]
    if missing:
        return f"Slurm or munge not installed (missing {', '.join(missing)}: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    partition: str = "debug"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [_which(argv[0]), *argv[1:]],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
        )

    def jobs(self, prefix: str = "fleetbench-") -> list[tuple[str, str, str]]:
        """(id, name, state) of the jobs Slurm knows whose name starts with prefix, ended ones included."""
        out = self.command("squeue", "--noheader", "--states=all", "--format=%i|%j|%T").stdout
        rows = [tuple(line.strip().split("|")) for line in out.splitlines() if line.strip()]
        return [r for r in rows if len(r) == 3 and r[1].startswith(prefix)]

    def active(self, prefix: str = "fleetbench-") -> list[tuple[str, str, str]]:
        return [j for j in self.jobs(prefix) if j[2] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            pidfile = self.root / f"{name}.pid"
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def start_cluster(root: Path) -> SlurmCluster:
    root = Path(root)
    root.chmod(0o700)  # munged refuses a key or socket folder others may write to
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = root / "munge.sock"
    subprocess.run(
        [
            _which("munged"),
            "--force",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--log-file={root / 'log' / 'munged.log'}",
            f"--pid-file={root / 'munged.pid'}",
            f"--seed-file={root / 'munged.seed'}",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=fleetbench-test",
                f"SlurmctldHost={node}(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "AuthType=auth/munge",
                f"AuthInfo=socket={sock}",
                "CredType=cred/munge",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
                # No cgroups, no accounting daemon: a container without systemd runs this.
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "PlugStackConfig=/dev/null",
                "ReturnToService=2",
                "MinJobAge=600",
                "SchedulerType=sched/backfill",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
                f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
            ]
        )
        + "\n"
    )
    cluster = SlurmCluster(root=root, conf=conf, node=node)
    env = {**os.environ, **cluster.env}
    try:
        subprocess.run([_which("slurmctld"), "-c"], env=env, check=True, capture_output=True, timeout=30)
        subprocess.run([_which("slurmd")], env=env, check=True, capture_output=True, timeout=30)
        deadline = time.monotonic() + 30
        while True:
            out = cluster.command("sinfo", "--noheader", "--format=%T", check=False).stdout.split()
            if out and out[0].rstrip("*~#") in ("idle", "mixed"):
                return cluster
            if time.monotonic() > deadline:
                logs = "\n".join(
                    (root / "log" / f).read_text()[-1500:]
                    for f in ("slurmctld.log", "slurmd.log")
                    if (root / "log" / f).exists()
                )
                raise RuntimeError(f"the Slurm node did not come up (sinfo: {out}):\n{logs}")
            time.sleep(0.3)
    except Exception:
        cluster.stop()
        raise
