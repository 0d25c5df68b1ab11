"""One sweep per GPU at a time: a host-wide lock file per GPU, held for the whole run of a job.

Two sweeps timing kernels on one GPU would each measure the other. The lock is an flock() on
`<lock dir>/gpu-<id>.lock` (the GPU's UUID when NVML can tell it, else its index), so it is released by
the kernel when the holder dies, crash or not. The holder writes who it is into the file; a waiter
that gives up names that run. A host without a GPU times on its CPU, and two sweeps there would
measure each other the same way: it locks `<lock dir>/cpu-<host>.lock` (the inventory's name for the
host, so that hosts sharing one machine in a test fleet stay separate hosts).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

DEFAULT_LOCK_DIR = Path(tempfile.gettempdir()) / "fleetbench-locks"
POLL_S = 0.2
CPU = "cpu"  # the id locked where the cases are timed on the CPU


class GpuLockTimeout(Exception):
    pass


def gpu_ids() -> list[str]:
    """Ids of the GPUs this process may use (CUDA_VISIBLE_DEVICES applied); [] when there are none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        uuids = []
        for i in range(count):
            u = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            uuids.append(u.decode() if isinstance(u, bytes) else u)
    except Exception:
        uuids = []
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        if not wanted:
            return []
        ids = []
        for w in wanted:
            if w.isdigit() and int(w) < len(uuids):
                ids.append(uuids[int(w)])
            else:
                ids.append(w)  # a UUID already, or an index NVML could not resolve
        return ids[:1]  # the worker times on its first visible device
    return uuids[:1] if uuids else []


def _lock_name(lock_id: str, host: str) -> str:
    name = f"cpu-{host}" if lock_id == CPU else f"gpu-{lock_id}"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name) + ".lock"


@contextlib.contextmanager
def gpu_lock(
    run_id: str,
    host: str,
    timeout_s: float,
    lock_dir: Optional[Path] = None,
    ids: Optional[list[str]] = None,
    on_wait=None,
) -> Iterator[Optional[str]]:
    """Hold the lock of what this process times on: its GPU, or the host's CPU when it has no GPU (or
    ids == [CPU]); yields the id locked (None for ids == []: nothing to lock).

    Raises GpuLockTimeout naming the holder when it is still held after `timeout_s`.
    """
    ids = (gpu_ids() or [CPU]) if ids is None else ids
    if not ids:
        yield None
        return
    lock_dir = Path(lock_dir or os.environ.get("FLEETBENCH_LOCK_DIR") or DEFAULT_LOCK_DIR)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(lock_dir, 0o1777)  # shared by every user's sweeps, like /tmp
    path = lock_dir / _lock_name(ids[0], host)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + timeout_s
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_holder(path)
                if time.monotonic() >= deadline:
                    what = f"the CPU of host {host}" if ids[0] == CPU else f"GPU {ids[0]}"
                    raise GpuLockTimeout(
                        f"{what} is busy: locked by run {holder.get('run_id', '?')} "
                        f"(host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, since "
                        f"{holder.get('since', '?')}); waited {timeout_s:g} s (--lock-timeout)"
                    ) from None
                if not waited and on_wait is not None:
                    on_wait(holder)
                waited = True
                time.sleep(POLL_S)
        info = {
            "run_id": run_id,
            "host": host,
            "pid": os.getpid(),
            "machine": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        yield ids[0]
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _read_holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
