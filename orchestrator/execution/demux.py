"""One attempt's output, line by line, to where each line belongs (worker/protocol.py says what crosses):
result records to the attempt's results file, progress events to the live view, the launcher's own
lines (a scheduler's queue) to its watch, and everything else to the attempt's log, with the tail of
stderr kept to explain a failure."""
from __future__ import annotations

import collections
import time
from typing import Callable, Optional, TextIO

from worker import protocol

from ..launchers import LaunchWatch

STDERR_TAIL = 30


class StreamDemux:
    def __init__(self, log: TextIO, results: TextIO, watch: LaunchWatch,
                 on_progress: Callable[[dict], None], on_launcher: Callable[[str], None]):
        self.log = log
        self.results = results
        self.watch = watch
        self.on_progress = on_progress
        self.on_launcher = on_launcher
        self.hello = False  # the launcher said it runs (protocol.HELLO_PREFIX)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)

    def note(self, text: str) -> None:
        """A line of the controller's own in the attempt's log."""
        self.log.write(f"{time.strftime('%H:%M:%S')} controller: {text}\n")

    def restart(self) -> None:
        """The command runs again (after an upload): what the first run said no longer explains anything."""
        self.stderr_tail.clear()
        self.hello = False

    def on_line(self, stream: str, line: str) -> None:
        kind, payload = protocol.decode_stdout(line) if stream == "stdout" else (protocol.LINE_LOG, line)
        if kind == protocol.LINE_RECORD:
            self.results.write(payload + "\n")
            self.results.flush()
            return
        self.log.write(f"{time.strftime('%H:%M:%S')} {stream}: {line}\n")
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
