"""Work and traffic of one GEMM, and the device peaks they are compared against."""

from __future__ import annotations

from typing import Optional

from .schema import Calibration, Metrics

# Dense tensor-core TFLOPS by operand family and DRAM TB/s, from vendor datasheets (leads, not
# measurements). Matched by substring of the CUDA device name, first match wins.
PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("RTX PRO 6000 Blackwell", {"bf16": 503.8, "fp8": 1007.6, "fp4": 2015.2, "tb_s": 1.792}),
    ("B200", {"bf16": 2250.0, "fp8": 4500.0, "fp4": 9000.0, "tb_s": 8.0}),
    ("H200", {"bf16": 989.4, "fp8": 1978.9, "tb_s": 4.8}),
    ("H100 80GB HBM3", {"bf16": 989.4, "fp8": 1978.9, "tb_s": 3.35}),
    ("H100", {"bf16": 756.5, "fp8": 1513.0, "tb_s": 2.0}),  # PCIe part
)

# Bytes per element of the A/B operands; FP4 adds one e4m3 scale byte per 16 elements.
_OPERAND_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16}
# Bytes per element of a case's output (CaseSpec.out_dtype).
OUT_BYTES = {"bfloat16": 2, "float16": 2}


def peaks_for(gpu_name: Optional[str]) -> Optional[dict[str, float]]:
    if not gpu_name:
        return None
    for key, peaks in PEAKS:
        if key in gpu_name:
            return peaks
    return None


def gemm_metrics(
    m: int,
    n: int,
    k: int,
    family: str,
    median_us: float,
    gpu_name: Optional[str],
    out_bytes: int = 2,
    calibration: Optional[Calibration] = None,
) -> Metrics:
    """TFLOPS = 2MNK/t; bytes = A + B (+ FP4 scales) + output, each moved once."""
    flops, nbytes = gemm_work(m, n, k, family, out_bytes)
    return work_metrics(flops, nbytes, family, median_us, gpu_name, calibration)


def gemm_work(m: int, n: int, k: int, family: str, out_bytes: int = 2) -> tuple[float, float]:
    """(FLOPs, bytes) of an M x N x K GEMM: 2MNK; A + B (+ FP4 scales) + output, each moved once."""
    return 2.0 * m * n * k, (m * k + n * k) * _OPERAND_BYTES[family] + m * n * out_bytes


def moe_metrics(
    counts: list[int],
    n: int,
    k: int,
    family: str,
    median_us: float,
    gpu_name: Optional[str],
    out_bytes: int = 2,
    calibration: Optional[Calibration] = None,
) -> Metrics:
    """All expert GEMMs of a layer: flops 2·T·N·K over its T routed tokens; bytes = activations + the
    weights of every expert that receives a token (each read once) + output."""
    flops, nbytes = moe_work(counts, n, k, family, out_bytes)
    return work_metrics(flops, nbytes, family, median_us, gpu_name, calibration)


def moe_work(counts: list[int], n: int, k: int, family: str, out_bytes: int = 2) -> tuple[float, float]:
    """(FLOPs, bytes) of a MoE layer's expert GEMMs (moe_metrics)."""
    tokens, active = sum(counts), sum(1 for c in counts if c)
    return 2.0 * tokens * n * k, (tokens * k + active * n * k) * _OPERAND_BYTES[family] + tokens * n * out_bytes


def speed_of_light(
    flops: float, nbytes: float, family: str, calibration: Optional[Calibration]
) -> tuple[Optional[float], Optional[str]]:
    """(µs, "math" | "memory"): the time this work takes at the GPU's measured peaks, or (None, None)
    when the calibration lacks the family's math peak or the copy bandwidth (never the datasheet's)."""
    if calibration is None or family not in calibration.tflops or not calibration.tb_s:
        return None, None
    math_us = flops / (calibration.tflops[family] * 1e12) * 1e6
    memory_us = nbytes / (calibration.tb_s * 1e12) * 1e6
    return (math_us, "math") if math_us >= memory_us else (memory_us, "memory")


def work_metrics(
    flops: float,
    nbytes: float,
    family: str,
    median_us: float,
    gpu_name: Optional[str],
    calibration: Optional[Calibration] = None,
) -> Metrics:
    seconds = median_us * 1e-6
    tflops = flops / seconds / 1e12
    tb_s = nbytes / seconds / 1e12
    peaks = peaks_for(gpu_name)
    pct_flops = pct_bw = None
    if peaks:
        if family in peaks:
            pct_flops = 100.0 * tflops / peaks[family]
        pct_bw = 100.0 * tb_s / peaks["tb_s"]
    sol_us, bound = speed_of_light(flops, nbytes, family, calibration)
    return Metrics(
        flops=flops,
        bytes=nbytes,
        tflops=tflops,
        tb_per_s=tb_s,
        pct_peak_flops=pct_flops,
        pct_peak_bw=pct_bw,
        sol_us=sol_us,
        sol_bound=bound,
        pct_sol=100.0 * sol_us / median_us if sol_us is not None and median_us > 0 else None,
    )


def at_median(metrics: Metrics, median_us: float) -> Metrics:
    """The same work's metrics at another median (rounds joined after the first were recorded)."""
    seconds = median_us * 1e-6
    tflops = metrics.flops / seconds / 1e12
    tb_s = metrics.bytes / seconds / 1e12
    scale = tflops / metrics.tflops if metrics.tflops else 0.0
    return metrics.model_copy(
        update={
            "tflops": tflops,
            "tb_per_s": tb_s,
            "pct_peak_flops": None if metrics.pct_peak_flops is None else metrics.pct_peak_flops * scale,
            "pct_peak_bw": None if metrics.pct_peak_bw is None else metrics.pct_peak_bw * scale,
            "pct_sol": 100.0 * metrics.sol_us / median_us if metrics.sol_us is not None and median_us > 0 else None,
        }
    )
