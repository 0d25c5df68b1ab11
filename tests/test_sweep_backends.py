"""A shape's own `backends:` (issue 33's follow-up): a shape entry may name which of the sweep's backends
run it, so one run holds a fused MoE block (its fused backend only) and its two projections (the grouped
and loop backends only), and the pivot sets the block beside their sum. Without the key a shape runs
every backend of its kind, as before, and case ids never depend on the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config.sweep import Sweep, load_sweep
from orchestrator.runs.store import RunStore
from worker.contract.catalog import CATALOG
from worker.contract.schema import CaseRecord, CaseSpec, FactsRecord
from worker.contract.stats import summarize

REPO = Path(__file__).resolve().parent.parent
FUSED = "moe-fused-flashinfer-fp4-cutlass"
LAYER = {"moe_layer": {"experts": 8, "top_k": 2, "tokens": 16}, "n": 768, "k": 256}


def ids(cases: list[CaseSpec]) -> list[tuple[str, int, int, int]]:
    return [(c.backend, c.m, c.n, c.k) for c in cases]


def test_a_shape_runs_every_backend_of_its_kind_unless_it_names_some():
    sweep = Sweep(
        name="x",
        backends=["torch-bf16", "torch-fp8", "moe-reference", "moe-loop-torch-bf16"],
        shapes=[
            {"m": 16, "n": 64, "k": 64},
            {"m": 32, "n": 64, "k": 64, "backends": ["torch-fp8"]},
            dict(LAYER),
            dict(LAYER, k=512, backends=["moe-reference"]),
        ],
    )
    assert [(b, m, n, k) for b, m, n, k in ids(sweep.cases()) if b.startswith("torch")] == [
        ("torch-bf16", 16, 64, 64),
        ("torch-fp8", 16, 64, 64),
        ("torch-fp8", 32, 64, 64),
    ]
    assert [(c.backend, c.k) for c in sweep.cases() if c.workload == "moe"] == [
        ("moe-reference", 256),
        ("moe-loop-torch-bf16", 256),
        ("moe-reference", 512),
    ]


def test_case_ids_do_not_depend_on_the_key_and_order_is_the_sweeps():
    """Naming every backend, in another order, plans the very cases the bare shape plans: the key picks,
    it never changes what a case is (a stored run still pairs with a new one in `diff`)."""
    backends = ["torch-bf16", "torch-fp8", "reference-nvfp4"]
    bare = Sweep(name="x", backends=backends, shapes=[{"m": [16, 64], "n": 64, "k": 64}]).cases()
    named = Sweep(
        name="x", backends=backends, shapes=[{"m": [16, 64], "n": 64, "k": 64, "backends": list(reversed(backends))}]
    ).cases()
    assert [c.case_id for c in named] == [c.case_id for c in bare] and len(bare) == 6
    some = Sweep(
        name="x",
        backends=backends,
        shapes=[{"m": [16, 64], "n": 64, "k": 64, "backends": ["reference-nvfp4", "torch-bf16"]}],
    ).cases()
    assert [c.case_id for c in some] == [c.case_id for c in bare if c.backend != "torch-fp8"]


def test_a_shape_names_a_kernel_file_of_the_sweep_by_its_name(tmp_path):
    (tmp_path / "mine.py").write_text("FAMILY = 'bf16'\ndef prepare(a, b, out_dtype):\n    return lambda: a @ b.T\n")
    (tmp_path / "s.yaml").write_text(
        "name: s\nbackends: [torch-bf16, {name: mine, file: mine.py}]\n"
        "shapes: [{m: 16, n: 64, k: 64, backends: [mine]}, {m: 32, n: 64, k: 64}]\n"
    )
    cases = load_sweep(tmp_path / "s.yaml").cases()
    assert [(c.backend, c.m) for c in cases] == [("mine", 16), ("torch-bf16", 32), ("mine", 32)]
    assert cases[0].kernel_sha256 and cases[0].kernel_sha256 == cases[2].kernel_sha256


HEAD = "name: s\nbackends: [torch-bf16, moe-reference, moe-loop-torch-bf16, {name: mine, file: mine.py}]\nshapes:\n"
GEMM = "  - {m: 16, n: 64, k: 64%s}\n"
MOE = "  - {moe_layer: {experts: 8, top_k: 2, tokens: 16}, n: 64, k: 64%s}\n"
BAD = [
    (
        "empty list",
        GEMM % ", backends: []",
        "field 'shapes.0.backends': an empty list runs nothing: name the backends this shape runs, or leave "
        "'backends' out to run all the sweep's",
    ),
    (
        "named twice",
        GEMM % ", backends: [torch-bf16, mine, torch-bf16]",
        "field 'shapes.0.backends': backend 'torch-bf16' is named twice",
    ),
    ("not a list", GEMM % ", backends: torch-bf16", "field 'shapes.0.backends': Input should be a valid list"),
    (
        "unknown name",
        GEMM % "" + GEMM % ", backends: [cublas-magic]",
        "field 'shapes.1.backends': unknown backend 'cublas-magic'; the sweep's backends for it: torch-bf16, mine",
    ),
    (
        "an MoE backend the sweep does not list on a GEMM shape",
        GEMM % ", backends: [moe-grouped-sgl-fp4]",
        "field 'shapes.0.backends': backend 'moe-grouped-sgl-fp4' runs MoE layers and this shape is a GEMM shape",
    ),
    (
        "a built-in the sweep does not list",
        GEMM % ", backends: [torch-fp8]",
        "field 'shapes.0.backends': backend 'torch-fp8' is not in the sweep's 'backends' (a shape picks among them)",
    ),
    (
        "a glob",
        GEMM % ", backends: ['torch-*']",
        "field 'shapes.0.backends': 'torch-*': name each backend (globs belong in the sweep's 'backends')",
    ),
    (
        "a GEMM backend on an MoE layer",
        GEMM % "" + MOE % ", backends: [moe-reference, torch-bf16]",
        "field 'shapes.1.backends': backend 'torch-bf16' runs GEMM shapes and this shape is an MoE layer "
        "(the sweep's backends for it: moe-reference, moe-loop-torch-bf16)",
    ),
    (
        "a kernel file on an MoE layer",
        GEMM % "" + MOE % ", backends: [mine]",
        "field 'shapes.1.backends': backend 'mine' runs GEMM shapes and this shape is an MoE layer",
    ),
    (
        "an MoE backend on a GEMM shape",
        GEMM % ", backends: [moe-reference]" + MOE % "",
        "field 'shapes.0.backends': backend 'moe-reference' runs MoE layers and this shape is a GEMM shape "
        "(the sweep's backends for it: torch-bf16, mine)",
    ),
    (
        "a listed backend no shape runs",
        GEMM % "" + MOE % ", backends: [moe-reference]",
        "field 'backends': 'moe-loop-torch-bf16' runs on no shape: every shape of its kind names its own "
        "'backends' without it",
    ),
]


@pytest.mark.parametrize("what, shapes, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_backends_list_exits_2_with_one_line_naming_the_shape(what, shapes, message, tmp_path, capsys):
    (tmp_path / "mine.py").write_text("FAMILY = 'bf16'\n")
    (tmp_path / "hosts.yaml").write_text("hosts: [{name: local, transport: local}]\n")
    (tmp_path / "s.yaml").write_text(HEAD + shapes)
    code = main(
        ["run", str(tmp_path / "s.yaml"), "-i", str(tmp_path / "hosts.yaml"), "--runs-dir", str(tmp_path / "runs")]
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 's.yaml'}: "), err
    assert message in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_the_listed_backends_leave_the_rest_of_a_sweep_as_it_was():
    """A backend with no shape of its kind at all (a GEMM backend in an MoE-only sweep) is left alone, as
    before the key; so is a backend a glob brought in that no shape names."""
    Sweep(name="x", backends=["torch-bf16", "moe-reference"], shapes=[dict(LAYER)]).cases()
    sweep = Sweep(
        name="x",
        backends=["flashinfer-fp4-*"],
        shapes=[{"m": 16, "n": 64, "k": 64, "backends": ["flashinfer-fp4-cutlass"]}],
    )
    assert [c.backend for c in sweep.cases()] == ["flashinfer-fp4-cutlass"]


# -- the shipped sweep: blocks and their projections in one run ----------------------------------------------
def _rendered(tmp_path) -> RunStore:
    """`fleetbench render` of sweeps/moe_fp4.yaml on the local host: the plan, stored as a run is."""
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts: [{name: local, transport: local}]\n")
    runs = tmp_path / "runs"
    assert (
        main(
            ["render", str(REPO / "sweeps" / "moe_fp4.yaml"), "-i", str(inventory), "--runs-dir", str(runs), "--quiet"]
        )
        == 0
    )
    [folder] = runs.iterdir()
    return RunStore(folder)


def test_render_plans_each_block_with_the_fused_backend_and_its_projections_with_the_others(tmp_path, capsys):
    store = _rendered(tmp_path)
    assert "rendered 1 scripts, 66 cases" in capsys.readouterr().out
    planned = json.loads((store.dir / "manifest.json").read_text())["cases"]
    cases = [CaseSpec.model_validate(c) for c in planned.values()]
    blocks = [c for c in cases if c.backend == FUSED]
    projections = [c for c in cases if c.backend != FUSED]
    assert sorted({(c.label.split(" (")[0], c.n, c.k) for c in blocks}) == [
        ("DeepSeek-R1 TP8 MoE block", 768, 7168),
        ("GLM-5 TP8 MoE block", 768, 6144),
    ]
    assert len(blocks) == 6 and all("block" not in c.label for c in projections)
    fp4 = {c.backend for c in projections if CATALOG[c.backend].family == "fp4"}
    assert fp4 == {
        "moe-grouped-flashinfer-fp4",
        "moe-grouped-sgl-fp4",
        "moe-loop-flashinfer-fp4-cutlass",
        "moe-loop-sgl-fp4-cutlass",
    }
    for block in blocks:  # w13 (2I x H) and w2 (H x I) of the same layer, same tokens and routing, by each
        inter, hidden = block.n // 3, block.k
        for backend in fp4:
            for n, k in ((2 * inter, hidden), (hidden, inter)):
                assert (
                    sum((c.backend, c.n, c.k, c.m, c.moe) == (backend, n, k, block.m, block.moe) for c in projections)
                    == 1
                ), (block.label, backend, n, k)


# Median µs an SM120 host might have answered: the block, and each backend's w13 and w2.
US = {
    FUSED: (40.0,),
    "moe-grouped-sgl-fp4": (25.0, 18.0),
    "moe-grouped-flashinfer-fp4": (27.0, 20.0),
    "moe-loop-sgl-fp4-cutlass": (300.0, 200.0),
    "moe-loop-flashinfer-fp4-cutlass": (310.0, 210.0),
    "moe-grouped-torch-bf16": (30.0, 20.0),
}


def _answer(store: RunStore) -> None:
    """Every planned case ok, as a host with an FP4 GPU would record it: the FP4 backends are
    `unsupported` on this CPU, so the records are written here (what the moe_blocks tests do with rows)."""
    manifest = json.loads((store.dir / "manifest.json").read_text())
    lines = [
        FactsRecord(
            hostname="local",
            python="3.12",
            platform="linux",
            worker_version="0.1.0",
            device="cuda",
            gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            compute_capability="12.0",
            driver="580.1",
            torch="2.11.0",
        ).model_dump_json()
    ]
    for raw in manifest["cases"].values():
        case = CaseSpec.model_validate(raw)
        times = US[case.backend]
        us = times[0] if case.backend == FUSED or case.k > case.n else times[1]  # w13: k = H > n = 2I
        lines.append(
            CaseRecord(
                case_id=case.case_id,
                case=case,
                status="ok",
                started_at="t",
                duration_s=0.1,
                timing=summarize([us] * 9, method="cuda-graph", calls_per_sample=1, l2="cold"),
            ).model_dump_json()
        )
    attempt = store.attempt_dir("local", 1)
    attempt.mkdir(parents=True)
    (attempt / "results.jsonl").write_text("\n".join(lines) + "\n")
    (attempt / "outcome.json").write_text(
        json.dumps(
            {
                "slot": "local",
                "host": "local",
                "attempt": 1,
                "outcome": "ok",
                "cases_total": len(lines) - 1,
                "cases_done": len(lines) - 1,
            }
        )
    )


@pytest.mark.parametrize("per_host", [False, True], ids=["fleet", "per host"])
def test_the_pivot_of_one_run_sets_each_block_beside_the_sum_of_its_projections(
    per_host, tmp_path, capsys, monkeypatch
):
    store = _rendered(tmp_path)
    _answer(store)
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "1000")  # one note a line
    argv = ["show", store.dir.name, "--runs-dir", str(store.dir.parent), "--pivot", "backend"]
    assert main(argv + (["--per-host"] if per_host else [])) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if f"{FUSED} block" in line]
    # 2 models x 3 token counts, each beside the 4 FP4 backends' projections (bf16's are another format)
    assert len(notes) == 24 and not any("moe-grouped-torch-bf16" in n for n in notes), notes
    assert (
        sum(
            f"{FUSED} block 40 µs against moe-grouped-sgl-fp4 w13 (512x7168) 25 µs + w2 (7168x256) 18 µs "
            f"= 43 µs (x1.07;" in n
            for n in notes
        )
        == 3
    ), notes
    assert (
        sum(
            "moe-loop-flashinfer-fp4-cutlass w13 (512x6144) 310 µs + w2 (6144x256) 210 µs = 520 µs (x13.00;" in n
            for n in notes
        )
        == 3
    ), notes


def test_the_example_of_sweeps_md_plans_a_block_and_its_projections(tmp_path):
    text = (REPO / "docs" / "SWEEPS.md").read_text(encoding="utf-8")
    example = text.split("## A shape's own backends", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "s.yaml").write_text("name: example\n" + example)
    cases = load_sweep(tmp_path / "s.yaml").cases()
    assert sorted({(c.backend, c.n, c.k) for c in cases}) == [
        (FUSED, 768, 6144),
        ("moe-grouped-sgl-fp4", 512, 6144),
        ("moe-grouped-sgl-fp4", 6144, 256),
        ("moe-loop-sgl-fp4-cutlass", 512, 6144),
        ("moe-loop-sgl-fp4-cutlass", 6144, 256),
    ]
    assert len(cases) == 15 and len({c.moe.model_dump_json() for c in cases if c.m == 128}) == 1  # one routing
