"""Fault injection on the real sshd fleet: crashes, frozen and killed hosts, Ctrl-C, a killed controller,
and failures on the wire. Each ends in a recorded outcome, one clear line, and nothing lost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest
import yaml
from conftest import FAULTY, cases_ended, processes_under, set_host_field, slow_sweep, start_cli, write_sweep
from support.cli_output import cli_json

from benchmarks.harness.polling import wait_until
from orchestrator.cli import main
from orchestrator.runs.records import parse_results
from orchestrator.runs.store import resolve_run


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_worker_crash_marks_the_case_crashed_and_the_rest_still_run(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], env={"FLEETBENCH_TEST_FAULT": "segv:32"})
    sweep = write_sweep(tmp_path / "s.yaml", backends=(FAULTY,), ms=(16, 32, 64))
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "json")
    rows = {r["m"]: r for r in cli_json(out)}
    assert code == 1
    assert rows[32]["status"] == "crashed" and "killed by SIGSEGV during this case" in rows[32]["reason"]
    assert rows[16]["status"] == rows[64]["status"] == "ok"
    assert "1 of 3 cases are not done: 1 crashed" in err


def test_restart_budget_is_bounded(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], env={"FLEETBENCH_TEST_FAULT": "exit:16,exit:32"})
    sweep = write_sweep(tmp_path / "s.yaml", backends=(FAULTY,), ms=(16, 32, 64), extra="max_restarts: 1\n")
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "json")
    rows = {r["m"]: r["status"] for r in cli_json(out)}
    assert code == 1 and rows == {16: "crashed", 32: "crashed", 64: "missing"}
    assert "ssh1: partial: fleetbench: giving up after 1 restarts; 1 cases have no result" in err


def test_frozen_host_times_out_at_its_limit_while_others_finish_then_rerun_recovers(fleet, tmp_path, capsys):
    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0", "ssh1"], timeout=120)
    set_host_field(inv, "ssh1", timeout=8)
    sweep = slow_sweep(tmp_path / "s.yaml", shapes=10, budget=0.5)
    t0 = time.monotonic()
    proc = start_cli("run", sweep, "-i", inv, "--runs-dir", runs)
    try:
        assert wait_until(lambda: cases_ended(runs, "ssh1") >= 2, 30)
        fleet.host("ssh1").freeze()
        _, err = proc.communicate(timeout=60)
    finally:
        fleet.host("ssh1").thaw()
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1
    assert "ssh1: timeout: did not finish within the host's 8 s limit" in err
    store = resolve_run(runs, "latest")
    assert store.outcome("ssh0", 1).outcome == "ok"
    assert elapsed < 8 + 30  # the limit, plus bounded cleanup: nothing hangs
    # The frozen attempt's lines could not be fetched; the rerun recovers them, then completes the host
    # (with room for its remaining cases: the 8 s limit was for the freeze, and a loaded CI machine may
    # need more than that to start a worker and time 8 cases of 0.5 s).
    set_host_field(inv, "ssh1", timeout=120)
    code, out, err = run_cli(
        capsys, "rerun", store.run_id, "--failed", "--resume", "-i", inv, "--runs-dir", runs, "--format", "json"
    )
    assert code == 0, err
    rows = cli_json(out)
    assert len(rows) == 20 and {r["status"] for r in rows} == {"ok"}
    first = parse_results(store.attempt_dir("ssh1", 1) / "results.jsonl").cases
    assert len(first) >= 2  # written before the freeze: kept, not rerun
    second = parse_results(store.attempt_dir("ssh1", 2) / "results.jsonl").cases
    assert {c.case_id for c in first}.isdisjoint({c.case_id for c in second})
    assert len(first) + len(second) == 10


def test_a_host_frozen_at_the_start_ends_stalled_within_two_minutes_and_the_printed_hint_completes_it(
    fleet, tmp_path, capsys, monkeypatch
):
    """No `timeout` anywhere: the default stall timeout ends a frozen host, the others finish, and the
    rerun hint the tool prints works as printed from another folder, with the run's own inventory."""
    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml")
    doc = yaml.safe_load(inv.read_text())
    del doc["defaults"]["timeout"]
    inv.write_text(yaml.safe_dump(doc))
    sweep = slow_sweep(tmp_path / "s.yaml", shapes=6, budget=0.3)
    t0 = time.monotonic()
    proc = start_cli("run", sweep, "-i", inv, "--runs-dir", runs)
    frozen = fleet.host("ssh2")
    try:
        assert wait_until(
            lambda: (
                any(runs.glob("*/hosts/ssh2/attempt-1/log.txt"))
                and '"event":"start"' in next(runs.glob("*/hosts/ssh2/attempt-1/log.txt")).read_text()
            ),
            60,
        )
        frozen.freeze()
        _, err = proc.communicate(timeout=150)
        elapsed = time.monotonic() - t0
    finally:
        frozen.thaw()
    assert proc.returncode == 1, err
    assert elapsed < 120, f"{elapsed:.0f} s"
    assert "ssh2: stalled: no sign of life for 60 s" in err
    store = resolve_run(runs, "latest")
    assert {s: store.outcome(s, 1).outcome for s in ("ssh0", "ssh1", "ssh3")} == dict.fromkeys(
        ("ssh0", "ssh1", "ssh3"), "ok"
    )
    hint = next(line for line in err.splitlines() if line.startswith("complete it with: "))
    assert hint.removeprefix("complete it with: ").split() == [
        "fleetbench",
        "rerun",
        str(store.dir.resolve()),
        "--failed",
    ]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no hosts.yaml, no runs/ here; no -i: the run's own inventory
    code, out, err = run_cli(capsys, "rerun", "latest", "--failed", "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    rows = cli_json(out)
    assert len(rows) == 24 and {r["status"] for r in rows} == {"ok"}
    code, _, err = run_cli(capsys, *hint.removeprefix("complete it with: ").split()[1:])  # the hint, as printed
    assert code == 2 and "nothing to rerun" in err  # it names the same run, now complete


def test_rerun_refuses_an_inventory_whose_host_is_another_machine(fleet, tmp_path, capsys):
    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"])
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"][0]["python"] = "/nonexistent/bin/python"
    inv.write_text(yaml.safe_dump(doc))
    assert run_cli(capsys, "run", write_sweep(tmp_path / "s.yaml"), "-i", inv, "--runs-dir", runs)[0] == 1
    other = tmp_path / "other.yaml"
    doc["hosts"][0]["port"] = fleet.host("ssh1").port
    other.write_text(yaml.safe_dump(doc))
    code, _, err = run_cli(capsys, "rerun", "latest", "--failed", "-i", other, "--runs-dir", runs)
    assert code == 2 and "host 'ssh0' in" in err and "is not the host run" in err and "port" in err
    inv.unlink()
    code, _, err = run_cli(capsys, "rerun", "latest", "--failed", "--runs-dir", runs)
    assert code == 2 and f"was started with inventory {inv}, which is not there any more" in err


def test_a_host_without_an_sftp_subsystem_is_one_clear_line(fleet, tmp_path, capsys):
    host = fleet.host("ssh3")
    original = host.config.read_text()
    host.config.write_text("".join(line for line in original.splitlines(keepends=True) if "Subsystem" not in line))
    host.restart()
    try:
        inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh3"], workdir=str(tmp_path / "fresh-workdir"))
        code, _, err = run_cli(capsys, "run", write_sweep(tmp_path / "s.yaml"), "-i", inv, "--runs-dir", tmp_path / "r")
    finally:
        host.config.write_text(original)
        host.restart()
    assert code == 1
    line = next(line for line in err.splitlines() if line.startswith("ssh3: failed: "))
    assert "refused an SFTP session" in line and "Subsystem sftp" in line and "Traceback" not in err


def test_killed_host_loses_no_result_line(fleet, tmp_path, capsys):
    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh2", "ssh3"])
    sweep = slow_sweep(tmp_path / "s.yaml", shapes=8, budget=0.4)
    proc = start_cli("run", sweep, "-i", inv, "--runs-dir", runs)
    assert wait_until(lambda: cases_ended(runs, "ssh2") >= 2, 30)
    fleet.host("ssh2").kill()
    _, err = proc.communicate(timeout=60)
    # The records streamed before the host died are already home: partial, not empty-handed.
    assert proc.returncode == 1 and "ssh2: partial: connection lost during the run" in err
    store = resolve_run(runs, "latest")
    streamed = parse_results(store.attempt_dir("ssh2", 1) / "results.jsonl").cases
    assert len(streamed) >= 2
    remote_results = fleet.host("ssh2").workdir / "runs" / store.run_id / "ssh2.attempt-1" / "results.jsonl"
    written = [line for line in remote_results.read_text().splitlines() if '"kind":"case"' in line]
    assert len(written) >= len(streamed)
    fleet.host("ssh2").restart()
    code, out, err = run_cli(
        capsys, "rerun", store.run_id, "--failed", "--resume", "-i", inv, "--runs-dir", runs, "--format", "json"
    )
    assert code == 0, err
    recovered = (store.attempt_dir("ssh2", 1) / "results.jsonl").read_text().splitlines()
    assert all(line in recovered for line in remote_results.read_text().splitlines())  # every line came home
    assert {r["status"] for r in cli_json(out)} == {"ok"}


def test_ctrl_c_stops_remote_work_and_leaves_a_consistent_store(fleet, tmp_path, capsys):
    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0", "ssh1"])
    for name in ("ssh0", "ssh1"):
        set_host_field(inv, name, workdir=str(tmp_path / f"work-{name}"))
    sweep = slow_sweep(tmp_path / "s.yaml", shapes=12, budget=0.5)
    proc = start_cli("run", sweep, "-i", inv, "--runs-dir", runs)
    assert wait_until(lambda: cases_ended(runs, "ssh0") >= 1 and cases_ended(runs, "ssh1") >= 1, 30)
    assert processes_under(tmp_path / "work-ssh0")  # remote work is running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: remote work was stopped" in err and "Traceback" not in err
    for name in ("ssh0", "ssh1"):
        assert wait_until(lambda: not processes_under(tmp_path / f"work-{name}"), 10), f"orphans on {name}"
    store = resolve_run(runs, "latest")
    assert {o.outcome for o in store.latest_outcomes().values()} == {"interrupted"}
    code, out, err = run_cli(capsys, "show", "latest", "--runs-dir", runs, "--format", "json")
    assert code == 1 and "Traceback" not in err
    assert {r["status"] for r in cli_json(out)} <= {"ok", "missing"}


def test_controller_killed_with_sigkill_leaves_a_run_that_show_reads_and_rerun_completes(fleet, tmp_path, capsys):
    runs = tmp_path / "runs"
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh3"], workdir=str(tmp_path / "w3"))
    sweep = slow_sweep(tmp_path / "s.yaml", shapes=6, budget=0.4)
    proc = start_cli("run", sweep, "-i", inv, "--runs-dir", runs)
    assert wait_until(lambda: cases_ended(runs, "ssh3") >= 1, 30)
    proc.kill()
    proc.wait()
    code, out, err = run_cli(capsys, "show", "latest", "--runs-dir", runs)
    assert code == 1 and "ssh3: interrupted" in err and "Traceback" not in err
    code, out, err = run_cli(
        capsys, "rerun", "latest", "--failed", "--resume", "-i", inv, "--runs-dir", runs, "--format", "json"
    )
    assert code == 0, err
    assert len(cli_json(out)) == 6
    assert wait_until(lambda: not processes_under(tmp_path / "w3"), 10)  # the orphaned attempt was stopped


# -- failures on the wire: one clear line each, exit 1 (the host failed; the input was fine) ---------
def test_auth_failure(fleet, tmp_path, capsys):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], identity_file=str(other))
    code, _, err = run_cli(capsys, "run", write_sweep(tmp_path / "s.yaml"), "-i", inv, "--runs-dir", tmp_path / "r")
    assert code == 1 and f"ssh0: auth-failed: authentication failed for {fleet.user}@127.0.0.1:" in err
    assert "Traceback" not in err


