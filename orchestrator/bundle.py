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

import worker

from .atomicfile import write_atomic
from .formats import MANIFEST_VERSION


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


def build_worker_bundle(package_dir: Path | None = None) -> WorkerBundle:
    """tar.gz of worker/**/*.py with fixed metadata (mtime 0, uid 0, mode 0644)."""
    root = Path(package_dir or Path(worker.__file__).parent)
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(name=f"worker/{path.relative_to(root).as_posix()}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    data = packed.getvalue()
    return WorkerBundle(data=data, sha256=hashlib.sha256(data).hexdigest(), files=len(files))
