"""The grouped and fused NVFP4 MoE calls (issue 33), proven without the hardware, as
tests/test_fp4_contracts.py proves the dense ones.

- Recorders: the worker's own path (CaseRunner.run: inputs, prepare, the integrity checks, the MoE
  oracle, the timing) runs on CPU with the capability of an RTX PRO 6000 (12.0) and the library replaced
  by a stand-in that binds every call to the real signature, checks what it is given (dtypes, shapes,
  the 128x4-swizzled scales, each expert's scale rows as the kernel computes them, the padding) and
  answers with what those exact arguments describe: a scale dropped, transposed or read from another
  expert's rows gives another product, and the oracle says so.
- Contracts: every call against the installed FlashInfer and the recorded sgl-kernel wheel.
None of these kernels has run on SM100/SM120 hardware: what is proven here is the calls, not the kernels.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import sys
import types

import pytest
import torch
from test_fp4_contracts import (
    FI_RECORD,
    FI_VERSION,
    SGL_RECORD,
    FakeFlashInfer,
    FakeSglKernel,
    _contract_problems,
    _fi_signatures,
    _sgl_signatures,
    bind,
    flashinfer,
    fp4_product,
)

from worker.backends import moe, moe_fp4
from worker.check import nvfp4
from worker.check.verify import THRESHOLDS, verdict
from worker.contract.catalog import CATALOG, support_problem
from worker.contract.routing import draw_counts
from worker.contract.schema import CaseSpec, MoeSpec, TimingOptions

FI_GROUPED, SGL_GROUPED, FI_FUSED = (
    "moe-grouped-flashinfer-fp4",
    "moe-grouped-sgl-fp4",
    "moe-fused-flashinfer-fp4-cutlass",
)
NEW = (FI_GROUPED, SGL_GROUPED, FI_FUSED)
RTX_PRO_6000 = (12, 0)
QUICK = TimingOptions(budget_s=0.05, warmup_ms=0, min_samples=3, max_samples=4, rounds=1, settle_ms=0)
# Expert rows that are no multiple of 4 or of 128, and more than one 128-row tile: a layout that only
# works for aligned experts gives another product here. With them the kernel's scale row for expert 2,
# (m_indptr[2] + 2 * 127) // 128 * 128 = 384, is not the 256 of cumulated 128-row tiles.
COUNTS = [100, 97, 130, 5]


def _ru(x: int, to: int) -> int:
    return (x + to - 1) // to * to


def _deq(packed: torch.Tensor, swizzled: torch.Tensor) -> torch.Tensor:
    """fp32 codes * block scales (global scale 1) of packed uint8 rows and their 128x4-swizzled scales."""
    rows, k = packed.shape[0], packed.shape[1] * 2
    scales = nvfp4.unswizzle_scales(swizzled.contiguous().view(torch.float8_e4m3fn), rows, k // nvfp4.BLOCK)
    return nvfp4.dequantize(
        nvfp4.NVFP4Tensor(packed=packed, scales=scales, global_scale=torch.ones((), dtype=torch.float32))
    )


# -- stand-ins -------------------------------------------------------------------------------------------
def check_group_gemm(v: dict) -> None:
    """What group_gemm_nvfp4_nt_groupwise must be given (its problem check and docstring, 0.7.2.post1)."""
    a, b, sa, sb, ind, alpha, out = (v[n] for n in ("a", "b", "a_scale", "b_scale", "m_indptr", "alpha", "out"))
    assert a.dtype == torch.uint8 and a.dim() == 2 and a.is_contiguous(), "a: packed NVFP4 uint8 [cum_m, K/2]"
    assert b.dtype == torch.uint8 and b.dim() == 3 and b.shape[2] == a.shape[1], "b: packed NVFP4 uint8 [E, N, K/2]"
    experts, n, k = b.shape[0], b.shape[1], 2 * b.shape[2]
    assert n % 8 == 0 and k % 128 == 0, "group_gemm_nvfp4_nt_groupwise: N % 8 and K % 128"
    assert sa.dtype == torch.uint8 and sa.dim() == 2 and sa.shape[1] == _ru(k // 16, 4) and sa.is_contiguous(), (
        "a_scale: every expert's 128x4-swizzled scales, uint8 [rows, round_up(K/16, 4)], contiguous"
    )
    assert (
        sb.dtype == torch.uint8 and tuple(sb.shape) == (experts, _ru(n, 128), _ru(k // 16, 4)) and sb.is_contiguous()
    ), "b_scale: each expert's 128x4-swizzled weight scales [E, round_up(N, 128), ...]"
    assert ind.dtype == torch.int32 and tuple(ind.shape) == (experts + 1,), "m_indptr: int32 [E + 1]"
    bounds = ind.tolist()
    assert bounds[0] == 0 and bounds[-1] == a.shape[0], "m_indptr: from 0 to a's rows"
    assert all((hi - lo) % 4 == 0 and hi >= lo for lo, hi in zip(bounds, bounds[1:])), (
        "m_indptr: each expert's rows padded to a multiple of 4 (its docstring asks for it)"
    )
    assert alpha is not None, "alpha is missing: every expert's product is off by its global scales"
    assert alpha.dtype == torch.float32 and tuple(alpha.shape) == (experts,), "alpha: one fp32 per expert"
    assert v["tile_m"] == 128 and v["tile_n"] in (32, 64, 128) and v["tile_k"] in (128, 256)
    assert (
        out is not None and tuple(out.shape) == (a.shape[0], n) and out.dtype == v["out_dtype"] and out.is_contiguous()
    ), "out: one preallocated [cum_m, N] output of out_dtype"


def check_fused(v: dict) -> None:
    """What cutlass_fused_moe must be given for NVFP4 (its binding's getQuantParams and shape checks)."""
    x, ids, fs, w1, w2, qs, isf, out = (
        v[n]
        for n in (
            "input",
            "token_selected_experts",
            "token_final_scales",
            "fc1_expert_weights",
            "fc2_expert_weights",
            "quant_scales",
            "input_sf",
            "output",
        )
    )
    assert w1.dtype == w2.dtype == torch.int64 and w1.dim() == w2.dim() == 3, (
        "fc1_expert_weights / fc2_expert_weights: packed NVFP4 viewed as int64 (16 values each)"
    )
    experts, hidden, inter = w2.shape[0], w2.shape[1], w2.shape[2] * 16
    assert w1.shape[0] == experts and w1.shape[1] == 2 * inter and w1.shape[2] * 16 == hidden, (
        "fc1_expert_weights: [E, 2 * I, H / 16], the gated inter size twice fc2's"
    )
    tokens = x.shape[0]
    assert x.dtype == torch.uint8 and tuple(x.shape) == (tokens, hidden // 2) and x.is_contiguous(), (
        "input: the tokens, packed NVFP4 uint8 [T, H/2]"
    )
    assert isf is not None, "input_sf is missing: the kernel reads quantized tokens' scales from it"
    assert (
        isf.dtype == torch.uint8
        and tuple(isf.shape) == (_ru(tokens, 128), _ru(hidden // 16, 4))
        and v["swizzled_input_sf"]
    ), "input_sf: the tokens' 128x4-swizzled scales"
    assert (
        ids.dtype == torch.int32
        and ids.dim() == 2
        and ids.shape[0] == tokens
        and int(ids.min()) >= 0
        and int(ids.max()) < experts
    ), "token_selected_experts: int32 [T, top_k] expert ids"
    assert fs.dtype == torch.float32 and fs.shape == ids.shape, "token_final_scales: fp32 [T, top_k]"
    assert isinstance(qs, list) and len(qs) == 6, "quant_scales: the 6 NVFP4 scales of fc1 and fc2"
    for i, name in ((0, "fc1 input global scale"), (3, "fc2 input global scale")):
        assert qs[i].dtype == torch.float32 and (qs[i].dim() == 0 or tuple(qs[i].shape) == (experts,)), (
            f"quant_scales[{i}]: the {name}, fp32 scalar or one per expert"
        )
    for i, rows, cols in ((1, _ru(inter, 128) * 2, hidden), (4, _ru(hidden, 128), inter)):
        assert qs[i].dtype == torch.int32 and tuple(qs[i].shape) == (experts, rows, _ru(cols, 64) // 64), (
            f"quant_scales[{i}]: {'fc1' if i == 1 else 'fc2'} weight block scales, int32 view [E, {rows}, ...]"
        )
    for i in (2, 5):
        assert qs[i].dtype == torch.float32 and tuple(qs[i].shape) == (experts,), (
            f"quant_scales[{i}]: one alpha per expert, 1 / (input global scale * weight global scale)"
        )
    assert out is not None and tuple(out.shape) == (tokens, hidden) and out.dtype == v["output_dtype"], (
        "output: one preallocated [T, H] output"
    )
    assert v["activation_type"] == flashinfer.ActivationType.Swiglu and v["backend"] == "cutlass"
    assert (
        v["tp_size"],
        v["ep_size"],
        v["min_latency_mode"],
        v["use_w4_group_scaling"],
        v["use_mxfp8_act_scaling"],
        v["use_packed_weights"],
    ) == (1, 1, False, False, False, False)


class FakeFlashInferMoe(FakeFlashInfer):
    def __init__(self, signatures):
        super().__init__(signatures)
        self.gemm = types.SimpleNamespace(group_gemm_nvfp4_nt_groupwise=self.group_gemm_nvfp4_nt_groupwise)
        self.ActivationType = flashinfer.ActivationType
        self.tuning = 0  # calls made inside autotune()

    @contextlib.contextmanager
    def _tuning(self):
        self.tuning += 1
        try:
            yield
        finally:
            self.tuning -= 1

    def autotune(self, *args, **kwargs):
        self._record("autotune", args, kwargs)
        return self._tuning()

    def group_gemm_nvfp4_nt_groupwise(self, *args, **kwargs):
        v = self._record("group_gemm_nvfp4_nt_groupwise", args, kwargs)
        check_group_gemm(v)
        a, b, sa, sb, out = v["a"], v["b"], v["a_scale"], v["b_scale"], v["out"]
        bounds = v["m_indptr"].tolist()
        for i in range(b.shape[0]):
            rows = bounds[i + 1] - bounds[i]
            first = (bounds[i] + i * 127) // 128 * 128  # compute_sm120_cutlass_nvfp4_group_gemm_args
            tiles = _ru(rows, 128)
            assert first + tiles <= sa.shape[0], (
                f"a_scale: expert {i}'s scale rows {first}..{first + tiles} run past it"
            )
            out[bounds[i] : bounds[i + 1]] = fp4_product(
                a[bounds[i] : bounds[i + 1]], b[i], sa[first : first + tiles], sb[i], v["alpha"][i]
            ).to(out.dtype)
        return out

    def cutlass_fused_moe(self, *args, **kwargs):
        v = self._record("cutlass_fused_moe", args, kwargs)
        check_fused(v)
        qs, out, odt = v["quant_scales"], v["output"], v["output_dtype"]
        w1, w2 = v["fc1_expert_weights"].view(torch.uint8), v["fc2_expert_weights"].view(torch.uint8)
        sf1, sf2 = qs[1].view(torch.uint8), qs[4].view(torch.uint8)
        inter, ids = w2.shape[2] * 2, v["token_selected_experts"]
        tokens = _deq(v["input"], v["input_sf"])
        result = torch.zeros(out.shape, dtype=torch.float32)
        for e in range(w1.shape[0]):
            tok, slot = torch.nonzero(ids == e, as_tuple=True)
            h = (tokens[tok] @ _deq(w1[e], sf1[e]).T * qs[2][e]).to(odt).float()  # GEMM1 writes out_dtype
            act = (torch.nn.functional.silu(h[:, inter:]) * h[:, :inter]).to(odt).float()  # gate rows second
            q = nvfp4.quantize(act, qs[3] if qs[3].dim() == 0 else qs[3][e])
            act4 = nvfp4.dequantize(
                nvfp4.NVFP4Tensor(packed=q.packed, scales=q.scales, global_scale=torch.ones((), dtype=torch.float32))
            )
            y = act4 @ _deq(w2[e], sf2[e]).T * qs[5][e]
            result.index_add_(0, tok, y * v["token_final_scales"][tok, slot].unsqueeze(1))
        out.copy_(result.to(odt))
        return [out, None, None, None]


def check_experts_quant(v: dict) -> None:
    x, gs, eo, bo = v["input_tensor"], v["input_global_scale"], v["expert_offsets"], v["blockscale_offsets"]
    experts = gs.shape[0]
    assert v["expert_map"] is None, "expert_map: the rows are already routed"
    assert x.dtype in (torch.bfloat16, torch.float16) and x.dim() == 2 and x.shape[1] % 16 == 0
    assert gs.dtype == torch.float32 and gs.dim() == 1, "input_global_scale: one fp32 per expert"
    assert eo.dtype == torch.int32 and tuple(eo.shape) == (experts + 1,), "expert_offsets: int32 [E + 1]"
    assert bo.dtype == torch.int32 and tuple(bo.shape) == (experts + 1,), "blockscale_offsets: int32 [E + 1]"
    assert eo[0] == 0 and eo[-1] == x.shape[0], "expert_offsets: from 0 to the routed rows"


def check_group_mm(v: dict) -> None:
    """What cutlass_fp4_group_mm must be given (its wrapper and the checks of nvfp4_blockwise_moe.cu)."""
    a, b, sa, sb, alphas, params = (
        v[n] for n in ("a_fp4", "b_fp4", "a_blockscale", "b_blockscale", "alphas", "params")
    )
    assert (
        a.dtype == b.dtype == torch.uint8 and a.dim() == 2 and b.dim() == 3 and a.is_contiguous() and b.is_contiguous()
    ), "a_fp4 [rows, K/2] and b_fp4 [E, N, K/2]: contiguous packed uint8"
    experts, n, k = b.shape[0], b.shape[1], 2 * b.shape[2]
    assert sa.dtype == torch.float8_e4m3fn and sa.dim() == 2 and sa.is_contiguous(), (
        "a_blockscale: scaled_fp4_experts_quant's e4m3 scales, 2-D, contiguous"
    )
    assert (
        sb.dtype == torch.float8_e4m3fn
        and tuple(sb.shape) == (experts, _ru(n, 128), _ru(k // 16, 4))
        and sb.is_contiguous()
    ), "b_blockscale: each expert's 128x4-swizzled weight scales, e4m3 [E, N, K/16]"
    assert alphas.dtype == torch.float32 and tuple(alphas.shape) == (experts,), "alphas: one fp32 per expert"
    assert v["out_dtype"] in (torch.bfloat16, torch.float16)
    assert {"ab_strides", "c_strides", "problem_sizes", "expert_offsets", "blockscale_offsets"} <= set(params), (
        "params: the five tensors its wrapper reads"
    )
    ps = params["problem_sizes"]
    assert ps.dtype == torch.int32 and tuple(ps.shape) == (experts, 3), "problem_sizes: int32 [E, 3]"
    assert all(nn == n and kk == k for _, nn, kk in ps.tolist()), "problem_sizes: (m, N, K) per expert"
    for name in ("expert_offsets", "blockscale_offsets"):
        assert params[name].dtype == torch.int32 and tuple(params[name].shape) == (experts,), (
            f"{name}: int32, each expert's start [E]"
        )
    assert params["ab_strides"].dtype == torch.int64 and params["ab_strides"].tolist() == [k] * experts, (
        "ab_strides: each expert's row stride of A and B, K elements"
    )
    assert params["c_strides"].dtype == torch.int64 and params["c_strides"].tolist() == [n] * experts, (
        "c_strides: each expert's output row stride, N"
    )


class FakeSglKernelMoe(FakeSglKernel):
    def scaled_fp4_experts_quant(self, *args, **kwargs):
        v = self._record("scaled_fp4_experts_quant", args, kwargs)
        check_experts_quant(v)
        x, gs = v["input_tensor"], v["input_global_scale"]
        max_tokens = int(os.environ.get(moe_fp4.SGL_MAX_TOKENS_ENV, 65536))
        assert x.shape[0] <= max_tokens * v["topk"], "scaled_fp4_experts_quant: more rows than MAX_TOKENS * topk"
        scales = torch.zeros((max_tokens * v["topk"], _ru(x.shape[1] // 16, 4)), dtype=torch.uint8)
        packed = torch.empty((x.shape[0], x.shape[1] // 2), dtype=torch.uint8)
        rows, firsts = v["expert_offsets"].tolist(), v["blockscale_offsets"].tolist()
        for e in range(gs.shape[0]):  # expert e's scales written 128x4-swizzled from row blockscale_offsets[e]
            q = nvfp4.quantize(x[rows[e] : rows[e + 1]], gs[e])
            packed[rows[e] : rows[e + 1]] = q.packed
            tile = nvfp4.swizzle_scales(q.scales).view(torch.uint8)
            assert firsts[e] + tile.shape[0] <= scales.shape[0], (
                f"blockscale_offsets: expert {e}'s scales run past the MAX_TOKENS * topk rows of the buffer"
            )
            scales[firsts[e] : firsts[e] + tile.shape[0]] = tile
        return packed, scales.view(torch.float8_e4m3fn)

    def cutlass_fp4_group_mm(self, *args, **kwargs):
        v = self._record("cutlass_fp4_group_mm", args, kwargs)
        check_group_mm(v)
        a, b, params = v["a_fp4"], v["b_fp4"], v["params"]
        n, k = b.shape[1], 2 * b.shape[2]
        group_k = k // 16
        flat_a, flat_b = (
            v["a_blockscale"].view(torch.uint8).reshape(-1),
            v["b_blockscale"].view(torch.uint8).reshape(-1),
        )
        out = torch.full((a.shape[0], n), float("nan"), dtype=v["out_dtype"])  # torch.empty: rows no expert writes
        starts, firsts = params["expert_offsets"].tolist(), params["blockscale_offsets"].tolist()
        for e, (m, _, _) in enumerate(params["problem_sizes"].tolist()):
            # __get_group_gemm_starts: each expert's scales from sf_offset * K/16 and expert * N * K/16
            at, bt = firsts[e] * group_k, e * n * group_k
            assert at % 128 == 0, f"blockscale_offsets: expert {e}'s scales are not 128-byte aligned (TMA needs it)"
            assert bt % 128 == 0, f"b_blockscale: expert {e}'s scales are not 128-byte aligned (TMA needs it)"
            a_tiles, b_tiles = (_ru(m, 128), _ru(group_k, 4)), (_ru(n, 128), _ru(group_k, 4))
            assert at + a_tiles[0] * a_tiles[1] <= flat_a.numel(), f"a_blockscale: expert {e}'s scales run past it"
            out[starts[e] : starts[e] + m] = fp4_product(
                a[starts[e] : starts[e] + m],
                b[e],
                flat_a[at : at + a_tiles[0] * a_tiles[1]].reshape(a_tiles),
                flat_b[bt : bt + b_tiles[0] * b_tiles[1]].reshape(b_tiles),
                v["alphas"][e],
            ).to(out.dtype)
        return out


def _fi_moe_signatures() -> dict[str, inspect.Signature]:
    return dict(
        _fi_signatures(),
        group_gemm_nvfp4_nt_groupwise=inspect.signature(flashinfer.gemm.group_gemm_nvfp4_nt_groupwise),
        cutlass_fused_moe=inspect.signature(flashinfer.cutlass_fused_moe),
        autotune=inspect.signature(flashinfer.autotune),
    )


def _fake(name: str):
    return (
        FakeFlashInferMoe(_fi_moe_signatures())
        if CATALOG[name].import_name == "flashinfer"
        else FakeSglKernelMoe("sgl_kernel", _sgl_signatures())
    )


# -- the worker's path, on CPU as on an RTX PRO 6000 ------------------------------------------------------
def _case(name: str, out_dtype: str = "bfloat16") -> CaseSpec:
    if name == FI_FUSED:  # a block: n = 3 * I (I = 128), k = H; each token on top_k distinct experts
        counts = draw_counts(8, 2, 40, "zipf", 1.2, seed=0)
        return CaseSpec(
            workload="moe",
            backend=name,
            m=40,
            n=384,
            k=256,
            out_dtype=out_dtype,
            timing=QUICK,
            moe=MoeSpec(experts=8, top_k=2, routing="zipf", skew=1.2, counts=counts),
        )
    n, k = (64, 256) if name == FI_GROUPED else (128, 128)
    return CaseSpec(
        workload="moe",
        backend=name,
        m=sum(COUNTS),
        n=n,
        k=k,
        out_dtype=out_dtype,
        timing=QUICK,
        moe=MoeSpec(experts=len(COUNTS), top_k=1, routing="file", counts=COUNTS),
    )


def _runner(monkeypatch, fake, cc=RTX_PRO_6000):
    import worker.sweep.runner as runner_module

    monkeypatch.setitem(sys.modules, fake.library, fake)
    monkeypatch.setattr(runner_module, "availability_problem", lambda spec: None)  # the stand-in is "installed"
    runner = runner_module.CaseRunner("cpu")
    runner.device = dataclasses.replace(runner.device, compute_capability=cc)
    return runner


def run_case(name: str, monkeypatch, **kw):
    """(the runner's record, the stand-in) of one case through the worker's path."""
    fake = _fake(name)
    return _runner(monkeypatch, fake).run(_case(name, **kw)), fake


@pytest.mark.parametrize("name", NEW)
def test_each_call_computes_what_the_moe_oracle_expects(name, monkeypatch):
    rec, fake = run_case(name, monkeypatch)
    assert rec.status == "ok", (rec.reason, rec.traceback)
    assert rec.correctness.verdict == "pass" and rec.correctness.rel_err < 0.02, rec.correctness
    assert getattr(rec.correctness, "integrity", None) in (None, []), rec.correctness  # a worker before issue 31: None
    calls = [c[0] for c in fake.calls]
    kernel = {
        FI_GROUPED: "group_gemm_nvfp4_nt_groupwise",
        SGL_GROUPED: "cutlass_fp4_group_mm",
        FI_FUSED: "cutlass_fused_moe",
    }[name]
    assert calls.count(kernel) >= 3  # checked, then timed


def test_the_fused_block_is_tuned_once_before_it_is_timed(monkeypatch):
    rec, fake = run_case(FI_FUSED, monkeypatch)
    assert rec.status == "ok"
    names = [c[0] for c in fake.calls]
    assert names.index("autotune") < names.index("cutlass_fused_moe") and names.count("autotune") == 1


def test_the_block_oracle_is_the_composition_of_per_expert_products():
    """The fused block's oracle is built from the same per-expert NVFP4 products that judge a grouped
    projection: w13 on each expert's tokens, SwiGLU (gate rows second), w2, the top-k weighted sum."""
    case = _case(FI_FUSED)
    x, block, counts = moe.inputs(case, 0, "cpu")
    inter = case.n // 3
    out = moe.oracle("bf16", x, block, counts)
    by_hand = torch.zeros_like(out)
    for t in range(x.shape[0]):
        for slot, e in enumerate(block.expert_ids[t].tolist()):
            h = x[t].float() @ nvfp4.dequantize(nvfp4.quantize(block.w13[e])).T
            act = torch.nn.functional.silu(h[inter:]) * h[:inter]
            by_hand[t] += block.weights[t, slot] * (act @ nvfp4.dequantize(nvfp4.quantize(block.w2[e])).T)
    assert torch.allclose(out, by_hand, rtol=1e-4, atol=1e-4)
    assert sorted(sum(block.expert_ids.tolist(), [])) == sorted(e for e, c in enumerate(counts) for _ in range(c))


# -- a scale dropped or transposed, a wrong per-expert offset: each fails, named -------------------------------
def _last_call(name: str, monkeypatch, kernel: str) -> tuple:
    """(stand-in, args, kwargs) of the worker's last call of `kernel` in a case that passed."""
    rec, fake = run_case(name, monkeypatch)
    assert rec.status == "ok", rec.reason
    _, args, kwargs, _ = [c for c in fake.calls if c[0] == kernel][-1]
    return fake, args, dict(kwargs)


def _without(key):
    return lambda kw: {k: v for k, v in kw.items() if k != key}


def _transposed(key, dims):
    return lambda kw: dict(kw, **{key: kw[key].transpose(*dims)})


def _scales_swapped(i):
    return lambda kw: dict(
        kw, quant_scales=[q.transpose(1, 2) if j == i else q for j, q in enumerate(kw["quant_scales"])]
    )


CHECKS = {
    "group_gemm_nvfp4_nt_groupwise": check_group_gemm,
    "cutlass_fp4_group_mm": check_group_mm,
    "cutlass_fused_moe": check_fused,
    "scaled_fp4_experts_quant": check_experts_quant,
}


@pytest.mark.parametrize(
    "name, kernel, edit, words",
    [
        (FI_GROUPED, "group_gemm_nvfp4_nt_groupwise", _without("a_scale"), "missing a required argument: 'a_scale'"),
        (FI_GROUPED, "group_gemm_nvfp4_nt_groupwise", _without("alpha"), "alpha is missing"),
        (FI_GROUPED, "group_gemm_nvfp4_nt_groupwise", _transposed("a_scale", (0, 1)), "a_scale: "),
        (FI_GROUPED, "group_gemm_nvfp4_nt_groupwise", _transposed("b_scale", (1, 2)), "b_scale: "),
        (SGL_GROUPED, "cutlass_fp4_group_mm", _without("b_blockscale"), "missing a required argument: 'b_blockscale'"),
        (SGL_GROUPED, "cutlass_fp4_group_mm", _transposed("a_blockscale", (0, 1)), "a_blockscale: "),
        (SGL_GROUPED, "cutlass_fp4_group_mm", _transposed("b_blockscale", (1, 2)), "b_blockscale: "),
        (
            SGL_GROUPED,
            "scaled_fp4_experts_quant",
            _without("blockscale_offsets"),
            "missing a required argument: 'blockscale_offsets'",
        ),
        (FI_FUSED, "cutlass_fused_moe", _without("input_sf"), "input_sf is missing"),
        (FI_FUSED, "cutlass_fused_moe", _scales_swapped(1), r"quant_scales\[1\]: fc1 weight block scales"),
        (FI_FUSED, "cutlass_fused_moe", _scales_swapped(4), r"quant_scales\[4\]: fc2 weight block scales"),
        (
            FI_FUSED,
            "cutlass_fused_moe",
            lambda kw: dict(kw, quant_scales=kw["quant_scales"][:5]),
            "quant_scales: the 6",
        ),
    ],
    ids=[
        "fi a_scale dropped",
        "fi alpha dropped",
        "fi a_scale transposed",
        "fi b_scale transposed",
        "sgl b_blockscale dropped",
        "sgl a_blockscale transposed",
        "sgl b_blockscale transposed",
        "sgl blockscale_offsets dropped",
        "fused input_sf dropped",
        "fused fc1 scales transposed",
        "fused fc2 scales transposed",
        "fused a quant scale dropped",
    ],
)
def test_a_scale_dropped_or_transposed_is_named(name, kernel, edit, words, monkeypatch):
    """The worker's real call minus one scale, or with one transposed: the binding or the stand-in's
    check fails, naming the argument."""
    fake, args, kwargs = _last_call(name, monkeypatch, kernel)
    with pytest.raises((AssertionError, pytest.fail.Exception), match=words):
        CHECKS[kernel](bind(fake.library, kernel, fake.signatures[kernel], args, edit(kwargs)))


def _cumulated_tiles(m_indptr):  # the layout sgl-kernel uses, which FlashInfer's kernel does not read
    return moe_fp4.offsets_of([_ru(hi - lo, 128) for lo, hi in zip(m_indptr, m_indptr[1:])])[:-1]


@pytest.mark.parametrize(
    "name, helper, wrong, words",
    [
        (FI_GROUPED, "flashinfer_sf_rows", _cumulated_tiles, "a_scale: expert 3's scale rows"),
        (SGL_GROUPED, "sgl_blockscale_offsets", lambda counts: moe_fp4.offsets_of(counts), "128-byte aligned"),
    ],
    ids=["flashinfer a_scale rows per expert", "sgl blockscale_offsets unpadded"],
)
def test_a_wrong_per_expert_scale_offset_fails(name, helper, wrong, words, monkeypatch):
    """Each expert's scales placed where the kernel does not read them: the per-expert oracle fails the
    case (or the kernel's own alignment check refuses it), naming what is wrong."""
    monkeypatch.setattr(moe_fp4, helper, wrong)
    rec, _ = run_case(name, monkeypatch)
    assert rec.status == "failed" and words in rec.reason, rec.reason


def _layer_output(name: str, result, bound: dict) -> torch.Tensor:
    """A call's output as the layer's [rows, N] (the padded FlashInfer output's rows of each expert)."""
    if name == FI_FUSED:
        return result[0]
    if name == FI_GROUPED:
        bounds = bound["m_indptr"].tolist()
        return torch.cat([result[bounds[e] : bounds[e] + c] for e, c in enumerate(COUNTS)])
    return result


def _roll_params(*keys):
    return lambda kw: dict(kw, params=dict(kw["params"], **{k: torch.roll(kw["params"][k], 1, 0) for k in keys}))


@pytest.mark.parametrize(
    "name, kernel, edit",
    [
        (SGL_GROUPED, "cutlass_fp4_group_mm", _roll_params("expert_offsets", "problem_sizes")),
        (SGL_GROUPED, "cutlass_fp4_group_mm", _roll_params("blockscale_offsets")),
        (
            FI_GROUPED,
            "group_gemm_nvfp4_nt_groupwise",  # each expert's weights, scales and alpha another's
            lambda kw: dict(
                kw,
                b=torch.roll(kw["b"], 1, 0),
                b_scale=torch.roll(kw["b_scale"], 1, 0),
                alpha=torch.roll(kw["alpha"], 1),
            ),
        ),
        (
            FI_FUSED,
            "cutlass_fused_moe",
            lambda kw: dict(
                kw, token_selected_experts=(kw["token_selected_experts"] + 1) % kw["fc1_expert_weights"].shape[0]
            ),
        ),
    ],
    ids=[
        "sgl expert_offsets shifted",
        "sgl blockscale_offsets of another expert",
        "flashinfer experts reordered",
        "fused token experts shifted",
    ],
)
def test_rows_given_to_the_wrong_expert_fail_the_oracle(name, kernel, edit, monkeypatch):
    """Each expert's rows (a token's experts) given to another expert: every scale is in place and every
    product has the right size, yet the per-expert oracle fails it."""
    fake, args, kwargs = _last_call(name, monkeypatch, kernel)
    bound = bind(fake.library, kernel, fake.signatures[kernel], args, edit(kwargs))
    result = _layer_output(name, getattr(fake, kernel)(**bound), bound)
    x, w, counts = moe.inputs(_case(name), 0, "cpu")
    check = verdict(
        result.float(), moe.oracle("fp4", x, w, counts), moe.oracle("bf16", x, w, counts), THRESHOLDS["fp4"]
    )
    assert check.verdict == "fail" and "rel_err" in check.detail, check


# -- contracts: the installed FlashInfer, the recorded sgl-kernel wheel --------------------------------------
def _moe_calls(library: str, monkeypatch) -> list[tuple[str, tuple, dict]]:
    calls = []
    for name in NEW:
        if CATALOG[name].import_name == library:
            _, fake = run_case(name, monkeypatch)
            calls += [(c[0], c[1], c[2]) for c in fake.calls]
    return calls


def test_every_flashinfer_moe_call_fits_the_installed_flashinfer_and_its_record(monkeypatch):
    record = json.loads(FI_RECORD.read_text())
    problems = _contract_problems(
        "flashinfer", FI_VERSION, record, _fi_moe_signatures().get, _moe_calls("flashinfer", monkeypatch)
    )
    assert problems == [], "\n".join(problems)
    assert record["functions"]["group_gemm_nvfp4_nt_groupwise"]["exported_from"] == "flashinfer.gemm"


def test_every_sgl_kernel_moe_call_fits_the_recorded_wheel(monkeypatch):
    record = json.loads(SGL_RECORD.read_text())
    problems = _contract_problems(
        "sgl_kernel", record["version"], record, lambda name: None, _moe_calls("sgl_kernel", monkeypatch)
    )
    assert problems == [], "\n".join(problems)


def test_a_renamed_fused_moe_parameter_is_named(monkeypatch):
    sig = inspect.signature(flashinfer.cutlass_fused_moe)
    renamed = sig.replace(
        parameters=[
            p.replace(name="input_scale_factors") if p.name == "input_sf" else p for p in sig.parameters.values()
        ]
    )
    live = dict(_fi_moe_signatures(), cutlass_fused_moe=renamed)
    problems = _contract_problems(
        "flashinfer", FI_VERSION, json.loads(FI_RECORD.read_text()), live.get, _moe_calls("flashinfer", monkeypatch)
    )
    assert any("cutlass_fused_moe: parameter 'input_sf' that the worker passes does not exist" in p for p in problems)


# -- the catalog: capabilities from the libraries' sources, refusals with their reason --------------------------
def test_capabilities_are_those_the_libraries_declare():
    """FlashInfer's grouped GEMM: its @supported_compute_capability list. Its fused MoE has no decorator:
    the archs get_cutlass_fused_moe_module builds a module for, less SM90 and SM89, whose MoE GEMMs take
    no NVFP4 activations. sgl-kernel's dispatch is C++ (docs/FP4_MOE.md quotes it)."""
    import ast

    from flashinfer.fused_moe.core import get_cutlass_fused_moe_module
    from flashinfer.gemm.gemm_base import _check_group_gemm_nvfp4_nt_groupwise_problem_size as fi_check

    assert {divmod(cc, 10) for cc in fi_check._supported_ccs} == CATALOG[FI_GROUPED].only_cc == {(12, 0), (12, 1)}
    tree = ast.parse(inspect.getsource(get_cutlass_fused_moe_module.__wrapped__).lstrip())
    archs = {
        c.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for c in ast.walk(node)
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }
    assert archs - {"90", "89"} == {"%d%d" % cc for cc in CATALOG[FI_FUSED].only_cc}
    assert CATALOG[SGL_GROUPED].only_cc == {(10, 0), (10, 3), (12, 0)}
    assert {CATALOG[n].kernel for n in NEW} == {"grouped", "fused"} and CATALOG[FI_FUSED].kernel == "fused"
    assert all(CATALOG[n].workload == "moe" and CATALOG[n].family == "fp4" for n in NEW)


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize(
    "cc, words",
    [
        ((9, 0), "needs compute capability >= 10.0, host has 9.0"),
        (None, "needs a CUDA GPU with compute capability >= 10.0; host has none (CPU)"),
    ],
    ids=["H200", "CPU"],
)
def test_unsupported_on_the_h200_and_on_cpu_with_the_reason(name, cc, words, monkeypatch):
    fake = _fake(name)
    rec = _runner(monkeypatch, fake, cc=cc).run(_case(name))
    assert rec.status == "unsupported" and words in rec.reason
    if cc is not None:  # the library's own capabilities, named beside the FP4 floor
        listed = ", ".join("%d.%d" % c for c in sorted(CATALOG[name].only_cc))
        assert rec.reason.endswith(f"(this kernel: {listed} only)")
    assert fake.calls == []  # refused before any call: FP4 quantizers below 10.0 write garbage silently


@pytest.mark.parametrize(
    "name, cc, n, k, words",
    [
        (FI_GROUPED, (10, 0), 2048, 6144, "supports compute capability 12.0, 12.1 only"),
        (FI_GROUPED, (12, 0), 2048, 6000, "needs K % 128 == 0"),
        (SGL_GROUPED, (12, 1), 2048, 6144, "supports compute capability 10.0, 10.3, 12.0 only"),
        (SGL_GROUPED, (10, 0), 2000, 6144, "needs N % 128 == 0"),
        (FI_FUSED, (12, 0), 2048, 6144, "needs N % 384 == 0"),
        (FI_FUSED, (9, 0), 768, 6144, "needs compute capability >= 10.0"),
        (FI_FUSED, (12, 1), 768, 6144, None),
        (FI_GROUPED, (12, 1), 2048, 6144, None),
        (SGL_GROUPED, (10, 3), 2048, 6144, None),
    ],
)
def test_shape_and_capability_rules(name, cc, n, k, words):
    got = support_problem(CATALOG[name], 16, n, k, cc)
    assert (got is None) if words is None else (words in (got or "")), got


def test_sgl_refuses_float16_on_sm120_where_its_kernel_writes_nothing():
    assert "bfloat16 only" in moe_fp4.sgl_output_problem(torch.float16, (12, 0))
    assert moe_fp4.sgl_output_problem(torch.bfloat16, (12, 0)) is None
    assert moe_fp4.sgl_output_problem(torch.float16, (10, 0)) is None


# -- the layouts, as the kernels compute them -------------------------------------------------------------------
def test_scale_rows_per_expert_follow_each_kernels_own_formula():
    padded = [_ru(c, 4) for c in COUNTS]  # [100, 100, 132, 8]: m_indptr [0, 100, 200, 332, 340]
    assert moe_fp4.flashinfer_sf_rows(moe_fp4.offsets_of(padded)) == [0, 128, 384, 640]
    assert _cumulated_tiles(moe_fp4.offsets_of(padded)) == [0, 128, 256, 512]  # not what FlashInfer reads
    assert moe_fp4.sgl_blockscale_offsets(COUNTS) == [0, 128, 256, 512, 640]


def test_tokens_are_routed_to_distinct_experts_with_the_drawn_counts():
    counts = draw_counts(16, 4, 33, "zipf", 1.5, seed=3)
    active = [c for c in counts if c]
    routes = moe_fp4.route_tokens(active, 33, 4)
    assert all(len(set(r)) == 4 for r in routes)
    assert [sum(e in r for r in routes) for e in range(len(active))] == active
    with pytest.raises(ValueError, match="no top-2 routing of 8 tokens"):
        moe_fp4.route_tokens([9, 1, 4, 2], 8, 2)  # one expert would need a token twice


# -- rows: which kernel ran, and a fused block only beside its composition --------------------------------------
def _row(backend: str, n: int, k: int, us: float, label: str = "layer", slot: str = "h1"):
    from orchestrator.analysis.merge import Row

    spec = CATALOG[backend]
    return Row(
        run_id="r",
        host=slot,
        gpu=None,
        slot=slot,
        gpu_name="RTX PRO 6000",
        label=label,
        backend=backend,
        m=64,
        n=n,
        k=k,
        status="ok",
        reason="",
        workload="moe",
        experts=256,
        top_k=8,
        routing="zipf 1.2",
        active_experts=120,
        max_expert_m=31,
        kernel=spec.kernel,
        median_us=us,
        verdict="pass",
    )


def test_a_rows_kernel_says_which_kind_ran():
    from orchestrator.analysis.merge import _case_fields

    assert _case_fields(_case(FI_FUSED))["kernel"] == "fused"
    assert _case_fields(_case(SGL_GROUPED))["kernel"] == "grouped"
    assert (
        _case_fields(_case(FI_GROUPED).model_copy(update={"backend": "moe-loop-sgl-fp4-cutlass"}))["kernel"] == "loop"
    )
    assert _case_fields(CaseSpec(backend="torch-bf16", m=8, n=8, k=16)) == {"workload": "gemm"}


def test_a_fused_block_is_set_beside_its_two_projections_never_beside_one_gemm():
    from orchestrator.analysis.merge import pivot_by_backend
    from orchestrator.analysis.moe_blocks import block_comparisons
    from orchestrator.views.tables import pivot_document

    inter, hidden = 256, 7168
    rows = [
        _row(FI_FUSED, 3 * inter, hidden, 40.0),
        _row(SGL_GROUPED, 3 * inter, hidden, 20.0),  # a GEMM of the block's n and k: not its peer
        _row(SGL_GROUPED, 2 * inter, hidden, 25.0),
        _row(SGL_GROUPED, hidden, inter, 18.0),
        _row("moe-grouped-torch-bf16", 2 * inter, hidden, 30.0),
        _row("moe-grouped-torch-bf16", hidden, inter, 20.0),
        _row(SGL_GROUPED, hidden, inter, 9.0, slot="h2"),
    ]  # another host's w2
    _, pivot = pivot_by_backend(rows)
    same_shape = [p for p in pivot if (p.n, p.k) == (3 * inter, hidden)]
    assert sorted((p.block, sorted(p.cells)) for p in same_shape) == [(False, [SGL_GROUPED]), (True, [FI_FUSED])]
    [c] = block_comparisons(rows)  # bf16 projections are another format; h2 has no block
    assert (c.composed_backend, c.w13_us, c.w2_us, c.composed_us) == (SGL_GROUPED, 25.0, 18.0, 43.0)
    assert abs(c.speedup - 43.0 / 40.0) < 1e-12
    doc = pivot_document(rows, per_host=True)
    assert any("[fused MoE block]" in cell for row in doc.sections[0].rows for cell in row)
    assert any(
        f"{FI_FUSED} block 40 µs against {SGL_GROUPED} w13 (512x7168) 25 µs + w2 (7168x256) 18 µs" in n
        for n in doc.notes
    ), doc.notes


def test_a_fused_case_never_matches_a_grouped_one_in_a_diff():
    """diff pairs cases by what they measure, backend included: a fused block and a GEMM of the same
    n and k are two cases, whatever their rows say."""
    fused = _case(FI_FUSED)
    assert fused.case_id != fused.model_copy(update={"backend": SGL_GROUPED}).case_id


def test_the_shipped_fp4_moe_sweep_holds_each_block_and_its_projections():
    """Every block of moe_fp4.yaml has both projections in the same sweep (one run), with the same routing;
    the fused backend runs the blocks only (each shape's `backends:`, tests/test_sweep_backends.py)."""
    from pathlib import Path

    from orchestrator.config.sweep import load_sweep

    cases = load_sweep(Path(__file__).resolve().parent.parent / "sweeps" / "moe_fp4.yaml").cases()
    blocks = [c for c in cases if CATALOG[c.backend].kernel == "fused"]
    projections = [c for c in cases if CATALOG[c.backend].kernel != "fused"]
    assert {c.backend for c in blocks} == {FI_FUSED} and all(c.n % 384 == 0 for c in blocks) and len(blocks) == 6
    assert not {(c.n, c.k) for c in blocks} & {(c.n, c.k) for c in projections}
    assert {FI_GROUPED, SGL_GROUPED} <= {c.backend for c in projections}
    for block in blocks:
        inter, hidden = block.n // 3, block.k
        for n, k in ((2 * inter, hidden), (hidden, inter)):
            assert any(
                (c.n, c.k, c.m, c.moe) == (n, k, block.m, block.moe) and c.backend == SGL_GROUPED for c in projections
            ), (block.label, n, k, block.m)
