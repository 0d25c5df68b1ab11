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

The arithmetic lives in the contract (worker/contract/physics.py): the controller runs it again on each
record of a kernel from the user's own file, outside the process that ran the user's code.
"""

from __future__ import annotations

from typing import Optional

from ..contract.physics import MARGIN, impossible_reason, roofs
from .integrity import IMPOSSIBLE, Finding

__all__ = ["MARGIN", "impossible", "roofs"]


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
    positive. `l2`: the timing's L2 mode; with `hot`, the memory roof does not apply (L2 is faster).
    The arithmetic is the contract's (worker/contract/physics.py), which the controller runs again."""
    reason = impossible_reason(flops, nbytes, family, median_us, calibration, device_name, l2, margin)
    return None if reason is None else Finding(IMPOSSIBLE, reason)
