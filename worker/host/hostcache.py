"""The host's own small state files (`.cache/fleetbench/` beside FlashInfer's cache): read tolerantly,
written atomically and at best effort. Nothing there is part of a run: losing a file costs a
re-measurement or a rebuild, or (a clock-lock note, worker/host/clocks.py) leaves a clock a killed sweep
locked for the user to reset, as before there were notes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional


def cache_file(name: str, env: Optional[dict] = None) -> Path:
    """`name` in the folder beside FlashInfer's cache, which lives under FLASHINFER_WORKSPACE_BASE, else HOME."""
    env = os.environ if env is None else env
    base = env.get("FLASHINFER_WORKSPACE_BASE") or env.get("HOME") or str(Path.home())
    return Path(base) / ".cache" / "fleetbench" / name


def read_json(path: Path) -> dict:
    """The file's JSON object; {} when it is missing, unreadable, torn or not an object."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def write_json(path: Path, doc: dict) -> None:
    """Replace the file atomically (a concurrent reader sees the old or the new one, never half of
    one); a read-only home is not an error, the next run simply finds nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass
