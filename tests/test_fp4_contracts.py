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

import ast
import inspect
import json
import sys
import types
from pathlib import Path
from typing import Callable, Optional

import pytest
import torch
from support.ci import require

from orchestrator.ops.provision import pinned_versions
from worker.backends import flashinfer_mm_fp4_backends
from worker.backends.fp8 import dequantized_product
from worker.check import nvfp4
from worker.check.verify import THRESHOLDS, verdict
from worker.contract.catalog import CATALOG

CONTRACTS = Path(__file__).parent / "contracts"
SGL_RECORD = CONTRACTS / "sgl_kernel-0.3.21.json"
M, N, K = 16, 64, 256  # K % 256 for cake; M <= 8 is needed by cutedsl_low_latency (its own shape below)

try:
    import flashinfer
except ImportError:
    flashinfer = None
require(flashinfer, "flashinfer-python is not installed (`make test` installs it)", module=True)
FI_VERSION = flashinfer.__version__
FI_RECORD = CONTRACTS / f"flashinfer_python-{FI_VERSION}.json"


# -- signatures --------------------------------------------------------------------------------------
_HAS_DEFAULT = object()


def signature_from_record(entry: dict) -> inspect.Signature:
    """An inspect.Signature built from a record of record_signatures.py."""
    return inspect.Signature(
        [
            inspect.Parameter(
                p["name"],
                getattr(inspect.Parameter, p["kind"]),
                default=inspect.Parameter.empty if p["default"] is None else _HAS_DEFAULT,
            )
            for p in entry["parameters"]
        ]
    )


def literal_values(annotation: str) -> Optional[list[str]]:
    """The values of a recorded `Literal[...]` annotation, or None."""
    node = ast.parse(annotation, mode="eval").body
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [ast.literal_eval(e) for e in elements]
    return None


def bind(library: str, name: str, sig: inspect.Signature, args, kwargs) -> dict:
    """The call's arguments by parameter name (defaults filled in); fails naming the call and parameter."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        pytest.fail(f"{library}.{name}: the worker's call does not fit the library's signature: {exc}")
    bound.apply_defaults()
    return dict(bound.arguments)


# -- recorders ---------------------------------------------------------------------------------------
class Recorder(types.ModuleType):
    """A stand-in library module: every call is bound to the real signature and recorded."""

    def __init__(self, library: str, signatures: dict[str, inspect.Signature]):
        super().__init__(library)
        self.library, self.signatures = library, signatures
        self.calls: list[tuple[str, tuple, dict, dict]] = []  # (name, args, kwargs, bound)
        for name, sig in signatures.items():  # inspect.signature() of a stand-in says what the real one says
            method = getattr(self, name, None)
            if method is not None:
                stand_in = (lambda m: lambda *args, **kwargs: m(*args, **kwargs))(method)
                stand_in.__signature__ = sig
                setattr(self, name, stand_in)

    def _record(self, name: str, args, kwargs) -> dict:
        bound = bind(self.library, name, self.signatures[name], args, kwargs)
        self.calls.append((name, args, kwargs, bound))
        return bound


def _packed_scales(x: torch.Tensor, gs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference NVFP4 of x as the libraries return it: packed uint8 [M, K/2], 128x4-swizzled e4m3 scales
    of shape (round_up(M, 128), round_up(K/16, 4))."""
    q = nvfp4.quantize(x, gs)
    return q.packed, nvfp4.swizzle_scales(q.scales)


