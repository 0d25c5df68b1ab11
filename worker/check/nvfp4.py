"""Reference NVFP4 in pure torch: the correctness oracle for every FP4 kernel (CPU and GPU).

Format (the recipe FlashInfer, sgl-kernel and cutlass use):
- values are FP4 e2m1 {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit, two per byte, even element low;
- one float8_e4m3fn scale per 16 consecutive K elements, one fp32 global scale per tensor:
  global_scale = 448 * 6 / amax(|x|), block scale = e4m3(block_amax / 6 * global_scale),
  x ~= e2m1 * block_scale / global_scale; a GEMM's alpha = 1 / (gs_a * gs_b);
- rounding to e2m1 is to nearest with ties to even codes, saturating at 6.
Scales are kept linear here ([M, K/16]); `swizzle_scales` gives the 128x4 layout kernels read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring e2m1 magnitudes; a value exactly on one is a tie.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


@dataclass(frozen=True)
class NVFP4Tensor:
    packed: torch.Tensor  # uint8 [M, K/2]
    scales: torch.Tensor  # float8_e4m3fn [M, K/16], linear layout
    global_scale: torch.Tensor  # fp32 scalar tensor

    @property
    def shape(self) -> tuple[int, int]:
        return (self.packed.shape[0], self.packed.shape[1] * 2)


def global_scale_for(x: torch.Tensor) -> torch.Tensor:
    """fp32 global scale 448*6/amax(|x|) (1.0 for an all-zero tensor, which has nothing to scale)."""
    amax = x.detach().abs().max().to(torch.float32)
    if amax.item() == 0:
        return torch.ones((), dtype=torch.float32, device=x.device)
    return (E4M3_MAX * E2M1_MAX) / amax


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """Round fp32 values (already scaled into e2m1 range) to 4-bit codes: nearest, ties to even, saturating."""
    mag = v.abs().clamp(max=E2M1_MAX)
    mids = torch.tensor(_MIDPOINTS, dtype=v.dtype, device=v.device)
    low = torch.bucketize(mag, mids, right=False)  # a tie lands on the smaller code
    high = torch.bucketize(mag, mids, right=True)  # a tie lands on the larger code
    code = torch.where((low != high) & (low % 2 == 1), high, low)
    sign = (v < 0).to(torch.uint8) << 3
    return code.to(torch.uint8) | sign


def e2m1_lut(device: torch.device | str = "cpu") -> torch.Tensor:
    """fp32 value of each of the 16 codes (sign bit 8)."""
    pos = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    return torch.cat((pos, -pos))


def e2m1_values(codes: torch.Tensor, lut: torch.Tensor | None = None) -> torch.Tensor:
    """Codes (uint8 0..15) to fp32 values."""
    table = e2m1_lut(codes.device) if lut is None else lut
    return table[codes.long()]


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """[M, K] codes -> [M, K/2] bytes, even element in the low nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def quantize(x: torch.Tensor, global_scale: torch.Tensor | float | None = None) -> NVFP4Tensor:
    """Quantize a 2-D tensor [M, K] (K % 16 == 0) to NVFP4 with the libraries' recipe."""
    if x.dim() != 2 or x.shape[1] % BLOCK:
        raise ValueError(f"NVFP4 needs a 2-D tensor with K % {BLOCK} == 0, got shape {tuple(x.shape)}")
    xf = x.to(torch.float32)
    if global_scale is None:
        gs = global_scale_for(xf)
    else:
        gs = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device)
    m, k = xf.shape
    blocks = xf.reshape(m, k // BLOCK, BLOCK)
    block_amax = blocks.abs().amax(dim=-1)
    scale = (block_amax / E2M1_MAX * gs).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    scale_f = scale.to(torch.float32)
    # Blocks whose scale rounds to zero quantize to zero (the kernels do the same, not a division by 0).
    inv = torch.where(scale_f > 0, gs / scale_f.clamp(min=torch.finfo(torch.float32).tiny), torch.zeros_like(scale_f))
    codes = e2m1_codes(blocks * inv.unsqueeze(-1)).reshape(m, k)
    return NVFP4Tensor(packed=pack_codes(codes), scales=scale, global_scale=gs)


def dequantize(q: NVFP4Tensor, lut: torch.Tensor | None = None) -> torch.Tensor:
    """NVFP4 -> fp32 [M, K]."""
    values = e2m1_values(unpack_codes(q.packed), lut)
    m, k = values.shape
    scale = q.scales.to(torch.float32) / q.global_scale
    return (values.reshape(m, k // BLOCK, BLOCK) * scale.unsqueeze(-1)).reshape(m, k)


def reference_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 a @ b.T through NVFP4 quantization of both operands: what an exact FP4 kernel computes."""
    return dequantize(quantize(a)) @ dequantize(quantize(b)).T


def _round_up(x: int, to: int) -> int:
    return (x + to - 1) // to * to


def swizzled_shape(m: int, k: int) -> tuple[int, int]:
    """Padded scale shape of the 128x4 layout for an [m, k] operand."""
    return _round_up(m, 128), _round_up(k // BLOCK, 4)


def swizzle_scales(scales: torch.Tensor) -> torch.Tensor:
    """Linear [M, K/16] scales -> flat 128x4-swizzled scales, zero-padded to `swizzled_shape`.

    offset(m, kb) = (m//128)*Kt*512 + (kb//4)*512 + (m%32)*16 + ((m%128)//32)*4 + kb%4,
    with Kt = padded_cols / 4: tiles of 128 rows x 4 columns, rows interleaved by 32.
    """
    rows, cols = scales.shape
    pr, pc = _round_up(rows, 128), _round_up(cols, 4)
    padded = torch.zeros((pr, pc), dtype=scales.dtype, device=scales.device)
    padded[:rows, :cols] = scales
    tiles = padded.view(pr // 128, 4, 32, pc // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(pr, pc).contiguous()


def unswizzle_scales(swizzled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of `swizzle_scales`: back to linear [rows, cols]."""
    pr, pc = _round_up(rows, 128), _round_up(cols, 4)
    flat = swizzled.reshape(pr // 128, pc // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    return flat.reshape(pr, pc)[:rows, :cols].contiguous()
