"""Fleet operations on the sshd fleet: host checks, version skew, multi-GPU hosts."""

from __future__ import annotations

import csv
import io
import json

import yaml
from conftest import write_sweep
from support.cli_output import cli_json

from orchestrator.cli import main
from orchestrator.runs.store import resolve_run


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_hosts_check_reports_every_host_and_flags_version_skew(fleet, tmp_path, capsys):
    # One host sees another FlashInfer version: a dist-info on its PYTHONPATH, found before the venv's own
    # (the venv has the pinned one when `make test` installed it, else none).
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("flashinfer-python")
    except PackageNotFoundError:
        installed = None
    extra = tmp_path / "extra-site"
    dist = extra / "flashinfer_python-0.6.99.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.99\n")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0", "ssh1", "ssh2"], local=True)
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"][2]["env"] = {"PYTHONPATH": str(extra)}
    inv.write_text(yaml.safe_dump(doc))

    code, out, err = run_cli(capsys, "hosts", "--check", "-i", inv, "--format", "json")
    statuses = {s["name"]: s for s in cli_json(out)}
    assert set(statuses) == {"ssh0", "ssh1", "ssh2", "local"}
    assert all(s["ready"] for s in statuses.values()), err
    assert statuses["ssh0"]["facts"]["torch"] and statuses["ssh0"]["facts"]["free_disk_gb"] > 0
    assert statuses["ssh2"]["facts"]["flashinfer"] == "0.6.99" and statuses["ssh0"]["facts"]["flashinfer"] == installed
    assert f"version skew in flashinfer: {installed} on ssh0, ssh1, local; 0.6.99 on ssh2" in err
    assert code == 0
    assert run_cli(capsys, "hosts", "--check", "--strict", "-i", inv)[0] == 1


def test_hosts_check_fails_for_a_host_that_is_not_ready(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1", "ssh3"])
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"][1]["python"] = "/nonexistent/bin/python"
    inv.write_text(yaml.safe_dump(doc))
    fleet.host("ssh1").kill()
    code, out, err = run_cli(capsys, "hosts", "--check", "-i", inv)
    assert code == 1
    assert "ssh1: not ready (unreachable): connection refused" in err
    assert "ssh3: not ready (failed): remote interpreter not found: /nonexistent/bin/python" in err


def test_a_two_gpu_host_runs_one_worker_per_gpu_sharded_or_all(tmp_path, capsys):
    """On a CPU the GPU index only reaches the worker's environment: enough to check the plumbing."""
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        yaml.safe_dump(
            {"hosts": [{"name": "box", "transport": "local", "gpus": [0, 1], "workdir": str(tmp_path / "w")}]}
        )
    )
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",), ms=(16, 32, 48, 64))
    code, out, err = run_cli(
        capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--per-gpu", "shard", "--format", "csv"
    )
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sorted((r["slot"], r["gpu"], r["m"]) for r in rows) == [
        ("box.gpu0", "0", "16"),
        ("box.gpu0", "0", "48"),
        ("box.gpu1", "1", "32"),
        ("box.gpu1", "1", "64"),
    ]
    store = resolve_run(tmp_path / "runs", "latest")
    for gpu in (0, 1):
        facts = json.loads((store.attempt_dir(f"box.gpu{gpu}", 1) / "results.jsonl").read_text().splitlines()[0])
        assert facts["visible_devices"] == str(gpu)
    code, out, err = run_cli(
        capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--per-gpu", "all", "--format", "csv"
    )
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 8 and {r["slot"] for r in rows} == {"box.gpu0", "box.gpu1"}


def test_ssh_config_supplies_hostname_port_user_and_key(fleet, tmp_path, capsys):
    h = fleet.host("ssh2")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {h.port}\n  User {fleet.user}\n  IdentityFile {fleet.client_key}\n"
    )
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "hosts": [
                    {
                        "name": "box",
                        "hostname": "gpu-box",
                        "ssh_config": str(cfg),
                        "known_hosts": str(fleet.known_hosts),
                        "python": fleet_python(),
                        "workdir": str(h.workdir),
                        "connect_timeout": 5,
                    }
                ]
            }
        )
    )
    code, out, err = run_cli(
        capsys,
        "run",
        write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
        "-i",
        inv,
        "--runs-dir",
        tmp_path / "runs",
        "--format",
        "csv",
    )
    assert code == 0, err
    assert [r["status"] for r in csv.DictReader(io.StringIO(out))] == ["ok"]


def test_a_host_behind_a_jump_host(fleet, tmp_path, capsys):
    """ssh1 is reached through ssh0: with the jump host down, ssh1 (itself up) is unreachable."""
    jump, target = fleet.host("ssh0"), fleet.host("ssh1")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], proxy_jump=f"{fleet.user}@127.0.0.1:{jump.port}")
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 0, err
    jump.kill()
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 1 and "ssh1: unreachable" in err
    assert target.proc is not None and target.proc.poll() is None


def fleet_python() -> str:
    import sys

    return sys.executable


