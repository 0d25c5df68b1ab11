"""FlashInfer: mm_fp4 (cutlass / cudnn / trtllm / auto / b12x / cute-dsl / cutedsl_low_latency / cake)
and bmm_fp8 (cublas).

Calling conventions (flashinfer-python 0.7.x, see shared FP4 facts):
- global scales are fp32 tensors 448*6/amax (a bf16 global scale gave all-zero output: #3398);
- `mm_fp4(a [M, K/2], b.T, a_sf, b_sf.T, alpha=1/(gs_a*gs_b), out_dtype, out=...)`, 128x4 scale layout;
- trtllm wants B quantized with shuffle; cutlass wants a contiguous `out`; cake serves the per-token
  alpha path only (alpha of shape [M]: here the one global alpha repeated per row).
Every argument goes by keyword: a library release that reorders parameters cannot shift a value into
another one's place, and one that renames a parameter fails loudly (tests/test_fp4_contracts.py binds
these calls against the installed FlashInfer). The quantizer is told `nvfp4_4over6=None` where it has
that parameter: left out, FlashInfer reads a recipe from FLASHINFER_NVFP4_4OVER6* environment
variables, and a benchmark's numbers must not depend on the shell they were started from.
The runner guards capability before this module is ever imported on a host below CC 10.0.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..check import nvfp4
from ..contract.catalog import BackendSpec
from .fp8 import quantize_e4m3

Sets = list[tuple[torch.Tensor, torch.Tensor]]


def _accepts(fn, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _quantize_fp4(flashinfer, x: torch.Tensor, gs: torch.Tensor, shuffle: bool):
    if hasattr(flashinfer, "nvfp4_quantize"):
        fixed = {"nvfp4_4over6": None} if _accepts(flashinfer.nvfp4_quantize, "nvfp4_4over6") else {}
        return flashinfer.nvfp4_quantize(
            a=x, a_global_sf=gs, sfLayout=flashinfer.SfLayout.layout_128x4, do_shuffle=shuffle, **fixed
        )
    if shuffle:
        raise RuntimeError("this flashinfer has no nvfp4_quantize(do_shuffle=True), which trtllm needs")
    fixed = {"nvfp4_4over6": None} if _accepts(flashinfer.fp4_quantize, "nvfp4_4over6") else {}
    return flashinfer.fp4_quantize(
        input=x, global_scale=gs, sf_vec_size=16, sf_use_ue8m0=False, is_sf_swizzled_layout=True, **fixed
    )


def prepare(spec: BackendSpec, sets: Sets, out_dtype: torch.dtype) -> Callable[[int], torch.Tensor]:
    import flashinfer

    m, n = sets[0][0].shape[0], sets[0][1].shape[0]
    device = sets[0][0].device
    out = torch.empty((m, n), dtype=out_dtype, device=device)

    if spec.family == "fp8":
        quant = []
        for a, b in sets:
            (a8, sa), (b8, sb) = quantize_e4m3(a), quantize_e4m3(b)
            # bmm_fp8 wants A (1, M, K) and B (1, K, N) column-major: the transpose view of (N, K).
            quant.append((a8.unsqueeze(0), b8.unsqueeze(0).transpose(1, 2), sa, sb))
        out3 = out.unsqueeze(0)

        def run_fp8(i: int) -> torch.Tensor:
            a8, b8, sa, sb = quant[i]
            return flashinfer.bmm_fp8(
                A=a8, B=b8, A_scale=sa, B_scale=sb, dtype=out_dtype, out=out3, backend=spec.option
            )[0]

        run_fp8.reads = [[q[0]] for q in quant]  # operand A as the call reads it (worker/check/integrity.py)
        return run_fp8

    shuffle_b = spec.option == "trtllm"
    ops = []
    for a, b in sets:
        gs_a = nvfp4.global_scale_for(a).reshape(1)
        gs_b = nvfp4.global_scale_for(b).reshape(1)
        a4, a_sf = _quantize_fp4(flashinfer, a, gs_a, shuffle=False)
        b4, b_sf = _quantize_fp4(flashinfer, b, gs_b, shuffle=shuffle_b)
        alpha = (1.0 / (gs_a * gs_b)).to(torch.float32)
        if spec.option == "cake":
            alpha = alpha.expand(m).contiguous()  # per-token alpha: the same value for every row
        ops.append((a4, b4.T, a_sf, b_sf.T, alpha))

    def run_fp4(i: int) -> torch.Tensor:
        a4, b4t, a_sf, b_sf_t, alpha = ops[i]
        return flashinfer.mm_fp4(
            a=a4,
            b=b4t,
            a_descale=a_sf,
            b_descale=b_sf_t,
            alpha=alpha,
            out_dtype=out_dtype,
            out=out,
            block_size=16,
            use_8x4_sf_layout=False,
            backend=spec.option,
        )

    run_fp4.reads = [[op[0]] for op in ops]
    return run_fp4
