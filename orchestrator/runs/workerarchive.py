"""What a run's stored worker archive (worker.tar.gz, planning/bundle.py) holds apart from its user kernels.

The archive's sha256 (the manifest's worker_sha256) covers the user kernel files it carries too, so a
sweep whose user kernel changed ships another archive with the same worker code. What the worker's own
code was is the digest of its members outside worker/user/: two runs with the same digest timed every
case with the same harness, whatever user kernels they carried.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from typing import Optional

USER_KERNELS = "worker/user/"  # where the archive carries each user kernel file: k<sha256[:16]>.py


def worker_code_digest(archive: bytes) -> Optional[str]:
    """sha256 over the names and contents of the archive's members outside USER_KERNELS, in name order;
    None where the archive cannot be read."""
    digest = hashlib.sha256()
    try:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive)), mode="r:") as tar:
            members = sorted((m for m in tar.getmembers() if m.isfile()), key=lambda m: m.name)
            for m in members:
                if m.name.startswith(USER_KERNELS):
                    continue
                data = tar.extractfile(m).read()
                digest.update(f"{m.name}\0{len(data)}\0".encode())
                digest.update(data)
    except (OSError, EOFError, tarfile.TarError):
        return None
    return digest.hexdigest()
