"""`fleetbench provision`: give each host the venv its `python` points at, with the worker's
dependencies at the versions pinned in requirements/host-constraints.txt. Idempotent: an existing
venv is kept and pip installs only what is missing. With a wheelhouse, wheels are uploaded (those
not there yet) and pip installs from them alone, for hosts without internet. With `dry_run`, nothing
is created or installed: pip only resolves the profile against the pins on the host (`--dry-run
--report`), which proves the pinned set installs together there.

The profile is chosen per host unless one is named (`auto`, default_profile): a host with the NVIDIA
driver loaded (or whose jobs a launcher starts on other nodes, GPU nodes) gets `gpu`; any other host, and the `local`
host that runs the controller's own Python, gets `cpu`: torch's CPU build, never the CUDA stack (the
resolution is checked for it before anything is installed). On the controller's own Python, packages it
already imports are kept as they are: the controller runs on them.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..config.inventory import Host
from ..config.resources import data_dir
from ..errors import InputError
from ..execution.fanout import Running, fan_out
from ..transport import TransportError, make_transport

# Package data when installed (a wheel has no requirements/ folder beside the package), the checkout's otherwise.
CONSTRAINTS = data_dir("orchestrator.requirements", "requirements") / "host-constraints.txt"
# What each profile installs; versions come from the constraints file.
PROFILES = {
    "minimal": ["pydantic"],  # enough for the worker's no-op plumbing sweep
    "cpu": ["pydantic", "numpy", "torch"],  # torch's CPU build (CPU_TORCH_INDEX): a CPU host's whole need
    "worker": ["pydantic", "numpy", "torch"],  # torch as the package index builds it (CUDA on Linux)
    "gpu": ["pydantic", "numpy", "torch", "flashinfer-python", "sgl-kernel", "nvidia-ml-py"],
}
AUTO = "auto"  # the profile chosen per host (default_profile)
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# Present when the NVIDIA driver is loaded (Linux): a host without any of them runs no CUDA.
GPU_DRIVER_PATHS = ("/proc/driver/nvidia/gpus", "/dev/nvidiactl")
# The module each package is imported as (what the controller's own Python is asked for).
IMPORT_NAMES = {
    "pydantic": "pydantic",
    "numpy": "numpy",
    "torch": "torch",
    "flashinfer-python": "flashinfer",
    "sgl-kernel": "sgl_kernel",
    "nvidia-ml-py": "pynvml",
}
PIP_TIMEOUT_S = 1800.0


@dataclass
class ProvisionResult:
    name: str
    ok: bool
    actions: list[str] = field(default_factory=list)
    problem: str = ""


def runs_controller_python(host: Host) -> bool:
    """Whether the host runs the worker with the controller's own interpreter (the `local` host as
    `fleetbench init` writes it): provisioning it installs into the controller's venv."""
    return (
        host.transport == "local"
        and host.launcher == "direct"
        and os.path.abspath(os.path.expanduser(host.python)) == os.path.abspath(sys.executable)
    )


def default_profile(host: Host, gpu_driver: bool) -> tuple[str, str]:
    """(profile, why) for a host when none is named: `cpu` for the controller's own Python and for a
    host without the NVIDIA driver, `gpu` for a host whose launcher starts its jobs on other nodes (the
    cluster's GPU nodes, not the login node provision connects to) and for a host with the driver loaded."""
    if runs_controller_python(host):
        return "cpu", "the controller's own Python: never the CUDA stack unless --profile names it"
    if host.launcher != "direct":
        return "gpu", f"launcher {host.launcher}: its jobs run on the cluster's GPU nodes"
    if gpu_driver:
        return "gpu", "the NVIDIA driver is loaded there"
    return "cpu", "no NVIDIA driver there: torch's CPU build, never the CUDA stack"


def cuda_stack(chosen: dict[str, str]) -> list[str]:
    """What of a resolution (name -> version) is the CUDA stack: nvidia-* libraries (NVML's Python
    binding aside) and a torch built for CUDA."""
    found = [f"{n}=={v}" for n, v in sorted(chosen.items()) if n.startswith("nvidia-") and n != "nvidia-ml-py"]
    if "+cu" in chosen.get("torch", ""):
        found.insert(0, f"torch=={chosen['torch']}")
    return found


def venv_dir_of(python: str) -> str:
    """`.../venv/bin/python3` -> `.../venv`; refuses interpreters that are not inside a venv layout."""
    bindir = posixpath.dirname(python)
    if posixpath.basename(bindir) != "bin" or not posixpath.basename(python).startswith("python"):
        raise InputError(f"python {python!r} is not <venv>/bin/python*: provision cannot tell which venv to create")
    return posixpath.dirname(bindir)


