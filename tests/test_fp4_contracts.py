"""The FP4 (and fp8) library calls, proven without the hardware.

No GPU here runs an FP4 kernel, so the worker's calls into FlashInfer and sgl-kernel are checked two ways:
- Recorders: the worker's own backend code runs on CPU with the library replaced by a stand-in that
  binds every call against the real signature, checks what is passed (shapes, dtypes, the 128x4
  swizzled scales, transposes, `alpha`, `out`, `do_shuffle` for trtllm), and answers with the product
  those exact arguments describe, computed from the reference NVFP4; the worker's oracle must pass it.
- Contracts: each call's parameters against the installed FlashInfer (CI installs it) and against a
  signature record of the sgl-kernel wheel (tests/contracts/, made by record_signatures.py), so a
  release that renames, removes or reorders a parameter fails here, naming the call and the parameter.
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Callable

import pytest
import torch
from support.fp4standins import (
    FI_RECORD,
    FI_VERSION,
    SGL_RECORD,
    FakeFlashInfer,
    FakeSglKernel,
    Recorder,
    _contract_problems,
    _fi_signatures,
    _sgl_signatures,
    bind,
    check_mm_fp4,
    flashinfer,
)

from orchestrator.ops.provision import pinned_versions
from worker.backends import flashinfer_mm_fp4_backends
from worker.backends.fp8 import dequantized_product
from worker.check import nvfp4
from worker.check.verify import THRESHOLDS, verdict
from worker.contract.catalog import CATALOG

M, N, K = 16, 64, 256  # K % 256 for cake; M <= 8 is needed by cutedsl_low_latency (its own shape below)


def _operands(m: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g).to(torch.bfloat16), torch.randn(n, k, generator=g).to(torch.bfloat16))


def run_backend(
    name: str, fake: Recorder, monkeypatch, m=M, n=N, k=K
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The worker's own prepare + two timed calls of `name` against `fake`; returns (output, a, b)."""
    import importlib

    spec = CATALOG[name]
    monkeypatch.setitem(sys.modules, spec.import_name, fake)
    module = importlib.import_module(f"worker.backends.{spec.module}")
    a, b = _operands(m, n, k)
    fn = module.prepare(spec, [(a, b)], torch.bfloat16)
    fn(0)
    return fn(0), a, b


FI_FP4 = sorted(n for n, s in CATALOG.items() if s.module == "flashinfer_gemm" and s.family == "fp4")


@pytest.mark.parametrize("name", FI_FP4)
def test_flashinfer_fp4_calls_compute_the_reference_product(name, monkeypatch):
    fake = FakeFlashInfer(_fi_signatures())
    m = 8 if CATALOG[name].max_m else M
    out, a, b = run_backend(name, fake, monkeypatch, m=m)
    check = verdict(out.float(), nvfp4.reference_gemm(a, b), a.float() @ b.float().T, THRESHOLDS["fp4"])
    assert check.verdict == "pass", check
    names = [c[0] for c in fake.calls]
    assert names == ["nvfp4_quantize", "nvfp4_quantize", "mm_fp4", "mm_fp4"]
    first, second = fake.calls[2][3], fake.calls[3][3]
    assert first["out"] is second["out"], "each timed call must write the same output buffer (graph replay)"
    assert first["backend"] == CATALOG[name].option


def test_flashinfer_fp8_call_computes_the_dequantized_product(monkeypatch):
    fake = FakeFlashInfer(_fi_signatures())
    out, a, b = run_backend("flashinfer-fp8-cublas", fake, monkeypatch)
    check = verdict(out.float(), dequantized_product(a, b), a.float() @ b.float().T, THRESHOLDS["fp8"])
    assert check.verdict == "pass", check


