"""What a time means in work (worker/contract/metrics.py): FLOPs, bytes with FP4's scales, percent of peak."""

from __future__ import annotations

import pytest

from worker.contract.metrics import gemm_metrics


def test_metrics_count_fp4_scale_bytes_and_peak():
    m = gemm_metrics(16, 2048, 6144, "fp4", 10.0, "NVIDIA RTX PRO 6000 Blackwell Server Edition")
    flops = 2 * 16 * 2048 * 6144
    assert m.tflops == pytest.approx(flops / 10e-6 / 1e12)
    assert m.bytes == pytest.approx((16 + 2048) * 6144 * (0.5 + 1 / 16) + 16 * 2048 * 2)
    assert m.pct_peak_flops == pytest.approx(100 * m.tflops / 2015.2)
    assert gemm_metrics(16, 64, 64, "bf16", 1.0, None).pct_peak_flops is None
