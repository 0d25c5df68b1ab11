"""The oracle's verdict (worker/check/verify.py): zeros, a wrong layout and NaN fail loudly; FP4's thresholds."""

from __future__ import annotations

import json

import torch

from worker.check.verify import THRESHOLDS, verdict


def test_zeros_wrong_layout_and_nan_fail_loudly():
    torch.manual_seed(0)
    a, b = torch.randn(32, 128), torch.randn(64, 128)
    ref = a @ b.T
    th = THRESHOLDS["bf16"]
    assert verdict(ref.to(torch.bfloat16), ref, None, th).verdict == "pass"
    zeros = verdict(torch.zeros_like(ref), ref, None, th)
    assert zeros.verdict == "fail" and "all zeros" in zeros.detail and zeros.cosine == 0.0
    swapped = verdict(a @ torch.randn(64, 128).T, ref, None, th)
    assert swapped.verdict == "fail" and "rel_err" in swapped.detail
    nan = ref.clone()
    nan[0, 0] = float("nan")
    bad = verdict(nan, ref, None, th)
    assert bad.verdict == "fail" and "NaN" in bad.detail
    json.dumps(bad.model_dump())  # stays valid JSON


def test_fp4_thresholds_accept_nvfp4_error_and_reject_a_wrong_scale():
    from worker.check import nvfp4

    torch.manual_seed(0)
    a, b = torch.randn(64, 512), torch.randn(128, 512)
    out = nvfp4.reference_gemm(a, b).to(torch.bfloat16)
    good = verdict(out, nvfp4.reference_gemm(a, b), a @ b.T, THRESHOLDS["fp4"])
    assert good.verdict == "pass" and 0.05 < good.rel_err_bf16 < 0.3
    scaled = verdict(out * 1.5, nvfp4.reference_gemm(a, b), a @ b.T, THRESHOLDS["fp4"])
    assert scaled.verdict == "fail"  # cosine alone would miss a wrong global scale; rel_err does not
