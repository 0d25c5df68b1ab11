"""What the benchmark scripts share with each other and with the tests: where the repo is, how a script
hands over what it measured, (in `benchmarks.harness.coldrun`) a sweep run by a fresh CLI process and the
run folder it left, and (in `benchmarks.harness.sshfleet`) the loopback sshd fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "benchmarks" / "results"
KERNELS = ROOT / "benchmarks" / "kernels"


def publish(lines: list[str], out: Optional[Path]) -> int:
    """Print the lines as one Markdown text (and write it to `out`); the script's exit status (0)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text)
    return 0
