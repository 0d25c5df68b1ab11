"""Stand-ins for FlashInfer and sgl-kernel that bind every call to the library's real signature (the
installed FlashInfer's, the recorded sgl-kernel wheel's, tests/contracts/), check what is passed and answer
with the product those arguments describe; and the check of the worker's calls against those signatures.
For the FP4 contract tests, GEMM (tests/test_fp4_contracts.py) and MoE (tests/test_fp4_moe.py)."""

from __future__ import annotations

import ast
import inspect
import json
import types
from typing import Callable, Optional

import pytest
import torch

from support.ci import require
from support.files import REPO
from worker.check import nvfp4

CONTRACTS = REPO / "tests" / "contracts"
SGL_RECORD = CONTRACTS / "sgl_kernel-0.3.21.json"

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