@pytest.mark.parametrize("name", ["sgl-fp4-cutlass", "sgl-fp8"])
def test_sgl_kernel_calls_compute_the_reference_product(name, monkeypatch):
    fake = FakeSglKernel("sgl_kernel", _sgl_signatures())
    out, a, b = run_backend(name, fake, monkeypatch)
    family = CATALOG[name].family
    ref = nvfp4.reference_gemm(a, b) if family == "fp4" else dequantized_product(a, b)
    check = verdict(out.float(), ref, a.float() @ b.float().T, THRESHOLDS[family])
    assert check.verdict == "pass", check


@pytest.mark.parametrize("drop, words", [("alpha", "alpha"), ("out", "out is missing")])
def test_the_recorder_fails_when_alpha_or_out_is_dropped(drop, words, monkeypatch):
    """The seed's mistake: an mm_fp4 call without alpha and out. The worker's real call, minus one."""
    fake = FakeFlashInfer(_fi_signatures())
    run_backend("flashinfer-fp4-cutlass", fake, monkeypatch)
    _, args, kwargs, _ = fake.calls[-1]
    broken = bind(
        "flashinfer", "mm_fp4", fake.signatures["mm_fp4"], args, {k: v for k, v in kwargs.items() if k != drop}
    )
    with pytest.raises(AssertionError, match=words):
        check_mm_fp4(broken, fake.shuffled)


def test_trtllm_is_refused_a_weight_quantized_without_shuffle(monkeypatch):
    fake = FakeFlashInfer(_fi_signatures())
    run_backend("flashinfer-fp4-trtllm", fake, monkeypatch)
    _, args, kwargs, bound = fake.calls[-1]
    fake.shuffled[bound["b"].data_ptr()] = False
    with pytest.raises(AssertionError, match="do_shuffle"):
        check_mm_fp4(bound, fake.shuffled)


# -- contracts against the installed FlashInfer and the recorded sgl-kernel ----------------------------
def _worker_calls(library: str) -> list[tuple[str, tuple, dict]]:
    """Every distinct library call the worker's backends make, recorded by running them."""
    mp = pytest.MonkeyPatch()
    calls = []
    try:
        names = [n for n, s in CATALOG.items() if s.import_name == library and s.workload == "gemm"]
        for name in names:
            fake = (
                FakeFlashInfer(_fi_signatures())
                if library == "flashinfer"
                else FakeSglKernel(library, _sgl_signatures())
            )
            run_backend(name, fake, mp, m=8 if CATALOG[name].max_m else M)
            calls += [(c[0], c[1], c[2]) for c in fake.calls]
    finally:
        mp.undo()
    return calls


def test_every_flashinfer_call_fits_the_installed_flashinfer_and_its_record():
    assert FI_RECORD.exists(), (
        f"no signature record for the installed flashinfer {FI_VERSION}: read its calls, then "
        f"write {FI_RECORD.name} with tests/contracts/record_signatures.py"
    )
    record = json.loads(FI_RECORD.read_text())
    live = _fi_signatures()
    problems = _contract_problems("flashinfer", FI_VERSION, record, live.get, _worker_calls("flashinfer"))
    assert problems == [], "\n".join(problems)


def test_every_sgl_kernel_call_fits_the_recorded_wheel():
    record = json.loads(SGL_RECORD.read_text())
    problems = _contract_problems(
        "sgl_kernel", record["version"], record, lambda name: None, _worker_calls("sgl_kernel")
    )
    assert problems == [], "\n".join(problems)


def test_the_sgl_record_is_of_the_pinned_version():
    pins = pinned_versions()
    assert json.loads(SGL_RECORD.read_text())["version"] == pins["sgl-kernel"]
    assert pins["flashinfer-python"] == FI_VERSION, "tests run against the FlashInfer that hosts are provisioned with"


def _edited_mm_fp4(edit: Callable[[list[inspect.Parameter]], list[inspect.Parameter]]) -> Callable:
    """A local copy of the installed mm_fp4 whose signature was edited, as a library release might."""
    sig = inspect.signature(flashinfer.mm_fp4)
    copy = lambda *a, **k: None  # noqa: E731
    copy.__signature__ = sig.replace(parameters=edit(list(sig.parameters.values())))
    return copy


