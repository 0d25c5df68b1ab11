"""fleetbench controller: plans sweeps, renders scripts, fans out over SSH, stores and compares runs.

It never imports torch."""

__version__ = "0.2.0"