def test_a_host_without_its_venv_is_provisioned_offline_from_a_wheelhouse_then_runs(fleet, tmp_path, capsys):
    import os
    import sys
    from pathlib import Path

    from support.ci import require

    wheelhouse = os.environ.get("FLEETBENCH_TEST_WHEELHOUSE")
    require(
        wheelhouse and Path(wheelhouse).is_dir(),
        "no wheelhouse: FLEETBENCH_TEST_WHEELHOUSE is not set up (`make test` downloads it)",
    )
    venv_python = tmp_path / "hostvenv" / "bin" / "python"
    inv = fleet.inventory(
        tmp_path / "hosts.yaml", names=["ssh3"], python=str(venv_python), workdir=str(tmp_path / "w3")
    )
    noop = Path(__file__).resolve().parent.parent / "sweeps" / "noop.yaml"
    code, _, err = run_cli(capsys, "run", noop, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 1 and "remote interpreter not found" in err  # before: no venv

    code, out, err = run_cli(
        capsys,
        "provision",
        "-i",
        inv,
        "--wheelhouse",
        wheelhouse,
        "--profile",
        "minimal",
        "--base-python",
        sys.executable,
    )
    assert code == 0, err
    assert "ssh3: ok: created venv" in out and "installed profile minimal" in out
    assert venv_python.exists()

    code, out, err = run_cli(capsys, "run", noop, "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "csv")
    assert code == 0, err
    assert [r["status"] for r in csv.DictReader(io.StringIO(out))] == ["ok"]

    code, out, err = run_cli(capsys, "provision", "-i", inv, "--wheelhouse", wheelhouse, "--profile", "minimal")
    assert code == 0 and "venv exists; uploaded 0.0 MiB of wheels" in out  # idempotent


def test_keys_held_by_ssh_agent_work(fleet, tmp_path, capsys, monkeypatch):
    import os
    import shutil
    import subprocess

    import pytest

    if not shutil.which("ssh-agent") or not shutil.which("ssh-add"):
        pytest.skip("ssh-agent not installed")
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        from benchmarks.harness.polling import wait_until

        assert wait_until(sock.exists, 10)
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
        subprocess.run(["ssh-add", "-q", str(fleet.client_key)], env=env, check=True, stderr=subprocess.DEVNULL)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/id_* to fall back on: the agent must do it
        inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh2"])
        doc = yaml.safe_load(inv.read_text())
        del doc["defaults"]["identity_file"]
        inv.write_text(yaml.safe_dump(doc))
        code, out, err = run_cli(
            capsys,
            "run",
            write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
            "-i",
            inv,
            "--runs-dir",
            tmp_path / "runs",
        )
        assert code == 0, err
        monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "no-agent"))
        code, out, err = run_cli(
            capsys,
            "run",
            write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
            "-i",
            inv,
            "--runs-dir",
            tmp_path / "runs",
        )
        assert code == 1 and "ssh2: auth-failed: no key to offer" in err  # without the agent: refused
    finally:
        agent.terminate()
        agent.wait()


def test_prune_removes_old_runs_here_and_on_their_hosts_but_never_one_in_progress(fleet, tmp_path, capsys):
    from orchestrator.runs.store import RunStore, list_run_dirs

    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0", "ssh1"])
    sweep = write_sweep(tmp_path / "s.yaml", backends=("noop",))
    for _ in range(4):
        assert run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", runs)[0] == 0
    ids = [p.name for p in list_run_dirs(runs)]
    remote = {name: fleet.host(name).workdir / "runs" for name in ("ssh0", "ssh1")}
    assert all((remote[h] / i).is_dir() for h in remote for i in ids)

    code, out, _ = run_cli(capsys, "prune", "--keep", "3", "--runs-dir", runs, "--dry-run")
    assert code == 0 and out.strip() == f"would prune {ids[0]} (and on ssh0, ssh1)"
    assert (runs / ids[0]).is_dir()  # a dry run removes nothing

    with RunStore(runs / ids[1]).hold():  # a command is running it
        code, out, err = run_cli(capsys, "prune", "--keep", "2", "--runs-dir", runs)
    assert code == 1 and f"{ids[1]}: in progress" in err
    assert out.strip() == f"pruned {ids[0]} (and on ssh0, ssh1)"
    assert not (runs / ids[0]).exists() and not any((remote[h] / ids[0]).exists() for h in remote)
    assert (runs / ids[1]).is_dir() and all((remote[h] / ids[1]).is_dir() for h in remote)

    fleet.host("ssh1").kill()  # a host that cannot be reached keeps the run here, so a later prune finds it
    code, _, err = run_cli(capsys, "prune", "--keep", "2", "--runs-dir", runs)
    assert code == 1 and f"{ids[1]}: host 'ssh1': connection refused" in err and (runs / ids[1]).is_dir()
    code, out, _ = run_cli(capsys, "prune", "--keep", "2", "--runs-dir", runs, "--local-only")
    assert code == 0 and out.strip() == f"pruned {ids[1]}"
    assert [p.name for p in list_run_dirs(runs)] == ids[2:]
    assert run_cli(capsys, "prune", "--runs-dir", runs)[0] == 2  # which runs? say it


def test_the_gpu_fleet_benchmark_finishes_when_the_run_prints_more_than_a_pipe_holds(ssh_fleet, tmp_path):
    """benchmarks/fleet/gpu_fleet.py watched its run without reading the run's output: a merged table larger
    than the pipe's buffer (64 KiB) blocked the run, and the benchmark with it. 2 hosts x 700 no-op
    cases print a table of about 130 KB."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    sweep = tmp_path / "many.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "many",
                "backends": ["noop"],
                "device": "cpu",
                "shapes": [{"m": list(range(1, 701)), "n": 16, "k": 16, "label": "plumbing"}],
            }
        )
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fleet.gpu_fleet",
            "--hosts",
            "2",
            "--sweep",
            str(sweep),
            "--out",
            str(out),
            "--kill-after-cases",
            "100000",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (out / "summary.md").read_text()
    assert "## run: exit 0" in summary and "ssh1: ok (700/700)" in summary
    assert (out / "run.stdout.txt").stat().st_size > 65536 and (out / "merged.csv").read_text().count("\n") > 1400
