"""Several library environments on one host (issue 18, part 4): inventory, provision pins, plan, a run
on both and a diff between them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.cli_output import cli_json

from orchestrator.cli import main
from orchestrator.config.inventory import load_inventory, select_hosts
from orchestrator.config.sweep import load_sweep
from orchestrator.errors import InputError
from orchestrator.ops.provision import constraints_for
from orchestrator.planning.plan import build_plan

REPO = Path(__file__).resolve().parent.parent
TWO_ENVS = f"""
hosts:
  - name: local
    transport: local
    env: {{SHARED: "1"}}
    environments:
      a: {{python: {json.dumps(sys.executable)}, pins: [flashinfer-python==0.7.2.post1], env: {{WHICH: a}}}}
      b: {{python: {json.dumps(sys.executable)}, pins: [flashinfer-python==0.7.4, extra-pkg==1.0], env: {{WHICH: b}}}}
  - {{name: other, hostname: 10.0.0.9}}
"""


def inventory(tmp_path: Path, text: str = TWO_ENVS):
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    return load_inventory(path)


def test_a_host_with_environments_becomes_one_host_per_environment(tmp_path):
    inv = inventory(tmp_path)
    assert inv.names() == ["local@a", "local@b", "other"]
    a, b = inv.hosts[0], inv.hosts[1]
    assert a.environment == "a" and a.machine == "local" and a.pins == ("flashinfer-python==0.7.2.post1",)
    assert a.env == {"SHARED": "1", "WHICH": "a"} and b.env == {"SHARED": "1", "WHICH": "b"}
    assert [h.name for h in select_hosts(inv, "local")] == ["local@a", "local@b"]  # the machine's name: all of them
    assert [h.name for h in select_hosts(inv, "local@b")] == ["local@b"]
    assert [h.name for h in select_hosts(inv, "local,!local@a")] == ["local@b"]


@pytest.mark.parametrize(
    "entry, message",
    [
        ("environments: {a: {python: /x/bin/python, pins: [flashinfer-python]}}", "expected name==version"),
        ("environments: {'bad name': {python: /x/bin/python}}", "environment name"),
        ("environments: {}", "at least one environment"),
        ("environments: {a: {pins: []}}", "python"),
    ],
)
def test_bad_environments_are_input_errors(tmp_path, entry, message):
    with pytest.raises(InputError, match=message):
        inventory(tmp_path, f"hosts:\n  - name: h\n    transport: local\n    {entry}\n")


def test_an_environments_pins_replace_or_extend_the_host_constraints(tmp_path):
    base = tmp_path / "constraints.txt"
    base.write_text("torch==2.9.1\nflashinfer_python==0.7.2.post1  # FP4 GEMM\nsgl-kernel==0.3.21\n")
    b = inventory(tmp_path).hosts[1]
    text = constraints_for(b, base)
    lines = text.splitlines()
    assert lines[0] == "torch==2.9.1" and lines[2] == "sgl-kernel==0.3.21"
    assert lines[1].startswith("flashinfer-python==0.7.4  # environment b (was: flashinfer_python==0.7.2.post1")
    assert lines[3] == "extra-pkg==1.0  # environment b"


def test_environments_of_one_gpu_take_turns_and_wait_for_each_other(tmp_path):
    inv = inventory(tmp_path)
    sweep = load_sweep(REPO / "sweeps" / "smoke.yaml")
    alone = build_plan([inv.hosts[2]], sweep, "r", lock_timeout_s=600)
    both = build_plan(list(inv.hosts[:2]), sweep, "r", lock_timeout_s=600)
    assert alone.worker.lock_timeout_s == 600 and both.worker.lock_timeout_s > 600 + 10 * 30


def test_one_sweep_on_two_environments_diffs_environment_against_environment(tmp_path, capsys):
    inv = tmp_path / "hosts.yaml"
    inv.write_text(TWO_ENVS)
    runs = tmp_path / "runs"
    code = main(
        [
            "run",
            str(REPO / "sweeps" / "smoke.yaml"),
            "-i",
            str(inv),
            "-l",
            "local",
            "--runs-dir",
            str(runs),
            "--format",
            "json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = cli_json(out)
    assert {r["slot"] for r in rows} == {"local@a", "local@b"} and all(r["status"] != "missing" for r in rows)
    code = main(["diff", "latest:local@a", "latest:local@b", "--runs-dir", str(runs), "--format", "json"])
    report = cli_json(capsys.readouterr().out)
    # Both environments time the same CPU cases, so either may be confirmed slower by chance: the exit code
    # is 1 exactly when the report has a SLOWER case.
    assert code == (1 if "SLOWER" in report["summary"] else 0), report["summary"]
    assert len(report["cases"]) == 10 and not {"ONLY-A", "ONLY-B"} & set(report["summary"])
    code = main(["history", "--runs-dir", str(runs), "--backend", "torch-bf16", "--m", "16", "--format", "json"])
    hist = cli_json(capsys.readouterr().out)
    assert {p["host"] for p in hist["points"]} == {"local@a", "local@b"}
