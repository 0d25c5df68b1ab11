"""One attempt's output, line by line, to where each line belongs (worker/contract/protocol.py says what crosses):
result records to the attempt's results file (or, for a command whose records have no file of their own,
to the log and to `on_record`), progress events to the live view, the launcher's own
lines (a scheduler's queue) to its watch, and everything else to the attempt's log, with the tail of
stderr kept to explain a failure.

A line that cannot be written (a full disk) never raises in the thread that reads the stream: the first
such error is kept (`write_error`), `on_write_error` is told once (the attempt stops its job), and
later lines are read and dropped, so the command's output never backs up. The files end with whole
lines: what was written before stays as it was."""

from __future__ import annotations

import collections
import io
import time
from typing import BinaryIO, Callable, Optional

from worker.contract import protocol

from ..atomicfile import append_line
from ..launchers import LaunchWatch

STDERR_TAIL = 30


class StreamDemux:
    def __init__(
        self,
        log: BinaryIO,
        results: Optional[BinaryIO],
        watch: LaunchWatch,
        on_progress: Callable[[dict], None],
        on_launcher: Callable[[str], None],
        on_write_error: Callable[[OSError], None] = lambda exc: None,
        on_record: Callable[[str], None] = lambda payload: None,
    ):
        """`log` and `results`: files opened unbuffered in binary ("wb", buffering=0), or text streams;
        `results` None: records are logged and given to `on_record` instead."""
        self.log = log
        self.results = results
        self.on_record = on_record
        self.on_write_error = on_write_error
        self.write_error: Optional[OSError] = None  # the first line that could not be written
        self.watch = watch
        self.on_progress = on_progress
        self.on_launcher = on_launcher
        self.hello = False  # the launcher said it runs (protocol.HELLO_PREFIX)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)

    def note(self, text: str) -> None:
        """A line of the controller's own in the attempt's log."""
        self._write(self.log, f"{time.strftime('%H:%M:%S')} controller: {text}\n")

    def _write(self, f: BinaryIO, line: str) -> None:
        if self.write_error is not None:
            return  # the disk refused a line already: this attempt is being stopped
        try:
            if isinstance(f, io.TextIOBase):  # a text stream (a test's, a caller's own): whole lines, flushed
                f.write(line)
                f.flush()
            else:
                append_line(f, line.encode("utf-8", errors="replace"))
        except OSError as exc:
            self.write_error = exc
            self.on_write_error(exc)

    def restart(self) -> None:
        """The command runs again (after an upload): what the first run said no longer explains anything."""
        self.stderr_tail.clear()
        self.hello = False

    def last_stderr(self) -> str:
        """The last stderr line with something on it (not the launcher's), or ""."""
        return next((line.strip() for line in reversed(self.stderr_tail) if line.strip()), "")

    def on_line(self, stream: str, line: str) -> None:
        kind, payload = protocol.decode_stdout(line) if stream == "stdout" else (protocol.LINE_LOG, line)
        if kind == protocol.LINE_RECORD and self.results is not None:
            self._write(self.results, payload + "\n")
            return
        self._write(self.log, f"{time.strftime('%H:%M:%S')} {stream}: {line}\n")
        if stream == "stderr":
            said: Optional[str] = self.watch.see(line, time.monotonic())
            if said is not None:
                self.note(said)
                self.on_launcher(said)
            else:
                self.stderr_tail.append(line)
        elif kind == protocol.LINE_HELLO:
            self.hello = True
        elif kind == protocol.LINE_PROGRESS:
            self.on_progress(payload)
        elif kind == protocol.LINE_RECORD:
            self.on_record(payload)
