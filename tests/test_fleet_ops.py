"""Fleet operations on the sshd fleet: host checks, version skew, multi-GPU hosts."""
from __future__ import annotations

import csv
import io
import json

import yaml
from conftest import write_sweep

from orchestrator.cli import main
from orchestrator.store import resolve_run


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_hosts_check_reports_every_host_and_flags_version_skew(fleet, tmp_path, capsys):
    # One host sees an extra package: a FlashInfer "installed" only there (a dist-info on its PYTHONPATH).
    extra = tmp_path / "extra-site"
    dist = extra / "flashinfer_python-0.7.2.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.7.2\n")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0", "ssh1", "ssh2"], local=True)
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"][2]["env"] = {"PYTHONPATH": str(extra)}
    inv.write_text(yaml.safe_dump(doc))

    code, out, err = run_cli(capsys, "hosts", "--check", "-i", inv, "--format", "json")
    statuses = {s["name"]: s for s in json.loads(out)}
    assert set(statuses) == {"ssh0", "ssh1", "ssh2", "local"}
    assert all(s["ready"] for s in statuses.values()), err
    assert statuses["ssh0"]["facts"]["torch"] and statuses["ssh0"]["facts"]["free_disk_gb"] > 0
    assert statuses["ssh2"]["facts"]["flashinfer"] == "0.7.2" and statuses["ssh0"]["facts"]["flashinfer"] is None
    assert "version skew in flashinfer: None on ssh0, ssh1, local; 0.7.2 on ssh2" in err
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
    inv.write_text(yaml.safe_dump({"hosts": [{"name": "box", "transport": "local", "gpus": [0, 1],
                                              "workdir": str(tmp_path / "w")}]}))
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",), ms=(16, 32, 48, 64))
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--per-gpu", "shard",
                             "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sorted((r["slot"], r["gpu"], r["m"]) for r in rows) == [
        ("box.gpu0", "0", "16"), ("box.gpu0", "0", "48"), ("box.gpu1", "1", "32"), ("box.gpu1", "1", "64")]
    store = resolve_run(tmp_path / "runs", "latest")
    for gpu in (0, 1):
        facts = json.loads((store.attempt_dir(f"box.gpu{gpu}", 1) / "results.jsonl").read_text().splitlines()[0])
        assert facts["visible_devices"] == str(gpu)
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--per-gpu", "all",
                             "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 8 and {r["slot"] for r in rows} == {"box.gpu0", "box.gpu1"}
