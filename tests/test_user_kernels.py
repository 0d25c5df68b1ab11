"""Bring your own kernel (issue 16): a sweep backend defined in the user's Python file."""
from __future__ import annotations

import hashlib

import json
from pathlib import Path

import yaml

from orchestrator.planning.bundle import build_worker_bundle
from orchestrator.cli import main
from cli_output import cli_json
from conftest import kernel_sweep

GOOD = '''import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
'''
ZEROS = '''import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    out = torch.zeros((a.shape[0], b.shape[0]), dtype=out_dtype)
    return lambda: out
'''
TRANSPOSED = '''import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    return lambda: (b @ a.t()).to(out_dtype)   # [N, M]: the classic layout mistake
'''
BROKEN = "FAMILY = 'bf16'\ndef prepare(a, b, out_dtype)\n    return None\n"  # a syntax error
NEEDS_GPU = GOOD.replace('FAMILY = "bf16"', 'FAMILY = "bf16"\nMIN_CC = (9, 0)\ndef never(): raise SystemExit(1)')
NO_PREPARE = "FAMILY = 'bf16'\n"


def sweep_with(tmp_path: Path, kernels: dict[str, str], *, ms=(16,), builtins=("torch-bf16",)) -> Path:
    return kernel_sweep(tmp_path, kernels, ms=ms, builtins=builtins)


def run_json(capsys, *argv) -> tuple[int, list, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    doc = cli_json(out) if out.strip() else []
    return code, doc.get("rows", doc) if isinstance(doc, dict) else doc, err


def test_a_correct_and_a_wrong_kernel_on_the_local_host(tmp_path, capsys):
    sweep = sweep_with(tmp_path, {"good": GOOD, "zeros": ZEROS, "transposed": TRANSPOSED, "broken": BROKEN,
                                  "needs-gpu": NEEDS_GPU, "no-prepare": NO_PREPARE})
    code, rows, err = run_json(capsys, "run", sweep, "--runs-dir", tmp_path / "runs", "--format", "json")
    by = {r["backend"]: r for r in rows}
    assert code == 1, err  # failed cases exist
    assert by["torch-bf16"]["status"] == "ok" and by["good"]["status"] == "ok"
    assert by["good"]["verdict"] == "pass" and float(by["good"]["median_us"]) > 0
    assert by["zeros"]["status"] == "failed" and "wrong result" in by["zeros"]["reason"]
    assert by["zeros"]["median_us"] in (None, "") and float(by["zeros"]["rel_err"]) == 1.0  # never timed
    assert by["transposed"]["status"] == "failed"
    assert by["broken"]["status"] == "unavailable"
    assert "line 2 (def prepare(a, b, out_dtype)): SyntaxError: expected ':'" in by["broken"]["reason"]
    assert by["needs-gpu"]["status"] == "unsupported" and "compute capability >= 9.0" in by["needs-gpu"]["reason"]
    assert by["no-prepare"]["status"] == "unavailable" and "prepare" in by["no-prepare"]["reason"]


def test_a_kernel_that_does_not_import_is_unavailable_at_its_line_and_leaves_the_exit_status_alone(tmp_path, capsys):
    """Exit policy: `unavailable` (a library or a user file that does not load) is not a failure, exit 0;
    a `failed` case (an error or a wrong result) is, exit 1. The reason leads to the line to fix, whether
    the file does not parse or raises while it is imported."""
    raises = "FAMILY = 'bf16'\nimport torch\nSCALE = torch.tensor(1.0) / undefined_name\n"
    sweep = sweep_with(tmp_path, {"broken": BROKEN, "raises": raises}, builtins=())
    code, rows, err = run_json(capsys, "run", sweep, "--runs-dir", tmp_path / "runs", "--format", "json")
    assert code == 0, err
    by = {r["backend"]: r for r in rows}
    assert by["broken"]["reason"].endswith("line 2 (def prepare(a, b, out_dtype)): SyntaxError: expected ':'")
    assert ("line 3 (SCALE = torch.tensor(1.0) / undefined_name): NameError: name 'undefined_name' is not defined"
            in by["raises"]["reason"])
    sweep = sweep_with(tmp_path, {"zeros": ZEROS}, builtins=())
    assert run_json(capsys, "run", sweep, "--runs-dir", tmp_path / "runs", "--format", "json")[0] == 1


def test_the_kernel_file_travels_over_ssh_in_the_worker_bundle(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"])
    sweep = sweep_with(tmp_path, {"good": GOOD})
    code, rows, err = run_json(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "json")
    assert code == 0, err
    assert {(r["host"], r["backend"], r["status"]) for r in rows} == {("ssh0", "torch-bf16", "ok"), ("ssh0", "good", "ok")}
    name = f"k{hashlib.sha256(GOOD.encode()).hexdigest()[:16]}.py"  # content-addressed (other tests' kernels too)
    remote = list(fleet.host("ssh0").workdir.glob(f"worker/*/worker/user/{name}"))
    assert remote and remote[0].read_text() == GOOD


def test_the_bundle_is_content_addressed_by_kernel_bytes():
    plain = build_worker_bundle()
    one = build_worker_bundle(user_kernels=[GOOD.encode()])
    assert build_worker_bundle(user_kernels=[GOOD.encode()]).sha256 == one.sha256 != plain.sha256
    assert build_worker_bundle(user_kernels=[ZEROS.encode()]).sha256 != one.sha256


def test_diff_says_when_the_kernel_code_changed(tmp_path, capsys):
    runs = tmp_path / "runs"
    sweep = sweep_with(tmp_path, {"good": GOOD}, builtins=())
    assert main(["run", str(sweep), "--runs-dir", str(runs), "--format", "json"]) == 0
    a = sorted(runs.iterdir())[-1]
    (tmp_path / "kernels" / "good.py").write_text(GOOD + "# tuned\n")
    assert main(["run", str(sweep), "--runs-dir", str(runs), "--format", "json"]) == 0
    b = sorted(p for p in runs.iterdir() if p != a)[-1]
    capsys.readouterr()
    main(["diff", str(a), str(b), "--format", "json"])
    doc = cli_json(capsys.readouterr().out)
    settings = json.dumps(doc.get("settings", doc))
    assert "kernel good sha256" in settings


def test_bad_kernel_entries_are_input_errors(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump({"name": "x", "backends": [{"name": "mine", "file": "nowhere.py"}],
                                       "shapes": [{"m": 16, "n": 64, "k": 128}]}))
    assert main(["run", str(missing), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere.py does not exist" in err
    (tmp_path / "k.py").write_text(GOOD)
    clash = tmp_path / "clash.yaml"
    clash.write_text(yaml.safe_dump({"name": "x", "backends": [{"name": "torch-bf16", "file": "k.py"}],
                                     "shapes": [{"m": 16, "n": 64, "k": 128}]}))
    assert main(["run", str(clash), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "built-in backend has that name" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
