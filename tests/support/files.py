"""The repository's files as a test finds them from any folder under tests/, and the files a test writes."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
GOLDEN = REPO / "tests" / "golden"


def write(path: Path, text: str) -> Path:
    """`text` written to `path` (UTF-8); the path back, to pass on."""
    path.write_text(text, encoding="utf-8")
    return path
