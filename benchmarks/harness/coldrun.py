"""fleetbench's CLI in a fresh process, as a user starts it: nothing imported or cached in the caller's
process counts, so each sweep is cold. `cold_run` runs one sweep and finds the run folder it left."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

from . import ROOT


def cli(*argv: Union[str, Path], env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """`python -m orchestrator.cli ARGV...` from the repo root, its output captured; `env` is added to
    this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
    )


@dataclass
class ColdRun:
    run_dir: Optional[Path]  # the run folder the sweep created (absolute); None when it did not start
    wall_s: float  # the CLI process, start to exit
    returncode: int
    stdout: str
    stderr: str


def cold_run(
    sweep: Path, inventory: Path, runs_dir: Path, *, extra: Sequence[str] = (), env: Optional[dict] = None
) -> ColdRun:
    """One `fleetbench run SWEEP -i INVENTORY [EXTRA...] --runs-dir RUNS_DIR --format json` in a fresh
    process, and the run folder it created in RUNS_DIR (the newest new one: run ids begin with their time).
    Relative paths are the repo root's, as the CLI reads them there."""
    runs = ROOT / runs_dir
    before = set(runs.iterdir()) if runs.exists() else set()
    t0 = time.perf_counter()
    done = cli(
        "run", str(sweep), "-i", str(inventory), *extra, "--runs-dir", str(runs_dir), "--format", "json", env=env
    )
    wall = time.perf_counter() - t0
    after = set(runs.iterdir()) if runs.exists() else set()
    new = sorted(p for p in after - before if p.is_dir() and not p.name.startswith("."))
    return ColdRun(new[-1] if new else None, wall, done.returncode, done.stdout, done.stderr)
