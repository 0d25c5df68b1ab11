"""A small Triton matmul as a user kernel: C[M, N] = A[M, K] @ B[N, K]^T in bf16 with fp32 accumulation.

Tiles of BLOCK_M x BLOCK_N, K in steps of BLOCK_K; a tile's B operand is read as the transposed view of
the [N, K] weight, so nothing is copied. Plain (no autotuning, no split-K): a baseline of what a few
dozen lines of Triton reach against cuBLAS, not a contender.
"""

import torch

FAMILY = "bf16"
MIN_CC = (8, 0)  # bf16 tensor cores; below it (or on a CPU) fleetbench never calls prepare

try:  # a host without Triton still loads the file: its cases are then decided by MIN_CC or fail in prepare
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:

    @triton.jit
    def _matmul(
        a_ptr,
        b_ptr,
        c_ptr,
        M,
        N,
        K,
        stride_am,
        stride_ak,
        stride_bn,
        stride_bk,
        stride_cm,
        stride_cn,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(
                a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak,
                mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
                other=0.0,
            )
            b = tl.load(
                b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
                other=0.0,
            )
            acc = tl.dot(a, b, acc)
        c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
        tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def prepare(a, b, out_dtype):
    if triton is None:
        raise RuntimeError("triton is not installed on this host")
    m, k = a.shape
    n = b.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    block_m = 16 if m <= 16 else 64
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, 64))

    def run():
        _matmul[grid](
            a,
            b,
            out,
            m,
            n,
            k,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            out.stride(0),
            out.stride(1),
            BLOCK_M=block_m,
            BLOCK_N=64,
            BLOCK_K=64,
        )
        return out

    return run