def test_dns_failure(fleet, tmp_path, capsys, monkeypatch):
    real = socket.getaddrinfo

    def fake(host, *args, **kw):  # no DNS traffic leaves this machine in tests
        if host == "gpu-node-17.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], hostname="gpu-node-17.invalid")
    code, _, err = run_cli(capsys, "run", write_sweep(tmp_path / "s.yaml"), "-i", inv, "--runs-dir", tmp_path / "r")
    assert code == 1 and "ssh0: unreachable: cannot resolve host name 'gpu-node-17.invalid'" in err


def test_remote_disk_full(fleet, tmp_path, capsys):
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(small)]).returncode:
        pytest.skip("needs root to mount a tiny tmpfs")
    try:
        inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], workdir=str(small))
        code, _, err = run_cli(capsys, "run", write_sweep(tmp_path / "s.yaml"), "-i", inv, "--runs-dir", tmp_path / "r")
        assert code == 1
        assert "ssh1: failed: upload of worker.tar.gz" in err and "remote disk full or not writable?" in err
        # Content-addressed files are trusted by name: a cut-off upload must leave nothing under it.
        assert not list((small / "worker").glob("*.tar.gz*"))
    finally:
        subprocess.run(["umount", str(small)])


def test_a_torn_record_from_code_under_test_is_refused_and_the_rest_kept(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh2"], env={"FLEETBENCH_TEST_FAULT": "garbage:32"})
    sweep = write_sweep(tmp_path / "s.yaml", backends=(FAULTY,), ms=(16, 32))
    code, out, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "r", "--format", "json")
    # The supervisor writes only whole records of the cases it gave the process: the torn line never
    # reaches results.jsonl or the controller, and the host's log says it was refused.
    assert code == 0, err
    assert {r["status"] for r in cli_json(out)} == {"ok"}
    log = next((tmp_path / "r").glob("*/hosts/ssh2/attempt-1/log.txt")).read_text()
    assert "fleetbench: refused a record the user-kernel process sent for an unreadable line" in log
    results = next((tmp_path / "r").glob("*/hosts/ssh2/attempt-1/results.jsonl")).read_text()
    assert "oops" not in results


def test_refused_connection_and_connect_timeout_are_unreachable(fleet, tmp_path, capsys):
    with socket.socket() as silent:  # accepts TCP but never speaks SSH: a frozen or wedged sshd
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"], port=port, connect_timeout=1)
        t0 = time.monotonic()
        code, _, err = run_cli(capsys, "run", write_sweep(tmp_path / "s.yaml"), "-i", inv, "--runs-dir", tmp_path / "r")
    assert code == 1 and f"ssh0: timeout: 127.0.0.1:{port} accepted the connection but sent no SSH banner" in err
    assert time.monotonic() - t0 < 15
