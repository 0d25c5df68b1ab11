"""Per-tensor e4m3 quantization shared by the fp8 baselines (and their dequantized oracle)."""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


def quantize_e4m3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x -> (e4m3 tensor, fp32 dequantization scale as a 1-element tensor): x ~= x8 * scale."""
    amax = x.detach().abs().max().to(torch.float32).clamp(min=1e-12)
    scale = amax / E4M3_MAX
    x8 = (x.to(torch.float32) / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, scale.reshape(1)


def dequantized_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 a @ b.T through e4m3 quantization of both: what an exact fp8 GEMM computes."""
    a8, sa = quantize_e4m3(a)
    b8, sb = quantize_e4m3(b)
    return (a8.to(torch.float32) * sa) @ (b8.to(torch.float32) * sb).T
