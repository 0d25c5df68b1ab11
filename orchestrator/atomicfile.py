"""The one way the controller writes a file that someone may read: whole or not at all; and what a full
disk is called when a write meets one."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

from .errors import FleetbenchError

# The errors that say the disk (or the user's share of it) has no room left.
_NO_ROOM = {errno.ENOSPC: "disk full (ENOSPC)", errno.EDQUOT: "disk quota exceeded (EDQUOT)"}


class DiskFull(FleetbenchError, OSError):
    """A write found no room on the disk. Still an OSError (with its errno), so code that handles a failed
    write goes on handling it; its message names the file and what to do."""

    def __init__(self, code: int, path, doing: str = "writing", then: str = "what was written before is kept"):
        OSError.__init__(self, code, os.strerror(code), str(path))
        self.path = Path(path)
        self.message = f"{_NO_ROOM.get(code, os.strerror(code))} {doing} {path}: free space on that disk; {then}"

    def __str__(self) -> str:
        return self.message


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _NO_ROOM


def as_disk_full(exc: OSError, path, doing: str = "writing") -> OSError:
    """`exc` as a DiskFull naming `path` when it says the disk has no room; else `exc` itself."""
    if isinstance(exc, DiskFull) or not is_disk_full(exc):
        return exc
    return DiskFull(exc.errno, path, doing)


def write_atomic(path: Path, data: bytes) -> None:
    """Write a temporary name, fsync, then rename: a reader (or a crash) sees the old file or the new
    one, never half. The folder is created when missing. DiskFull when the disk has no room (the old
    file, if any, is left as it was)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise as_disk_full(exc, path) from None
        raise


def append_line(f, data: bytes) -> None:
    """Append `data` (one line) to the unbuffered binary file `f`, whole or not at all: a write that
    fails half-way (a full disk) is cut back, so the file still ends with a whole line. Raises OSError
    (DiskFull when the disk has no room)."""
    start = f.tell()
    view = memoryview(data)
    try:
        while view:
            view = view[f.write(view) :]
    except OSError as exc:
        try:
            f.truncate(start)
            f.seek(start)
        except OSError:
            pass
        raise as_disk_full(exc, f.name) from None


def write_json(path: Path, obj) -> None:
    """`obj` as JSON, whole or not at all. A NaN or an infinity is refused (ValueError) rather than written
    as a token no JSON reader takes: what is written here is read back for years."""
    write_atomic(path, (json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8"))
