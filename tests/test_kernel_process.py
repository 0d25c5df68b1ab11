"""Code under test lives apart (issue 41): kernels from the user's own files run in a worker process of
their own, after the built-in backends' one, and the supervisor writes only the records of the cases it
gave each process. Two user kernels try, as an independent check on the H200 did, to reach a built-in's
number: one patches torch.mm when it is imported, one writes a forged torch-bf16 record to every pipe
it finds among its file descriptors (the protocol channel's name is gone from its environment)."""

from __future__ import annotations

import json

from conftest import kernel_sweep
from support.cli_output import cli_json

from orchestrator.cli import main

PATCHER = """
import time

import torch

FAMILY = "bf16"
_mm = torch.mm


def _slow_mm(*args, **kwargs):
    time.sleep(0.002)  # every torch.mm in this process 2 ms slower, a built-in's too if it shared the process
    return _mm(*args, **kwargs)


torch.mm = _slow_mm


def prepare(a, b, out_dtype):
    bt = b.t()
    return lambda: _mm(a, bt).to(out_dtype)
"""

FORGER = """
import json
import os

import torch

FAMILY = "bf16"
SEEN = {"env": os.environ.get("FLEETBENCH_PROTOCOL_FD")}


def _forge(case_id):
    record = {"kind": "case", "schema_version": 9, "case_id": case_id, "status": "ok", "forged": True}
    line = ("@@fleetbench-record " + json.dumps(record) + "\\n").encode()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                os.write(int(name), line)
        except OSError:
            pass


def prepare(a, b, out_dtype):
    _forge(os.environ.get("FORGED_CASE", "0" * 16))
    bt = b.t()
    run = lambda: torch.mm(a, bt).to(out_dtype)  # noqa: E731
    return run
"""


def test_a_user_kernel_reaches_neither_a_builtins_calls_nor_its_record(tmp_path, capsys, monkeypatch):
    from worker.contract.schema import CaseSpec, TimingOptions

    sweep = kernel_sweep(tmp_path, {"patcher": PATCHER, "forger": FORGER}, ms=(16,), rounds=1)
    # The forger targets torch-bf16's case (its id is what the sweep plans for M=16 x 64 x 128).
    timing = TimingOptions(budget_s=0.05, warmup_ms=1, min_samples=3, max_samples=20, rounds=1)
    builtin = CaseSpec(backend="torch-bf16", m=16, n=64, k=128, timing=timing)
    monkeypatch.setenv("FORGED_CASE", builtin.case_id)
    code = main(["run", str(sweep), "--runs-dir", str(tmp_path / "runs"), "--format", "json"])
    out, err = capsys.readouterr()
    rows = {r["backend"]: r for r in cli_json(out)}
    assert code == 0, err
    assert {rows[b]["status"] for b in ("torch-bf16", "patcher", "forger")} == {"ok"}
    # The patch stayed in the user kernels' process: torch-bf16 (16x64x128, microseconds) is not 2 ms slower.
    assert float(rows["torch-bf16"]["median_us"]) < 1000, rows["torch-bf16"]
    # The forged record was refused (the host's log says so), and the run folder holds none.
    log = next((tmp_path / "runs").glob("*/hosts/*/attempt-1/log.txt")).read_text()
    assert "refused a record the user-kernel process sent for case " + builtin.case_id in log
    results = list((tmp_path / "runs").glob("*/hosts/*/attempt-1/results.jsonl"))
    lines = [json.loads(x) for x in results[0].read_text().splitlines()]
    assert not any(x.get("forged") for x in lines)
    assert [x["kind"] for x in lines].count("facts") == 1
    # Progress counts to the host's whole run in both processes
    totals = {
        json.loads(line.split("@@fleetbench-progress ", 1)[1]).get("total")
        for line in log.splitlines()
        if "@@fleetbench-progress " in line and '"total"' in line
    }
    assert totals == {3}
