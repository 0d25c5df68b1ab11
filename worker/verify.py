"""Correctness verdicts: each kernel's output against an oracle that shares none of its code.

Thresholds, per operand family (relative error is ||out - ref||_F / ||ref||_F):
- bf16 vs the fp32 product: the only error is bf16 output rounding (2^-9 ~ 0.2% relative), so
  rel_err <= 1% and cosine >= 0.9999 leave 5x headroom while a wrong layout gives rel_err ~ 1.
- fp8 vs the product of the same e4m3-quantized operands in fp32: again only output rounding and
  accumulation order: rel_err <= 1%. Against bf16 the e4m3 quantization itself adds ~4% (measured 0.038
  for FlashInfer bmm_fp8 on an H200): rel_err <= 10%, cosine >= 0.99.
- fp4 vs our reference NVFP4 product (independent quantizer, same recipe): ties the kernel's
  quantizer rounds differently (approximate reciprocals) move a few elements by one code, well under
  1% after a K-long sum; with output rounding, rel_err <= 2%, cosine >= 0.999. Against bf16, NVFP4 itself
  costs ~10% per operand (0.096 measured with torchao), ~14% for the product: rel_err <= 30%,
  cosine >= 0.97 (FlashInfer's own refcheck threshold).
A kernel writing zeros has rel_err 1 and cosine 0: it fails every check, loudly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from .schema import Correctness


@dataclass(frozen=True)
class Thresholds:
    reference: str
    max_rel_err: float
    min_cosine: float
    max_rel_err_bf16: Optional[float] = None
    min_cosine_bf16: Optional[float] = None


THRESHOLDS = {
    "bf16": Thresholds("fp32 product", 0.01, 0.9999),
    "fp8": Thresholds("dequantized e4m3 product", 0.01, 0.9999, 0.10, 0.99),
    "fp4": Thresholds("reference NVFP4 product", 0.02, 0.999, 0.30, 0.97),
}
# The reference path is the oracle itself: it is judged against bf16 with NVFP4's own error budget.
REFERENCE_SELF = Thresholds("bf16 product", 0.30, 0.97)


def compare(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(relative Frobenius error, cosine similarity) of `out` against `ref`, in fp64."""
    o = out.detach().to(torch.float64).flatten()
    r = ref.detach().to(torch.float64).flatten()
    ref_norm = r.norm().item()
    rel = (o - r).norm().item() / ref_norm if ref_norm > 0 else (0.0 if o.norm().item() == 0 else math.inf)
    denom = o.norm().item() * ref_norm
    cos = (o @ r).item() / denom if denom > 0 else 0.0
    return rel, cos


def verdict(out: torch.Tensor, ref: torch.Tensor, bf16_ref: Optional[torch.Tensor], th: Thresholds) -> Correctness:
    """Pass only if every check holds; the detail names each one that failed."""
    problems = []
    if not bool(torch.isfinite(out).all()):
        problems.append("output has NaN or Inf")
    if not bool(out.any()):
        problems.append("output is all zeros")
    rel, cos = compare(out, ref)
    if not rel <= th.max_rel_err:
        problems.append(f"rel_err {rel:.3g} > {th.max_rel_err} vs {th.reference}")
    if not cos >= th.min_cosine:
        problems.append(f"cosine {cos:.6f} < {th.min_cosine} vs {th.reference}")
    rel_b = cos_b = None
    if bf16_ref is not None and th.max_rel_err_bf16 is not None:
        rel_b, cos_b = compare(out, bf16_ref)
        if not rel_b <= th.max_rel_err_bf16:
            problems.append(f"rel_err {rel_b:.3g} > {th.max_rel_err_bf16} vs bf16 product")
        if th.min_cosine_bf16 is not None and not cos_b >= th.min_cosine_bf16:
            problems.append(f"cosine {cos_b:.6f} < {th.min_cosine_bf16} vs bf16 product")
    return Correctness(
        verdict="fail" if problems else "pass",
        reference=th.reference,
        rel_err=_finite(rel),
        cosine=_finite(cos),
        max_rel_err=th.max_rel_err,
        min_cosine=th.min_cosine,
        rel_err_bf16=None if rel_b is None else _finite(rel_b),
        cosine_bf16=None if cos_b is None else _finite(cos_b),
        max_rel_err_bf16=th.max_rel_err_bf16,
        min_cosine_bf16=th.min_cosine_bf16,
        detail="; ".join(problems),
    )


def _finite(x: float) -> float:
    # JSON has no NaN/Inf; a sentinel keeps the record valid while the verdict says what happened.
    return x if math.isfinite(x) else 1e30


def with_integrity(check: Correctness, findings: list) -> Correctness:
    """`check` with the outcome of the integrity checks (worker/integrity.py Findings): `integrity` lists
    the names of those failed ([]: every one passed, so far); with any, the check fails and its detail
    names each first."""
    names = list(dict.fromkeys([*(check.integrity or []), *(f.check for f in findings)]))
    if not findings:
        return check.model_copy(update={"integrity": names})
    detail = "; ".join([str(f) for f in findings] + ([check.detail] if check.detail else []))
    return check.model_copy(update={"verdict": "fail", "detail": detail, "integrity": names})


def no_result(th: Thresholds, findings: list) -> Correctness:
    """The failed verdict of a call that returned nothing to judge (its findings say what it returned)."""
    empty = Correctness(verdict="fail", reference=th.reference, rel_err=_finite(math.inf), cosine=0.0,
                        max_rel_err=th.max_rel_err, min_cosine=th.min_cosine)
    return with_integrity(empty, findings)


def failure_reason(check: Correctness) -> str:
    """A failed verdict as a record's reason: `wrong result: ` and the detail when the output's numbers are
    wrong, the detail alone (its integrity findings, each naming its check) when only a cheat is."""
    numbers_right = check.rel_err <= check.max_rel_err and check.cosine >= check.min_cosine and (
        check.rel_err_bf16 is None or check.max_rel_err_bf16 is None or check.rel_err_bf16 <= check.max_rel_err_bf16)
    if check.integrity and (numbers_right or "lazy" in check.integrity):  # a lazy result had no numbers to judge
        return check.detail
    return f"wrong result: {check.detail}"
