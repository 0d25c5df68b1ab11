"""Opening a report page in headless Chromium, for the tests that check what a reader's browser shows."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from support.ci import require


def chromium() -> str:
    """The path of the Chromium to run. In CI a missing Chromium fails the test (`make test` installs it);
    elsewhere it skips the test."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(found, "chromium is not installed; `make test` installs it")
    return found


def headless(browser: str, page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`browser` run headless on `page` with `args` (--dump-dom, --screenshot=...), its profile under
    `tmp_path`, nothing fetched in the background: the finished process, output captured."""
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
