"""Errors the CLI turns into one line and an exit code. Anything else is a bug and keeps its traceback."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # some host or case failed, or a diff found a regression
EXIT_BAD_INPUT = 2  # bad configuration, arguments or files: nothing was run
EXIT_INTERRUPTED = 130  # Ctrl-C


class FleetbenchError(Exception):
    """A problem the user can fix; the message says what and where."""

    exit_code = EXIT_BAD_INPUT


class InputError(FleetbenchError):
    """Bad input: a file, a field, an argument."""


class RunInterrupted(FleetbenchError):
    """Ctrl-C during a run or rerun: its hosts were stopped, and what finished is stored in `store`."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, store):
        super().__init__(f"interrupted: run {store.run_id}")
        self.store = store
