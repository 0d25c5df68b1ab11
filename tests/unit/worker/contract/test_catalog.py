"""The backend catalog (worker/contract/catalog.py): support decided from capability and shape before anything runs."""

from __future__ import annotations

import pytest

from worker.contract.catalog import CATALOG, support_problem


@pytest.mark.parametrize(
    "backend,cc,expected",
    [
        (
            "flashinfer-fp4-cutlass",
            (9, 0),
            "needs compute capability >= 10.0, host has 9.0 (this kernel: 10.0, 10.3, 10.7, 11.0, 12.0, 12.1 only)",
        ),
        (
            "sgl-fp4-cutlass",
            (9, 0),
            "needs compute capability >= 10.0, host has 9.0 (this kernel: 10.0, 10.3, 12.0 only)",
        ),
        ("torch-nvfp4", (8, 9), "needs compute capability >= 10.0, host has 8.9"),
        ("flashinfer-fp4-trtllm", (12, 0), "supports compute capability 10.0, 10.3, 10.7 only, host has 12.0"),
        ("flashinfer-fp4-b12x", (10, 0), "supports compute capability 12.0, 12.1 only, host has 10.0"),
        ("torch-fp8", None, "needs a CUDA GPU with compute capability >= 8.9; host has none (CPU)"),
        ("flashinfer-fp4-cutlass", (12, 0), None),
        ("sgl-fp4-cutlass", (12, 0), None),
        ("torch-bf16", None, None),
        ("reference-nvfp4", None, None),
    ],
)
def test_support_is_decided_from_capability_before_anything_runs(backend, cc, expected):
    assert support_problem(CATALOG[backend], 16, 2048, 6144, cc) == expected


def test_shape_constraints_are_unsupported_with_the_rule():
    assert support_problem(CATALOG["sgl-fp4-cutlass"], 16, 2048, 6160, (12, 0)) == "needs K % 32 == 0 (K=6160)"
    assert support_problem(CATALOG["sgl-fp4-cutlass"], 16, 2050, 6144, (12, 0)) == "needs N % 32 == 0 (N=2050)"
    assert support_problem(CATALOG["reference-nvfp4"], 16, 64, 40, None) == "needs K % 16 == 0 for NVFP4 blocks (K=40)"