def pinned_versions(constraints: Path = CONSTRAINTS) -> dict[str, str]:
    """name -> version of every `name==version` line of the constraints file (names lowercased)."""
    pins = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def constraints_for(host: Host, constraints: Path = CONSTRAINTS) -> str:
    """The constraints file's text for this host: its environment's pins replace the lines of the same
    packages (names compared as pip does) and are added when the file has none."""

    def key(name: str) -> str:
        return name.strip().lower().replace("_", "-").replace(".", "-")

    pins = {key(p.split("==", 1)[0]): p.strip() for p in host.pins}
    out = []
    for line in constraints.read_text(encoding="utf-8").splitlines():
        name = line.split("#", 1)[0].split("==", 1)[0]
        if "==" in line.split("#", 1)[0] and key(name) in pins:
            out.append(f"{pins.pop(key(name))}  # environment {host.environment} (was: {line.strip()})")
        else:
            out.append(line)
    out += [f"{p}  # environment {host.environment}" for p in pins.values()]
    return "\n".join(out) + "\n"


def resolution_problems(report: dict, profile: str, constraints: Path = CONSTRAINTS) -> tuple[list[str], list[str]]:
    """(what pip would install as name==version, problems): a package of the profile that did not
    resolve to its pin is a problem."""
    chosen = {
        i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in report.get("install", [])
    }
    pins = pinned_versions(constraints)
    # A build's local label (2.9.1+cpu) is the pinned version built another way, as pip's == reads it.
    problems = [
        f"{name} resolved to {chosen.get(name, 'nothing')}, pinned {pins[name]}"
        for name in PROFILES[profile]
        if name in pins and chosen.get(name, "").split("+")[0] != pins[name]
    ]
    if profile in ("minimal", "cpu") and cuda_stack(chosen):
        problems.append(
            f"profile {profile} would install the CUDA stack ({', '.join(cuda_stack(chosen)[:4])}"
            f"{', ...' if len(cuda_stack(chosen)) > 4 else ''}): nothing was installed; a wheelhouse "
            f"needs torch's CPU build ({CPU_TORCH_INDEX})"
        )
    return sorted(f"{n}=={v}" for n, v in chosen.items()), problems


def missing_modules(run, python: str, packages: list[str], lines: list[str]) -> list[str]:
    """The packages `python` cannot import (each tried in one child process)."""
    probe = (
        "import importlib, sys\nfor name, module in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    try:\n        importlib.import_module(module)\n    except Exception:\n        print(name)\n"
    )
    pairs = [w for p in packages for w in (p, IMPORT_NAMES.get(p, p.replace("-", "_")))]
    if run([python, "-c", probe, *pairs], 300) != 0:
        return list(packages)
    return [line.strip() for line in lines if line.strip() in packages]


