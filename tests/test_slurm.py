"""Hosts behind Slurm, against a real Slurm (tests/support/slurmcluster.py: munged, slurmctld and slurmd on this
machine, CPU jobs): a sweep runs under srun and merges like any run; a job cancelled from outside ends
`failed` with Slurm's reason and `rerun --failed` completes it; Ctrl-C leaves no job behind; `hosts
--check` reports the partition."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, cases_ended, processes_under, set_host_field, slow_sweep, start_cli
from support.cli_output import cli_json

from benchmarks.harness.polling import wait_until
from orchestrator.cli import main
from orchestrator.config.inventory import load_inventory
from orchestrator.launchers.slurm import srun_prefix


def inventory(path: Path, cluster, *, local: bool = False, **slurm) -> Path:
    hosts = [
        {
            "name": "slurm1",
            "launcher": "slurm",
            "python": sys.executable,
            "workdir": str(path.parent / "slurm-workdir"),
            "env": cluster.env,
            "slurm": {"partition": cluster.partition, **slurm},
        }
    ]
    if local:
        hosts.append({"name": "local", "transport": "local", "workdir": str(path.parent / "local-workdir")})
    path.write_text(yaml.safe_dump({"hosts": hosts}))
    return path


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_slurm_host_entry_is_validated_and_builds_one_srun_step(tmp_path):
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "hosts": [
                    {
                        "name": "c1",
                        "transport": "ssh",
                        "launcher": "slurm",
                        "hostname": "login.example",
                        "python": "/shared/venv/bin/python",
                        "slurm": {
                            "partition": "gpu",
                            "gpus": 1,
                            "account": "perf",
                            "time": "00:30:00",
                            "options": ["--qos=bench"],
                        },
                    },
                    {"name": "c2", "launcher": "slurm"},
                    # fleetbench 0.2's form: `transport: slurm`, the login node over SSH when a hostname is given
                    {"name": "c3", "transport": "slurm", "hostname": "login.example"},
                    {"name": "c4", "transport": "slurm"},
                ]
            }
        )
    )
    c1, c2, c3, c4 = load_inventory(inv).hosts
    assert (c1.transport, c1.launcher) == ("ssh", "slurm") and (c2.transport, c2.launcher) == ("local", "slurm")
    assert (c3.transport, c3.launcher) == ("ssh", "slurm") and (c4.transport, c4.launcher) == ("local", "slurm")
    # A run stored by 0.2 names the host as it was then: the same machine today.
    assert c3.differs_from({**c3.public_view(), "transport": "slurm", "login": "ssh", "launcher": None}) is None
    assert srun_prefix(c1, "job") == [
        "srun",
        "--job-name=job",
        "--nodes=1",
        "--ntasks=1",
        "--kill-on-bad-exit=1",
        "--partition=gpu",
        "--account=perf",
        "--time=00:30:00",
        "--gpus=1",
        "--qos=bench",
        "--",
    ]
    bad = tmp_path / "bad.yaml"
    for host, message in [
        ({"name": "x", "transport": "slurm", "gpus": [0, 1]}, "get their GPUs from Slurm"),
        ({"name": "x", "transport": "ssh", "hostname": "h", "slurm": {}}, "only for launcher slurm"),
        ({"name": "x", "transport": "slurm", "slurm": {"options": ["--qos bench; rm"]}}, None),
        ({"name": "x", "transport": "slurm", "slurm": {"options": ["qos=bench"]}}, "each item is one option"),
    ]:
        bad.write_text(yaml.safe_dump({"hosts": [host]}))
        if message is None:  # one argv item: quoted as a whole where the command is built, never split
            assert load_inventory(bad).hosts[0].slurm.options == ("--qos bench; rm",)
            continue
        with pytest.raises(Exception, match=message):
            load_inventory(bad)


def test_a_sweep_runs_under_slurm_and_merges_like_an_ssh_run(slurm_cluster, fleet, tmp_path, capsys):
    """The smoke sweep on a Slurm host and on an sshd host in one run: the same cases, statuses, checks
    and reasons; the rows differ in host facts and timings only; the job left Slurm's queue COMPLETED."""
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"])
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"].append(yaml.safe_load(inventory(tmp_path / "slurm.yaml", slurm_cluster).read_text())["hosts"][0])
    inv.write_text(yaml.safe_dump(doc))
    code, out, err = cli(
        capsys, "run", REPO / "sweeps" / "smoke.yaml", "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "json"
    )
    assert code == 0, err
    rows = cli_json(out)
    by_host = {h: {r["case_id"]: r for r in rows if r["host"] == h} for h in ("slurm1", "ssh0")}
    assert len(by_host["slurm1"]) == len(by_host["ssh0"]) == 10
    same = ("label", "backend", "m", "n", "k", "workload", "status", "reason", "verdict", "method", "l2")
    for case_id, row in by_host["slurm1"].items():
        assert {f: row[f] for f in same} == {f: by_host["ssh0"][case_id][f] for f in same}
    assert "slurm1: ok" in err and "s queued in Slurm" in err
    jobs = slurm_cluster.jobs(f"fleetbench-{rows[0]['run_id']}-")
    assert len(jobs) == 1 and jobs[0][2] == "COMPLETED"  # files were uploaded first: no allocation spent on a miss
    outcome = json.loads(next((tmp_path / "runs").glob("*/hosts/slurm1/attempt-1/outcome.json")).read_text())
    assert outcome["outcome"] == "ok" and outcome["queue_s"] is not None


