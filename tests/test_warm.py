"""The warm controller (`fleetbench warm`): commands forked from a resident process that already did
the imports behave exactly like cold ones: same output, exit codes, Ctrl-C, and a stale server is
never used."""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
from conftest import REPO
from test_faults import cases_ended, processes_under, set_host_field, slow_sweep

from orchestrator.transport import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm controller is Linux-only")


def _env(tmp_path, **extra) -> dict:
    """This environment with a private runtime folder under tmp_path, without CI and FLEETBENCH_WARM
    (each test says which warm mode it means), plus `extra`."""
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "FLEETBENCH_WARM")}
    return dict(env, XDG_RUNTIME_DIR=str(runtime), **extra)


def _state_dir(tmp_path) -> Path:
    """Where the server keeps its socket, pid file, lock and log, for _env(tmp_path)."""
    return tmp_path / "xdg" / f"fleetbench-{os.getuid()}"


@pytest.fixture
def warm_env(tmp_path):
    """A private runtime folder, a running server, and no server left behind."""
    env = _env(tmp_path, FLEETBENCH_WARM="manual")
    started = fleetbench(env, "warm", "start")
    assert started.returncode == 0, started.stderr
    yield env
    fleetbench(env, "warm", "stop")
    pidfile = _state_dir(tmp_path) / "warm.pid"
    assert wait_until(lambda: not pidfile.exists(), 10)


def fleetbench(env, *argv, **kw) -> subprocess.CompletedProcess:
    """The `fleetbench` command as installed (orchestrator.warm:main)."""
    return subprocess.run([sys.executable, "-m", "orchestrator.warm", *map(str, argv)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, **kw)


def server_children(env) -> list[int]:
    pid = int((Path(env["XDG_RUNTIME_DIR"]) / f"fleetbench-{os.getuid()}" / "warm.pid").read_text())
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == pid]


