"""FlashInfer's JIT build environment (worker/host/buildenv.py): one spelling of the toolkit and compiler
whatever session starts the worker, so that no session rebuilds another's modules."""

from __future__ import annotations

import json
import os


def test_cuda_home_is_the_same_for_a_shell_and_an_ssh_session(tmp_path):
    """FlashInfer's JIT build files name the toolkit's path; a shell (PATH through a symlink) and an SSH
    session (another PATH) must give the worker the same one, or each rebuilds the other's modules."""
    from worker.host.buildenv import stable_build_env

    real = tmp_path / "cuda-13.0"
    (real / "bin").mkdir(parents=True)
    nvcc = real / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    (tmp_path / "cuda").symlink_to(real)
    link = tmp_path / "cuda"
    home = {"HOME": str(tmp_path / "home")}
    shell = stable_build_env({**home, "PATH": f"{link / 'bin'}:/usr/bin"})
    other = stable_build_env({**home, "PATH": f"/usr/bin:{real / 'bin'}"})
    named = stable_build_env({**home, "PATH": "/usr/bin", "CUDA_HOME": str(link)})  # the H200's shell: via a symlink
    via_cuda_path = stable_build_env({**home, "PATH": "/usr/bin", "CUDA_PATH": str(link)})
    assert shell == other == named == via_cuda_path == {"CUDA_HOME": str(real)}
    assert stable_build_env({**home, "PATH": "/usr/bin", "CUDA_HOME": str(real)}) == {}  # already one spelling
    assert (
        stable_build_env({"HOME": str(tmp_path / "h2"), "PATH": "/usr/bin", "CUDA_HOME": str(tmp_path / "none")}) == {}
    )  # no toolkit: untouched


def test_a_tool_running_flashinfer_itself_takes_the_workers_build_variables(tmp_path, monkeypatch):
    """A benchmark that calls FlashInfer in its own process (or starts `python -m worker run` itself) from
    the H200's shell (CUDA_HOME through a symlink) rebuilt the JIT module the sweeps had built, and the next
    sweep rebuilt it back (~25 s each): adopt_build_env gives it the worker child's variables."""
    from worker.host.buildenv import adopt_build_env

    real = tmp_path / "cuda-13.0"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (real / "bin" / "nvcc").chmod(0o755)
    (tmp_path / "cuda").symlink_to(real)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert adopt_build_env() == {"CUDA_HOME": str(real)}
    assert os.environ["CUDA_HOME"] == str(real)
    assert adopt_build_env() == {}  # already the worker's


def test_a_session_without_the_compiler_variables_gets_the_hosts_last_ones(tmp_path):
    """Measured on the H200: its shell sets CC/CXX, an SSH session does not, and FlashInfer rebuilt its
    JIT module (~40 s) at every switch because the compiler in the build file changed."""
    from worker.host.buildenv import describe_added, encode_added, record_path, stable_build_env

    gcc = tmp_path / "opt-gcc" / "gcc"
    gcc.parent.mkdir()
    gcc.write_text("#!/bin/sh\n")
    gcc.chmod(0o755)
    home = str(tmp_path / "home")
    no_toolkit = str(tmp_path / "no-cuda")  # so that this machine's own toolkit stays out of the test
    shell = {
        "HOME": home,
        "PATH": "/usr/bin:/bin",
        "CUDA_HOME": no_toolkit,
        "CC": str(gcc),
        "FLASHINFER_EXTRA_CFLAGS": "-O3,-g",
    }
    ssh = {"HOME": home, "PATH": "/usr/bin:/bin", "CUDA_HOME": no_toolkit}
    assert stable_build_env(shell) == {}  # the shell's own values: nothing added, but remembered
    assert json.loads(record_path(shell).read_text()) == {
        "CC": str(gcc),
        "CUDA_HOME": no_toolkit,
        "FLASHINFER_EXTRA_CFLAGS": "-O3,-g",
    }
    added = stable_build_env(ssh)
    assert added == {"CC": str(gcc), "FLASHINFER_EXTRA_CFLAGS": "-O3,-g"}
    notes = describe_added(encode_added(added, ssh), {**ssh, **added})
    assert len(notes) == 2 and f"CC={gcc}" in notes[0] and "had none" in notes[0]
    # A session that names its own compiler keeps it and becomes what the host remembers.
    assert stable_build_env({**ssh, "CC": "/bin/sh"}) == {"FLASHINFER_EXTRA_CFLAGS": "-O3,-g"}
    assert stable_build_env(ssh)["CC"] == "/bin/sh"
    # A remembered compiler that is gone is not handed on; a torn record is ignored, never fatal.
    stable_build_env(shell)
    gcc.unlink()
    assert "CC" not in stable_build_env(ssh)
    record_path(ssh).write_text('{"CC": ')
    assert stable_build_env(ssh) == {}
    # Nothing to remember where the home is read-only: the run goes on.
    assert stable_build_env({"HOME": "/proc/none", "PATH": "/usr/bin", "CUDA_HOME": no_toolkit, "CC": "/bin/sh"}) == {}
