"""The SM clock held still for a sweep, where the inventory allows it (`clocks: lock` on a host), and
given back after, however the sweep ends (a stop's SIGTERM included). Stdlib only: the supervisor runs it.

Locked at the GPU's default applications clock, which it sustains under load (a boost clock it cannot
hold would read as throttling). Nothing is changed unless asked: a benchmark tool never changes the
conditions it measures under behind the user's back. A supervisor killed outright (SIGKILL cannot be
caught) cannot give the clock back, so while it holds a clock locked a record beside the host's caches
names it, and the next sweep on that GPU (holding the GPU's lock, so no live sweep of this host uses it)
resets a clock whose locker is gone, and says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Callable, Iterator, Optional

from .hostcache import cache_file, read_json, write_json

NVIDIA_SMI = "nvidia-smi"
# Set for the case loop while the clock is locked: its facts record the clock (FactsRecord.sm_clock_locked_mhz).
CLOCK_ENV = "FLEETBENCH_SM_CLOCK_LOCKED_MHZ"


def _smi(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run([NVIDIA_SMI, *argv], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return done.returncode, (done.stdout.strip() or done.stderr.strip())


def default_sm_clock(gpu: str) -> Optional[int]:
    rc, out = _smi(["-i", gpu, "--query-gpu=clocks.default_applications.graphics", "--format=csv,noheader,nounits"])
    first = out.splitlines()[0].strip() if rc == 0 and out else ""
    return int(float(first)) if first.replace(".", "", 1).isdigit() else None


def lock_record(gpu: str) -> Path:
    """Where a sweep that holds `gpu`'s clock locked says so (one file per GPU: sweeps on other GPUs of
    the host write their own)."""
    return cache_file(f"clock-lock-{''.join(c if c.isalnum() or c in '-_.' else '_' for c in gpu)}.json")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def reset_left_lock(gpu: str, say: Callable[[str], None]) -> None:
    """Reset the clock a killed sweep left locked on `gpu` (module docstring); nothing when none did."""
    path = lock_record(gpu)
    left = read_json(path)
    pid = left.get("pid")
    if not left or (isinstance(pid, int) and pid != os.getpid() and _alive(pid)):
        return
    rc, out = _smi(["-i", gpu, "--reset-gpu-clocks"])
    say(
        f"clocks: GPU {gpu} was left locked at {left.get('mhz', '?')} MHz by a sweep that was killed "
        f"(run {left.get('run_id', '?')}, pid {pid}): {'reset' if rc == 0 else 'reset failed: ' + out[:200]}"
    )
    if rc == 0:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def locked_clocks(
    gpu: Optional[str], wanted: bool, say: Callable[[str], None], run_id: str = ""
) -> Iterator[Optional[int]]:
    """Yields the locked SM clock in MHz, or None (not asked, no GPU, or nvidia-smi refused: `say` tells).
    First resets a clock a killed sweep left locked on this GPU (reset_left_lock)."""
    if gpu and gpu != "cpu":
        reset_left_lock(gpu, say)
    if not wanted:
        yield None
        return
    if not gpu or gpu == "cpu":
        say("clocks: lock was asked, but this host times on its CPU: nothing to lock")
        yield None
        return
    mhz = default_sm_clock(gpu)
    if mhz is None:
        say(f"clocks: the default clock of GPU {gpu} could not be read: not locked")
        yield None
        return

    def stopped(signum, frame):  # a stop (TERM, then KILL after a grace) must still give the clock back
        raise SystemExit(128 + signum)

    # The handler is in place before nvidia-smi is asked to lock: a stop that arrives while it runs (or just
    # after) still resets what it may have locked.
    previous = signal.signal(signal.SIGTERM, stopped)
    give_back = True
    try:
        # Recorded before it is asked: a kill while nvidia-smi locks still leaves the next sweep a record.
        write_json(lock_record(gpu), {"pid": os.getpid(), "mhz": mhz, "run_id": run_id})
        rc, out = _smi(["-i", gpu, f"--lock-gpu-clocks={mhz},{mhz}"])
        if rc != 0:
            give_back = False  # nothing of ours to reset (and a lock someone else set stays)
            lock_record(gpu).unlink(missing_ok=True)
            say(
                f"clocks: nvidia-smi could not lock GPU {gpu} at {mhz} MHz ({out[:200]}): not locked "
                "(locking needs root)"
            )
            yield None
            return
        say(f"clocks: GPU {gpu} locked at {mhz} MHz for this sweep")
        yield mhz
    finally:
        if give_back:
            rc, out = _smi(["-i", gpu, "--reset-gpu-clocks"])
            say(f"clocks: GPU {gpu} given back ({'reset' if rc == 0 else 'reset failed: ' + out[:200]})")
            if rc == 0:
                lock_record(gpu).unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, previous)


def visible_gpus() -> list[str]:
    """The GPUs a sweep here would lock: CUDA_VISIBLE_DEVICES's entries, else every GPU nvidia-smi lists."""
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if visible:
        return visible
    rc, out = _smi(["--query-gpu=uuid", "--format=csv,noheader"])
    return [line.strip() for line in out.splitlines() if line.strip()] if rc == 0 else []


def lock_readiness(gpus: Optional[list[str]] = None) -> tuple[bool, str]:
    """(can lock, why) for `clocks: lock` on this host, changing nothing: nvidia-smi answers, each GPU's
    default applications clock (the one a sweep locks at) can be read, and the worker runs as root
    (nvidia-smi refuses --lock-gpu-clocks to anyone else)."""
    import shutil

    if shutil.which(NVIDIA_SMI) is None:
        return False, "nvidia-smi is not on PATH: no GPU clock to lock (a CPU host times unlocked)"
    gpus = visible_gpus() if gpus is None else gpus
    if not gpus:
        return False, "nvidia-smi lists no GPU: no clock to lock"
    clocks = {}
    for gpu in gpus:
        mhz = default_sm_clock(gpu)
        if mhz is None:
            return False, f"the default clock of GPU {gpu} cannot be read, so it cannot be locked"
        clocks[gpu] = mhz
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return False, f"locking needs root and the worker runs as uid {os.geteuid()}"
    return True, "can lock " + ", ".join(f"GPU {g} at {mhz} MHz" for g, mhz in clocks.items())


if __name__ == "__main__":  # `python -m worker.host.clocks`: what `hosts --check` asks a host with clocks: lock
    import json

    can, why = lock_readiness()
    print(json.dumps({"can_lock": can, "why": why}), flush=True)
