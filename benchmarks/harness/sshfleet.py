"""A fleet of real OpenSSH servers on loopback, for the tests and the benchmarks: each with its own host
key, authorized key, workdir and port. Hosts can be killed (listener and sessions), frozen and restarted."""

from __future__ import annotations

import getpass
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

# Overridable for machines where OpenSSH is unpacked into a folder (see benchmarks/fleet/gpu_fleet.py).
SSHD = os.environ.get("FLEETBENCH_SSHD", "/usr/sbin/sshd")
SSH_KEYGEN = os.environ.get("FLEETBENCH_SSH_KEYGEN") or shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


def sshd_available() -> bool:
    return os.path.exists(SSHD) and os.path.exists(SSH_KEYGEN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_banner(port: int, timeout: float = 10.0, proc: Optional[subprocess.Popen] = None) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"sshd on port {port} exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.settimeout(1)
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.05)
    raise RuntimeError(f"sshd on port {port} did not answer within {timeout} s: {last}")


def descendants(pid: int) -> list[int]:
    """All processes below pid (sshd's session children setsid(), so process groups miss them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@dataclass
class SshHost:
    name: str
    dir: Path
    port: int
    workdir: Path
    host_key_line: str
    cpus: Optional[frozenset[int]] = None  # pin the host's sshd and everything it runs to these CPUs
    proc: Optional[subprocess.Popen] = None

    @property
    def config(self) -> Path:
        return self.dir / "sshd_config"

    def start(self) -> None:
        cpus = self.cpus
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "sshd.log", "ab"),
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        try:
            wait_for_banner(self.port, proc=self.proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; sshd log: {(self.dir / 'sshd.log').read_text()[-500:]}") from None

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        return [self.proc.pid, *descendants(self.proc.pid)]

    def _signal_all(self, sig: int) -> None:
        for pid in reversed(self.pids()):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """A host crash: the listener and every session process die at once."""
        self._signal_all(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)
            self.proc = None

    def freeze(self) -> None:
        self._signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal_all(signal.SIGCONT)

    def restart(self) -> None:
        if self.proc is not None:
            self.kill()
        self.start()

    def session_pids(self) -> list[int]:
        return self.pids()[1:]


@dataclass
class SshFleet:
    root: Path
    client_key: Path
    known_hosts: Path
    user: str
    hosts: list[SshHost] = field(default_factory=list)

    def host(self, name: str) -> SshHost:
        return next(h for h in self.hosts if h.name == name)

    def ssh_config(self, path: Path, *, jump: Optional[str] = None) -> Path:
        """Write an OpenSSH client config that names every host by its own name (address, port, user,
        key); with `jump`, every other host is reached through that one (ProxyJump), as behind a bastion."""
        stanzas = []
        for h in self.hosts:
            lines = [
                f"Host {h.name}",
                "  HostName 127.0.0.1",
                f"  Port {h.port}",
                f"  User {self.user}",
                f"  IdentityFile {self.client_key}",
            ]
            if jump is not None and h.name != jump:
                lines.append(f"  ProxyJump {jump}")
            stanzas.append("\n".join(lines))
        path.write_text("\n\n".join(stanzas) + "\n")
        return path

    def inventory(
        self,
        path: Path,
        names: Optional[list[str]] = None,
        *,
        local: bool = False,
        known_hosts: Optional[Path] = None,
        ssh_config: Optional[Path] = None,
        **host_overrides,
    ) -> Path:
        """Write a hosts.yaml for these hosts (and the local one); overrides apply to every ssh host.
        With `ssh_config` (see `SshFleet.ssh_config`), hosts are named by their alias there and reached
        as it says."""
        entries = []
        for h in self.hosts:
            if names is not None and h.name not in names:
                continue
            entry = {
                "name": h.name,
                "hostname": "127.0.0.1",
                "port": h.port,
                "workdir": str(h.workdir),
                "labels": ["sshd"],
            }
            if ssh_config is not None:
                entry.update(hostname=h.name, ssh_config=str(ssh_config))
                del entry["port"]
            entry.update(host_overrides)
            entries.append(entry)
        if local:
            entries.append({"name": "local", "transport": "local", "workdir": str(self.root / "local-work")})
        # GPU lock files under the fleet's own folder, not the machine's /tmp (hosts' env adds to this).
        doc = {
            "defaults": {
                "user": self.user,
                "identity_file": str(self.client_key),
                "python": sys.executable,
                "known_hosts": str(known_hosts or self.known_hosts),
                "connect_timeout": 5,
                "timeout": 300,
                "env": {"FLEETBENCH_LOCK_DIR": str(self.root / "gpu-locks")},
            },
            "hosts": entries,
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def stop(self) -> None:
        for h in self.hosts:
            h.thaw()
            h.kill()


def start_fleet(root: Path, count: int, user: Optional[str] = None, cpus: Optional[frozenset[int]] = None) -> SshFleet:
    """`count` sshd servers; logins as `user` (default: whoever runs this; another user needs root,
    and its workdirs are handed to it). `cpus` pins every host (sshd, its sessions, their workers) to
    those CPUs, so that on a machine with cores to spare the hosts do not take the controller's: the
    nearest one machine gets to a fleet of separate machines. (Niceness cannot do it: each SSH session
    calls setsid(), and with the kernel's autogroup scheduling every session is then its own group that
    gets as much CPU as the controller's whole process, whatever its nice value.)"""
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    key = root / "client_key"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    user = user or getpass.getuser()
    owner = None if user == getpass.getuser() else pwd.getpwnam(user)
    fleet = SshFleet(root=root, client_key=key, known_hosts=root / "known_hosts", user=user)
    known_lines = []
    for i in range(count):
        d = root / f"host{i}"
        d.mkdir()
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True)
        shutil.copy(f"{key}.pub", d / "authorized_keys")
        # sshd reads it as the login user: another user needs read access to this public key.
        os.chmod(d / "authorized_keys", 0o600 if owner is None else 0o644)
        port = free_port()
        (d / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {d / 'host_key'}",
                    f"PidFile {d / 'sshd.pid'}",
                    f"AuthorizedKeysFile {d / 'authorized_keys'}",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "StrictModes no",
                    "MaxStartups 256:30:1024",
                    "MaxSessions 256",
                    "Subsystem sftp internal-sftp",
                    "LogLevel ERROR",
                    "PrintMotd no",
                    "ClientAliveInterval 0",
                    "",
                ]
            )
        )
        pub = (d / "host_key.pub").read_text().split()
        line = f"[127.0.0.1]:{port} {pub[0]} {pub[1]}"
        known_lines.append(line)
        host = SshHost(name=f"ssh{i}", dir=d, port=port, workdir=d / "work", host_key_line=line, cpus=cpus)
        host.workdir.mkdir()
        if owner is not None:
            os.chown(host.workdir, owner.pw_uid, owner.pw_gid)
        fleet.hosts.append(host)
    fleet.known_hosts.write_text("\n".join(known_lines) + "\n")
    for h in fleet.hosts:
        h.start()
    return fleet