def fp4_product(
    a: torch.Tensor, b_rows: torch.Tensor, sf_a: torch.Tensor, sf_b_rows: torch.Tensor, alpha: torch.Tensor
) -> torch.Tensor:
    """What an FP4 GEMM computes from these operands: a [M, K/2] and b_rows [N, K/2] packed, their
    swizzled scales by rows, alpha the global dequantization factor."""

    def operand(packed, swizzled):
        rows, k = packed.shape[0], packed.shape[1] * 2
        scales = nvfp4.unswizzle_scales(swizzled.view(torch.float8_e4m3fn), rows, k // nvfp4.BLOCK)
        q = nvfp4.NVFP4Tensor(packed=packed, scales=scales, global_scale=torch.ones((), dtype=torch.float32))
        return nvfp4.dequantize(q)

    return (operand(a, sf_a) @ operand(b_rows, sf_b_rows).T) * alpha.to(torch.float32).reshape(-1, 1)


class FakeFlashInfer(Recorder):
    SfLayout = types.SimpleNamespace(
        layout_128x4="layout_128x4", layout_8x4="layout_8x4", layout_linear="layout_linear"
    )

    def __init__(self, signatures):
        super().__init__("flashinfer", signatures)
        self.shuffled: dict[int, bool] = {}  # data_ptr of a quantized operand -> quantized with do_shuffle

    def nvfp4_quantize(self, *args, **kwargs):
        v = self._record("nvfp4_quantize", args, kwargs)
        assert v["sfLayout"] == self.SfLayout.layout_128x4, "nvfp4_quantize: scales must be in the 128x4 layout"
        assert v["sf_vec_size"] == 16 and not v["per_token_activation"]
        assert v["nvfp4_4over6"] is None, "nvfp4_quantize: pass nvfp4_4over6=None (else it reads the environment)"
        gs = v["a_global_sf"]
        assert isinstance(gs, torch.Tensor) and gs.dtype == torch.float32 and gs.numel() == 1, (
            "nvfp4_quantize: the global scale must be an fp32 tensor (a bf16 one gave all-zero output)"
        )
        packed, sf = _packed_scales(v["a"], gs)
        self.shuffled[packed.data_ptr()] = bool(v["do_shuffle"])
        return packed, sf.view(torch.uint8)

    def mm_fp4(self, *args, **kwargs):
        # trtllm's shuffled weight layout is not emulated: its flag is checked, the math uses the plain layout.
        v = self._record("mm_fp4", args, kwargs)
        check_mm_fp4(v, self.shuffled)
        out = v["out"]
        out.copy_(fp4_product(v["a"], v["b"].T, v["a_descale"], v["b_descale"].T, v["alpha"]))
        return out

    def bmm_fp8(self, *args, **kwargs):
        v = self._record("bmm_fp8", args, kwargs)
        a, b, out = v["A"], v["B"], v["out"]
        assert a.dtype == b.dtype == torch.float8_e4m3fn and a.dim() == b.dim() == 3
        assert b.stride(1) == 1, "bmm_fp8: B must be column-major (the transpose view of an (N, K) weight)"
        assert v["A_scale"].dtype == v["B_scale"].dtype == torch.float32 and v["backend"] == "cublas"
        assert out is not None and out.dtype == v["dtype"] and out.shape == (1, a.shape[1], b.shape[2])
        out.copy_((a.float() * v["A_scale"]) @ (b.float() * v["B_scale"]))
        return out


def check_mm_fp4(v: dict, shuffled: dict[int, bool]) -> None:
    """What mm_fp4 must be given (FP4_FACTS.md): the checks that make the seed's mistakes fail."""
    a, b, sf_a, sf_b, alpha, out = v["a"], v["b"], v["a_descale"], v["b_descale"], v["alpha"], v["out"]
    m, half_k = a.shape
    n = b.shape[1]
    assert a.dtype == torch.uint8 and a.is_contiguous(), "mm_fp4: a must be the contiguous packed [M, K/2]"
    assert b.dtype == torch.uint8 and b.shape[0] == half_k and b.stride() == (1, half_k), (
        "mm_fp4: b must be the column-major [K/2, N] view of the packed [N, K/2] weight (b.T)"
    )
    assert tuple(sf_a.shape) == nvfp4.swizzled_shape(m, 2 * half_k) and sf_a.is_contiguous(), (
        "mm_fp4: a_descale must be a's 128x4 swizzled scales"
    )
    assert tuple(sf_b.T.shape) == nvfp4.swizzled_shape(n, 2 * half_k) and sf_b.T.is_contiguous(), (
        "mm_fp4: b_descale must be the transpose view of b's 128x4 swizzled scales"
    )
    assert alpha is not None, "mm_fp4: alpha (1 / (gs_a * gs_b)) is missing: the product is off by the global scales"
    assert isinstance(alpha, torch.Tensor) and alpha.dtype == torch.float32, "mm_fp4: alpha must be an fp32 tensor"
    per_token = v["backend"] == "cake"
    assert alpha.numel() == (m if per_token else 1), f"mm_fp4 {v['backend']}: alpha has {alpha.numel()} values"
    assert out is not None, "mm_fp4: out is missing: the timed call must write one preallocated buffer"
    assert out.is_contiguous() and tuple(out.shape) == (m, n) and out.dtype == v["out_dtype"], (
        "mm_fp4: out must be a contiguous [M, N] tensor of out_dtype"
    )
    assert v["block_size"] == 16 and v["use_nvfp4"] and not v["use_8x4_sf_layout"]
    want_shuffle = v["backend"] == "trtllm"
    assert shuffled.get(b.data_ptr()) is want_shuffle, (
        f"mm_fp4 {v['backend']}: b quantized with do_shuffle={not want_shuffle}"
    )
    assert shuffled.get(a.data_ptr()) is False, "mm_fp4: a must be quantized without shuffle"


class FakeSglKernel(Recorder):
    def scaled_fp4_quant(self, *args, **kwargs):
        v = self._record("scaled_fp4_quant", args, kwargs)
        gs = v["input_global_scale"]
        assert gs.dtype == torch.float32 and gs.numel() == 1, "scaled_fp4_quant: an fp32 global scale"
        packed, sf = _packed_scales(v["input"], gs)
        return packed, sf  # sgl returns the scales as float8_e4m3fn

    def cutlass_scaled_fp4_mm(self, *args, **kwargs):
        v = self._record("cutlass_scaled_fp4_mm", args, kwargs)
        a, b, sf_a, sf_b, alpha = v["a"], v["b"], v["block_scale_a"], v["block_scale_b"], v["alpha"]
        assert a.dtype == b.dtype == torch.uint8 and a.is_contiguous() and b.is_contiguous(), (
            "cutlass_scaled_fp4_mm: a and b are contiguous packed uint8"
        )
        assert b.shape[1] == a.shape[1], "cutlass_scaled_fp4_mm: b is the (N, K/2) weight, NOT transposed"
        assert sf_a.dtype == sf_b.dtype == torch.float8_e4m3fn and sf_a.is_contiguous() and sf_b.is_contiguous()
        assert tuple(sf_b.shape) == nvfp4.swizzled_shape(b.shape[0], 2 * b.shape[1])
        assert alpha.dtype == torch.float32 and alpha.numel() == 1, "cutlass_scaled_fp4_mm: alpha fp32 scalar tensor"
        return fp4_product(a, b, sf_a.view(torch.uint8), sf_b.view(torch.uint8), alpha).to(v["out_dtype"])

    def fp8_scaled_mm(self, *args, **kwargs):
        v = self._record("fp8_scaled_mm", args, kwargs)
        a, b, sa, sb = v["mat_a"], v["mat_b"], v["scales_a"], v["scales_b"]
        assert a.dtype == b.dtype == torch.float8_e4m3fn and a.is_contiguous(), "fp8_scaled_mm: row-major e4m3 a"
        assert b.stride(0) == 1, "fp8_scaled_mm: b must be [K, N] column-major"
        assert sa.numel() == a.shape[0] and sb.numel() == b.shape[1] and sa.dtype == sb.dtype == torch.float32
        return ((a.float() * sa.reshape(-1, 1)) @ (b.float() * sb.reshape(1, -1))).to(v["out_dtype"])


def _fi_signatures() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(flashinfer, name))
        for name in ("mm_fp4", "nvfp4_quantize", "fp4_quantize", "bmm_fp8")
    }


