"""Code under test lives apart (issue 41): kernels from the user's own files run in a worker process of
their own, after the built-in backends' one, and the supervisor writes only the records of the cases it
gave each process. Two user kernels try, as an independent check on the H200 did, to reach a built-in's
number: one patches torch.mm when it is imported, one writes a forged torch-bf16 record to every pipe
it finds among its file descriptors (the protocol channel's name is gone from its environment). A third
writes a forged record of its own case, which the supervisor accepts: the controller judges it again,
outside the kernel's process, and an impossible one reads as failed."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import kernel_sweep
from support.cli_output import cli_json

from orchestrator.cli import main

PATCHER = """
import torch

FAMILY = "bf16"
_mm = torch.mm


def _wrong_mm(*args, **kwargs):
    # every torch.mm in this process doubled, out= included: a built-in's too if it shared the process
    return _mm(*args, **kwargs).mul_(2)


torch.mm = _wrong_mm


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
    run = lambda: (a @ bt).to(out_dtype)  # noqa: E731  (`@`: the patcher beside it doubles torch.mm)
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
    # The patch stayed in the user kernels' process: torch-bf16 (torch.mm) passed its check against the fp32
    # product (`@`, which the patch does not reach), so its torch.mm was not doubled. (A time bound in its
    # place, a leaked patch sleeping 2 ms a call, failed on a loaded 2-core machine.)
    assert rows["torch-bf16"]["reason"] in (None, ""), rows["torch-bf16"]
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


# A kernel that, as its process ends (however it ends), writes a record of its own case on every pipe it
# holds (its protocol channel among them): ok, at 0.001 µs, the last line of its case. The supervisor accepts it
# (the case is one it gave that process); the worker's own physics check never saw it.
OWN_FORGER = """
import atexit
import json
import os
import sys
import time

import torch

from worker.contract.schema import CaseRecord, CaseSpec
from worker.contract.stats import summarize

FAMILY = "bf16"
MINE = os.path.basename(__file__)[1:17]  # worker/user/k<sha256[:16]>.py


def _forge():
    params = json.loads(open(sys.argv[sys.argv.index("--params") + 1]).read())
    for raw in params["cases"]:
        if (raw.get("kernel_sha256") or "").startswith(MINE):
            case = CaseSpec.model_validate(raw)
            timing = summarize([0.001] * 5, method="cuda-graph", calls_per_sample=100, l2=case.timing.l2)
            record = CaseRecord(
                case_id=case.case_id, case=case, status="ok", timing=timing, started_at="t", duration_s=0.1
            )
            line = ("@@fleetbench-record " + record.model_dump_json() + "\\n").encode()
            for name in os.listdir("/proc/self/fd"):
                try:
                    if os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                        os.write(int(name), line)
                except OSError:
                    pass
    time.sleep(0.2)


_exit = os._exit


def _forge_then_exit(code):
    _forge()
    _exit(code)


os._exit = _forge_then_exit  # `python -m worker run` ends by os._exit once every record is written
atexit.register(_forge)  # a process that ends by the interpreter's teardown


def prepare(a, b, out_dtype):
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
"""
HONEST = """
import torch

FAMILY = "bf16"


def prepare(a, b, out_dtype):
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
"""


def as_an_h200s(results: Path) -> None:
    """The attempt's facts rewritten as an H200's with its calibration (the CPU here has no roofs to judge
    by), the records left as they came."""
    from support.h200 import CAL, H200

    lines = results.read_text().splitlines()
    facts = json.loads(lines[0])
    assert facts["kind"] == "facts"
    facts.update(device="cuda", gpu_name=H200, compute_capability="9.0", calibration=CAL.model_dump(mode="json"))
    results.write_text("\n".join([json.dumps(facts), *lines[1:]]) + "\n")


def test_a_forged_record_of_a_kernels_own_case_is_judged_again_outside_its_process(tmp_path, capsys):
    sweep = kernel_sweep(tmp_path, {"forger": OWN_FORGER, "honest": HONEST}, ms=(16,), rounds=1)
    runs = tmp_path / "runs"
    assert main(["run", str(sweep), "--runs-dir", str(runs), "--format", "json"]) == 0
    capsys.readouterr()
    (results,) = runs.glob("*/hosts/*/attempt-1/results.jsonl")
    last = {}
    for line in results.read_text().splitlines():
        record = json.loads(line)
        last[record.get("case", {}).get("backend")] = record
    assert last["forger"]["timing"]["median_us"] == 0.001  # the forged line came through, its case's last
    as_an_h200s(results)
    assert main(["show", "latest", "--runs-dir", str(runs), "--format", "json"]) == 1
    out, err = capsys.readouterr()
    rows = {r["backend"]: r for r in cli_json(out)}
    assert rows["forger"]["status"] == "failed" and rows["forger"]["median_us"] is None
    reason = rows["forger"]["reason"]
    # Held to the family that allows the most (the file's FAMILY is its own code): fp8's bytes and roofs.
    assert reason.startswith("integrity (impossible): 0.001 µs is 290% of this GPU's speed of light (0.0029 µs")
    assert "at the calibrated 1464 TFLOPS fp8 / calibrated 4.24 TB/s copy" in reason, reason
    assert reason.endswith("re-checked outside the kernel's process"), reason
    assert rows["forger"]["integrity"] == "impossible" and rows["forger"]["verdict"] == "fail"
    assert {rows[b]["status"] for b in ("honest", "torch-bf16")} == {"ok"}  # honest records stay ok
    assert "1 of 3 cases are not done: 1 failed" in err


def test_an_attempts_facts_are_the_first_its_supervisor_wrote(tmp_path):
    """A second facts record (the supervisor writes one, before any case) is not the host's: a kernel's
    code could have sent it to lift the roofs its record is judged by."""
    from support.h200 import h200_facts

    from orchestrator.runs.records import parse_results

    results = tmp_path / "results.jsonl"
    forged = h200_facts(device="cpu", gpu_name=None, calibration=None)
    results.write_text(h200_facts().model_dump_json() + "\n" + forged.model_dump_json() + "\n")
    assert parse_results(results).facts == h200_facts()
