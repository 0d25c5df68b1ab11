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

Before any value is compared, the output's dtype, shape and device are checked against what was asked
(output_problem): a kernel returning fp32 where bf16 was asked would otherwise match the fp32 oracle at
rel_err 0, and one returning [M, N-1] would fail on torch's broadcasting error, naming neither shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from ..contract.schema import Correctness


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


@dataclass(frozen=True)
class Expected:
    """What a call must return: one plain tensor of `dtype` and `shape` on `device`. With `rows` (an MoE
    loop: the row count of each expert that receives tokens) it may instead return one [rows[e], N]
    tensor per such expert, in order, which stack to `shape`."""

    dtype: torch.dtype
    shape: tuple
    device: torch.device
    rows: Optional[tuple] = None


class WrongOutput(ValueError):
    """A call returned another dtype, shape or device than it was asked for (the message says both)."""


def describe(dtype: torch.dtype, shape, device) -> str:
    """`bfloat16 [16, 2048] on cuda:0`."""
    return f"{str(dtype).removeprefix('torch.')} {list(shape)} on {device}"


def _matches(t: torch.Tensor, dtype: torch.dtype, shape, device: torch.device) -> bool:
    return t.dtype == dtype and tuple(t.shape) == tuple(shape) and t.device == device


def output_problem(result, expected: Expected) -> Optional[str]:
    """None when `result` (a tensor, or a list of per-expert tensors) is what `expected` asks for; else a
    sentence naming the actual and the expected dtype, shape and device, e.g. "output is float32
    [16, 2048] on cuda:0; expected bfloat16 [16, 2048] on cuda:0". A result that is not plain tensors is
    not judged here (worker/check/integrity.py names it `lazy`)."""
    want = describe(expected.dtype, expected.shape, expected.device)
    if not isinstance(result, (list, tuple)):
        if type(result) is not torch.Tensor or _matches(result, expected.dtype, expected.shape, expected.device):
            return None
        return f"output is {describe(result.dtype, result.shape, result.device)}; expected {want}"
    parts = list(result)
    if not all(type(t) is torch.Tensor for t in parts):
        return None
    if expected.rows is None:
        return f"output is a list of {len(parts)} tensors; expected one tensor, {want}"
    if len(parts) != len(expected.rows):
        return (
            f"output is a list of {len(parts)} tensors; expected one per expert that receives tokens "
            f"({len(expected.rows)}), together {want}"
        )
    for e, (t, rows) in enumerate(zip(parts, expected.rows)):
        shape = (rows, *expected.shape[1:])
        if not _matches(t, expected.dtype, shape, expected.device):
            return (
                f"expert {e}'s output is {describe(t.dtype, t.shape, t.device)}; expected "
                f"{describe(expected.dtype, shape, expected.device)}"
            )
    return None


def expected_output(case, spec, oracle: torch.Tensor) -> Expected:
    """What a call of backend `spec` on `case` must return: the case's out_dtype (fp32 for the oracles,
    which compute in fp32 whatever their family), the shape of its oracle's result, on the oracle's
    device; an MoE backend may return one tensor per expert that receives tokens."""
    from ..contract.catalog import ORACLE_BACKENDS

    dtype = torch.float32 if case.backend in ORACLE_BACKENDS else getattr(torch, case.out_dtype)
    rows = None
    if case.workload == "moe":  # a loop, and a grouped kernel, may return one tensor per expert (moe.as_output)
        rows = tuple(c for c in case.moe.counts if c)
    return Expected(dtype, tuple(oracle.shape), oracle.device, rows)


def compare(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(relative Frobenius error, cosine similarity) of `out` against `ref`, in fp64."""
    o = out.detach().to(torch.float64).flatten()
    r = ref.detach().to(torch.float64).flatten()
    ref_norm = r.norm().item()
    rel = (o - r).norm().item() / ref_norm if ref_norm > 0 else (0.0 if o.norm().item() == 0 else math.inf)
    denom = o.norm().item() * ref_norm
    cos = (o @ r).item() / denom if denom > 0 else 0.0
    return rel, cos


def verdict(
    out: torch.Tensor,
    ref: torch.Tensor,
    bf16_ref: Optional[torch.Tensor],
    th: Thresholds,
    expected: Optional[Expected] = None,
) -> Correctness:
    """Pass only if every check holds; the detail names each one that failed. The output's dtype, shape and
    device come first (`expected`; without it the oracle's shape and device, any dtype): an output that
    is not what was asked for fails with a sentence naming both, its values not compared."""
    want = Expected(expected.dtype if expected else out.dtype, tuple(ref.shape), ref.device)
    problem = output_problem(out, want)
    if problem:
        return Correctness(
            verdict="fail",
            reference=th.reference,
            rel_err=_finite(math.inf),
            cosine=0.0,
            max_rel_err=th.max_rel_err,
            min_cosine=th.min_cosine,
            max_rel_err_bf16=th.max_rel_err_bf16,
            min_cosine_bf16=th.min_cosine_bf16,
            detail=problem,
        )
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
    """`check` with the outcome of the integrity checks (worker/check/integrity.py Findings): `integrity` lists
    the names of those failed ([]: every one passed, so far); with any, the check fails and its detail
    names each first."""
    names = list(dict.fromkeys([*(check.integrity or []), *(f.check for f in findings)]))
    if not findings:
        return check.model_copy(update={"integrity": names})
    detail = "; ".join([str(f) for f in findings] + ([check.detail] if check.detail else []))
    return check.model_copy(update={"verdict": "fail", "detail": detail, "integrity": names})


def no_result(th: Thresholds, findings: list) -> Correctness:
    """The failed verdict of a call that returned nothing to judge (its findings say what it returned)."""
    empty = Correctness(
        verdict="fail",
        reference=th.reference,
        rel_err=_finite(math.inf),
        cosine=0.0,
        max_rel_err=th.max_rel_err,
        min_cosine=th.min_cosine,
    )
    return with_integrity(empty, findings)


def failure_reason(check: Correctness) -> str:
    """A failed verdict as a record's reason: `wrong result: ` and the detail when the output's numbers are
    wrong, the detail alone (its integrity findings, each naming its check) when only a cheat is."""
    numbers_right = (
        check.rel_err <= check.max_rel_err
        and check.cosine >= check.min_cosine
        and (
            check.rel_err_bf16 is None or check.max_rel_err_bf16 is None or check.rel_err_bf16 <= check.max_rel_err_bf16
        )
    )
    if check.integrity and (numbers_right or "lazy" in check.integrity):  # a lazy result had no numbers to judge
        return check.detail
    return f"wrong result: {check.detail}"
