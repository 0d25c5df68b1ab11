"""The one way the controller writes a file that someone may read: whole or not at all."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write a temporary name, fsync, then rename: a reader (or a crash) sees the old file or the new
    one, never half. The folder is created when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, (json.dumps(obj, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
