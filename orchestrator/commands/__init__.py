"""One module per command: its help, its arguments (`declare`) beside the function that runs it (`run`,
which returns the exit code). orchestrator/cli.py assembles them and is the one error boundary."""

from __future__ import annotations

# The order `fleetbench --help` lists them in.
NAMES = (
    "init",
    "run",
    "render",
    "show",
    "runs",
    "rerun",
    "diff",
    "versus",
    "profile",
    "crosscheck",
    "report",
    "history",
    "hosts",
    "prune",
    "provision",
)
