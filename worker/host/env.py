"""Host facts, built from small collectors that each tolerate a missing library."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
from dataclasses import dataclass
from typing import Optional

from .. import __version__
from ..contract.schema import FactsRecord


@dataclass(frozen=True)
class DeviceInfo:
    """What backends need to decide support: where we run and what the chip can do."""

    device: str  # "cuda" or "cpu"
    compute_capability: Optional[tuple[int, int]] = None
    name: str = ""
    l2_bytes: int = 0

    @property
    def cc_text(self) -> str:
        return "none (CPU)" if self.compute_capability is None else "%d.%d" % self.compute_capability


def detect_device(wanted: str = "auto") -> DeviceInfo:
    """The device cases run on: CUDA when asked for or available, else the CPU."""
    if wanted == "cpu":
        return DeviceInfo(device="cpu")  # no torch import: a CPU-only sweep of no-op cases never needs it
    import torch

    if wanted == "auto" and not torch.cuda.is_available():
        return DeviceInfo(device="cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for but torch sees no CUDA device")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return DeviceInfo(
        device="cuda",
        compute_capability=(props.major, props.minor),
        name=props.name,
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
    )


def package_version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver_version() -> Optional[str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def collect_facts(device: DeviceInfo) -> FactsRecord:
    """Everything a diff between two hosts should explain first."""
    notes: list[str] = []
    facts = dict(
        hostname=socket.gethostname(),
        python=platform.python_version(),
        platform=platform.platform(),
        worker_version=__version__,
        device=device.device,
        torch=package_version("torch"),
        flashinfer=package_version("flashinfer-python"),
        sgl_kernel=package_version("sgl-kernel"),
        triton=package_version("triton"),
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    if device.device == "cuda":
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        facts.update(
            gpu_name=props.name,
            compute_capability=device.cc_text,
            sm_count=props.multi_processor_count,
            gpu_memory_gb=round(props.total_memory / 2**30, 1),
            l2_cache_mb=round(device.l2_bytes / 2**20, 1) if device.l2_bytes else None,
            cuda=torch.version.cuda,
            driver=_driver_version(),
        )
    else:
        notes.append("no CUDA device: cases run on the CPU with wall-clock timing")
    from .buildenv import ADDED_VAR, describe_added

    notes += describe_added(os.environ.get(ADDED_VAR, ""), dict(os.environ))
    return FactsRecord(notes=notes, **facts)


def gpu_processes() -> Optional[int]:
    """Compute processes on the visible GPUs other than ours (None when NVML cannot tell)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = 0
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            count += sum(1 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != os.getpid())
        return count
    except Exception:
        return None


def readiness() -> dict:
    """What `fleetbench hosts --check` shows: the facts, plus whether this host can run a sweep."""
    import shutil
    import sys

    problems = []
    try:
        device = detect_device("auto")
        facts = collect_facts(device).model_dump(exclude={"kind", "schema_version", "notes"})
    except Exception as exc:  # torch missing or broken: still report what we can
        problems.append(f"torch unusable: {type(exc).__name__}: {exc}"[:300])
        facts = {
            "python": platform.python_version(),
            "hostname": socket.gethostname(),
            "torch": package_version("torch"),
        }
    for dist in ("pydantic",):
        if package_version(dist) is None:
            problems.append(f"{dist} is not installed")
    usage = shutil.disk_usage(os.getcwd())
    from ..backends import flashinfer_mm_fp4_backends

    return {
        **facts,
        "executable": sys.executable,
        "in_venv": sys.prefix != sys.base_prefix,
        "free_disk_gb": round(usage.free / 2**30, 1),
        "gpu_processes": gpu_processes(),
        "flashinfer_mm_fp4_backends": flashinfer_mm_fp4_backends() if facts.get("flashinfer") else None,
        "problems": problems,
    }
