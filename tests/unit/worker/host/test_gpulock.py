"""The host-wide lock per GPU (worker/host/gpulock.py)."""

from __future__ import annotations

import pytest


def test_gpu_lock_serializes_and_names_the_holder(tmp_path):
    from worker.host.gpulock import GpuLockTimeout, gpu_lock

    with gpu_lock("run-A", "host1", 0, lock_dir=tmp_path, ids=["GPU-1234"]) as held:
        assert held == "GPU-1234"
        with pytest.raises(GpuLockTimeout, match="locked by run run-A \\(host host1"):
            with gpu_lock("run-B", "host2", 0.3, lock_dir=tmp_path, ids=["GPU-1234"]):
                pass
        with gpu_lock("run-C", "host3", 0, lock_dir=tmp_path, ids=["GPU-other"]) as other:
            assert other == "GPU-other"  # another GPU is another lock
    with gpu_lock("run-B", "host2", 0, lock_dir=tmp_path, ids=["GPU-1234"]):
        pass  # released when the holder left
    with gpu_lock("run-D", "h", 0, lock_dir=tmp_path, ids=[]) as none:
        assert none is None  # nothing to lock on a CPU host
