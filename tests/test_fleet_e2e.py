"""End to end over real sshd hosts (and the local host): the core loop as a user drives it."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

from conftest import write_sweep
from support.cli_output import cli_json

from orchestrator.cli import main
from orchestrator.runs.store import resolve_run

# Every quote and shell metacharacter a label may hold (control characters are refused at load).
HOSTILE = "{'Desc':40s} | \"it's\" ; $(touch /tmp/pwned) `id` && ünïcode"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sweep_over_four_sshd_hosts_and_local_merges_into_one_table(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", local=True)
    sweep = write_sweep(tmp_path / "s.yaml", ms=(16, 32))
    runs = tmp_path / "runs"

    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", runs, "--format", "csv")

    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    hosts = {r["host"] for r in rows}
    assert hosts == {"ssh0", "ssh1", "ssh2", "ssh3", "local"}
    assert len(rows) == 5 * 2 * 2  # hosts x shapes x backends
    assert {r["status"] for r in rows} == {"ok"}
    for r in rows:
        assert float(r["median_us"]) > 0 and float(r["tflops"]) > 0
        assert r["verdict"] == "pass" and float(r["rel_err"]) >= 0
        assert r["run_id"] and r["m"] in ("16", "32") and r["n"] == "64" and r["k"] == "128"
    store = resolve_run(runs, "latest")
    for slot in ("ssh0", "ssh1", "ssh2", "ssh3", "local"):
        results = (store.attempt_dir(slot, 1) / "results.jsonl").read_text().splitlines()
        facts = json.loads(results[0])
        assert facts["kind"] == "facts" and facts["torch"] and facts["python"]
        assert (store.attempt_dir(slot, 1) / "log.txt").read_text().strip()
        assert json.loads((store.attempt_dir(slot, 1) / "outcome.json").read_text())["outcome"] == "ok"
    # `show` re-reads the store and renders the same table.
    code2, out2, _ = run_cli(capsys, "show", "latest", "--runs-dir", runs, "--format", "csv")
    assert code2 == 0 and out2 == out
    # Each host's work happened in its own workdir, and the records that streamed back are the host's
    # own results.jsonl, byte for byte (no fetch was needed).
    for h in fleet.hosts:
        remote = h.workdir / "runs" / store.run_id / f"{h.name}.attempt-1" / "results.jsonl"
        assert remote.read_bytes() == (store.attempt_dir(h.name, 1) / "results.jsonl").read_bytes()


def test_hostile_label_round_trips_byte_exact_over_ssh_and_runs_nothing(fleet, tmp_path, capsys):
    pwned = Path("/tmp/pwned")
    pwned.unlink(missing_ok=True)
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"])
    sweep = write_sweep(tmp_path / "s.yaml", label=HOSTILE, backends=("torch-bf16",))
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "json")
    assert code == 0, err
    rows = cli_json(out)
    assert [r["label"] for r in rows] == [HOSTILE]
    assert not pwned.exists()
    store = resolve_run(tmp_path / "runs", "latest")
    script = (store.scripts_dir / "ssh1.py").read_text()
    assert "Desc" not in script and "pwned" not in script  # parameters are data, never source


def test_second_run_skips_the_worker_upload(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh2"], workdir=str(tmp_path / "fresh"))
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    uploaded = []
    for _ in range(2):
        code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
        assert code == 0, err
        store = resolve_run(tmp_path / "runs", "latest")
        uploaded.append(store.outcome("ssh2", 1).bytes_uploaded)
    archive = len((store.dir / "worker.tar.gz").read_bytes())
    assert uploaded[0] >= archive  # first run ships the worker
    # Unchanged worker and script: only the params travel (on the command's stdin).
    assert uploaded[1] == len((store.attempt_dir("ssh2", 1) / "params.json").read_bytes())


def test_a_host_that_lost_its_worker_gets_it_again(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], workdir=str(tmp_path / "w"))
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 0, err
    shutil.rmtree(tmp_path / "w" / "worker")  # the script stays: only the launcher can notice
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 0, err
    store = resolve_run(tmp_path / "runs", "latest")
    assert store.outcome("ssh1", 1).bytes_uploaded >= len((store.dir / "worker.tar.gz").read_bytes())
    log = (store.attempt_dir("ssh1", 1) / "log.txt").read_text()
    assert "is not on this host" in log and "uploading, then starting again" in log


def test_killed_host_is_unreachable_others_finish_and_rerun_failed_completes(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml")
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    runs = tmp_path / "runs"
    fleet.host("ssh3").kill()

    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", runs)

    assert code == 1
    assert "ssh3: unreachable: connection refused" in err
    store = resolve_run(runs, "latest")
    outcomes = store.latest_outcomes()
    assert {s: o.outcome for s, o in outcomes.items()} == {
        "ssh0": "ok",
        "ssh1": "ok",
        "ssh2": "ok",
        "ssh3": "unreachable",
    }
    fleet.host("ssh3").restart()
    code, out, err = run_cli(
        capsys, "rerun", store.run_id, "--failed", "-i", inv, "--runs-dir", runs, "--format", "csv"
    )
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["host"] for r in rows if r["status"] == "ok"} == {"ssh0", "ssh1", "ssh2", "ssh3"}
    assert store.attempts("ssh3") == [1, 2] and store.attempts("ssh0") == [1]
    # The rerun used the run's stored script, byte for byte.
    stored = (store.scripts_dir / "ssh3.py").read_bytes()
    remote_script = fleet.host("ssh3").workdir / "scripts" / f"bench-{hashlib.sha256(stored).hexdigest()[:16]}.py"
    assert remote_script.read_bytes() == stored


def test_unknown_host_key_is_refused_with_the_fix_and_accept_new_records_it(fleet, tmp_path, capsys):
    empty_known = tmp_path / "known_hosts"
    empty_known.write_text("")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], known_hosts=empty_known)
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 1
    assert "ssh0: auth-failed: unknown host key for [127.0.0.1]:" in err and "--accept-new" in err
    assert empty_known.read_text() == ""

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--accept-new")
    assert code == 0, err
    assert empty_known.read_text().strip() == fleet.host("ssh0").host_key_line


def test_changed_host_key_is_always_refused(fleet, tmp_path, capsys):
    wrong = tmp_path / "known_hosts"
    other = fleet.host("ssh1").host_key_line.split(" ", 1)[1]
    wrong.write_text(f"[127.0.0.1]:{fleet.host('ssh0').port} {other}\n")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], known_hosts=wrong)
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--accept-new")
    assert code == 1
    assert "host key for [127.0.0.1]:" in err and "CHANGED" in err


def test_render_writes_scripts_and_prints_exact_remote_commands(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], env={"TOKEN": "s3cr3t value"})
    sweep = write_sweep(tmp_path / "s.yaml")
    code, out, err = run_cli(capsys, "render", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()  # a dry run is never `latest`
    store = resolve_run(tmp_path / "runs", run_dir.name)
    assert "WORKER_ARCHIVE" in out and str(store.scripts_dir / "ssh0.py") in out
    assert "'TOKEN=***' " in out and "s3cr3t" not in out  # values may be secrets: printed masked
    manifest = (store.dir / "manifest.json").read_text()
    assert "s3cr3t" not in manifest  # environment values may be secrets: only names are stored
    assert not (fleet.host("ssh0").workdir / "runs" / store.run_id).exists()  # nothing was uploaded


def test_missing_remote_python_is_one_clear_line(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], python="/nonexistent/venv/bin/python")
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 1
    assert "ssh0: failed: remote interpreter not found: /nonexistent/venv/bin/python" in err
    assert "Traceback" not in err
