"""The MoE layer as one case (issue 16): routing, sweep expansion, the worker's checks, the rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_output import cli_json

from orchestrator.cli import main
from orchestrator.config.sweep import load_sweep
from orchestrator.errors import InputError
from worker.contract.metrics import moe_metrics
from worker.contract.routing import draw_counts, read_counts_file

REPO = Path(__file__).resolve().parent.parent


def test_routing_draws_top_k_distinct_experts_per_token_and_zipf_is_skewed():
    uniform = draw_counts(256, 8, 1024, "uniform", seed=0)
    assert sum(uniform) == 1024 * 8 and max(uniform) <= 1024 and len(uniform) == 256
    assert uniform == draw_counts(256, 8, 1024, "uniform", seed=0)  # the same sweep means the same layer
    assert uniform != draw_counts(256, 8, 1024, "uniform", seed=1)
    zipf = draw_counts(256, 8, 1024, "zipf", skew=1.2, seed=0)
    assert sum(zipf) == 1024 * 8 and max(zipf) > 4 * max(uniform)  # a few hot experts
    assert sum(1 for c in zipf if c == 0) > sum(1 for c in uniform if c == 0)  # and many cold ones
    # Every token reaches top_k distinct experts: with top_k == experts each expert gets every token.
    assert draw_counts(4, 4, 10, "zipf", skew=3.0) == [10, 10, 10, 10]
    with pytest.raises(ValueError, match="top_k"):
        draw_counts(4, 5, 10, "uniform")


def test_a_counts_file_is_read_and_checked(tmp_path):
    f = tmp_path / "c.json"
    f.write_text("[3, 0, 5, 1]")
    assert read_counts_file(f, 4) == [3, 0, 5, 1]
    f.write_text("3 0 5")
    with pytest.raises(ValueError, match="3 counts for 4 experts"):
        read_counts_file(f, 4)
    f.write_text("3 x 5 1")
    with pytest.raises(ValueError, match="integers"):
        read_counts_file(f, 4)


def _sweep(tmp_path: Path, shapes: list, backends=("moe-reference", "moe-loop-torch-bf16")) -> Path:
    path = tmp_path / "moe.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "moe",
                "backends": list(backends),
                "shapes": shapes,
                "timing": {"budget_s": 0.05, "warmup_ms": 1, "min_samples": 3, "max_samples": 20, "rounds": 2},
            }
        )
    )
    return path


def test_moe_presets_and_routings_expand_into_self_describing_cases(tmp_path):
    sweep = load_sweep(
        _sweep(
            tmp_path,
            [
                {"moe_layer": {"preset": "deepseek-r1-tp8", "tokens": [16, 64], "routing": "zipf", "skew": 1.0}},
                {"m": 16, "n": 64, "k": 128},
            ],
            backends=("moe-reference", "torch-bf16"),
        )
    )
    cases = sweep.cases()
    moe = [c for c in cases if c.workload == "moe"]
    assert {(c.n, c.k) for c in moe} == {(512, 7168), (7168, 256)} and {c.m for c in moe} == {16, 64}
    assert all(c.backend == "moe-reference" and sum(c.moe.counts) == c.m * 8 and c.moe.experts == 256 for c in moe)
    assert "zipf 1, 64 tokens, top-8/256" in moe[-1].label
    gemm = [c for c in cases if c.workload == "gemm"]
    assert [c.backend for c in gemm] == ["torch-bf16"] and gemm[0].moe is None
    # The routing is part of what a case is: another skew is another case.
    other = load_sweep(
        _sweep(
            tmp_path, [{"moe_layer": {"preset": "deepseek-r1-tp8", "tokens": [16, 64], "routing": "zipf", "skew": 1.5}}]
        )
    )
    assert not {c.case_id for c in other.cases()} & {c.case_id for c in moe}


@pytest.mark.parametrize(
    "shapes, backends, message",
    [
        (
            [{"moe_layer": {"experts": 8, "top_k": 2, "tokens": 16}, "n": 64, "k": 128}],
            ("torch-bf16",),
            "no backend runs MoE layers",
        ),
        ([{"m": 16, "n": 64, "k": 128}], ("moe-reference",), "every backend is an MoE backend"),
        (
            [
                {
                    "moe_layer": {"experts": 8, "top_k": 2, "routing": "file", "counts_file": "none.json"},
                    "n": 64,
                    "k": 128,
                }
            ],
            ("moe-reference",),
            "cannot read",
        ),
        (
            [{"moe_layer": {"experts": 8, "top_k": 9, "tokens": 16}, "n": 64, "k": 128}],
            ("moe-reference",),
            "must not exceed",
        ),
        (
            [{"moe_layer": {"preset": "glm5-tp8", "tokens": 16}, "n": 64, "k": 128}],
            ("moe-reference",),
            "sets its own n and k",
        ),
        ([{"moe_layer": {"experts": 8, "top_k": 2}, "n": 64, "k": 128}], ("moe-reference",), "'tokens'"),
    ],
)
def test_bad_moe_entries_are_input_errors(tmp_path, shapes, backends, message):
    with pytest.raises(InputError, match=message):
        load_sweep(_sweep(tmp_path, shapes, backends))


def test_moe_metrics_count_each_active_experts_weights_once():
    m = moe_metrics([3, 0, 5], 64, 128, "bf16", 10.0, None)
    assert m.flops == 2.0 * 8 * 64 * 128
    assert m.bytes == (8 * 128 + 2 * 64 * 128) * 2 + 8 * 64 * 2


def test_an_moe_layer_with_skewed_routing_runs_on_the_local_host(tmp_path, capsys):
    counts = tmp_path / "trace.txt"
    counts.write_text("9 0 1 0 4 2 0 0\n")
    sweep = _sweep(
        tmp_path,
        [
            {
                "moe_layer": {"experts": 8, "top_k": 2, "tokens": [16, 48], "routing": "zipf", "skew": 1.2},
                "n": 64,
                "k": 128,
                "label": "tiny",
            },
            {"moe_layer": {"experts": 8, "top_k": 2, "routing": "file", "counts_file": "trace.txt"}, "n": 64, "k": 128},
        ],
        backends=(
            "moe-reference",
            "moe-loop-torch-bf16",
            "moe-grouped-torch-bf16",
            "moe-loop-torch-fp8",
            "moe-loop-sgl-fp4-cutlass",
        ),
    )
    code = main(["run", str(sweep), "--runs-dir", str(tmp_path / "runs"), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = cli_json(out)
    rows = doc.get("rows", doc) if isinstance(doc, dict) else doc
    assert len(rows) == 15
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["backend"] for r in ok} == {"moe-reference", "moe-loop-torch-bf16", "moe-grouped-torch-bf16"}
    assert all(r["verdict"] == "pass" and r["median_us"] > 0 for r in ok)
    unsupported = {r["backend"] for r in rows if r["status"] == "unsupported"}
    assert unsupported == {"moe-loop-torch-fp8", "moe-loop-sgl-fp4-cutlass"}  # CPU: refused, never called
    traced = [r for r in rows if r["routing"] == "counts trace.txt"]
    assert len(traced) == 5 and traced[0]["m"] == 8 and traced[0]["max_expert_m"] == 9
    assert traced[0]["active_experts"] == 4 and traced[0]["experts"] == 8 and traced[0]["top_k"] == 2
    skewed = [r for r in rows if r["routing"] == "zipf 1.2"]
    assert {r["m"] for r in skewed} == {16, 48} and all(r["workload"] == "moe" for r in skewed)


def test_a_loop_that_pairs_tokens_with_the_wrong_expert_fails_the_check():
    """The oracle is per expert: a kernel that multiplies each expert's tokens by another expert's
    weights (an off-by-one in the offsets) is caught even though every row has the right scale."""
    import torch

    from worker.backends import moe
    from worker.contract.catalog import CATALOG
    from worker.contract.schema import CaseSpec, MoeSpec
    from worker.sweep.runner import CaseRunner

    case = CaseSpec(
        workload="moe",
        backend="moe-loop-torch-bf16",
        m=8,
        n=32,
        k=64,
        moe=MoeSpec(experts=3, top_k=1, routing="file", counts=[3, 2, 3]),
    )
    a, w, counts = moe.inputs(case, 0, "cpu")
    runner = CaseRunner("cpu")
    good = moe.prepare(CATALOG[case.backend], [(a, w, counts)], torch.bfloat16)
    assert runner._check_moe(case, CATALOG[case.backend], good, (a, w, counts)).verdict == "pass"
    shifted = moe.prepare(CATALOG[case.backend], [(a, w.roll(1, dims=0), counts)], torch.bfloat16)
    check = runner._check_moe(case, CATALOG[case.backend], shifted, (a, w, counts))
    assert check.verdict == "fail" and "rel_err" in check.detail


def test_the_shipped_moe_sweeps_load():
    for name in ("moe_smoke.yaml", "glm5_tp8_moe_layer.yaml"):
        cases = load_sweep(REPO / "sweeps" / name).cases()
        assert cases and all(c.workload == "moe" for c in cases)
