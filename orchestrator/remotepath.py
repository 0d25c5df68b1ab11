"""Remote paths may start with `~/`; an SSH exec (and the local transport) starts in the login directory,
so there they are written relative to it and no shell ever expands `~`."""

from __future__ import annotations


def login_relative(path: str) -> str:
    """`~/x` -> `x` (relative to the login directory); `~` -> `.`; anything else unchanged."""
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:] or "."
    return path
