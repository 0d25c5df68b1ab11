"""The supervisor's descriptors are out of reach of the processes it starts (worker/sweep/supervise.py
out_of_reach): a process of the same user cannot open the protocol channel through /proc/<pid>/fd."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

NOBODY = 65534
HOLDER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    from worker.sweep.supervise import out_of_reach  # imported before the user changes: the repo may be root's
    os.setgid({uid}); os.setuid({uid})
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable, as a process the user started is (setuid cleared it)
    read_fd, write_fd = os.pipe()
    if {guard}:
        assert out_of_reach()
    print(write_fd, flush=True)
    time.sleep(30)
    """
)
REACHER = textwrap.dedent(
    """
    import os, sys
    os.setgid({uid}); os.setuid({uid})
    try:
        os.close(os.open("/proc/%s/fd/%s" % (sys.argv[1], sys.argv[2]), os.O_WRONLY))
    except PermissionError:
        print("refused")
    else:
        print("opened")
    """
)


def reach(guard: bool) -> str:
    """What a process of one user gets when it opens the pipe another process of that user holds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(uid=NOBODY, guard=guard)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        fd = holder.stdout.readline().strip()
        assert fd, "the holder did not start"
        done = subprocess.run(
            [sys.executable, "-c", REACHER.format(uid=NOBODY), str(holder.pid), fd],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        return done.stdout.strip() or done.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="needs Linux and root to run as another user")
def test_a_process_of_the_same_user_cannot_open_the_supervisors_descriptors():
    assert reach(guard=False) == "opened"  # the hole: any process of the user reaches an open pipe
    assert reach(guard=True) == "refused"


def test_out_of_reach_says_whether_it_took_effect():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ctypes, sys; from worker.sweep.supervise import out_of_reach; ok = out_of_reach(); "
            "print(ok, ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))",  # PR_GET_DUMPABLE
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.stdout.split() == (["True", "0"] if sys.platform == "linux" else ["False"]), done.stderr
