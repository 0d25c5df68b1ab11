"""Physics as a check, the part both sides compute: a median below its case's speed of light by more than
MARGIN is `impossible` (why the margin is what it is, and the figures behind it: worker/check/physics.py).

The worker judges every round in the process that timed it (worker/sweep/runner.py). A kernel from the user's
own file runs in that process too, so its code could patch that check, or write a record of its own case
on the process's pipe with any number in it: the controller judges such a record again when it reads it
(`recheck`, orchestrator/runs/slots.py), outside the process that ran the code, from the case the run
planned and the host's facts (written before any of the user's code ran).
"""

from __future__ import annotations

import statistics
from typing import Optional

from .catalog import FAMILIES, FP4_MIN_CC, builtin_family
from .metrics import OUT_BYTES, gemm_work, moe_work, peaks_for
from .schema import CaseSpec, FactsRecord, Stats

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


def speed_of_light(
    flops: float, nbytes: float, family: str, calibration, device_name: Optional[str], l2: str = "cold"
) -> tuple[Optional[float], str]:
    """(µs, the roofs it came from in words) of this work on this GPU (roofs), or (None, "") where it
    has no roof to judge by: a CPU (no `device_name`), or a GPU with neither calibration nor datasheet
    figures. `l2` hot: the memory roof does not apply (L2 is faster than memory)."""
    if not device_name or device_name.lower() == "cpu":
        return None, ""
    tflops, tb_s, source = roofs(family, calibration, device_name)
    if l2 == "hot":
        tb_s = None
        source = source.split(" / ")[0] if tflops is not None else ""
    bounds = []
    if tflops:
        bounds.append(flops / (tflops * 1e12) * 1e6)
    if tb_s:
        bounds.append(nbytes / (tb_s * 1e12) * 1e6)
    return (max(bounds), source) if bounds else (None, "")


def impossible_reason(
    flops: float,
    nbytes: float,
    family: str,
    median_us: float,
    calibration,
    device_name: Optional[str],
    l2: str = "cold",
    margin: float = MARGIN,
) -> Optional[str]:
    """None when `median_us` is physically possible for `flops` and `nbytes` on this GPU; else why not:
    the median, its share of speed of light, the speed of light, the roofs it came from (calibrated or
    datasheet) and the margin. No judgement (None) where speed_of_light has none, or for a median that
    is not positive."""
    if not median_us > 0:
        return None
    sol_us, source = speed_of_light(flops, nbytes, family, calibration, device_name, l2)
    if sol_us is None or median_us * (1.0 + margin) >= sol_us:
        return None
    pct = 100.0 * sol_us / median_us
    hot = "; hot L2: the math roof alone" if l2 == "hot" else ""
    return (
        f"{_us(median_us)} µs is {pct:.0f}% of this GPU's speed of light ({_us(sol_us)} µs for "
        f"{flops / 1e9:.3g} GFLOP and {nbytes / 1e6:.3g} MB at the {source}{hot}; "
        f"margin {margin:.0%}): faster than the hardware can go, not a result"
    )


def case_work(case: CaseSpec, family: str) -> tuple[float, float]:
    """(FLOPs, bytes) of the case as the worker counts them (metrics.gemm_work, moe_work)."""
    out_bytes = OUT_BYTES[case.out_dtype]
    if case.workload == "moe" and case.moe is not None:
        return moe_work(case.moe.counts, case.n, case.k, family, out_bytes)
    return gemm_work(case.m, case.n, case.k, family, out_bytes)


def fastest_median(timing: Stats) -> Optional[float]:
    """The smallest median any figure of the timing is read from: the case's, its graph replay's, each
    round's, and each round's paired samples' (head-to-head); None when it holds none."""
    medians = [timing.median_us, timing.replay_median_us]
    for one in timing.rounds:
        medians.append(one.median_us)
        if one.paired_us:
            medians.append(statistics.median(one.paired_us))
    medians = [m for m in medians if m is not None]
    return min(medians) if medians else None


def recheck(case: CaseSpec, timing: Optional[Stats], facts: Optional[FactsRecord]) -> Optional[str]:
    """Why a record of `case` (as the run planned it) timed as `timing` is impossible on the host `facts`
    describe (its GPU and calibration), or None. A kernel from the user's file declares its operand family
    in that file, which is code under test: such a case is held to the family that allows the most (the
    one whose speed of light is lowest), so a kernel the worker found possible never is here."""
    if timing is None or facts is None:
        return None
    median_us = fastest_median(timing)
    if median_us is None:
        return None
    family = builtin_family(case)
    families = _user_families(facts) if case.kernel_sha256 else (family,) if family else ()
    device = facts.gpu_name if facts.device != "cpu" else None
    judged = []
    for family in families:
        flops, nbytes = case_work(case, family)
        sol_us, _ = speed_of_light(flops, nbytes, family, facts.calibration, device, case.timing.l2)
        if sol_us is None:
            return None  # a family without a roof here: nothing to hold the record to
        judged.append((sol_us, family, flops, nbytes))
    if not judged:
        return None
    _, family, flops, nbytes = min(judged)
    return impossible_reason(flops, nbytes, family, median_us, facts.calibration, device, case.timing.l2)


def _user_families(facts: FactsRecord) -> tuple[str, ...]:
    """The families a user's kernel can have run as on this GPU (FP4 needs FP4_MIN_CC: worker/backends/userkernel.py)."""
    try:
        cc = tuple(int(x) for x in (facts.compute_capability or "").split("."))
    except ValueError:
        cc = ()
    return tuple(f for f in FAMILIES if f != "fp4" or not cc or cc >= FP4_MIN_CC)


def _us(x: float) -> str:
    return f"{x:.3g}" if x < 0.01 else f"{x:.2f}" if x < 100 else f"{x:.0f}"
