"""The reference NVFP4 quantizer: hand-derived vectors, the 128x4 swizzle formula, and torchao as an
independent oracle."""

from __future__ import annotations

import pytest
import torch

from worker.check import nvfp4

CODE_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def codes_of(values):
    return nvfp4.e2m1_codes(torch.tensor(values, dtype=torch.float32)).tolist()


def test_every_code_decodes_to_its_value_and_encodes_back():
    codes = torch.arange(16, dtype=torch.uint8)
    values = nvfp4.e2m1_values(codes).tolist()
    assert values == CODE_VALUES + [-v for v in CODE_VALUES]
    back = nvfp4.e2m1_codes(torch.tensor(values)).tolist()
    assert back[:8] == list(range(8)) and back[9:] == list(range(9, 16))
    assert back[8] in (0, 8)  # -0.0 and +0.0 are the same value


@pytest.mark.parametrize(
    "value,code",
    [
        (0.25, 0),
        (0.75, 2),
        (1.25, 2),
        (1.75, 4),
        (2.5, 4),
        (3.5, 6),
        (5.0, 6),  # ties go to the even code
        (0.2499, 0),
        (0.2501, 1),
        (2.9, 5),
        (4.9, 6),
        (5.1, 7),  # otherwise nearest
        (6.0, 7),
        (7.0, 7),
        (1e9, 7),  # saturation at 6
        (-0.75, 10),
        (-5.0, 14),
        (-1e9, 15),  # sign bit 8
    ],
)
def test_rounding_is_nearest_ties_to_even_and_saturating(value, code):
    assert codes_of([value]) == [code]


def test_hand_derived_blocks():
    # Tensor amax 6 -> global scale 448*6/6 = 448.
    # Block 0 amax 6: scale e4m3(6/6*448) = 448, values scaled by 448/448 = 1.
    # Block 1 amax 1.5: scale 1.5/6*448 = 112, values scaled by 448/112 = 4.
    row0 = [1.0, -2.0, 3.0, 6.0] + [0.0] * 12
    row1 = [1.5, 0.375, 0.1875, -0.25] + [0.0] * 12
    x = torch.tensor([row0 + row1], dtype=torch.float32)
    q = nvfp4.quantize(x)
    assert q.global_scale.item() == pytest.approx(448.0)
    assert q.scales.to(torch.float32).tolist() == [[448.0, 112.0]]
    codes = nvfp4.unpack_codes(q.packed)[0].tolist()
    assert codes[:4] == [2, 4 | 8, 5, 7]
    # 1.5*4 = 6 -> 7; 0.375*4 = 1.5 -> 3; 0.1875*4 = 0.75 is a tie -> 1.0 (2); -0.25*4 = -1 -> 10
    assert codes[16:20] == [7, 3, 2, 10]
    deq = nvfp4.dequantize(q)[0].tolist()
    assert deq[:4] == [1.0, -2.0, 3.0, 6.0]
    assert deq[16:20] == [1.5, 0.375, 0.25, -0.25]


def test_even_element_is_the_low_nibble():
    assert nvfp4.pack_codes(torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)).tolist() == [[0x21, 0x0F]]
    packed = torch.tensor([[0x21, 0x0F]], dtype=torch.uint8)
    assert nvfp4.unpack_codes(packed).tolist() == [[1, 2, 15, 0]]


def test_all_zero_blocks_and_tensors_quantize_to_zero_without_nan():
    x = torch.zeros(2, 32)
    x[1, 16:] = torch.linspace(-3, 3, 16)
    q = nvfp4.quantize(x)
    deq = nvfp4.dequantize(q)
    assert torch.isfinite(deq).all()
    assert deq[0].abs().sum() == 0 and deq[1, :16].abs().sum() == 0
    assert q.scales.to(torch.float32)[0].tolist() == [0.0, 0.0]
    zeros = nvfp4.quantize(torch.zeros(1, 16))
    assert zeros.global_scale.item() == 1.0 and nvfp4.dequantize(zeros).abs().sum() == 0


