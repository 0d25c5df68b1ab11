"""Where fleetbench's own data files are: package data when installed (`orchestrator.templates`,
`orchestrator.sweeps`, mapped in pyproject.toml), the checkout's top-level folders otherwise."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def data_dir(package: str, checkout_folder: str) -> Path:
    """The folder of `package`'s data; in a source checkout without an install, ./<checkout_folder>."""
    try:
        return Path(str(importlib.resources.files(package)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / checkout_folder  # orchestrator/config/ -> the checkout


def templates_dir() -> Path:
    return data_dir("orchestrator.templates", "templates")


def sweeps_dir() -> Path:
    return data_dir("orchestrator.sweeps", "sweeps")
