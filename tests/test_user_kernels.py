"""Bring your own kernel (issue 16): a sweep backend defined in the user's Python file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml
from cli_output import cli_json
from conftest import kernel_sweep

from orchestrator.cli import main
from orchestrator.planning.bundle import build_worker_bundle

GOOD = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    bt = b.t()
    return lambda: torch.mm(a, bt).to(out_dtype)
"""
ZEROS = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    out = torch.zeros((a.shape[0], b.shape[0]), dtype=out_dtype)
    return lambda: out
"""
TRANSPOSED = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    return lambda: (b @ a.t()).to(out_dtype)   # [N, M]: the classic layout mistake
"""
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
    sweep = sweep_with(
        tmp_path,
        {
            "good": GOOD,
            "zeros": ZEROS,
            "transposed": TRANSPOSED,
            "broken": BROKEN,
            "needs-gpu": NEEDS_GPU,
            "no-prepare": NO_PREPARE,
        },
    )
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
    assert (
        "line 3 (SCALE = torch.tensor(1.0) / undefined_name): NameError: name 'undefined_name' is not defined"
        in by["raises"]["reason"]
    )
    sweep = sweep_with(tmp_path, {"zeros": ZEROS}, builtins=())
    assert run_json(capsys, "run", sweep, "--runs-dir", tmp_path / "runs", "--format", "json")[0] == 1


