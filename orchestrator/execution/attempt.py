"""One attempt of a worker command on a host: the one attempt runner of sweeps (execute.py) and of a
stored run's cases run again (storedcases.py: profile, crosscheck).

On a transport the caller connects: the command as its launcher starts it (`WorkerCall.argv`), its
params on stdin, each output line demultiplexed (demux.py) into the caller's sinks, run first and
uploaded only when the host says it lacks the files (remote.run_first), under the launcher's stall limit
(suspended while a scheduler queues the job) and the caller's time budget, and registered in `Running`
while it runs, so Ctrl-C stops it (the launcher's stop, or the process group in its pid file). A line the
disk refuses stops the job. What the attempt's end means is the caller's (outcome.judge, or a slot's
error).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Optional

from ..config.inventory import Host
from ..launchers import launcher_for
from ..transport import CommandResult, Transport
from .demux import StreamDemux
from .fanout import Running
from .remote import lacks_files, run_first, stop_remote


@dataclass(frozen=True)
class WorkerCall:
    """What one attempt runs on its host."""

    argv: list[str]  # as its launcher starts it (remote.job_argv, storedcases.worker_argv)
    env: dict[str, str]
    params: bytes  # on its stdin
    job_name: str  # its launcher's name of it (launchers.job_name): how it is found to stop it
    pidfile: str  # where the host writes its process group
    stall_timeout_s: float


def _ignore(*args) -> None:
    return None


class Attempt:
    """One run of a `WorkerCall` on `transport` (connected before `run`). Its output goes to `log` and
    `results` (or `on_record`, see StreamDemux), progress events to `on_progress`, the launcher's news
    (a queue) to `on_launcher`; what the streams said is in `lines` (hello, stderr tail, write error)."""

    def __init__(
        self,
        transport: Transport,
        host: Host,
        call: WorkerCall,
        running: Running,
        *,
        log: BinaryIO,
        results: Optional[BinaryIO] = None,
        on_record: Callable[[str], None] = _ignore,
        on_progress: Callable[[dict], None] = _ignore,
        on_launcher: Callable[[str], None] = _ignore,
    ):
        self.transport = transport
        self.call = call
        self.running = running
        self.launcher = launcher_for(host)
        self.watch = self.launcher.watch(launched=time.monotonic())
        self.lines = StreamDemux(
            log, results, self.watch, on_progress, on_launcher, self._on_write_error, on_record=on_record
        )

    def stop(self) -> bool:
        """Stop the command wherever its launcher started it. Returns whether something was found."""
        return self.launcher.stop(
            self.transport, self.call.job_name, lambda: stop_remote(self.transport, self.call.pidfile)
        )

    def _on_write_error(self, exc: OSError) -> None:
        # In the background: this runs in the thread that reads the output, which must go on reading.
        threading.Thread(target=self.stop, daemon=True).start()

    def run(
        self,
        *,
        time_left: Callable[[], float],
        sync: Callable[[], object],
        resync: Optional[Callable[[], object]] = None,
        cancel: Optional[threading.Event] = None,
        on_launch: Callable[[int], None] = _ignore,
    ) -> Optional[CommandResult]:
        """Run the command, upload what the host lacks (`sync`: before the first launch where the launcher
        wants it; `resync`, default `sync`, when the host says so) and run it once more. `time_left`: the
        seconds a launch may take, asked at each; none left, or `cancel` set, and it does not launch
        (exit status -1). `on_launch` is told the bytes each launch sends. Raises what the transport raises."""
        resync = resync or sync

        def launch() -> CommandResult:
            left = time_left()
            if left <= 0 or (cancel is not None and cancel.is_set()):
                return CommandResult(exit_code=-1, timed_out=left <= 0)
            on_launch(len(self.call.params))
            return self.transport.run(
                self.call.argv,
                env=self.call.env,
                timeout=left,
                on_line=self.lines.on_line,
                stdin=self.call.params,
                stall_timeout=self.launcher.stall_limit(self.watch, self.call.stall_timeout_s),
            )

        def upload_then_again() -> None:
            self.lines.note("the host lacks this script or worker version: uploading, then starting again")
            self.lines.restart()
            resync()

        self.running.add(self.call.job_name, self.stop)
        try:
            if self.launcher.upload_first:
                sync()
            return run_first(launch, lambda r: lacks_files(r, self.lines.hello), upload_then_again)
        finally:
            self.running.remove(self.call.job_name)
