"""The local transport: the embedded `local` host runs on this machine through subprocess, no SSH."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

from worker.contract.protocol import LineDecoder

from ..config.inventory import Host
from .base import CommandResult, LineSink, TransportError, shell_command, stall_limit


class LocalTransport:
    """Runs on this machine with subprocess: the embedded `local` host, no SSH involved."""

    def __init__(self, host: Host):
        self.host = host
        self._running: set[subprocess.Popen] = set()

    def connect(self) -> None:
        pass

    def path(self, p: str) -> str:
        return os.path.expanduser(p)

    def exists(self, path: str) -> bool:
        return os.path.exists(self.path(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(self.path(path), exist_ok=True)

    def put(self, local: Path, remote: str, *, atomic: bool = False) -> int:
        target = self.path(remote)
        tmp = f"{target}.part-{os.getpid()}-{threading.get_ident()}"
        shutil.copyfile(local, tmp)
        os.replace(tmp, target)
        return os.path.getsize(target)

    def get(self, remote: str, local: Path) -> bool:
        src = self.path(remote)
        if not os.path.exists(src):
            return False
        shutil.copyfile(src, local)
        return True

    def read_text(self, remote: str) -> Optional[str]:
        try:
            return Path(self.path(remote)).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def run(self, argv, *, env, timeout, on_line, stdin=None, stall_timeout=None) -> CommandResult:
        argv = [self.path(a) if a.startswith("~") else a for a in argv]
        home = os.path.expanduser("~")
        try:
            # cwd is the home folder, as for an SSH exec, so login-relative paths mean the same here.
            proc = subprocess.Popen(
                argv,
                env={**os.environ, **env},
                cwd=home,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError:
            if not os.path.isdir(home):  # Popen names neither: say which one is missing
                raise TransportError(
                    "failed",
                    f"home folder not found: {home} (commands of the local host run "
                    "there; set HOME to a folder that exists)",
                ) from None
            raise TransportError("failed", f"interpreter not found: {argv[0]}") from None
        except PermissionError:
            raise TransportError("failed", f"interpreter not executable: {argv[0]}") from None
        self._running.add(proc)
        last_heard = [time.monotonic()]
        readers = [
            threading.Thread(target=_pump, args=(stream, name, on_line, last_heard), daemon=True)
            for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))
        ]
        for r in readers:
            r.start()
        if stdin is not None:
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except OSError:  # the command exited without reading it: its exit status says why
                pass
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = stalled = False
        try:
            while True:
                try:
                    code = proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    timed_out = deadline is not None and now >= deadline
                    limit = stall_limit(stall_timeout)
                    stalled = limit is not None and now - last_heard[0] > limit
                    if timed_out or stalled:
                        _kill_group(proc)
                        code = proc.wait()
                        break
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        finally:
            self._running.discard(proc)
        for r in readers:
            r.join(timeout=5)
        if timed_out or stalled:
            return CommandResult(exit_code=-1, timed_out=timed_out, stalled=stalled and not timed_out)
        return CommandResult(exit_code=code)

    def describe(self, argv, env) -> str:
        return shell_command(argv, env)

    def close(self) -> None:
        """Stop every command still running through this transport (Ctrl-C: nothing is left behind)."""
        for proc in list(self._running):
            _kill_group(proc)


def _pump(stream, name: str, on_line: LineSink, last_heard: list) -> None:
    """Decode a pipe into lines exactly as the SSH transport decodes a channel (worker.contract.protocol)."""
    decoder = LineDecoder(name, on_line)
    try:
        while True:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            last_heard[0] = time.monotonic()
            decoder.feed(chunk)
    finally:
        decoder.close()
        stream.close()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
