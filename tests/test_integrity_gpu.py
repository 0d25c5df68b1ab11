"""Kernels that cheat cannot win, on a CUDA GPU (issue 31; `pytest -m gpu` on the device): every trick of
tests/kernels/cheats.py is caught with the check that caught it, the CUDA ones included (work forked
onto a side stream, a kernel that records nothing while it is captured, inputs kept in L2), in CUDA-graph
timing and in per-call event timing, and the honest backends of the same worker process (built-in,
user kernels, Triton) are never flagged. The rows are printed (pytest -s) for
benchmarks/results/integrity-gpu-h200.md."""

from __future__ import annotations

import importlib.util
import io
from contextlib import redirect_stdout

import pytest
from conftest import REPO, kernel_sweep
from support.cheatkernels import CONVERTS_AND_SAYS, CPU_CHEATS, HONEST, cheat_source
from support.cli_output import cli_json

from orchestrator.cli import main

pytestmark = pytest.mark.gpu

GPU_CHEATS = {
    **{c: check for c, (check, _) in CPU_CHEATS.items()},
    "side-stream": "side-stream",
    "capture-aware": "untimed",
    "graph-copy": "untimed",  # issue 41: the timed graph holds only a copy of the last eager call's result
    "l2-persist": "l2-persistence",
}
EVENTS_CHEATS = {
    "side-stream-slow": "side-stream",
    "ahead": "cached",
    "l2-persist": "l2-persistence",
    "by-version": "cached",
}
HONEST_KERNELS = {
    "honest": HONEST,
    "converts-and-says": CONVERTS_AND_SAYS,
    "triton": (REPO / "examples" / "kernels" / "triton_matmul.py").read_text(),
    "fp8-prequantized": (REPO / "examples" / "kernels" / "fp8_prequantized.py").read_text(),
}
HONEST_BUILTINS = ("torch-bf16", "torch-fp8", "reference-nvfp4")


def _sweep_rows(tmp, name: str, cheats: dict, mode: str) -> dict:
    """One sweep on this GPU (one worker process): the honest backends first and last, the cheats between."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kernels = {"honest": HONEST_KERNELS["honest"]}
    kernels.update({f"cheat-{c}": cheat_source(c) for c in cheats})
    kernels.update({k: v for k, v in HONEST_KERNELS.items() if k != "honest"})
    sweep = kernel_sweep(
        tmp,
        kernels,
        ms=(16, 256),
        builtins=HONEST_BUILTINS,
        name=name,
        timing={"mode": mode, "settle_ms": 5, "budget_s": 0.1},
        extra={"calibration": "off"},
    )
    out = io.StringIO()
    with redirect_stdout(out):
        main(["run", str(sweep), "--runs-dir", str(tmp / "runs"), "--format", "json"])
    rows = {(r["backend"], r["m"]): r for r in cli_json(out.getvalue())}
    print(f"\n| {mode} | backend | M | status | integrity | median µs | reason |\n|---|---|---:|---|---|---:|---|")
    for (backend, m), r in rows.items():
        print(
            f"| {mode} | {backend} | {m} | {r['status']} | {r.get('integrity')} | {r.get('median_us') or ''} "
            f"| {(r.get('reason') or '')[:160]} |"
        )
    return rows


@pytest.fixture(scope="module")
def graph_rows(tmp_path_factory):
    return _sweep_rows(tmp_path_factory.mktemp("graph"), "cheats-graph", GPU_CHEATS, "graph")


@pytest.fixture(scope="module")
def events_rows(tmp_path_factory):
    return _sweep_rows(tmp_path_factory.mktemp("events"), "cheats-events", EVENTS_CHEATS, "events")


@pytest.mark.parametrize("cheat", list(GPU_CHEATS))
@pytest.mark.parametrize("m", [16, 256])
def test_each_cheat_is_caught_with_its_check_in_graph_timing(graph_rows, cheat, m):
    row = graph_rows[(f"cheat-{cheat}", m)]
    assert row["status"] == "failed" and row["integrity"] == GPU_CHEATS[cheat], row
    assert f"integrity ({GPU_CHEATS[cheat]})" in row["reason"] and row["median_us"] in (None, ""), row


@pytest.mark.parametrize("cheat", list(EVENTS_CHEATS))
def test_each_cheat_is_caught_with_its_check_in_event_timing(events_rows, cheat):
    for m in (16, 256):
        row = events_rows[(f"cheat-{cheat}", m)]
        assert row["status"] == "failed" and row["integrity"] == EVENTS_CHEATS[cheat], row


@pytest.mark.parametrize("m", [16, 256])
def test_a_timed_graph_of_copies_is_named_for_what_it_replays(graph_rows, m):
    """Eagerly honest, so every eager check passes; its graph copies a cached result, which the timed
    sample on negated inputs (written raw between replays) exposes."""
    row = graph_rows[("cheat-graph-copy", m)]
    assert "what is timed does not follow its inputs" in row["reason"] and "copies of a cached result" in row["reason"]


def test_the_version_keyed_cache_is_caught_before_it_is_timed(graph_rows, events_rows):
    for rows in (graph_rows, events_rows):
        for m in (16, 256):
            row = rows.get(("cheat-by-version", m))
            if row is not None:
                assert row["status"] == "failed" and row["integrity"] == "cached" and row["median_us"] in (None, ""), (
                    row
                )


@pytest.mark.parametrize("backend", [*HONEST_BUILTINS, *HONEST_KERNELS])
def test_honest_backends_are_never_flagged_on_the_gpu(graph_rows, events_rows, backend):
    for rows in (graph_rows, events_rows):
        for m in (16, 256):
            row = rows[(backend, m)]
            if backend == "triton" and importlib.util.find_spec("triton") is None:
                pytest.skip(f"Triton is not installed here: {row['reason']}")
            assert row["status"] == "ok" and row["integrity"] == "pass" and row["median_us"] > 0, row
