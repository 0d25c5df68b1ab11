"""The MoE layer as one case: every expert's GEMM of one layer, with the per-expert M its routing drew.

Inputs are laid out as a grouped MoE kernel receives them after routing: the tokens' activations
sorted by expert, `a` [sum(counts), K], and the weights of the experts that receive tokens, `w`
[active experts, N, K] (an expert no token reaches costs nothing in any backend, so it gets no weights:
GLM-5's 256 experts of 2048×6144 bf16 would be 6.4 GB). The output is [sum(counts), N] in the same order.

Backends (catalog: MOE_CATALOG):
- reference: a per-expert fp32 loop, the oracle (timed, like reference-nvfp4);
- grouped: torch._grouped_mm over all experts in one call (bf16);
- loop:<dense backend>: each expert's GEMM through that dense backend, one call after another: the
  naive baseline every grouped kernel has to beat. Each expert's operands are converted (quantized) in
  prepare, outside timing, exactly as the dense backend does for a single GEMM;
- the grouped and fused NVFP4 kernels of FlashInfer and sgl-kernel (backends/moe_fp4.py). A fused
  backend computes a whole MoE block, so its input set is (tokens, moe_fp4.Block, counts) and its
  oracle the block composed of per-expert products (moe_fp4.block_oracle).
"""

from __future__ import annotations

import importlib
from typing import Callable, Union

import torch

from ..contract.catalog import BackendSpec

MoeSet = tuple[torch.Tensor, torch.Tensor, list[int]]  # a [T, K], w [E_active, N, K], tokens per active expert


def active_counts(counts: list[int]) -> list[int]:
    return [c for c in counts if c]


def inputs(case, set_index: int, dev: str) -> MoeSet:
    """The case's input set `set_index`: seeded like a GEMM case's, weights made one expert at a time
    (bounded temporary memory). A fused backend's set holds a whole block (moe_fp4.block_inputs)."""
    from ..contract.catalog import CATALOG

    spec = CATALOG.get(case.backend)
    if spec is not None and spec.kernel == "fused":
        from .moe_fp4 import block_inputs

        return block_inputs(case, set_index, dev)
    counts = active_counts(case.moe.counts)
    gen = torch.Generator(device=dev)
    gen.manual_seed(case.seed * 1_000_003 + set_index)
    a = torch.randn((sum(counts), case.k), generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
    w = torch.empty((len(counts), case.n, case.k), device=dev, dtype=torch.bfloat16)
    for e in range(len(counts)):
        w[e] = torch.randn((case.n, case.k), generator=gen, device=dev, dtype=torch.float32)
    return a, w, counts


def _slices(counts: list[int]):
    start = 0
    for e, c in enumerate(counts):
        yield e, slice(start, start + c)
        start += c


def oracle(family: str, a: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """fp32 [T, N]: each expert's exact product for the operand family (fp32, dequantized e4m3, NVFP4);
    for a fused block (w a moe_fp4.Block) the block composed of those products, [tokens, H]."""
    from ..check import nvfp4
    from .fp8 import dequantized_product
    from .moe_fp4 import Block, block_oracle

    if isinstance(w, Block):
        return block_oracle(family, a, w)

    out = torch.empty((a.shape[0], w.shape[1]), dtype=torch.float32, device=a.device)
    for e, rows in _slices(counts):
        ae, we = a[rows], w[e]
        if family == "bf16":
            out[rows] = ae.float() @ we.float().T
        elif family == "fp8":
            out[rows] = dequantized_product(ae, we)
        else:
            out[rows] = nvfp4.reference_gemm(ae, we)
    return out


def as_output(result: Union[torch.Tensor, list]) -> torch.Tensor:
    """A backend's result as one [T, N] tensor (a loop returns one tensor per expert)."""
    return torch.cat(result) if isinstance(result, list) else result


def prepare(spec: BackendSpec, sets: list[MoeSet], out_dtype: torch.dtype) -> Callable[[int], object]:
    if spec.module == "moe_fp4":
        from . import moe_fp4

        return moe_fp4.prepare(spec, sets, out_dtype)
    kind, _, dense = spec.option.partition(":")
    if kind == "reference":
        outs = [torch.empty((a.shape[0], w.shape[1]), dtype=torch.float32, device=a.device) for a, w, _ in sets]
        sliced = [
            [(a[rows], w[e].float(), out[rows]) for e, rows in _slices(counts)]
            for (a, w, counts), out in zip(sets, outs)
        ]

        def run_reference(i: int) -> torch.Tensor:
            for ae, we, oe in sliced[i]:
                torch.mm(ae.float(), we.T, out=oe)
            return outs[i]

        # operand A (the activations) as each call reads it: the integrity checks flip its sign
        # (worker/check/integrity.py)
        run_reference.reads = [[a] for a, _, _ in sets]
        return run_reference
    if kind == "grouped":
        if not hasattr(torch, "_grouped_mm"):
            raise RuntimeError(f"torch {torch.__version__} has no torch._grouped_mm (it came in torch 2.8)")
        grouped = []
        for a, w, counts in sets:
            offs = torch.tensor(counts, dtype=torch.int32, device=a.device).cumsum(0, dtype=torch.int32)
            grouped.append((a.to(out_dtype), w.to(out_dtype).transpose(-2, -1), offs))

        def run_grouped(i: int) -> torch.Tensor:
            a, wt, offs = grouped[i]
            return torch._grouped_mm(a, wt, offs=offs, out_dtype=out_dtype)

        run_grouped.reads = [[g[0]] for g in grouped]
        return run_grouped
    if kind == "loop":
        from ..contract.catalog import CATALOG

        inner = CATALOG[dense]
        module = importlib.import_module(f"worker.backends.{inner.module}")
        per_set = [
            [module.prepare(inner, [(a[rows], w[e])], out_dtype) for e, rows in _slices(counts)]
            for a, w, counts in sets
        ]

        def run_loop(i: int) -> list:
            return [fn(0) for fn in per_set[i]]

        run_loop.reads = [[t for fn in fns for t in getattr(fn, "reads", [[]])[0]] for fns in per_set]
        return run_loop
    raise ValueError(f"unknown MoE backend option {spec.option!r}")