def provision_host(
    host: Host,
    *,
    profile: str,
    wheelhouse: Optional[Path],
    base_python: str,
    accept_new: bool,
    constraints: Path = CONSTRAINTS,
    dry_run: bool = False,
    running: Optional[Running] = None,
) -> ProvisionResult:
    """Provision one host with `profile` (AUTO: chosen for it, default_profile). Every failure is the
    result's problem, never an exception."""
    result = ProvisionResult(host.name, False)
    transport = make_transport(host, accept_new=accept_new)
    if running is not None:  # Ctrl-C closes the connection: its commands stop (fanout.Running)
        running.add(host.name, transport.close)
    merged_dir: Optional[Path] = None  # the environment's constraints file, removed at the end
    lines: list[str] = []

    def run(argv: list[str], timeout: float) -> int:
        lines.clear()
        return transport.run(argv, env=host.env, timeout=timeout, on_line=lambda s, l: lines.append(l)).exit_code

    try:
        venv = venv_dir_of(host.python)
        transport.connect()
        gpu_driver = any(transport.exists(p) for p in GPU_DRIVER_PATHS)
        if profile == AUTO:
            profile, why = default_profile(host, gpu_driver)
            result.actions.append(f"profile {profile} ({why})")
        elif profile in ("worker", "gpu") and not gpu_driver and host.launcher == "direct":
            result.actions.append(f"note: profile {profile} brings the CUDA stack and this host has no NVIDIA driver")
        python = host.python
        if dry_run and not transport.exists(host.python):
            python = base_python
            result.actions.append(f"no venv yet: resolving with {base_python}")
        elif not transport.exists(host.python):
            if run([base_python, "-m", "venv", venv], 300) != 0:
                result.problem = f"creating the venv {venv} failed: {(lines or ['?'])[-1]}"
                return result
            result.actions.append(f"created venv {venv}")
        else:
            result.actions.append("venv exists")
        packages = list(dict.fromkeys([*PROFILES[profile], *(p.split("==", 1)[0].strip() for p in host.pins)]))
        if not dry_run and runs_controller_python(host):
            missing = missing_modules(run, python, packages, lines)
            kept = [p for p in packages if p not in missing]
            if kept:
                result.actions.append(f"kept what the controller's own Python has: {', '.join(kept)}")
            packages = missing
            if not packages:
                result.actions.append(f"profile {profile}: nothing to install")
                result.ok = True
                return result
        remote_dir = f"{host.workdir}/provision"
        transport.makedirs(remote_dir)
        # One constraints file per environment: environments of one host share its workdir.
        remote_constraints = f"{remote_dir}/constraints{'-' + host.environment if host.environment else ''}.txt"
        if host.pins:
            merged_dir = Path(tempfile.mkdtemp(prefix="fleetbench-pins-"))
            merged = merged_dir / "constraints.txt"
            merged.write_text(constraints_for(host, constraints), encoding="utf-8")
            constraints = merged  # also what the dry run's resolution is judged against
        transport.put(constraints, remote_constraints)
        pip = [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "-c",
            transport.path(remote_constraints),
        ]
        report_path = f"{remote_dir}/resolution.json"
        resolve = ["--dry-run", "--ignore-installed", "--report", transport.path(report_path)]
        if wheelhouse is not None:
            remote_wh = f"{host.workdir}/wheelhouse"
            transport.makedirs(remote_wh)
            sent = 0
            for wheel in sorted(wheelhouse.iterdir()):
                if (
                    wheel.is_file()
                    and not wheel.name.startswith(".")
                    and not transport.exists(f"{remote_wh}/{wheel.name}")
                ):
                    sent += transport.put(wheel, f"{remote_wh}/{wheel.name}")
            result.actions.append(f"uploaded {sent / 2**20:.1f} MiB of wheels")
            pip += ["--no-index", "--find-links", transport.path(remote_wh)]
        elif profile == "cpu":  # its torch 2.9.1+cpu sorts above the index's CUDA 2.9.1, so pip takes it
            pip += ["--extra-index-url", CPU_TORCH_INDEX]
        if dry_run or profile == "cpu":
            # A dry run reports the resolution; a CPU profile is resolved before anything is installed,
            # so a resolution that brings the CUDA stack installs nothing.
            if run([*pip, *resolve, *packages], PIP_TIMEOUT_S) != 0:
                result.problem = "pip could not resolve the pinned set: " + (lines[-1] if lines else "no output")[:300]
                return result
            chosen, problems = resolution_problems(
                json.loads(transport.read_text(report_path) or "{}"), profile, constraints
            )
            result.problem = "; ".join(problems)
            if dry_run or problems:
                result.actions.append(
                    f"profile {profile} resolves (nothing installed): {len(chosen)} packages, "
                    + ", ".join(c for c in chosen if c.split("==")[0] in PROFILES[profile])
                )
                result.ok = not problems
                return result
        if run([*pip, *packages], PIP_TIMEOUT_S) != 0:
            result.problem = "pip install failed: " + (lines[-1] if lines else "no output")[:300]
            return result
        result.actions.append(f"installed profile {profile} ({', '.join(packages)})")
        result.ok = True
    except (TransportError, InputError) as exc:
        result.problem = str(exc)
    except Exception as exc:
        result.problem = f"{type(exc).__name__}: {exc}"
    finally:
        if running is not None:
            running.remove(host.name)
        transport.close()
        if merged_dir is not None:
            shutil.rmtree(merged_dir, ignore_errors=True)
    return result


def provision_hosts(
    hosts: list[Host],
    *,
    profile: str = AUTO,
    wheelhouse: Optional[Path] = None,
    base_python: str = "python3",
    accept_new: bool = False,
    parallel: int = 64,
    dry_run: bool = False,
) -> list[ProvisionResult]:
    if profile != AUTO and profile not in PROFILES:
        raise InputError(f"--profile {profile!r}: one of {AUTO}, {', '.join(PROFILES)}")
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise InputError(f"--wheelhouse {wheelhouse}: not a folder")
    running = Running()
    results = fan_out(
        hosts,
        lambda h: provision_host(
            h,
            profile=profile,
            wheelhouse=wheelhouse,
            base_python=base_python,
            accept_new=accept_new,
            dry_run=dry_run,
            running=running,
        ),
        parallel=parallel,
        on_interrupt=running.stop_all,
    )
    return [r.value if r.ok else ProvisionResult(r.name, False, problem=r.describe_error()) for r in results]