def _sgl_signatures() -> dict[str, inspect.Signature]:
    record = json.loads(SGL_RECORD.read_text())
    return {name: signature_from_record(entry) for name, entry in record["functions"].items()}


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


def _contract_problems(
    library: str, version: str, record: dict, installed: Callable[[str], Optional[inspect.Signature]], calls
) -> list[str]:
    """One line per way the worker's calls and the library disagree, each naming the call and parameter."""
    problems = []
    for name, args, kwargs in calls:
        entry = record["functions"].get(name)
        where = f"{library} {version} {name}"
        if entry is None:
            problems.append(f"{where}: not in the signature record {record['wheel']}")
            continue
        if not entry["exported"]:
            problems.append(f"{where}: the package no longer exports it")
        recorded = [p["name"] for p in entry["parameters"]]
        sig = installed(name)
        live = list(sig.parameters) if sig is not None else recorded
        if args:
            problems.append(f"{where}: the worker passes {len(args)} arguments by position; pass every one by name")
        for param in kwargs:
            if param not in live:
                problems.append(
                    f"{where}: parameter '{param}' that the worker passes does not exist "
                    f"(parameters: {', '.join(live)})"
                )
            elif param in recorded and live.index(param) != recorded.index(param):
                problems.append(
                    f"{where}: parameter '{param}' moved from position {recorded.index(param)} to "
                    f"{live.index(param)}: re-read the call, then record this version"
                )
        if sig is not None:
            try:
                sig.bind(*args, **kwargs)
            except TypeError as exc:
                problems.append(f"{where}: {exc}")
        annotation = next((p["annotation"] for p in entry["parameters"] if p["name"] == "backend"), None)
        offered = literal_values(annotation) if annotation else None
        if offered is not None and "backend" in kwargs and kwargs["backend"] not in offered:
            problems.append(f"{where}: backend '{kwargs['backend']}' is not one it offers ({', '.join(offered)})")
    return sorted(set(problems))


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
