"""benchmarks/device_check.sh: NEED_GPU runs nothing on another card, before any set-up."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _run(tmp_path, gpu_name, need):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu_name is not None:
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\necho '{gpu_name}'\n")
        fake.chmod(0o755)
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("OUT", "PACK", "SKIP_WHEELS")},  # set-up stops at once
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "NEED_GPU": need,
        "WORK": str(tmp_path / "work"),
        "GPU_PY": "/nonexistent/python",  # set-up would fail loudly if it ran
    }
    return subprocess.run(
        ["bash", "benchmarks/device_check.sh", "jit"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "gpu_name, said",
    [("NVIDIA H100 80GB HBM3", "this GPU is NVIDIA H100 80GB HBM3"), (None, "this GPU is unknown (no nvidia-smi)")],
)
def test_another_card_runs_nothing(tmp_path, gpu_name, said):
    done = _run(tmp_path, gpu_name, "H200")
    assert done.returncode == 3
    assert f"NEED_GPU=H200: {said}; nothing run" in done.stdout
    assert not (tmp_path / "work").exists()  # not even set-up ran


def test_the_card_asked_for_goes_on_to_set_up(tmp_path):
    done = _run(tmp_path, "NVIDIA H200", "H200")
    assert done.returncode != 3 and "nothing run" not in done.stdout
    assert (tmp_path / "work").is_dir()  # set-up began (and failed on the missing Python)
