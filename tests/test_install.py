"""A new user's first steps outside the checkout: the wheel carries every package and the starter files,
`fleetbench init` writes a working folder, and the inventory is found by -i, $FLEETBENCH_INVENTORY or
./hosts.yaml, in that order."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cli_output import cli_json

from orchestrator.cli import main
from orchestrator.ops.provision import pinned_versions

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """fleetbench's wheel, built from a copy of the checkout's shipped folders (what `pip install .` builds)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "src"
    for name in ("orchestrator", "worker", "templates", "sweeps", "requirements"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(source),
            "-w",
            str(tmp_path / "dist"),
        ],
        check=True,
        capture_output=True,
    )
    return next((tmp_path / "dist").glob("*.whl"))


def test_the_wheel_holds_every_package_and_the_starter_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for top in ("orchestrator", "worker"):  # every package, sub-packages included
        expected = {p.relative_to(REPO).as_posix() for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts}
        assert expected <= names, f"the wheel lacks {sorted(expected - names)}"
    assert "orchestrator/templates/hosts.yaml" in names and "orchestrator/templates/bench_script.py.j2" in names
    assert "orchestrator/templates/report.js" in names and "orchestrator/templates/report.html.j2" in names
    assert {f"orchestrator/sweeps/{p.name}" for p in (REPO / "sweeps").glob("*.yaml")} <= names
    assert "orchestrator/requirements/host-constraints.txt" in names  # what provision pins the hosts to


def test_provision_finds_its_pins_in_an_installed_wheel(wheel, tmp_path):
    """A pip-installed (not editable) fleetbench has no requirements/ beside its packages: provision reads
    the pins shipped inside the package."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = (
        "import json, orchestrator.ops.provision as p; "
        "print(json.dumps([p.__file__, str(p.CONSTRAINTS), p.pinned_versions()]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr
    module, constraints, pins = json.loads(proc.stdout)
    assert Path(module).is_relative_to(site) and Path(constraints).is_relative_to(site)
    assert pins == pinned_versions() and "torch" in pins


def test_the_shipped_inventory_is_the_checkouts():
    assert (REPO / "templates" / "hosts.yaml").read_text() == (REPO / "hosts.yaml").read_text()


def test_init_in_an_empty_folder_then_the_smoke_sweep_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert "wrote hosts.yaml" in out and "wrote sweeps/smoke.yaml" in out
    assert main(["run", "sweeps/smoke.yaml", "--format", "json"]) == 0
    rows = cli_json(capsys.readouterr().out)
    assert len(rows) == 10 and {r["status"] for r in rows} == {"ok", "unsupported"}
    (tmp_path / "hosts.yaml").write_text("# mine\n" + (tmp_path / "hosts.yaml").read_text())
    assert main(["init"]) == 0
    assert "kept (exists) hosts.yaml" in capsys.readouterr().out
    assert (tmp_path / "hosts.yaml").read_text().startswith("# mine")  # never overwritten


@pytest.mark.parametrize(
    "given, env, local, found",
    [
        ("a.yaml", "b.yaml", True, "a"),
        (None, "b.yaml", True, "b"),
        (None, None, True, "local"),
    ],
)
def test_the_inventory_is_found_by_flag_then_environment_then_here(
    tmp_path, monkeypatch, capsys, given, env, local, found
):
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(f"hosts: [{{name: {name}, transport: local}}]\n")
    if local:
        (tmp_path / "hosts.yaml").write_text("hosts: [{name: local, transport: local}]\n")
    if env:
        monkeypatch.setenv("FLEETBENCH_INVENTORY", env)
    else:
        monkeypatch.delenv("FLEETBENCH_INVENTORY", raising=False)
    assert main(["hosts", "--format", "json", *(["-i", given] if given else [])]) == 0
    assert [h["name"] for h in cli_json(capsys.readouterr().out)] == [found]


def test_no_inventory_anywhere_names_all_three_places(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLEETBENCH_INVENTORY", raising=False)
    assert main(["hosts"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: no inventory: give -i FILE, set FLEETBENCH_INVENTORY, or create ./hosts.yaml "
        "(`fleetbench init` writes one with the local host)"
    )


def test_a_dry_run_is_never_latest(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert main(["render", "sweeps/noop.yaml", "--quiet"]) == 0
    assert main(["show", "latest"]) == 2
    assert "no runs in runs (only dry runs of `render`)" in capsys.readouterr().err
    assert main(["run", "sweeps/noop.yaml", "--format", "json"]) == 0
    ran = cli_json(capsys.readouterr().out)[0]["run_id"]
    assert main(["render", "sweeps/noop.yaml", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["show", "latest", "--format", "json"]) == 0
    assert cli_json(capsys.readouterr().out)[0]["run_id"] == ran


def test_the_worker_alone_installs_nothing_of_the_controller_and_pins_what_provision_pins(tmp_path):
    """worker/pyproject.toml builds `fleetbench-worker`: every worker module and nothing else; it needs
    torch, pydantic and numpy; its `[gpu]` extra is exactly `provision --profile gpu` at the pins of
    requirements/host-constraints.txt (one way to a GPU host's versions, whichever tool installs)."""
    from orchestrator.ops.provision import PROFILES, pinned_versions

    source = tmp_path / "src" / "worker"
    shutil.copytree(REPO / "worker", source, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(source),
            "-w",
            str(tmp_path / "dist"),
        ],
        check=True,
        capture_output=True,
    )
    wheel = zipfile.ZipFile(next((tmp_path / "dist").glob("fleetbench_worker-*.whl")))
    names = set(wheel.namelist())
    expected = {
        f"worker/{p.relative_to(REPO / 'worker')}"
        for p in (REPO / "worker").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert expected <= names, sorted(expected - names)
    assert not [n for n in names if not n.startswith(("worker/", "fleetbench_worker-"))]
    metadata = wheel.read(next(n for n in names if n.endswith("/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    base = sorted(r.split(">")[0].split("=")[0].strip() for r in requires if "extra ==" not in r)
    assert base == ["numpy", "pydantic", "torch"]
    pins = pinned_versions()
    gpu = sorted(r.split(";")[0].strip() for r in requires if 'extra == "gpu"' in r)
    assert gpu == sorted(f"{name}=={pins[name]}" for name in PROFILES["gpu"])


def test_init_says_when_the_local_host_has_no_torch(tmp_path, monkeypatch, capsys):
    """The controller never installs torch; the `local` host runs the worker with the controller's
    Python, so init names the one step that makes the smoke sweep run there."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    torch_spec = re.search(r"^TORCH_SPEC \?= (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    cpu = out.find(f"pip install {torch_spec} --index-url https://download.pytorch.org/whl/cpu\n")
    extra = out.find("pip install 'fleetbench[worker]'")
    assert 0 <= cpu < extra, (
        out
    )  # the small CPU torch first (its own index: PyPI's is CUDA's): the extra alone pulls a CUDA build
    assert "fleetbench provision -l local" in out  # which installs the CPU build (tests/test_provision_profiles.py)