def test_tiny_block_scales_stay_subnormal_or_flush_to_zero_like_the_kernels():
    # One big block sets the global scale; the small blocks' scales land in e4m3's subnormal range
    # (below 2^-6) or under its smallest subnormal (2^-9) and round to zero.
    x = torch.zeros(1, 48)
    x[0, 0] = 6.0 * 448  # global scale 1.0
    x[0, 16] = 6.0 * 2**-8  # block scale 2^-8: subnormal, exact
    x[0, 32] = 6.0 * 2**-11  # block scale 2^-11: below the smallest subnormal -> 0
    q = nvfp4.quantize(x)
    scales = q.scales.to(torch.float32)[0].tolist()
    assert scales == [448.0, 2**-8, 0.0]
    deq = nvfp4.dequantize(q)[0]
    assert deq[16].item() == pytest.approx(6.0 * 2**-8)
    assert deq[32].item() == 0.0 and torch.isfinite(deq).all()


def test_quantize_rejects_k_not_multiple_of_16():
    with pytest.raises(ValueError, match="K % 16"):
        nvfp4.quantize(torch.ones(2, 24))


@pytest.mark.parametrize("rows,cols", [(1, 1), (200, 12), (128, 4), (300, 7)])
def test_swizzle_matches_the_128x4_offset_formula(rows, cols):
    scales = torch.randint(1, 255, (rows, cols), dtype=torch.uint8)
    flat = nvfp4.swizzle_scales(scales).flatten()
    pr, pc = nvfp4.swizzled_shape(rows, cols * 16)
    assert flat.numel() == pr * pc
    kt = pc // 4
    for m in range(rows):
        for kb in range(cols):
            offset = (m // 128) * kt * 512 + (kb // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + kb % 4
            assert flat[offset] == scales[m, kb]
    assert int(flat.to(torch.int64).sum()) == int(scales.to(torch.int64).sum())  # padding is zero
    assert torch.equal(nvfp4.unswizzle_scales(nvfp4.swizzle_scales(scales), rows, cols), scales)


def test_reference_gemm_is_the_product_of_dequantized_operands_and_close_to_bf16():
    torch.manual_seed(1)
    a, b = torch.randn(32, 256), torch.randn(48, 256)
    ref = nvfp4.reference_gemm(a, b)
    exact = nvfp4.dequantize(nvfp4.quantize(a)) @ nvfp4.dequantize(nvfp4.quantize(b)).T
    assert torch.equal(ref, exact)
    rel = ((ref - a @ b.T).norm() / (a @ b.T).norm()).item()
    assert 0.05 < rel < 0.3  # NVFP4's own error: present, and bounded


def test_agrees_with_torchao_as_an_independent_oracle():
    """torchao (0.18) implements the same recipe separately. It differs on purpose where the kernels
    do not: it clamps block scales below 2^-6 up to 2^-6, and its scale arithmetic can break exact ties
    the other way; fp32 random inputs in the normal range avoid both."""
    ao = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    total_codes = mismatched_codes = 0
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(256, 1024) * 3
        q = nvfp4.quantize(x)
        scales_ao, packed_ao = ao.nvfp4_quantize(x, 16, ao.per_tensor_amax_to_scale(x.abs().max().float()))
        assert torch.equal(scales_ao.view(torch.uint8).reshape(q.scales.shape), q.scales.view(torch.uint8))
        ours = nvfp4.unpack_codes(q.packed)
        # torchao packs the even element into the high nibble: compare unpacked codes.
        theirs = torch.stack((packed_ao & 0xF, packed_ao >> 4), -1).reshape(ours.shape)
        if not torch.equal(ours, theirs):
            theirs = torch.stack((packed_ao >> 4, packed_ao & 0xF), -1).reshape(ours.shape)
        mismatched_codes += int((ours != theirs).sum())
        total_codes += ours.numel()
    assert mismatched_codes / total_codes < 1e-5
