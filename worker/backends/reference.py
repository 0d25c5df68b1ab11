"""The reference NVFP4 path, timed like a backend: dequantize both operands, fp32 matmul."""

from __future__ import annotations

from typing import Callable

import torch

from ..check import nvfp4
from ..contract.catalog import BackendSpec

Sets = list[tuple[torch.Tensor, torch.Tensor]]


def prepare(spec: BackendSpec, sets: Sets, out_dtype: torch.dtype) -> Callable[[int], torch.Tensor]:
    quantized = [(nvfp4.quantize(a), nvfp4.quantize(b)) for a, b in sets]
    # The lookup table is built once: a host-to-device copy inside a CUDA-graph capture is illegal.
    lut = nvfp4.e2m1_lut(sets[0][0].device)

    def run(i: int) -> torch.Tensor:
        qa, qb = quantized[i]
        return nvfp4.dequantize(qa, lut) @ nvfp4.dequantize(qb, lut).T

    run.reads = [[qa.packed] for qa, _ in quantized]  # operand A as the call reads it (worker/check/integrity.py)
    return run
