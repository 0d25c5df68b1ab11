"""A warm controller: a resident process that has already imported fabric, paramiko, pydantic, jinja2
and rich, and forks one fresh child per `fleetbench` command.

Those imports are ~0.35 s of CPU, paid by every command before it can contact a host (more than the
whole rest of a small fleet's fan-out: benchmarks/RESULTS.md). With `fleetbench warm start`, the
`fleetbench` command becomes a stdlib-only client: it hands its argv, working folder, environment and
its own stdin/stdout/stderr (SCM_RIGHTS) to the server, which forks; the child runs the ordinary CLI
on those descriptors (a terminal stays a terminal), the client forwards Ctrl-C and exits with the
child's status. Each command is a new process, as without the server: nothing is shared between runs
but the imported modules. No server, a stale one (its source files changed) or FLEETBENCH_WARM=0:
the command runs cold, as before.

FLEETBENCH_WARM says how much of this to use (`warm_mode`): `auto` (the default) also starts a server
in the background after a command that ran cold, as Gradle does with its daemon, so that only the
first command of a session pays the imports; `manual` uses a server only if `fleetbench warm start`
started one; `0` never uses one. CI (CI=true) gets `manual`: no process outlives a CI job unasked.

This module imports only the standard library: the client must stay cheap.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

IDLE_EXIT_S = 30 * 60
LOG_LIMIT_BYTES = 1 << 20
_HEADER = struct.Struct("!I")
_SOURCE_DIRS = ("orchestrator", "worker", "templates")


def socket_path() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"fleetbench-{os.getuid()}" / "warm.sock"


def _is_private(folder: Path) -> bool:
    """A real folder (not a link) of ours that nobody else may enter. Without XDG_RUNTIME_DIR the socket
    lives under /tmp, where another user could create `fleetbench-<our uid>` first and listen there for
    our commands, their environment and our terminal."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _private_dir(path: Path) -> Path:
    """The socket's folder: ours alone (0700), or we refuse to use it."""
    folder = path.parent
    folder.mkdir(mode=0o700, exist_ok=True)
    if not _is_private(folder):
        raise RuntimeError(f"{folder} must be a folder of uid {os.getuid()} with mode 0700")
    return folder


def _peer_uid(sock: socket.socket) -> int:
    return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]


def warm_mode() -> str:
    """'off', 'manual' or 'auto', from FLEETBENCH_WARM (and CI): see the module docstring."""
    value = os.environ.get("FLEETBENCH_WARM", "auto").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "off"
    if value == "manual" or os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        return "manual"
    return "auto"


def fingerprint() -> str:
    """What the server imported: a change in any source file, the interpreter or the installed
    packages (site-packages changes when one is installed or removed) makes it stale."""
    import hashlib
    import sysconfig

    root = Path(__file__).resolve().parent.parent
    parts = [sys.executable, sys.version]
    for folder in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        parts.append(f"{folder}:{os.stat(folder).st_mtime_ns}" if os.path.isdir(folder) else folder)
    for name in _SOURCE_DIRS:
        for p in sorted((root / name).rglob("*")):
            if p.suffix in (".py", ".j2") and "__pycache__" not in p.parts:
                st = p.stat()
                parts.append(f"{p}:{st.st_mtime_ns}:{st.st_size}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _send(sock: socket.socket, obj: dict, fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(obj).encode("utf-8")
    if fds:
        socket.send_fds(sock, [_HEADER.pack(len(data)) + data], list(fds))
    else:
        sock.sendall(_HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket, maxfds: int = 0) -> tuple[Optional[dict], list[int]]:
    """One message (and any descriptors sent with it); None at end of stream."""
    buf, fds = b"", []
    while len(buf) < _HEADER.size or len(buf) < _HEADER.size + _HEADER.unpack(buf[:_HEADER.size])[0]:
        if maxfds and not fds:
            chunk, got, _, _ = socket.recv_fds(sock, 65536, maxfds)
            fds.extend(got)
        else:
            chunk = sock.recv(65536)
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        buf += chunk
    size = _HEADER.unpack(buf[:_HEADER.size])[0]
    return json.loads(buf[_HEADER.size:_HEADER.size + size]), fds


# -- client -------------------------------------------------------------------------------------------
def run_via_server(argv: list[str]) -> Optional[int]:
    """Run one command through the warm server; None when there is none to use (run it cold)."""
    path = socket_path()
    if warm_mode() == "off" or not hasattr(socket, "SO_PEERCRED") or not path.exists() or not _is_private(path.parent):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2.0)
        sock.connect(str(path))
        if _peer_uid(sock) != os.getuid():  # a server of someone else's: tell it nothing
            sock.close()
            return None
    except OSError:
        sock.close()
        return None  # no server behind the socket (it exited): cold
    # From here on the command may run there: never also run it here (the server starts it only once
    # we have its pid). Signals that come before the pid are held and forwarded then.
    child: list[int] = []
    pending: list[int] = []

    def forward(signum, _frame):
        if not child:
            pending.append(signum)
            return
        try:
            os.kill(child[0], signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    sock.settimeout(None)
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        _send(sock, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}, (0, 1, 2))
        reply, _ = _recv(sock)
    except OSError:
        reply = None
    if reply is None or "pid" not in reply:
        sock.close()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        if pending:
            raise KeyboardInterrupt
        return None  # stale or refused before anything ran: cold
    child.append(int(reply["pid"]))
    for signum in pending:
        forward(signum, None)
    try:
        status, _ = _recv(sock)
    except OSError:
        status = None
    sock.close()
    if status is None:
        sys.stderr.write("error: the warm controller died during this command (fleetbench warm stop; run again)\n")
        return 1
    return int(status["exit"])


