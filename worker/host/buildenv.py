"""The build environment the worker gives FlashInfer's JIT, kept the same across shell and SSH sessions.

FlashInfer writes the compiler (CC / CXX), the toolkit path (CUDA_HOME) and its own flag variables into
each JIT module's build file, and ninja rebuilds a module (tens of seconds) whenever that file changes.
A login shell and an SSH session often differ in exactly these (one sets CC, CXX and a symlinked
CUDA_HOME, the other none), and every switch between the two rebuilt the module the other had built
(benchmarks/cost/jit_cache.py; the figures are in benchmarks/RESULTS.md).

So, for the worker's child only:
- CUDA_HOME is the real path (symlinks resolved) of the toolkit FlashInfer would find;
- the host remembers the build variables of its last run (`.cache/fleetbench/jit-build-env.json` beside
  FlashInfer's own cache), and a session that does not set one of them gets the remembered value, if it
  still exists. A session that sets a variable keeps its own value (that is a different build, paid once)
  and becomes what is remembered.
Every value the worker added is reported in the host's facts (worker/host/env.py), so a run says so.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .hostcache import cache_file, read_json, write_json

# What FlashInfer's JIT (flashinfer/jit/cpp_ext.py, compilation_context.py) reads into a build file.
BUILD_VARS = (
    "CC",
    "CXX",
    "CUDAHOSTCXX",
    "CUDA_HOME",
    "FLASHINFER_CUDA_ARCH_LIST",
    "FLASHINFER_EXTRA_CFLAGS",
    "FLASHINFER_EXTRA_CUDAFLAGS",
    "FLASHINFER_EXTRA_LDFLAGS",
    "FLASHINFER_NVCC",
    "FLASHINFER_CXX_LAUNCHER",
    "FLASHINFER_NVCC_LAUNCHER",
)
# Variables that name a program: only adopted while that program still exists.
_PROGRAMS = ("CC", "CXX", "CUDAHOSTCXX", "FLASHINFER_NVCC")
ADDED_VAR = "FLEETBENCH_ENV_ADDED"  # JSON {name: the caller's value or null}, read by worker/host/env.py


def record_path(env: dict) -> Path:
    return cache_file("jit-build-env.json", env)


def _real_cuda_home(env: dict) -> str | None:
    """The toolkit FlashInfer would use (CUDA_HOME, else CUDA_PATH, else nvcc on PATH, else
    /usr/local/cuda), as its real path; None when there is none or it is already spelled that way."""
    named = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not named:
        nvcc = shutil.which("nvcc", path=env.get("PATH"))
        named = str(Path(nvcc).parent.parent) if nvcc else "/usr/local/cuda"
    home = Path(named).resolve()
    if not (home / "bin" / "nvcc").exists() or str(home) == env.get("CUDA_HOME"):
        return None
    return str(home)


def _still_usable(name: str, value: str, env: dict) -> bool:
    if name == "CUDA_HOME":
        return (Path(value) / "bin" / "nvcc").exists()
    if name in _PROGRAMS:
        program = value.split()[0] if value.split() else ""
        return bool(program) and shutil.which(program, path=env.get("PATH")) is not None
    return True


def _read(path: Path) -> dict[str, str]:
    return {k: v for k, v in read_json(path).items() if k in BUILD_VARS and isinstance(v, str)}


def stable_build_env(env: dict) -> dict[str, str]:
    """The variables to add to (or, for CUDA_HOME's spelling, change in) env for the worker's child;
    {} when nothing changes. Updates the host's record of its build environment."""
    added: dict[str, str] = {}
    cuda = _real_cuda_home(env)
    if cuda:
        added["CUDA_HOME"] = cuda
    path = record_path(env)
    remembered = _read(path)
    for name, value in remembered.items():
        if name not in env and name not in added and _still_usable(name, value, env):
            added[name] = value
    now = {name: {**env, **added}[name] for name in BUILD_VARS if name in env or name in added}
    if now != remembered:
        write_json(path, now)
    return added


def encode_added(added: dict[str, str], caller_env: dict) -> str:
    return json.dumps({name: caller_env.get(name) for name in added})


def describe_added(encoded: str, env: dict) -> list[str]:
    """One facts note per variable the worker added or respelled."""
    try:
        added = json.loads(encoded) if encoded else {}
    except ValueError:
        return []
    notes = []
    for name, was in added.items():
        if name == "CUDA_HOME":
            why = f"the real path of the toolkit FlashInfer would use; the caller's: {was or 'unset'}"
        else:
            why = (
                f"the caller had {'none' if was is None else repr(was)}; this host's earlier FlashInfer builds used it"
            )
        notes.append(
            f"the worker set {name}={env.get(name)} ({why}: one build environment keeps FlashInfer's "
            "JIT cache valid across shell and SSH sessions)"
        )
    return notes


def adopt_build_env() -> dict[str, str]:
    """For a tool that runs FlashInfer in its own process or starts `python -m worker run` itself
    (benchmarks/): take the variables a worker's child gets (stable_build_env) into os.environ, so that
    tool and sweeps share FlashInfer's JIT modules instead of rebuilding each other's. Returns what it added."""
    added = stable_build_env(dict(os.environ))
    os.environ.update(added)
    return added