def _alive(pid: int) -> bool:
    """Running, not a zombie (a detached server's parent is init, which may reap late)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def test_commands_through_the_server_match_cold_ones(warm_env, fleet, tmp_path):
    folder = _state_dir(tmp_path)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "warm.sock").stat().st_mode) == 0o600
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0", "ssh1"])
    sweep = REPO / "sweeps" / "noop.yaml"
    runs = tmp_path / "runs"
    warm = fleetbench(warm_env, "run", sweep, "-i", inv, "--runs-dir", runs, "--format", "json")
    assert warm.returncode == 0, warm.stderr
    assert {r["host"] for r in json.loads(warm.stdout)} == {"ssh0", "ssh1"}
    assert "ssh0: ok (1/1)" in warm.stderr
    # The same `show`, warm and cold, prints the same bytes.
    shown = [fleetbench(dict(warm_env, FLEETBENCH_WARM=w), "show", "latest", "--runs-dir", runs, "--format", "csv")
             for w in ("1", "0")]
    assert shown[0].returncode == shown[1].returncode == 0
    assert shown[0].stdout == shown[1].stdout and shown[0].stdout.count("\n") == 3
    # Bad input: exit 2 and one line, as cold.
    bad = fleetbench(warm_env, "run", tmp_path / "missing.yaml", "-i", inv)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr
    assert wait_until(lambda: not server_children(warm_env), 5)  # every child was reaped


def test_ctrl_c_reaches_the_forked_command(warm_env, fleet, tmp_path):
    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"])
    set_host_field(inv, "ssh1", workdir=str(tmp_path / "w1"))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.warm", "run", str(slow_sweep(tmp_path / "s.yaml")),
                             "-i", str(inv), "--runs-dir", str(runs)], cwd=REPO, env=warm_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: cases_ended(runs, "ssh1") >= 1, 30)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: remote work was stopped" in err
    assert wait_until(lambda: not processes_under(tmp_path / "w1"), 10)


def test_a_stale_server_is_not_used_and_goes_away(warm_env, tmp_path):
    template = REPO / "templates" / "bench_script.py.j2"
    before = template.stat()
    pidfile = _state_dir(tmp_path) / "warm.pid"
    try:
        os.utime(template, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))  # "edited"
        result = fleetbench(warm_env, "runs", "--runs-dir", tmp_path / "none")
        assert result.returncode == 0, result.stderr  # answered cold
        assert wait_until(lambda: not pidfile.exists(), 10)  # and the stale server left
    finally:
        os.utime(template, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert fleetbench(warm_env, "warm", "status").stdout.strip() == "not running"


def test_no_server_means_cold(tmp_path):
    env = _env(tmp_path, FLEETBENCH_WARM="manual")
    assert fleetbench(env, "warm", "status").stdout.strip() == "not running"
    result = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
    assert result.returncode == 0 and "outcomes" in result.stdout, result.stderr  # the (empty) runs table
    assert "warm controller" not in result.stderr  # manual: nothing started
    assert fleetbench(env, "warm", "status").stdout.strip() == "not running"


def test_a_cold_command_starts_a_server_for_the_next_ones(tmp_path):
    env = _env(tmp_path)
    pidfile = _state_dir(tmp_path) / "warm.pid"
    try:
        first = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
        assert first.returncode == 0 and "outcomes" in first.stdout, first.stderr
        notice = [line for line in first.stderr.splitlines() if "warm controller" in line]
        assert len(notice) == 1 and "FLEETBENCH_WARM" in notice[0]
        assert wait_until(lambda: fleetbench(env, "warm", "status").stdout.startswith("running"), 30)
        server = int(pidfile.read_text())
        # The next command goes through it: no second server, no second notice; and the same answer.
        second = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
        assert second.returncode == 0 and second.stdout == first.stdout
        assert "warm controller" not in second.stderr
        assert int(pidfile.read_text()) == server
        # Detached: its own session, not the caller's; started in / (it holds no caller's folder).
        assert os.getsid(server) == server and os.readlink(f"/proc/{server}/cwd") == "/"
    finally:
        fleetbench(env, "warm", "stop")
    assert wait_until(lambda: not pidfile.exists(), 10)


@pytest.mark.parametrize("extra", [{"CI": "true"}, {"FLEETBENCH_WARM": "0"}, {"FLEETBENCH_WARM": "manual"}])
def test_no_server_is_started_in_ci_or_when_turned_off(tmp_path, extra):
    env = _env(tmp_path, **extra)
    result = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
    assert result.returncode == 0 and "warm controller" not in result.stderr, result.stderr
    assert fleetbench(env, "warm", "status").stdout.strip() == "not running"


def test_only_one_server_runs_when_two_start_at_once(tmp_path):
    env = _env(tmp_path, FLEETBENCH_WARM="manual")
    serve = [sys.executable, "-m", "orchestrator.cli", "warm", "serve", "--idle-minutes", "1"]
    first = subprocess.Popen(serve, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: fleetbench(env, "warm", "status").stdout.startswith("running"), 30)
        second = subprocess.run(serve, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1 and "another warm controller holds" in second.stderr
        assert fleetbench(env, "warm", "status").stdout.strip() == f"running (pid {first.pid}) on " \
            f"{_state_dir(tmp_path) / 'warm.sock'}"
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    assert first.returncode == 0


def test_the_command_runs_with_the_callers_umask(warm_env, tmp_path):
    runs = tmp_path / "runs"
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  - name: here\n    transport: local\n")
    for mask in (0o022, 0o077):
        made = fleetbench(warm_env, "render", REPO / "sweeps" / "noop.yaml", "-i", inv, "--runs-dir", runs,
                          "--quiet", preexec_fn=lambda m=mask: os.umask(m))
        assert made.returncode == 0, made.stderr
        newest = max((p for p in runs.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns)
        assert stat.S_IMODE(newest.stat().st_mode) == 0o777 & ~mask, oct(mask)


def _decoy_server(folder: Path, uid: Optional[int] = None) -> subprocess.Popen:
    """A listener on our socket path that reports how many bytes a client sent it ('none': nobody came).
    Bound here, listening there: SO_PEERCRED tells a client who called listen(), so as `uid`."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "warm.sock"))
    code = ("import socket, sys\n"
            "s = socket.socket(fileno=int(sys.argv[1])); s.listen(4); s.settimeout(8)\n"
            "print('listening', flush=True)\n"
            "try:\n    c, _ = s.accept()\nexcept OSError:\n    print('none'); raise SystemExit\n"
            "c.settimeout(5)\ntry:\n    print(len(c.recv(65536)))\nexcept OSError:\n    print('none')\n")
    try:
        decoy = subprocess.Popen([SYSTEM_PYTHON, "-c", code, str(listener.fileno())], pass_fds=[listener.fileno()],
                                 stdout=subprocess.PIPE, text=True,
                                 preexec_fn=(lambda: os.setuid(uid)) if uid is not None else None)
    finally:
        listener.close()
    assert decoy.stdout.readline().strip() == "listening"
    return decoy


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
                    reason="runs a listener as another uid (needs root and a python that uid may run)")
