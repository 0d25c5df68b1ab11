"""Physics as a check: a case timed faster than its GPU can go, for its FLOPs and bytes, is not a result.

A case's speed of light is its work at the GPU's roofs: max(flops / math peak, bytes / memory bandwidth)
(worker/contract/metrics.py). The roofs are the GPU's calibration (worker/measure/calibrate.py: a 8192³
GEMM per operand family, a 1 GiB device-to-device copy), and where it lacks one, the GPU model's
datasheet figure (metrics.PEAKS); the reason says which was used. A median below speed of light by more than MARGIN is
named `impossible` (worker/check/integrity.py), its case `failed` and its numbers dropped.

MARGIN: the calibration is not the hardware's ceiling, and an honest kernel may beat it:
- math: the 8192³ GEMM runs at the power-limited clock (H200: 797 TFLOPS bf16 measured, at ~1.5 GHz),
  while a light GEMM, or any in `timing.state: burst`, runs at the top SM clock (1980 MHz on the H200):
  132 SMs x 4096 dense bf16 FLOP per clock x 1.98 GHz = 1070 TFLOPS, 134% of the calibration;
- memory: the copy reads and writes (4.24 TB/s measured on the H200, against 4.8 TB/s on its datasheet,
  113%); a GEMM mostly reads, and its output may still sit in L2 when the timer stops;
- measured: the best honest kernels on the H200 reach 81% of speed of light settled (torch-bf16 and
  FlashInfer fp8 at 1024x2048x6144, benchmarks/results/seed-h200-settled.md) and 94% at the burst clock
  (torch-bf16 1024x2048x6144, 34.4 µs against 32.3 µs, benchmarks/results/burst-h200.md).
So nothing honest passes ~135%: a case is impossible beyond 150% (MARGIN 0.5), which leaves that
ceiling a further 10% for timing noise. The cheats of issue 41 read 534-934%.

Hot-L2 timing (`timing.l2: hot`) keeps operands in L2, whose bandwidth is several times DRAM's: there
only the math roof applies. A CPU has no roofs here: no check.
"""

from __future__ import annotations

from typing import Optional

from ..contract.metrics import peaks_for
from .integrity import IMPOSSIBLE, Finding

MARGIN = 0.5  # a case is impossible when its median is below speed of light / (1 + MARGIN)


def roofs(family: str, calibration, device_name: Optional[str]) -> tuple[Optional[float], Optional[float], str]:
    """(math TFLOPS, memory TB/s, their sources in words) for `family` on this GPU: each from the
    calibration where it has it, else the datasheet of the GPU model (metrics.PEAKS); None where
    neither has it."""
    sheet = peaks_for(device_name) or {}
    tflops = tb_s = None
    math_src = mem_src = ""
    if calibration is not None and calibration.tflops.get(family):
        tflops, math_src = calibration.tflops[family], "calibrated"
    elif sheet.get(family):
        tflops, math_src = sheet[family], "datasheet"
    if calibration is not None and calibration.tb_s:
        tb_s, mem_src = calibration.tb_s, "calibrated"
    elif sheet.get("tb_s"):
        tb_s, mem_src = sheet["tb_s"], "datasheet"
    words = []
    if tflops is not None:
        words.append(f"{math_src} {tflops:.0f} TFLOPS {family}")
    if tb_s is not None:
        words.append(f"{mem_src} {tb_s:.2f} TB/s" + (" copy" if mem_src == "calibrated" else ""))
    return tflops, tb_s, " / ".join(words)


def impossible(
    flops: float,
    nbytes: float,
    family: str,
    median_us: float,
    calibration,
    device_name: Optional[str],
    l2: str = "cold",
    margin: float = MARGIN,
) -> Optional[Finding]:
    """None when `median_us` is physically possible for `flops` and `nbytes` on this GPU; else the
    `impossible` Finding, whose text names the median, its share of speed of light, the speed of light,
    the roofs it came from (calibrated or datasheet) and the margin. No check (None) on a CPU (no
    `device_name`), for a GPU with neither calibration nor datasheet figures, or a median that is not
    positive. `l2`: the timing's L2 mode; with `hot`, the memory roof does not apply (L2 is faster)."""
    if not device_name or device_name.lower() == "cpu" or not median_us > 0:
        return None
    tflops, tb_s, source = roofs(family, calibration, device_name)
    if l2 == "hot":
        tb_s = None
        source = source.split(" / ")[0] if tflops is not None else ""
    bounds = []
    if tflops:
        bounds.append(flops / (tflops * 1e12) * 1e6)
    if tb_s:
        bounds.append(nbytes / (tb_s * 1e12) * 1e6)
    if not bounds:
        return None
    sol_us = max(bounds)
    if median_us * (1.0 + margin) >= sol_us:
        return None
    pct = 100.0 * sol_us / median_us
    hot = "; hot L2: the math roof alone" if l2 == "hot" else ""
    return Finding(
        IMPOSSIBLE,
        f"{_us(median_us)} µs is {pct:.0f}% of this GPU's speed of light ({_us(sol_us)} µs for "
        f"{flops / 1e9:.3g} GFLOP and {nbytes / 1e6:.3g} MB at the {source}{hot}; "
        f"margin {margin:.0%}): faster than the hardware can go, not a result",
    )


def _us(x: float) -> str:
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"
