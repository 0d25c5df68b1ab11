"""The backend catalog: what each kernel needs, declared up front and checked before anything runs.

Pure: names, kinds, operand families and shape and device limits, read by the controller (validating
sweep specs) and the worker alike. Whether a backend's library imports on this host is the worker's
question (worker/backends/__init__.py); each backend's code lives in one module per library under
worker/backends/, imported only when a case of that backend runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

CC = tuple[int, int]
FAMILIES = ("bf16", "fp8", "fp4")  # operand formats; a kernel from the user's file declares one (FAMILY)
# FlashInfer's @supported_compute_capability decorators of mm_fp4's backends (0.7.2.post1,
# flashinfer/gemm/gemm_base.py and experimental/cake_nvfp4_per_token/support.py).
_FI_CUTLASS_CC = frozenset({(10, 0), (10, 3), (10, 7), (11, 0), (12, 0), (12, 1)})  # cutlass, cudnn
_FI_TRTLLM_CC = frozenset({(10, 0), (10, 3), (10, 7)})  # trtllm, cutedsl_low_latency
_FI_B12X_CC = frozenset({(12, 0), (12, 1)})
_FI_CUTE_DSL_CC = frozenset({(10, 0), (10, 3), (10, 7), (12, 0), (12, 1)})
_FI_CAKE_CC = frozenset({(10, 0), (10, 3)})
# sgl-kernel 0.3.21 sends CC 12.0 to SM120 kernels and everything else to SM100 kernels.
_SGL_FP4_CC = frozenset({(10, 0), (10, 3), (12, 0)})
# Grouped / fused NVFP4 MoE (docs/FP4_MOE.md says where each set is read):
# FlashInfer group_gemm_nvfp4_nt_groupwise: @supported_compute_capability([120, 121]) on its problem check;
_FI_GROUP_NVFP4_CC = frozenset({(12, 0), (12, 1)})
# FlashInfer cutlass_fused_moe with NVFP4: get_cutlass_fused_moe_module builds the SM100 (10.0, 10.7, 11.0),
# SM103 and SM120 (12.0, 12.1) modules; the SM90 and SM89 ones have no NVFP4-activation GEMM
# (isValidHopperMOESpecialisation excludes FP4 activations, "FP4 data type is not supported on SM < 90").
_FI_CUTLASS_MOE_NVFP4_CC = frozenset({(10, 0), (10, 3), (10, 7), (11, 0), (12, 0), (12, 1)})
# sgl-kernel cutlass_fp4_group_mm: getSMVersion() 100 or 103 -> SM100 kernels, 120 -> SM120, else not implemented.
_SGL_FP4_GROUP_CC = frozenset({(10, 0), (10, 3), (12, 0)})
FP4_MIN_CC: CC = (10, 0)  # below this FP4 quantizers write garbage without an error: never call them


@dataclass(frozen=True)
class BackendSpec:
    name: str
    module: str  # module under worker.backends holding `prepare`
    family: str  # operand format: "bf16" | "fp8" | "fp4"
    import_name: str  # the library module whose import decides "unavailable"
    option: str = ""  # library-specific choice, e.g. FlashInfer's backend= value
    min_cc: Optional[CC] = None  # None: runs on the CPU as well
    cpu_ok: bool = False  # with min_cc: also runs on the CPU (a CPU fallback of the same operator)
    only_cc: Optional[frozenset] = None
    k_multiple: int = 1
    n_multiple: int = 1
    max_m: Optional[int] = None  # a low-latency kernel that serves small M only
    description: str = ""
    workload: str = "gemm"  # gemm | moe: which shapes of a sweep it runs
    # MoE only: which kind of kernel ran, so a fused block is never read as one GEMM:
    # reference | loop (one dense call per expert) | grouped (one call, every expert) | fused (a whole MoE block)
    kernel: str = ""


def _spec(name: str, module: str, family: str, import_name: str, **kw) -> tuple[str, BackendSpec]:
    return name, BackendSpec(name=name, module=module, family=family, import_name=import_name, **kw)


CATALOG: dict[str, BackendSpec] = dict(
    [
        _spec("torch-bf16", "torch_gemm", "bf16", "torch", description="torch.mm in bf16 (cuBLAS / CPU)"),
        _spec(
            "torch-fp8",
            "torch_gemm",
            "fp8",
            "torch",
            min_cc=(8, 9),
            k_multiple=16,
            n_multiple=16,
            description="torch._scaled_mm e4m3, per-tensor scales",
        ),
        _spec(
            "torch-nvfp4",
            "torch_gemm",
            "fp4",
            "torch",
            min_cc=FP4_MIN_CC,
            k_multiple=32,
            n_multiple=32,
            description="torch._scaled_mm NVFP4 (cuBLASLt, Blackwell)",
        ),
        _spec(
            "noop",
            "",
            "bf16",
            "json",  # needs nothing beyond the standard library
            description="does nothing and times nothing: checks the fleet's plumbing and the controller's own cost",
        ),
        _spec(
            "reference-nvfp4",
            "reference",
            "fp4",
            "torch",
            description="pure-torch NVFP4 dequantize + fp32 matmul (the oracle, timed)",
        ),
        _spec(
            "flashinfer-fp4-cutlass",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="cutlass",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_CUTLASS_CC,
            k_multiple=32,
            description="flashinfer.mm_fp4 cutlass",
        ),
        _spec(
            "flashinfer-fp4-cudnn",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="cudnn",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_CUTLASS_CC,
            k_multiple=32,
            description="flashinfer.mm_fp4 cudnn",
        ),
        _spec(
            "flashinfer-fp4-trtllm",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="trtllm",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_TRTLLM_CC,
            k_multiple=32,
            description="flashinfer.mm_fp4 trtllm",
        ),
        _spec(
            "flashinfer-fp4-auto",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="auto",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_CUTLASS_CC,
            k_multiple=32,
            description="flashinfer.mm_fp4 auto",
        ),
        _spec(
            "flashinfer-fp4-b12x",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="b12x",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_B12X_CC,
            k_multiple=32,
            description="flashinfer.mm_fp4 b12x",
        ),
        _spec(
            "flashinfer-fp4-cute-dsl",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="cute-dsl",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_CUTE_DSL_CC,
            k_multiple=32,
            description="flashinfer.mm_fp4 cute-dsl",
        ),
        # M <= 8 and K % 64 == 0 (its requirement check, for NVFP4); a and the transposed b as the others.
        _spec(
            "flashinfer-fp4-cutedsl-low-latency",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="cutedsl_low_latency",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_TRTLLM_CC,
            k_multiple=64,
            max_m=8,
            description="flashinfer.mm_fp4 cutedsl_low_latency (decode: M <= 8)",
        ),
        # Experimental in FlashInfer: per-token alpha only, N % 8 == 0, K % 256 == 0, bf16/fp16 out.
        _spec(
            "flashinfer-fp4-cake",
            "flashinfer_gemm",
            "fp4",
            "flashinfer",
            option="cake",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_CAKE_CC,
            k_multiple=256,
            n_multiple=8,
            description="flashinfer.mm_fp4 cake (experimental, per-token alpha)",
        ),
        _spec(
            "flashinfer-fp8-cublas",
            "flashinfer_gemm",
            "fp8",
            "flashinfer",
            option="cublas",
            min_cc=(8, 9),
            k_multiple=16,
            n_multiple=16,
            description="flashinfer.bmm_fp8 cublas",
        ),
        _spec(
            "sgl-fp4-cutlass",
            "sgl_gemm",
            "fp4",
            "sgl_kernel",
            min_cc=FP4_MIN_CC,
            only_cc=_SGL_FP4_CC,
            k_multiple=32,
            n_multiple=32,
            description="sgl_kernel.cutlass_scaled_fp4_mm",
        ),
        _spec(
            "sgl-fp8",
            "sgl_gemm",
            "fp8",
            "sgl_kernel",
            min_cc=(8, 9),
            k_multiple=16,
            n_multiple=16,
            description="sgl_kernel.fp8_scaled_mm",
        ),
    ]
)


# The MoE layer (a sweep's `moe_layer` shapes): all expert GEMMs of one layer as one case (backends/moe.py).
# Each dense backend also runs as a per-expert loop, the naive baseline; low-latency kernels limited to
# small M and the timed oracle are left out of that.
MOE_CATALOG: dict[str, BackendSpec] = dict(
    [
        _spec(
            "moe-reference",
            "moe",
            "bf16",
            "torch",
            option="reference",
            workload="moe",
            kernel="reference",
            description="per-expert fp32 loop: the MoE oracle, timed",
        ),
        # torch._grouped_mm: CUTLASS grouped GEMM on SM90 / SM100 (a CPU fallback in recent torch).
        _spec(
            "moe-grouped-torch-bf16",
            "moe",
            "bf16",
            "torch",
            option="grouped",
            workload="moe",
            n_multiple=8,
            k_multiple=8,
            min_cc=(9, 0),
            cpu_ok=True,
            kernel="grouped",
            description="torch._grouped_mm bf16 over all experts at once",
        ),
        *[
            _spec(
                f"moe-loop-{name}",
                "moe",
                s.family,
                s.import_name,
                option=f"loop:{name}",
                min_cc=s.min_cc,
                only_cc=s.only_cc,
                k_multiple=s.k_multiple,
                n_multiple=s.n_multiple,
                workload="moe",
                kernel="loop",
                description=f"per-expert loop of {name} ({s.description})",
            )
            for name, s in CATALOG.items()
            if name not in ("noop", "reference-nvfp4") and s.max_m is None
        ],
        # Grouped and fused NVFP4 MoE kernels as serving engines call them (backends/moe_fp4.py, docs/FP4_MOE.md).
        # Alignments from their sources: FlashInfer's check wants N % 8 and K % 128; sgl-kernel's offsets
        # step each expert's weight scales by N rows and K/16 columns unpadded, so N % 128 and K % 64.
        _spec(
            "moe-grouped-flashinfer-fp4",
            "moe_fp4",
            "fp4",
            "flashinfer",
            option="grouped:flashinfer",
            workload="moe",
            kernel="grouped",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_GROUP_NVFP4_CC,
            k_multiple=128,
            n_multiple=8,
            description="flashinfer.gemm.group_gemm_nvfp4_nt_groupwise: one NVFP4 call over all experts",
        ),
        _spec(
            "moe-grouped-sgl-fp4",
            "moe_fp4",
            "fp4",
            "sgl_kernel",
            option="grouped:sgl",
            workload="moe",
            kernel="grouped",
            min_cc=FP4_MIN_CC,
            only_cc=_SGL_FP4_GROUP_CC,
            k_multiple=64,
            n_multiple=128,
            description="sgl_kernel.cutlass_fp4_group_mm on scaled_fp4_experts_quant activations",
        ),
        # A whole MoE block, not a GEMM: n = 3 * I (gate and up 2I, down I), k = H, so n * k is each expert's
        # weights and the layer's flops are 2 * routed tokens * n * k, as for one projection. I % 128 == 0.
        _spec(
            "moe-fused-flashinfer-fp4-cutlass",
            "moe_fp4",
            "fp4",
            "flashinfer",
            option="fused:flashinfer-cutlass",
            workload="moe",
            kernel="fused",
            min_cc=FP4_MIN_CC,
            only_cc=_FI_CUTLASS_MOE_NVFP4_CC,
            n_multiple=384,
            description="flashinfer.cutlass_fused_moe NVFP4 block: w13 GEMM, SwiGLU, NVFP4 requantization, "
            "w2 GEMM, top-k weighted sum (n = 3 * intermediate, k = hidden)",
        ),
    ]
)
CATALOG.update(MOE_CATALOG)


def builtin_family(case) -> Optional[str]:
    """The operand family of a case's built-in backend (the catalog's); None for a user kernel (its file
    declares it, and that file is code under test) or a backend the catalog does not know."""
    spec = None if case.kernel_sha256 else CATALOG.get(case.backend)
    return spec.family if spec is not None else None


# The references, timed for scale: pure-torch fp32 (and NVFP4 dequantization), never a tensor-core kernel.
ORACLE_BACKENDS = frozenset({"reference-nvfp4", "moe-reference"})


def _cc_text(cc: CC) -> str:
    return "%d.%d" % cc


def support_problem(spec: BackendSpec, m: int, n: int, k: int, cc: Optional[CC]) -> Optional[str]:
    """Why this backend cannot run this shape on this device, or None. Pure: no imports, no GPU."""
    if spec.min_cc is not None and not (cc is None and spec.cpu_ok):
        if cc is None:
            return f"needs a CUDA GPU with compute capability >= {_cc_text(spec.min_cc)}; host has none (CPU)"
        listed = ", ".join(_cc_text(c) for c in sorted(spec.only_cc or ()))
        if cc < spec.min_cc:
            # The library's own list too, so a reader of an H200 row knows where the kernel would run.
            only = f" (this kernel: {listed} only)" if listed else ""
            return f"needs compute capability >= {_cc_text(spec.min_cc)}, host has {_cc_text(cc)}{only}"
        if spec.only_cc is not None and cc not in spec.only_cc:
            return f"supports compute capability {listed} only, host has {_cc_text(cc)}"
    if spec.family == "fp4" and k % 16:
        return f"needs K % 16 == 0 for NVFP4 blocks (K={k})"
    if k % spec.k_multiple:
        return f"needs K % {spec.k_multiple} == 0 (K={k})"
    if n % spec.n_multiple:
        return f"needs N % {spec.n_multiple} == 0 (N={n})"
    if spec.max_m is not None and m > spec.max_m:
        return f"serves M <= {spec.max_m} only (M={m})"
    return None


def unknown_flashinfer_backends(offered: Optional[list[str]]) -> list[str]:
    """Backends the installed FlashInfer offers that no catalog entry runs: available, but unknown here."""
    known = {spec.option for spec in CATALOG.values() if spec.module == "flashinfer_gemm" and spec.family == "fp4"}
    return [b for b in offered or [] if b not in known]