@pytest.mark.parametrize(
    "edit, words",
    [
        (
            lambda ps: [p.replace(name="global_alpha") if p.name == "alpha" else p for p in ps],
            "mm_fp4: parameter 'alpha' that the worker passes does not exist",
        ),
        (lambda ps: ps[:4] + [ps[5], ps[4]] + ps[6:], "mm_fp4: parameter 'alpha' moved from position 4 to 5"),
    ],
)
def test_a_renamed_or_reordered_mm_fp4_parameter_is_named(edit, words):
    record = json.loads(FI_RECORD.read_text())
    live = dict(_fi_signatures(), mm_fp4=inspect.signature(_edited_mm_fp4(edit)))
    problems = _contract_problems("flashinfer", FI_VERSION, record, live.get, _worker_calls("flashinfer"))
    assert any(words in p for p in problems), problems


def test_the_catalog_knows_every_mm_fp4_backend_the_installed_flashinfer_offers():
    offered = flashinfer_mm_fp4_backends()
    assert offered is not None and "cutlass" in offered
    known = {s.option for s in CATALOG.values() if s.module == "flashinfer_gemm" and s.family == "fp4"}
    assert set(offered) == known


# -- the pinned GPU set resolves together -----------------------------------------------------------------
def test_the_pinned_gpu_profile_resolves_together(tmp_path, monkeypatch, capsys):
    """`provision --profile gpu --dry-run` on the local host: pip resolves torch, FlashInfer and sgl-kernel
    at their pins from the package index (metadata only, nothing installed)."""
    from orchestrator.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(f"hosts: [{{name: local, transport: local, python: {json.dumps(sys.executable)}}}]\n")
    code = main(["provision", "-i", str(inventory), "--profile", "gpu", "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    line = captured.out.strip()
    assert "profile gpu resolves (nothing installed)" in line
    pins = pinned_versions()
    for name in ("torch", "flashinfer-python", "sgl-kernel"):
        assert f"{name}=={pins[name]}" in line


def test_backends_the_installed_flashinfer_offers_beyond_the_catalog_are_reported():
    from orchestrator.ops.hostcheck import readiness_notes

    offered = flashinfer_mm_fp4_backends()
    assert readiness_notes({"flashinfer": FI_VERSION, "flashinfer_mm_fp4_backends": offered}) == []
    notes = readiness_notes({"flashinfer": "9.9", "flashinfer_mm_fp4_backends": [*offered, "warp-drive"]})
    assert notes == [
        "FlashInfer 9.9 offers mm_fp4 backends fleetbench does not know: warp-drive "
        "(available but unknown: no sweep can name them yet)"
    ]


@pytest.mark.parametrize(
    "name, m, n, k, cc, problem",
    [
        ("flashinfer-fp4-cutedsl-low-latency", 16, 2048, 6144, (10, 0), "serves M <= 8 only (M=16)"),
        ("flashinfer-fp4-cutedsl-low-latency", 8, 2048, 6144, (12, 0), "supports compute capability 10.0, 10.3, 10.7"),
        ("flashinfer-fp4-cutedsl-low-latency", 8, 2048, 6144, (10, 0), None),
        ("flashinfer-fp4-cake", 16, 2048, 6144, (10, 3), None),
        ("flashinfer-fp4-cake", 16, 2048, 6000, (10, 0), "needs K % 256 == 0"),
        ("flashinfer-fp4-cake", 16, 2048, 6144, (12, 0), "supports compute capability 10.0, 10.3 only"),
        ("flashinfer-fp4-cute-dsl", 16, 2048, 6144, (11, 0), "supports compute capability"),
        ("flashinfer-fp4-cake", 16, 2048, 6144, (9, 0), "needs compute capability >= 10.0, host has 9.0"),
    ],
)
def test_capability_rules_of_the_newer_flashinfer_backends(name, m, n, k, cc, problem):
    from worker.contract.catalog import support_problem

    got = support_problem(CATALOG[name], m, n, k, cc)
    assert (got is None) if problem is None else (problem in (got or "")), got
