"""The one contract between a host and the controller: what crosses, and what each part means. Stdlib only.

What crosses from a host to the controller is an exit status and two streams of lines:
  stdout  the protocol channel: the launcher's hello (first line, before anything can fail), progress
          events and result records, and nothing else;
  stderr  log: everything any code on the host prints, on either of its own streams.
The rendered launcher writes its hello, then keeps the real stdout for the protocol alone (a file
descriptor named by PROTOCOL_FD_ENV) and points file descriptor 1 at stderr: whatever a kernel, a
library or a compiler prints, to sys.stdout or to fd 1 from C, is log and can never be read as a record
or a progress line. The supervisor is the only writer of that channel: the case loop it runs gets a
pipe of its own (PROTOCOL_FD_ENV again, in the child), and the supervisor forwards whole lines of it.
Every record is appended to results.jsonl (fsynced: the host's file is the durable copy) and then
sent on the channel, so the controller usually has all results when the command ends and fetches the
file only when the stream was cut short.

The worker, the rendered launcher (whose template is given these constants by the controller) and the
controller all take markers, exit statuses and line decoding from here; the controller matches no
message text of Python, of the shell or of the launcher. The supervisor and the controller import
nothing heavier than this: pydantic or torch just to print a line would cost every host a start-up.
"""

from __future__ import annotations

import codecs
import contextlib
import datetime as _dt
import json
import os
import sys
import threading
from pathlib import Path
from typing import Callable

MARKER = "@@fleetbench"
HELLO_PREFIX = MARKER + "-launcher "
PROGRESS_PREFIX = MARKER + "-progress "
RECORD_PREFIX = MARKER + "-record "
# The file descriptor of the protocol channel in a process the launcher (or the supervisor) started;
# unset: stdout (a worker run by hand).
PROTOCOL_FD_ENV = "FLEETBENCH_PROTOCOL_FD"
# Set in a child of the supervisor: the supervisor alone writes results.jsonl, from the records the child
# sends on its pipe (worker/sweep/supervise.py accepts only those of the cases it gave that child).
SUPERVISED_ENV = "FLEETBENCH_SUPERVISED"
# While it works, a host says so at least this often (a "heartbeat" progress event): the controller
# calls a host silent for its stall timeout (default 60 s) stalled, and never one that keeps beating.
HEARTBEAT_S = 5.0

# Exit statuses of the launcher and the worker.
EXIT_OK = 0
EXIT_USAGE = 64  # the worker's command line was malformed (argparse's own 2 is remapped to this)
EXIT_INCOMPLETE = 3  # some cases have no record after all restarts
EXIT_GPU_BUSY = 4  # another sweep held this GPU for longer than the lock timeout
EXIT_NEEDS_SYNC = 5  # this host lacks the worker version: upload it, then run again
EXIT_CANNOT_START = 6  # the worker cannot run here at all (a module it needs is missing): never retried
# Statuses given before any of our code runs: by the remote shell for the interpreter, and by CPython
# when it cannot open the script it was given. The last one counts only when no hello came: after
# the hello, the launcher is running and a 2 is not ours (our own usage errors are EXIT_USAGE).
EXIT_SHELL_NOT_EXECUTABLE = 126
EXIT_SHELL_NOT_FOUND = 127
EXIT_PYTHON_CANNOT_OPEN = 2

# What an exit status says about a command the controller launched (see `classify_exit`).
LAUNCH_OK = "ok"
LAUNCH_NEEDS_SYNC = "needs-sync"
LAUNCH_NO_INTERPRETER = "interpreter-not-found"
LAUNCH_NOT_EXECUTABLE = "interpreter-not-executable"
LAUNCH_GPU_BUSY = "gpu-busy"
LAUNCH_INCOMPLETE = "incomplete"
LAUNCH_CANNOT_START = "cannot-start"
LAUNCH_OTHER = "other"


def classify_exit(exit_code: int, hello_seen: bool) -> str:
    """One of the LAUNCH_* names for a command's exit status (-1: the connection died first: other)."""
    if exit_code == EXIT_OK:
        return LAUNCH_OK
    if exit_code == EXIT_NEEDS_SYNC:  # hello or not: launchers of run format 1 printed none
        return LAUNCH_NEEDS_SYNC
    if not hello_seen:
        if exit_code == EXIT_PYTHON_CANNOT_OPEN:
            return LAUNCH_NEEDS_SYNC  # the content-addressed script is not on this host yet
        if exit_code == EXIT_SHELL_NOT_FOUND:
            return LAUNCH_NO_INTERPRETER
        if exit_code == EXIT_SHELL_NOT_EXECUTABLE:
            return LAUNCH_NOT_EXECUTABLE
        return LAUNCH_OTHER
    return {
        EXIT_NEEDS_SYNC: LAUNCH_NEEDS_SYNC,
        EXIT_GPU_BUSY: LAUNCH_GPU_BUSY,
        EXIT_INCOMPLETE: LAUNCH_INCOMPLETE,
        EXIT_CANNOT_START: LAUNCH_CANNOT_START,
    }.get(exit_code, LAUNCH_OTHER)


# -- decoding what arrives --------------------------------------------------------------------------
class LineDecoder:
    """Bytes as they arrive (chunks that start and end anywhere, even inside a UTF-8 sequence) -> whole
    lines handed to `on_line(stream, line)`; a partial last line waits for the next chunk or close()."""

    def __init__(self, stream: str, on_line: Callable[[str, str], None]):
        self._stream = stream
        self._on_line = on_line
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""

    def feed(self, data: bytes) -> None:
        # One split per chunk: splitting off one line at a time would copy the rest of a large chunk
        # once per line.
        lines = (self._buf + self._decoder.decode(data)).split("\n")
        self._buf = lines.pop()
        for line in lines:
            self._on_line(self._stream, line.rstrip("\r"))

    def close(self) -> None:
        rest = self._buf + self._decoder.decode(b"", final=True)
        self._buf = ""
        if rest:
            self._on_line(self._stream, rest.rstrip("\r"))


