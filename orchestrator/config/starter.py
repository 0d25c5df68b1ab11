"""`fleetbench init`: what a new folder needs to run fleetbench, written from the installed package.

The shipped inventory (the `local` host and a commented fleet) and the shipped sweeps are package data
(`orchestrator.templates/hosts.yaml`, `orchestrator.sweeps/*.yaml`), so a pip-installed fleetbench works
outside its checkout. Existing files are never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..atomicfile import write_atomic
from ..errors import InputError
from .resources import sweeps_dir, templates_dir


@dataclass
class Written:
    path: Path
    created: bool  # False: it existed and was left as it was


def starter_files() -> dict[str, bytes]:
    """Relative path -> bytes of every file `init` writes."""
    files = {"hosts.yaml": (templates_dir() / "hosts.yaml").read_bytes()}
    for path in sorted(sweeps_dir().glob("*.yaml")):
        files[f"sweeps/{path.name}"] = path.read_bytes()
    return files


def write_starter(folder: Path) -> list[Written]:
    """Write the starter files into `folder` (created if missing); existing files are kept."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder}: not a folder")
    written = []
    for relative, data in starter_files().items():
        path = folder / relative
        if path.exists():
            written.append(Written(path, False))
            continue
        try:
            write_atomic(path, data)
        except OSError as exc:
            raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
        written.append(Written(path, True))
    return written