# -- server -------------------------------------------------------------------------------------------
def serve(idle_exit_s: float = IDLE_EXIT_S) -> int:
    """Import everything, then fork a child per request until idle for idle_exit_s (or stopped).
    Returns 1 at once if another server holds the lock (two commands may start one at the same time)."""
    path = socket_path()
    folder = _private_dir(path)
    lock = _try_lock(folder)  # held for this server's life; its forks close it
    if lock is None:
        sys.stderr.write(f"another warm controller holds {folder / 'warm.lock'}\n")
        return 1

    from . import cli, execute, live, merge, render, report, runs  # noqa: F401  (the point: import them now)
    import fabric  # noqa: F401
    import paramiko  # noqa: F401

    stamp = fingerprint()
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(16)
    (path.parent / "warm.pid").write_text(f"{os.getpid()}\n")
    clients: dict[int, socket.socket] = {}  # child pid -> the client waiting for its status
    last_active = time.monotonic()
    stopping = False

    def request_stop(_signum, _frame):
        nonlocal stopping
        stopping = True

    # A child's exit wakes select() through this pipe: its client gets the status at once.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        while not (stopping and not clients):
            _reap(clients)
            if clients:
                last_active = time.monotonic()
            elif time.monotonic() - last_active > idle_exit_s:
                break
            try:
                ready, _, _ = select.select([wake_r] if stopping else [listener, wake_r], [], [], 1.0)
            except InterruptedError:
                continue
            if wake_r in ready:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            if listener not in ready or stopping:
                continue
            conn, _ = listener.accept()
            last_active = time.monotonic()
            pid = _start_child(conn, listener, stamp,
                               [wake_r, wake_w, lock.fileno(), *(c.fileno() for c in clients.values())])
            if pid is None:
                conn.close()
                if stamp != fingerprint():
                    break  # the source changed under us: leave the socket to a fresh server
            else:
                clients[pid] = conn
    finally:
        listener.close()
        pidfile = path.parent / "warm.pid"
        try:
            ours = pidfile.read_text().strip() == str(os.getpid())
        except OSError:
            ours = False
        if ours:  # a newer server may own the socket by now
            path.unlink(missing_ok=True)
            pidfile.unlink(missing_ok=True)
    return 0


def _start_child(conn: socket.socket, listener: socket.socket, stamp: str, server_fds: list[int]) -> Optional[int]:
    if _peer_uid(conn) != os.getuid():
        return None
    conn.settimeout(5.0)
    try:
        request, fds = _recv(conn, maxfds=3)
    except (OSError, ValueError):
        return None
    if request is None or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    if fingerprint() != stamp:
        _send(conn, {"stale": True})
        for fd in fds:
            os.close(fd)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    go_r, go_w = os.pipe()  # the child waits for this: it runs only once its client knows its pid
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(go_w)
            if not os.read(go_r, 1):
                os._exit(1)  # the server could not tell the client: do not run unseen
            os.close(go_r)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            listener.close()
            conn.close()
            for fd in server_fds:  # other clients' connections: their EOF must not wait for us
                os.close(fd)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            _fresh_std_streams()
            os.chdir(request["cwd"])
            os.umask(int(request.get("umask", 0o022)))
            os.environ.clear()
            os.environ.update(request["env"])
            from .cli import main

            code = main(list(request["argv"]))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(go_r)
    for fd in fds:
        os.close(fd)
    try:
        _send(conn, {"pid": pid})
        os.write(go_w, b"x")
    except OSError:
        pass  # the client left: the child reads EOF and exits without running
    finally:
        os.close(go_w)
    return pid