LINE_LOG, LINE_HELLO, LINE_PROGRESS, LINE_RECORD = "log", "hello", "progress", "record"


def decode_stdout(line: str) -> tuple[str, object]:
    """(kind, payload) of one stdout line: (record, JSON text), (progress, event dict), (hello, worker
    version) or (log, the line). Markers are searched, not only matched at the start: a library may
    leave half a line on stdout before ours."""
    at = line.find(MARKER)
    if at < 0:
        return LINE_LOG, line
    rest = line[at:]
    if rest.startswith(RECORD_PREFIX):
        return LINE_RECORD, rest[len(RECORD_PREFIX) :]
    if rest.startswith(PROGRESS_PREFIX):
        try:
            event = json.loads(rest[len(PROGRESS_PREFIX) :])
        except ValueError:
            return LINE_LOG, line
        return (LINE_PROGRESS, event) if isinstance(event, dict) else (LINE_LOG, line)
    if rest.startswith(HELLO_PREFIX):
        return LINE_HELLO, rest[len(HELLO_PREFIX) :].strip()
    return LINE_LOG, line


def is_protocol_line(line: str) -> bool:
    return line.lstrip().startswith(MARKER)


# -- writing it (worker side) -----------------------------------------------------------------------
# One line at a time within a process: a record can be larger than a pipe writes atomically, and the
# heartbeat thread must not land in the middle of one. Across processes the supervisor is the only
# writer of the launcher's channel (module docstring).
_CHANNEL_LOCK = threading.Lock()
_channel: list = []  # the open protocol channel of this process, once opened


def _channel_file():
    if not _channel:
        fd = os.environ.pop(PROTOCOL_FD_ENV, None)  # gone from the environment once opened: code under test
        #                                            (a user kernel) reads no name of it there
        _channel.append(os.fdopen(int(fd), "w", encoding="utf-8", closefd=False) if fd else sys.stdout)
    return _channel[0]


def open_channel() -> None:
    """Open this process's protocol channel now, before any code under test is imported."""
    _channel_file()


def write_line(line: str) -> None:
    """One whole line on the protocol channel (a trailing newline is added when missing)."""
    if not line.endswith("\n"):
        line += "\n"
    with _CHANNEL_LOCK:
        out = _channel_file()
        out.write(line)
        out.flush()


def forward_lines(read_fd: int, on_line: Callable[[str], None]) -> None:
    """Supervisor side: every whole line that arrives on `read_fd` (a child's protocol pipe), until it
    closes, handed to `on_line`; a line cut short by the child's death is dropped."""
    decoder = LineDecoder("child", lambda _stream, line: on_line(line))
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            data = pipe.read(65536)
            if not data:
                break
            decoder.feed(data)


def emit_progress(**event) -> None:
    """One machine-readable line on stdout; the controller turns these into its live view."""
    write_line(PROGRESS_PREFIX + json.dumps(event, separators=(",", ":")) + "\n")


@contextlib.contextmanager
def heartbeat(interval_s: float = HEARTBEAT_S, **fields):
    """A daemon thread that emits a heartbeat event every `interval_s` while the block runs (a long case
    or a JIT build included: they release the GIL while they wait on the GPU or on the compiler)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            emit_progress(event="heartbeat", **fields)

    thread = threading.Thread(target=beat, name="fleetbench-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(interval_s)


def append_line(path: Path, line: str) -> None:
    """Append one record line durably (a host that dies right after loses nothing already written),
    then echo it for the controller. In a supervised child the supervisor appends it, once it has
    checked that the record is one of this child's (SUPERVISED_ENV)."""
    line = line.rstrip("\n")
    if os.environ.get(SUPERVISED_ENV) == "1":
        write_line(RECORD_PREFIX + line + "\n")
        return
    write_record(path, line)


def write_record(path: Path, line: str) -> None:
    """Append one record line to `path` durably, then send it on the channel."""
    line = line.rstrip("\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    write_line(RECORD_PREFIX + line + "\n")


def done_case_ids(path: Path) -> set[str]:
    """Ids of cases that have their final record (bad lines are skipped; the controller reports them)."""
    done: set[str] = set()
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        # An incomplete record (format >= 7) holds the rounds so far of a case still to be finished.
        if (
            isinstance(obj, dict)
            and obj.get("kind") == "case"
            and isinstance(obj.get("case_id"), str)
            and obj.get("complete", True) is not False
        ):
            done.add(obj["case_id"])
    return done


# What a case measures (worker/contract/schema.py IDENTITY_FIELDS) with the defaults its model gives them: the
# supervisor names a case of a params file by its id without importing pydantic.
IDENTITY_DEFAULTS = {
    "workload": "gemm",
    "backend": None,
    "m": None,
    "n": None,
    "k": None,
    "out_dtype": "bfloat16",
    "seed": 0,
    "label": "",
}


def case_id_of_raw(case: dict) -> str:
    """The id of a case given as the JSON of a CaseSpec (schema.case_id_of, which a test holds it to)."""
    import hashlib

    identity = {f: case.get(f, default) for f, default in IDENTITY_DEFAULTS.items()}
    if case.get("moe") is not None:
        identity["moe"] = case["moe"]
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def has_facts(path: Path) -> bool:
    if not path.exists():
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return any('"kind":"facts"' in line for line in f)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
