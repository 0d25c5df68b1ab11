#!/usr/bin/env python3
"""fleetbench bench script, rendered by the controller: do not edit.

It makes sure the worker package this run was planned with is unpacked on this host, then hands over
to the worker's command line (`supervise` for a sweep, `check` for a host check). Every parameter
arrives as data: the JSON file named by --params, which with --params-stdin this script first writes
from its standard input (one SSH exec carries it, no upload). This file only wires paths.
"""
import sys
import time

STARTED = time.time()  # first thing: the host-side cost is measured from here
# Second thing: say that the launcher runs, so the controller can tell our exit statuses from Python's.
sys.stdout.write("@@fleetbench-launcher " + "abababababababababababababababababababababababababababababababab" + "\n")
sys.stdout.flush()

import os  # noqa: E402
import shutil  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402

WORKER_ARCHIVE = "fb/worker/abababababababab.tar.gz"
WORKER_DIR = "fb/worker/abababababababab"
WORKER_SHA256 = "abababababababababababababababababababababababababababababababab"
EXIT_NEEDS_SYNC = 5  # tells the controller to upload the worker, then run again
PROTOCOL_FD_ENV = "FLEETBENCH_PROTOCOL_FD"


def worker_present():
    return os.path.exists(os.path.join(WORKER_DIR, ".complete")) or os.path.exists(WORKER_ARCHIVE)


def ensure_worker():
    """Unpack the worker archive once per version; a rename makes the folder appear complete or not at all."""
    if os.path.exists(os.path.join(WORKER_DIR, ".complete")):
        return
    parent = os.path.dirname(os.path.abspath(WORKER_DIR))
    tmp = tempfile.mkdtemp(prefix=".unpack-", dir=parent)
    with tarfile.open(WORKER_ARCHIVE, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")
        else:
            for member in tar.getmembers():
                if member.name.startswith(("/", "..")) or "/../" in member.name or not member.isreg():
                    raise SystemExit("fleetbench: refusing unsafe worker archive member %r" % member.name)
            tar.extractall(tmp)
    with open(os.path.join(tmp, ".complete"), "w") as marker:
        marker.write(WORKER_SHA256 + "\n")
    try:
        os.rename(tmp, WORKER_DIR)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another run unpacked the same version first
        if not os.path.exists(os.path.join(WORKER_DIR, ".complete")):
            raise


def write_file(path, data):
    """Create the folder if needed; write through a temporary name so a reader never sees half a file."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main(argv):
    # Own process group, recorded, so the controller can stop this run and everything it started.
    try:
        os.setsid()
    except OSError:
        pass
    if not worker_present():
        sys.stderr.write("fleetbench: worker %s is not on this host\n" % WORKER_SHA256[:16])
        return EXIT_NEEDS_SYNC
    if "--pidfile" in argv:
        i = argv.index("--pidfile")
        write_file(argv[i + 1], ("%d\n" % os.getpgid(0)).encode())
        argv = argv[:i] + argv[i + 2:]
    if "--params-stdin" in argv:
        argv.remove("--params-stdin")
        write_file(argv[argv.index("--params") + 1], sys.stdin.buffer.read())
    os.environ["FLEETBENCH_SCRIPT_STARTED"] = repr(STARTED)
    # From here on stdout is the protocol channel alone: fd 1 points at stderr, so nothing the worker
    # runs (a kernel, a library, a compiler) can print onto it.
    channel = os.dup(1)
    os.dup2(2, 1)
    os.environ[PROTOCOL_FD_ENV] = str(channel)
    ensure_worker()
    sys.path.insert(0, os.path.abspath(WORKER_DIR))
    from worker.__main__ import main as worker_main

    return worker_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
