"""The worker package as one deterministic archive: the host runs exactly what the controller has.

The archive is content-addressed (sha256 of its bytes, which depend only on the files' paths and
contents), so a host that already unpacked this version needs no upload at all.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import worker.contract

from ..atomicfile import write_atomic
from ..runs.formats import MANIFEST_VERSION
from ..runs.workerarchive import USER_KERNELS


@dataclass(frozen=True)
class WorkerBundle:
    data: bytes
    sha256: str
    files: int
    # The run format this worker was shipped with: the params it reads (a stored run keeps its worker).
    params_format: int = MANIFEST_VERSION

    def write(self, path: Path) -> Path:
        write_atomic(path, self.data)
        return path


def build_worker_bundle(package_dir: Path | None = None, user_kernels: Iterable[bytes] = ()) -> WorkerBundle:
    """tar.gz of worker/**/*.py, plus each user kernel file as worker/user/k<sha256[:16]>.py (where
    worker.backends.userkernel finds it), with fixed metadata (mtime 0, uid 0, mode 0644)."""
    root = Path(package_dir or Path(worker.contract.__file__).parent.parent)  # found through its one door
    entries = [
        (f"worker/{p.relative_to(root).as_posix()}", p.read_bytes())
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts and p.parent.name != "user"
    ]
    for data in sorted(set(user_kernels)):
        entries.append((f"{USER_KERNELS}k{hashlib.sha256(data).hexdigest()[:16]}.py", data))
    files = sorted(entries)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name=name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    data = packed.getvalue()
    return WorkerBundle(data=data, sha256=hashlib.sha256(data).hexdigest(), files=len(files))