def test_a_job_cancelled_from_outside_fails_with_slurms_reason_and_rerun_completes_it(slurm_cluster, tmp_path, capsys):
    inv = inventory(tmp_path / "hosts.yaml", slurm_cluster)
    runs = tmp_path / "runs"
    proc = start_cli("run", slow_sweep(tmp_path / "s.yaml", shapes=6, budget=0.5), "-i", inv, "--runs-dir", runs)
    try:
        assert wait_until(lambda: cases_ended(runs, "slurm1") >= 1, 90)
        running = slurm_cluster.active()
        assert len(running) == 1
        slurm_cluster.command("scancel", running[0][0])  # an operator, or a preemption, from outside
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert f"slurm1: failed: Slurm ended job {running[0][0]}: CANCELLED" in err
    code, out, err = cli(capsys, "rerun", "latest", "--failed", "-i", inv, "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    rows = cli_json(out)
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok"}
    assert not slurm_cluster.active()


def test_ctrl_c_cancels_the_job_and_leaves_none_in_the_queue(slurm_cluster, tmp_path):
    inv = inventory(tmp_path / "hosts.yaml", slurm_cluster)
    runs = tmp_path / "runs"
    proc = start_cli("run", slow_sweep(tmp_path / "s.yaml", shapes=20, budget=0.5), "-i", inv, "--runs-dir", runs)
    try:
        assert wait_until(lambda: bool(slurm_cluster.active()), 60)
        assert wait_until(lambda: any(runs.glob("*/hosts/slurm1/attempt-1/log.txt")), 30)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert wait_until(lambda: not slurm_cluster.active(), 15), slurm_cluster.active()


def test_hosts_check_reports_the_partition_and_runs_on_a_node(slurm_cluster, tmp_path, capsys):
    inv = inventory(tmp_path / "hosts.yaml", slurm_cluster)
    code, out, err = cli(capsys, "hosts", "--check", "-i", inv, "--format", "json")
    assert code == 0, err
    (status,) = cli_json(out)
    assert status["ready"] and status["facts"]["hostname"]
    assert any(f"partition {slurm_cluster.partition}: up" in n and "GPUs none" in n for n in status["notes"])
    # Asking for GPUs the partition cannot grant is a clear refusal, without queueing a job for ever.
    inv = inventory(tmp_path / "gpu.yaml", slurm_cluster, gpus=1)
    code, out, err = cli(capsys, "hosts", "--check", "-i", inv, "--format", "json")
    (status,) = cli_json(out)
    assert code == 1 and not status["ready"] and "jobs ask for 1 GPU(s)" in status["problem"]
    assert not slurm_cluster.active()


def test_the_login_node_may_be_reached_over_ssh(slurm_cluster, fleet, tmp_path, capsys):
    """`hostname` on a Slurm host: srun, squeue and scancel run on the login node through SSH (here an
    sshd of the test fleet on this machine), with the host's environment."""
    inv = fleet.inventory(
        tmp_path / "hosts.yaml",
        names=["ssh0"],
        transport="slurm",
        env={"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]},
        slurm={"partition": slurm_cluster.partition},
    )
    code, out, err = cli(
        capsys, "run", REPO / "sweeps" / "noop.yaml", "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "json"
    )
    assert code == 0, err
    rows = cli_json(out)
    assert rows and {r["status"] for r in rows} == {"ok"}
    assert [state for *_, state in slurm_cluster.jobs(f"fleetbench-{rows[0]['run_id']}-")] == ["COMPLETED"]


def test_a_job_past_its_hosts_limit_is_cancelled_and_rerun_completes_it(slurm_cluster, tmp_path, capsys):
    inv = inventory(tmp_path / "hosts.yaml", slurm_cluster)
    set_host_field(inv, "slurm1", timeout=6)
    runs = tmp_path / "runs"
    sweep = slow_sweep(tmp_path / "s.yaml", shapes=30, budget=0.5)
    code, out, err = cli(capsys, "run", sweep, "-i", inv, "--runs-dir", runs)
    assert code == 1 and "slurm1: timeout: did not finish within the host's 6 s limit" in err
    assert not slurm_cluster.active()
    set_host_field(inv, "slurm1", timeout=300)
    code, out, err = cli(
        capsys, "rerun", "latest", "--failed", "--resume", "-i", inv, "--runs-dir", runs, "--format", "json"
    )
    assert code == 0, err
    assert {r["status"] for r in cli_json(out)} == {"ok"}


def _job_processes(workdir: Path) -> list[int]:
    """The job's own processes on the node (launcher, supervisor, worker), not srun on the login side."""

    def is_srun(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"srun")
        except OSError:
            return True  # gone: nothing to stop

    return [pid for pid in processes_under(workdir) if not is_srun(pid)]


def test_a_job_that_stops_answering_on_its_node_ends_stalled_and_is_cancelled(slurm_cluster, tmp_path, capsys):
    import os

    inv = inventory(tmp_path / "hosts.yaml", slurm_cluster)
    set_host_field(inv, "slurm1", stall_timeout=15)
    runs = tmp_path / "runs"
    proc = start_cli("run", slow_sweep(tmp_path / "s.yaml", shapes=40, budget=0.5), "-i", inv, "--runs-dir", runs)
    workdir = tmp_path / "slurm-workdir"
    stopped: list[int] = []
    try:
        assert wait_until(lambda: len(_job_processes(workdir)) >= 2, 60)
        assert wait_until(lambda: any(runs.glob("*/hosts/slurm1/attempt-1/log.txt")), 30)
        stopped = _job_processes(workdir)
        for pid in stopped:  # a node that stops answering: no line, no heartbeat
            os.kill(pid, signal.SIGSTOP)
        _, err = proc.communicate(timeout=120)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)  # so Slurm's TERM reaches them at once
            except ProcessLookupError:
                pass
        proc.kill()
    assert proc.returncode == 1 and "slurm1: stalled" in err
    assert wait_until(lambda: not slurm_cluster.active(), 40), slurm_cluster.active()


def test_time_in_the_queue_is_not_a_stall_and_is_reported_apart(slurm_cluster, tmp_path, capsys):
    """The node is busy with another job for ~25 s: the sweep's job waits in the queue longer than its
    stall limit (15 s) without being called stalled, then runs; the wait is reported apart."""
    import os

    inv = inventory(tmp_path / "hosts.yaml", slurm_cluster)
    set_host_field(inv, "slurm1", stall_timeout=15)
    holder = subprocess.Popen(
        ["srun", "--job-name=other-user", f"--cpus-per-task={os.cpu_count()}", "sleep", "25"],
        env={**os.environ, **slurm_cluster.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: slurm_cluster.active("other-user"), 30)
        code, out, err = cli(capsys, "run", REPO / "sweeps" / "noop.yaml", "-i", inv, "--runs-dir", tmp_path / "runs")
    finally:
        holder.kill()
        holder.wait()
    assert code == 0, err
    outcome = json.loads(next((tmp_path / "runs").glob("*/hosts/slurm1/attempt-1/outcome.json")).read_text())
    assert outcome["outcome"] == "ok" and outcome["queue_s"] > 15
    assert "slurm1: queued" in err and "s queued in Slurm" in err
