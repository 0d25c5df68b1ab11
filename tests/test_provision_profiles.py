"""Issue 41: provision chooses each host's profile; a CPU host (the `local` host on the controller's own
Python, or a host without the NVIDIA driver) never gets the CUDA stack, and the hint a run prints for a
host without torch, run as printed, does exactly that. pip is a stand-in here: it records what it is
asked and answers a resolution report, so no wheel is downloaded."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config.inventory import Host
from orchestrator.ops.provision import CPU_TORCH_INDEX, default_profile

SWEEP = "name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 64}]\n"

# The controller's interpreter as a user without torch has it: pip is a stand-in that logs its argv and
# answers `--report` as an index would (torch's CPU build when the CPU index is given, else CUDA's).
STAND_IN = """#!{python}
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    with open({log!r}, "a") as f:
        f.write(json.dumps(args) + "\\n")
    if "--report" in args:
        cpu = "--extra-index-url" in args and {cpu_index!r} in args and not os.environ.get("STAND_IN_CUDA")
        install = [("pydantic", "2.14.4"), ("numpy", "2.4.6"), ("torch", "2.9.1+cpu" if cpu else "2.9.1+cu128")]
        install += [] if cpu else [("nvidia-cublas-cu12", "12.8.4.1"), ("nvidia-cudnn-cu12", "9.10.2.21")]
        with open(args[args.index("--report") + 1], "w") as f:
            json.dump({{"install": [{{"metadata": {{"name": n, "version": v}}}} for n, v in install]}}, f)
    sys.exit(0)
os.environ["PYTHONPATH"] = {no_torch!r}
os.execv({python!r}, [{python!r}, *args])
"""


@pytest.fixture
def controller_without_torch(tmp_path, monkeypatch):
    """(pip log) with sys.executable a venv interpreter that has no torch; HOME in tmp_path."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    python = tmp_path / "ctl" / "bin" / "python"
    python.parent.mkdir(parents=True)
    log = tmp_path / "pip.log"
    python.write_text(
        STAND_IN.format(python=sys.executable, log=str(log), cpu_index=CPU_TORCH_INDEX, no_torch=str(fake.parent))
    )
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("STAND_IN_CUDA", raising=False)
    return log


def pip_calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def packages_of(call: list[str]) -> list[str]:
    """The requirement words of a pip install argv (after its options and their values)."""
    takes_value = {"-c", "--report", "--extra-index-url", "--find-links"}
    words, skip = [], False
    for word in call[3:]:
        if skip:
            skip = False
        elif word in takes_value:
            skip = True
        elif not word.startswith("-"):
            words.append(word)
    return words


def test_the_hint_after_a_run_without_torch_installs_torchs_cpu_build_into_the_controller_only(
    controller_without_torch, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.yaml").write_text("hosts: [{name: local, transport: local, workdir: ~/.fleetbench/local}]\n")
    (tmp_path / "s.yaml").write_text(SWEEP)
    assert main(["run", "s.yaml"]) == 1
    err = capsys.readouterr().err
    assert "local: failed: fleetbench: the worker cannot start with" in err and "Traceback" not in err
    hint = next(line for line in err.splitlines() if line.startswith("install what local lacks with: "))
    command = shlex.split(hint.split(": ", 1)[1])
    assert command[:2] == ["fleetbench", "provision"]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # run as printed, from another folder
    assert main(command[1:]) == 0
    out = capsys.readouterr().out
    assert out.startswith("local: ok: profile cpu (the controller's own Python"), out
    assert "kept what the controller's own Python has: pydantic, numpy" in out
    assert "installed profile cpu (torch)" in out
    calls = pip_calls(controller_without_torch)
    assert len(calls) == 2 and "--dry-run" in calls[0] and "--dry-run" not in calls[1]  # resolved, then installed
    for call in calls:
        assert call[call.index("--extra-index-url") + 1] == CPU_TORCH_INDEX
        assert packages_of(call) == ["torch"]  # pydantic and numpy the controller runs on are left alone

    # The worker's own hint, `fleetbench provision` as it says, in the folder of the run: the same profile.
    monkeypatch.chdir(tmp_path)
    controller_without_torch.unlink()
    assert main(["provision"]) == 0
    assert "profile cpu" in capsys.readouterr().out
    assert all(packages_of(c) == ["torch"] for c in pip_calls(controller_without_torch))


def test_a_cpu_resolution_that_would_bring_the_cuda_stack_installs_nothing(
    controller_without_torch, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("STAND_IN_CUDA", "1")  # an index (a mirror, say) that answers torch with a CUDA build
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts: [{name: local, transport: local}]\n")
    assert main(["provision", "-i", str(inventory)]) == 1
    captured = capsys.readouterr()
    line = captured.err.strip()
    assert line.startswith("local: FAILED: profile cpu") and "Traceback" not in captured.err
    assert "profile cpu would install the CUDA stack (torch==2.9.1+cu128, nvidia-cublas-cu12==12.8.4.1" in line
    assert "nothing was installed" in line
    assert all("--dry-run" in call for call in pip_calls(controller_without_torch))  # no install ran


def test_a_dry_run_of_the_local_host_resolves_the_cpu_profile(controller_without_torch, tmp_path, capsys):
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts: [{name: local, transport: local}]\n")
    assert main(["provision", "-i", str(inventory), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "profile cpu resolves (nothing installed)" in out and "torch==2.9.1+cpu" in out
    assert "nvidia" not in out


def host(**fields) -> Host:
    base = dict(
        name="h",
        transport="ssh",
        hostname="h",
        port=None,
        user=None,
        identity_file=None,
        python="~/venv/bin/python",
        workdir="~/.fleetbench",
        env={},
        gpus=None,
        labels=(),
        connect_timeout=10.0,
        timeout=None,
        stall_timeout=None,
        known_hosts=None,
        proxy_jump=None,
        ssh_config=None,
    )
    return Host(**{**base, **fields})


@pytest.mark.parametrize(
    "fields, driver, profile",
    [
        ({}, True, "gpu"),
        ({}, False, "cpu"),
        ({"gpus": (0,)}, False, "cpu"),  # listed GPUs without a driver run no CUDA
        ({"launcher": "slurm"}, False, "gpu"),  # the login node is not where its jobs run
        ({"name": "local", "transport": "local", "python": sys.executable}, True, "cpu"),  # the controller's venv
        ({"name": "local", "transport": "local", "python": "/opt/gpuvenv/bin/python"}, True, "gpu"),
    ],
)
def test_the_default_profile_of_each_kind_of_host(fields, driver, profile):
    assert default_profile(host(**fields), driver)[0] == profile
