"""How the benchmark scripts hand over what they measured: Markdown on stdout, and to a file if asked."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def publish(lines: list[str], out: Optional[Path]) -> int:
    """Print the lines as one Markdown text (and write it to `out`); the script's exit status (0)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text)
    return 0
