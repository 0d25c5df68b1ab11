"""How a job starts on the machine a transport reaches: `direct` (the command itself) or `slurm` (one
job step under srun, on a node Slurm allocates), and room for others (a container runtime).

Where commands run (local | ssh: orchestrator/transport) and how a job is launched are two axes: a
launcher composes over whatever transport reaches its host's login machine. A launcher owns its argv,
its observation of the job before it runs (a queue), the stall limit while it waits there, how the job
is stopped, and the verdict on failures of its own making. Nothing outside this package names a
scheduler.
"""

from __future__ import annotations

from .base import DirectLauncher, Launcher, LaunchWatch, job_name

__all__ = ["DirectLauncher", "LaunchWatch", "Launcher", "job_name", "launcher_for"]


def launcher_for(host) -> Launcher:
    """The launcher of `host` (its inventory entry's `launcher`)."""
    if host.launcher == "slurm":
        from .slurm import SlurmLauncher

        return SlurmLauncher(host)
    return DirectLauncher(host)