def test_the_kernel_file_travels_over_ssh_in_the_worker_bundle(fleet, tmp_path, capsys):
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh0"])
    sweep = sweep_with(tmp_path, {"good": GOOD})
    code, rows, err = run_json(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--format", "json")
    assert code == 0, err
    assert {(r["host"], r["backend"], r["status"]) for r in rows} == {
        ("ssh0", "torch-bf16", "ok"),
        ("ssh0", "good", "ok"),
    }
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
    missing.write_text(
        yaml.safe_dump(
            {
                "name": "x",
                "backends": [{"name": "mine", "file": "nowhere.py"}],
                "shapes": [{"m": 16, "n": 64, "k": 128}],
            }
        )
    )
    assert main(["run", str(missing), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere.py does not exist" in err
    (tmp_path / "k.py").write_text(GOOD)
    clash = tmp_path / "clash.yaml"
    clash.write_text(
        yaml.safe_dump(
            {
                "name": "x",
                "backends": [{"name": "torch-bf16", "file": "k.py"}],
                "shapes": [{"m": 16, "n": 64, "k": 128}],
            }
        )
    )
    assert main(["run", str(clash), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "built-in backend has that name" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


CHEATS = (Path(__file__).parent / "kernels" / "cheats.py").read_text()
# tests/kernels/cheats.py tricks that return another output than was asked -> the sentence that fails them
WRONG_OUTPUTS = {
    "fp32-output": "output is float32 [16, 64] on cpu; expected bfloat16 [16, 64] on cpu",
    "narrow-output": "output is bfloat16 [16, 63] on cpu; expected bfloat16 [16, 64] on cpu",
    "meta-output": "output is bfloat16 [16, 64] on meta; expected bfloat16 [16, 64] on cpu",
    "list-output": "output is a list of 2 tensors; expected one tensor, bfloat16 [16, 64] on cpu",
}


def test_an_output_other_than_asked_fails_with_a_sentence_naming_expected_and_actual(tmp_path, capsys):
    """Issue 41: dtype, shape and device are checked before the values. An fp32 result of the right
    numbers was `ok` at rel_err 0; an [M, N-1] one failed on torch's "The size of tensor a (63) must
    match...", naming neither shape."""
    kernels = {name: CHEATS.replace('CHEAT = "ahead"', f'CHEAT = "{name}"') for name in WRONG_OUTPUTS}
    sweep = sweep_with(tmp_path, {**kernels, "good": GOOD})
    code, rows, err = run_json(capsys, "run", sweep, "--runs-dir", tmp_path / "runs", "--format", "json")
    by = {r["backend"]: r for r in rows}
    assert code == 1, err
    assert by["good"]["status"] == "ok" and by["torch-bf16"]["status"] == "ok"
    for name, sentence in WRONG_OUTPUTS.items():
        row = by[name]
        assert row["status"] == "failed" and row["median_us"] in (None, ""), row
        assert row["reason"] == f"WrongOutput: {sentence}", row
        assert "must match" not in row["reason"]


def test_the_output_contract_in_the_verdict_names_both_for_any_backend():
    """worker/check/verify.py verdict: without an expected dtype, the oracle's shape and device; with one, the
    dtype too, its values never compared."""
    import torch

    from worker.check.verify import THRESHOLDS, Expected, verdict

    ref = torch.randn((16, 64))
    good = verdict(ref.to(torch.bfloat16), ref, None, THRESHOLDS["bf16"])
    assert good.verdict == "pass"
    narrow = verdict(ref[:, :-1].to(torch.bfloat16), ref, None, THRESHOLDS["bf16"])
    assert narrow.verdict == "fail" and narrow.detail == (
        "output is bfloat16 [16, 63] on cpu; expected bfloat16 [16, 64] on cpu"
    )
    wide = verdict(ref, ref, None, THRESHOLDS["bf16"], Expected(torch.bfloat16, (16, 64), ref.device))
    assert (
        wide.verdict == "fail" and wide.detail == "output is float32 [16, 64] on cpu; expected bfloat16 [16, 64] on cpu"
    )
    assert wide.rel_err == 1e30 and wide.cosine == 0.0


def test_an_moe_loops_per_expert_outputs_are_each_held_to_the_contract():
    """An MoE loop returns one tensor per expert that receives tokens (worker/backends/moe.py as_output):
    each is checked, named by its expert, before they are stacked; parts that cannot stack are named
    rather than left to torch.cat's error."""
    import pytest
    import torch

    from worker.backends import moe
    from worker.check import integrity
    from worker.check.verify import Expected, WrongOutput

    rows = (3, 5)
    a = torch.randn((8, 32)).to(torch.bfloat16)
    w = torch.randn((2, 16, 32)).to(torch.bfloat16)
    want = Expected(torch.bfloat16, (8, 16), a.device, rows)

    def loop(dtype=torch.bfloat16, width=16):  # each expert's GEMM, computed at every call
        return lambda: [
            (a[:3].float() @ w[0, :width].float().T).to(dtype),
            (a[3:].float() @ w[1].float().T).to(torch.bfloat16),
        ]

    def check(call, expected=want):
        return integrity.check_calls(call, [a], [a], moe.as_output, lambda: None, 0.01, expected)

    out, findings, _ = check(loop())
    assert findings == [] and out.shape == (8, 16)
    with pytest.raises(
        WrongOutput,
        match=r"^expert 0's output is float32 \[3, 16\] on cpu; expected bfloat16 "
        r"\[3, 16\] on cpu$",
    ):
        check(loop(dtype=torch.float32))
    with pytest.raises(
        WrongOutput, match=r"^expert 0's output is bfloat16 \[3, 15\] on cpu; expected bfloat16 \[3, 16\]"
    ):
        check(loop(width=15))
    with pytest.raises(
        WrongOutput,
        match=r"^output is a list of 1 tensors; expected one per expert that receives "
        r"tokens \(2\), together bfloat16 \[8, 16\] on cpu$",
    ):
        check(lambda: [torch.zeros((8, 16), dtype=torch.bfloat16)])
    with pytest.raises(
        WrongOutput,
        match=r"do not stack into one \[rows, N\] output: bfloat16 \[3, 15\] on cpu, bfloat16 \[5, 16\] on cpu$",
    ):
        check(loop(width=15), expected=None)  # no contract given: torch.cat's failure, named
    grouped = Expected(torch.bfloat16, (8, 16), a.device)  # a grouped kernel returns one [T, N] tensor
    with pytest.raises(WrongOutput, match=r"^output is a list of 2 tensors; expected one tensor"):
        check(loop(), expected=grouped)


def test_every_builtin_backend_that_runs_here_keeps_the_output_contract():
    """What worker/check/verify.py expected_output asks of each built-in (its case's out_dtype, fp32 for the
    oracles; the oracle's shape; per expert for an MoE loop) is what each returns."""
    from worker.backends import availability_problem
    from worker.check import integrity
    from worker.check.verify import THRESHOLDS, expected_output
    from worker.contract.catalog import CATALOG, support_problem
    from worker.contract.schema import CaseSpec, MoeSpec
    from worker.sweep.runner import CaseRunner

    runner = CaseRunner("cpu")
    checked = []
    for name, spec in CATALOG.items():
        if name == "noop" or support_problem(spec, 16, 64, 128, None) or availability_problem(spec):
            continue
        moe_layer = MoeSpec(experts=4, top_k=2, routing="uniform", counts=[8, 0, 16, 8])
        extra = {"workload": "moe", "moe": moe_layer} if spec.workload == "moe" else {}
        for out_dtype in ("bfloat16", "float16"):
            case = CaseSpec(backend=name, m=16, n=64, k=128, out_dtype=out_dtype, **extra)
            fn, sets, _ = runner._prepare(case, spec)
            oracle = runner._references(case, spec, sets[0])[0]
            expected = expected_output(case, spec, oracle)
            out, findings, _ = integrity.check_calls(
                lambda: fn(0),
                [],
                [],
                runner._as_output(case),
                lambda: None,
                THRESHOLDS[spec.family].max_rel_err,
                expected,
            )
            assert out is not None and not findings, name
        checked.append(name)
    assert {"torch-bf16", "reference-nvfp4", "moe-reference"} <= set(checked)