def _fresh_std_streams() -> None:
    """sys.std* over the client's descriptors, buffered as Python would have chosen for them."""
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
                                  line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True)


def _reap(clients: dict[int, socket.socket]) -> None:
    while clients:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = clients.pop(pid, None)
        if conn is not None:
            try:
                _send(conn, {"exit": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)})
            except OSError:
                pass
            conn.close()


def spawn(idle_exit_s: float = IDLE_EXIT_S):
    """Start a server in a fresh interpreter, in its own session (no terminal), logging to warm.log;
    returns the Popen. A fresh interpreter and not a fork of this process: a fork after a command
    would inherit its threads' locks, caches and open connections."""
    import subprocess

    folder = _private_dir(socket_path())
    log_path = folder / "warm.log"
    try:
        keep = log_path.stat().st_size < LOG_LIMIT_BYTES
    except OSError:
        keep = True
    root = str(Path(__file__).resolve().parent.parent)  # this very code, whatever the caller's sys.path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    with open(log_path, "ab" if keep else "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "warm", "serve", "--idle-minutes", f"{idle_exit_s / 60:g}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd="/", env=env,
            start_new_session=True, close_fds=True)


def start_background(idle_exit_s: float = IDLE_EXIT_S) -> tuple[bool, str]:
    """`fleetbench warm start`: start a server detached from this terminal and wait until it listens;
    (started, message)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return False, "the warm controller needs Linux (it checks the client's uid with SO_PEERCRED)"
    up, running_pid = status()
    if up:
        return False, f"already running (pid {running_pid}) on {socket_path()}"
    proc = spawn(idle_exit_s)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        up, server_pid = status()
        if up:
            return True, f"warm controller pid {server_pid} on {socket_path()} (exits after {idle_exit_s / 60:g} idle minutes)"
        if proc.poll() is not None and not status()[0]:
            break
        time.sleep(0.05)
    return False, f"did not start; see {socket_path().parent / 'warm.log'}"


def autostart() -> bool:
    """After a command that ran cold (FLEETBENCH_WARM=auto): start a server for the next ones, without
    waiting for it. Quiet when it cannot (then commands simply stay cold); True if one is starting."""
    if not hasattr(socket, "SO_PEERCRED") or _lock_held():  # a server holds the lock all its life
        return False
    try:
        spawn()
    except (OSError, RuntimeError):
        return False
    return True


def _try_lock(folder: Path):
    """The one-server lock, without waiting: the open file (the lock lasts while it is open), or None
    when another process holds it."""
    import fcntl

    lock = open(folder / "warm.lock", "ab")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def _lock_held() -> bool:
    """Is a server running or still importing (it takes the lock first)? Then do not start another."""
    folder = socket_path().parent
    if not _is_private(folder):
        return False  # spawn() will say no
    try:
        lock = _try_lock(folder)
    except OSError:
        return False
    if lock is None:
        return True
    lock.close()
    return False


def status() -> tuple[bool, Optional[int]]:
    path = socket_path()
    if not _is_private(path.parent):
        return False, None  # a pid file in a folder others can write names nothing we should signal
    pidfile = path.parent / "warm.pid"
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False, None
    return path.exists(), pid


def stop() -> bool:
    up, pid = status()
    if not up or pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and status()[0]:
        time.sleep(0.05)
    return True


def main() -> None:
    """The `fleetbench` command: through the warm server when one runs, else the CLI in this process."""
    argv = sys.argv[1:]
    code = None if argv[:1] == ["warm"] else run_via_server(argv)
    if code is None:
        from .cli import main as cli_main

        code = cli_main(argv)  # (--help and usage errors leave here, by SystemExit)
        # Started after the command, not before: its imports would take CPU from this one.
        if argv[:1] != ["warm"] and warm_mode() == "auto" and autostart():
            sys.stderr.write(f"fleetbench: starting a warm controller in the background, so that later commands "
                             f"skip ~0.3 s of start-up (exits after {IDLE_EXIT_S // 60} idle minutes; "
                             "FLEETBENCH_WARM=manual or 0 turns this off)\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
