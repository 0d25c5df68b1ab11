"""Where a run's files live on a host (under its workdir; paths may start with `~/`), and a host's
rendered launcher with that layout: what planning decides and execution uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config.inventory import Host


@dataclass(frozen=True)
class RemoteLayout:
    """Where things live under a host's workdir (paths may start with `~/`)."""

    workdir: str
    run_id: str
    worker_sha: str

    @property
    def worker_archive(self) -> str:
        return f"{self.workdir}/worker/{self.worker_sha[:16]}.tar.gz"

    @property
    def worker_dir(self) -> str:
        return f"{self.workdir}/worker/{self.worker_sha[:16]}"

    @property
    def run_dir(self) -> str:
        return f"{self.workdir}/runs/{self.run_id}"

    def script(self, script_sha: str) -> str:
        # Content-addressed: an unchanged script is already there and the next run uploads nothing.
        return f"{self.workdir}/scripts/bench-{script_sha[:16]}.py"

    def attempt_dir(self, slot: str, attempt: int) -> str:
        # Flat under the run folder: creating it is one SFTP round trip.
        return f"{self.run_dir}/{slot}.attempt-{attempt}"

    def params(self, slot: str, attempt: int) -> str:
        return f"{self.attempt_dir(slot, attempt)}/params.json"

    def results(self, slot: str, attempt: int) -> str:
        return f"{self.attempt_dir(slot, attempt)}/results.jsonl"

    def pidfile(self, slot: str, attempt: int) -> str:
        return f"{self.attempt_dir(slot, attempt)}/pid"


def layout_for(host: Host, run_id: str, worker_sha: str) -> RemoteLayout:
    return RemoteLayout(workdir=host.workdir.rstrip("/") or "/", run_id=run_id, worker_sha=worker_sha)


@dataclass(frozen=True)
class RenderedScript:
    """A host's launcher: the local file (the exact bytes uploaded), its hash, and its host layout."""

    host: str
    path: Path
    sha256: str
    layout: RemoteLayout

    @property
    def remote(self) -> str:
        """Where the host keeps this script (content-addressed, so unchanged scripts are not re-sent)."""
        return self.layout.script(self.sha256)