def test_a_server_of_another_user_is_told_nothing(tmp_path):
    env = _env(tmp_path, FLEETBENCH_WARM="manual")
    folder = _state_dir(tmp_path)
    folder.mkdir(mode=0o700)
    decoy = _decoy_server(folder, uid=65534)
    result = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
    assert result.returncode == 0 and "outcomes" in result.stdout, result.stderr  # ran cold, here
    assert decoy.communicate(timeout=30)[0].strip() in ("0", "none")  # it connected, saw the uid, left


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="needs /usr/bin/python3 for the decoy")
def test_a_socket_folder_others_can_enter_is_not_used(tmp_path):
    env = _env(tmp_path, FLEETBENCH_WARM="manual")
    folder = _state_dir(tmp_path)
    folder.mkdir(mode=0o755)  # as another user's pre-made folder in /tmp would be to us: not private
    (folder / "warm.pid").write_text(f"{os.getpid()}\n")  # a live pid: `warm stop` must not signal it
    decoy = _decoy_server(folder)
    result = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
    assert result.returncode == 0 and "outcomes" in result.stdout, result.stderr
    assert fleetbench(env, "warm", "status").stdout.strip() == "not running"
    assert fleetbench(env, "warm", "stop").stdout.strip() == "not running"
    started = fleetbench(env, "warm", "start")
    assert started.returncode == 1 and "must be a folder of uid" in started.stderr
    assert decoy.communicate(timeout=30)[0].strip() == "none"  # nobody connected


def test_no_second_server_is_started_while_one_is_still_importing(tmp_path):
    env = _env(tmp_path)
    folder = _state_dir(tmp_path)
    folder.mkdir(mode=0o700)
    import fcntl

    try:
        with open(folder / "warm.lock", "ab") as lock:  # what a server holds from its first instant
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            result = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
            assert result.returncode == 0 and "warm controller" not in result.stderr, result.stderr
        assert not (folder / "warm.log").exists()  # nothing was spawned
    finally:
        fleetbench(env, "warm", "stop")  # had one been spawned, it would outlive the test


def test_after_a_source_change_the_next_cold_command_starts_a_fresh_server(tmp_path):
    env = _env(tmp_path)
    pidfile = _state_dir(tmp_path) / "warm.pid"
    template = REPO / "templates" / "bench_script.py.j2"
    before = template.stat()
    try:
        assert fleetbench(env, "runs", "--runs-dir", tmp_path / "none").returncode == 0
        assert wait_until(lambda: fleetbench(env, "warm", "status").stdout.startswith("running"), 30)
        old = int(pidfile.read_text())
        os.utime(template, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))  # "upgraded"
        result = fleetbench(env, "runs", "--runs-dir", tmp_path / "none")
        assert result.returncode == 0 and "starting a warm controller" in result.stderr, result.stderr
        assert wait_until(lambda: pidfile.exists() and int(pidfile.read_text()) != old, 30)
        assert wait_until(lambda: not _alive(old), 10)  # the stale one left by itself
    finally:
        os.utime(template, ns=(before.st_atime_ns, before.st_mtime_ns))
        fleetbench(env, "warm", "stop")
    assert wait_until(lambda: not pidfile.exists(), 10)
