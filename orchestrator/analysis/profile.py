"""Two profiles of one case compared: the counter diff (runs/ncureport.py reads each profile), which
names the likely cause of the slower side; a profile's time at another SM clock.

Pure: summaries in, data out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from ..runs.ncureport import KernelSummary, ProfileSummary, short_name


def at_clock_us(summary: Optional[dict], sm_mhz: Optional[float]) -> Optional[float]:
    """A profile's time per call had its kernels run at `sm_mhz` (their SM cycles over that clock): ncu runs
    each kernel alone, after its own replay passes, so it often runs at a higher SM clock than the sweep's
    back-to-back calls, which a heavy kernel holds at the power limit. An estimate for kernels bound by the
    SM clock; a kernel waiting on DRAM scales less."""
    cycles = (summary or {}).get("per_call_cycles")
    return cycles / sm_mhz if cycles and sm_mhz else None


# -- the counter diff of two profiles -------------------------------------------------------------------
CLOCK_STEP = 0.03  # a clock 3% apart is a difference worth naming
MEMORY_BOUND_PCT = 60.0  # DRAM (or the memory system) this busy: the kernel waits on memory
SAME_UNDER_NCU = 0.03  # kernels within this of each other under ncu: their own execution is not slower

# The likely cause of B's slower time (CounterFindings.cause.code); views/profile.py words each.
CAUSE_CANNOT_COMPARE = "cannot-compare"  # limits: why a side has no time per call (runs/ncureport.py Limit)
CAUSE_DIFFERENT_KERNEL = "different-kernel"  # only_a, only_b: [(kernel, µs per call)]
CAUSE_MORE_KERNELS = "more-kernels"  # only_b
CAUSE_FEWER_KERNELS = "fewer-kernels"  # only_a
CAUSE_LAUNCH_COUNT = "launch-count"  # moved: [(kernel, B's launches per call, A's)]
CAUSE_NO_KERNEL_TIME = "no-kernel-time"  # kernel
# The same kernels; each cause below also has kernel, b_us, a_us: the kernel whose time moved most.
CAUSE_LAUNCH_CONFIG = "launch-config"  # grid, block, registers: (B's, A's)
CAUSE_OUTSIDE_KERNELS = "outside-kernels"  # ratio: B/A per call
CAUSE_SM_CLOCK = "sm-clock"  # b_mhz, a_mhz
CAUSE_MEMORY_BOUND = "memory-bound"  # dram_pct (A's), b_gb_s, a_gb_s, b_dram_mhz, a_dram_mhz
CAUSE_MORE_DRAM_BYTES = "more-dram-bytes"  # b_bytes, a_bytes
CAUSE_LOWER_OCCUPANCY = "lower-occupancy"  # b_pct, a_pct
CAUSE_GPU_PROCESSES = "gpu-processes"  # processes: on B's GPU
CAUSE_NONE_NAMED = "none-named"
# Every other difference worth knowing (CounterFindings.details).
DETAIL_GPU_PROCESSES = "gpu-processes"  # b, a: other processes on each GPU
DETAIL_NVML_CLOCK = "nvml-clock"  # b_mhz, a_mhz: as the profiled range opened
DETAIL_THROTTLED = "throttled"  # reasons: B's
DETAIL_COUNTER = "counter"  # counter (one of COUNTERS), b, a: of the kernel that carries the effect
# The counters compared for DETAIL_COUNTER: name -> KernelSummary field.
COUNTERS = {
    "sm-clock": "sm_mhz",
    "dram-clock": "dram_mhz",
    "sm-throughput": "sm_pct",
    "dram-throughput": "dram_pct",
    "occupancy": "occupancy_pct",
    "dram-bytes": "dram_bytes",
    "dram-bandwidth": "dram_gb_s",
}


@dataclass
class Finding:
    """A decision of the counter diff: one of the CAUSE_* or DETAIL_* codes and the facts its words need."""

    code: str
    facts: dict = field(default_factory=dict)


@dataclass
class CounterFindings:
    """Side A (the host at the fleet median, or the baseline) against B (the flagged host), one case."""

    a_us: Optional[float]  # per call of the case under ncu
    b_us: Optional[float]
    ratio: Optional[float]  # b_us / a_us
    cause: Finding  # the likely cause
    details: list[Finding] = field(default_factory=list)  # every other difference worth knowing
    kernels: list[dict] = field(default_factory=list)  # per kernel name: A and B side by side


def _per_call(summary: ProfileSummary) -> dict[str, float]:
    return {k.name: k.per_call for k in summary.kernels if k.per_call}


def _kernel_rows(a: ProfileSummary, b: ProfileSummary) -> list[dict]:
    ka, kb = {k.name: k for k in a.kernels}, {k.name: k for k in b.kernels}
    rows = []
    for name in dict.fromkeys([*ka, *kb]):
        x, y = ka.get(name), kb.get(name)
        rows.append(
            {"name": name, "short": short_name(name), "a": asdict(x) if x else None, "b": asdict(y) if y else None}
        )
    return rows


def diagnose(a: ProfileSummary, b: ProfileSummary, a_run=None, b_run=None) -> CounterFindings:
    """Why B is slower than A, as far as the counters tell: a different kernel chosen, the same kernel at
    a lower SM clock, memory-bound at lower bandwidth, with another launch configuration, at lower
    occupancy, another process on the GPU; or, when the kernels take as long on both under ncu, that the
    difference lies outside them. `a_run` / `b_run`: what each profiled process said (ProfiledRun)."""
    ratio = b.per_call_us / a.per_call_us if a.per_call_us and b.per_call_us else None
    procs_a = (a_run.gpu_processes or 0) if a_run is not None else 0
    procs_b = (b_run.gpu_processes or 0) if b_run is not None else 0
    cause, counters = _cause(a, b, ratio, procs_a, procs_b)
    return CounterFindings(
        a_us=a.per_call_us,
        b_us=b.per_call_us,
        ratio=ratio,
        cause=cause,
        details=_run_details(a_run, b_run, procs_a, procs_b) + counters,
        kernels=_kernel_rows(a, b),
    )


def _run_details(a_run, b_run, procs_a: int, procs_b: int) -> list[Finding]:
    """What the profiled processes said that differs: other processes, the NVML clock, throttling."""
    details = []
    if procs_b > procs_a:
        details.append(Finding(DETAIL_GPU_PROCESSES, {"b": procs_b, "a": procs_a}))
    if (
        a_run is not None
        and b_run is not None
        and a_run.sm_clock_mhz
        and b_run.sm_clock_mhz
        and abs(b_run.sm_clock_mhz / a_run.sm_clock_mhz - 1) >= CLOCK_STEP
    ):
        details.append(Finding(DETAIL_NVML_CLOCK, {"b_mhz": b_run.sm_clock_mhz, "a_mhz": a_run.sm_clock_mhz}))
    if b_run is not None and b_run.throttle_reasons:
        details.append(Finding(DETAIL_THROTTLED, {"reasons": list(b_run.throttle_reasons)}))
    return details


def _cause(
    a: ProfileSummary, b: ProfileSummary, ratio: Optional[float], procs_a: int, procs_b: int
) -> tuple[Finding, list[Finding]]:
    """The likely cause, and the counters that moved of the kernel that carries the effect."""
    ca, cb = _per_call(a), _per_call(b)
    if not ca or not cb:
        return Finding(CAUSE_CANNOT_COMPARE, {"limits": a.limits + b.limits}), []
    ka, kb = {k.name: k for k in a.kernels}, {k.name: k for k in b.kernels}
    only_a, only_b = [n for n in ca if n not in cb], [n for n in cb if n not in ca]
    if only_a or only_b:

        def listed(names: list[str], kernels: dict) -> list[tuple[str, float]]:
            return [(n, (kernels[n].time_us or 0) * (kernels[n].per_call or 0)) for n in names]

        code = CAUSE_DIFFERENT_KERNEL if only_a and only_b else CAUSE_MORE_KERNELS if only_b else CAUSE_FEWER_KERNELS
        return Finding(code, {"only_a": listed(only_a, ka), "only_b": listed(only_b, kb)}), []
    moved = [n for n in ca if ca[n] != cb[n]]
    if moved:
        return Finding(CAUSE_LAUNCH_COUNT, {"moved": [(n, cb[n], ca[n]) for n in moved]}), []
    # The same kernels: the one whose time moved most (per call) carries the effect.
    name = max(ca, key=lambda n: abs(((kb[n].time_us or 0) - (ka[n].time_us or 0)) * ca[n]))
    x, y = ka[name], kb[name]
    if not x.time_us or not y.time_us:
        return Finding(CAUSE_NO_KERNEL_TIME, {"kernel": name}), []
    code, facts = _same_kernel_cause(x, y, ratio, procs_a, procs_b)
    return Finding(code, {"kernel": name, "b_us": y.time_us, "a_us": x.time_us, **facts}), _counters(x, y)


def _same_kernel_cause(
    x: KernelSummary, y: KernelSummary, ratio: Optional[float], procs_a: int, procs_b: int
) -> tuple[str, dict]:
    """The cause (code, facts) where A runs kernel x and B the same kernel y, slower or not."""
    kernel_ratio = y.time_us / x.time_us
    if x.launch_settings() != y.launch_settings():
        return CAUSE_LAUNCH_CONFIG, {
            "grid": (y.grid, x.grid),
            "block": (y.block, x.block),
            "registers": (y.registers, x.registers),
        }
    if abs(math.log(kernel_ratio)) < math.log1p(SAME_UNDER_NCU):
        return CAUSE_OUTSIDE_KERNELS, {"ratio": ratio}
    if (
        x.sm_mhz
        and y.sm_mhz
        and y.sm_mhz < x.sm_mhz * (1 - CLOCK_STEP)
        and math.log(x.sm_mhz / y.sm_mhz) >= 0.5 * math.log(kernel_ratio)
    ):
        return CAUSE_SM_CLOCK, {"b_mhz": y.sm_mhz, "a_mhz": x.sm_mhz}
    if max(x.dram_pct or 0, x.memory_pct or 0) >= MEMORY_BOUND_PCT and (
        (x.dram_mhz and y.dram_mhz and y.dram_mhz < x.dram_mhz * (1 - CLOCK_STEP))
        or (x.dram_gb_s and y.dram_gb_s and y.dram_gb_s < x.dram_gb_s * (1 - CLOCK_STEP))
    ):
        return CAUSE_MEMORY_BOUND, {
            "dram_pct": x.dram_pct or 0,
            "b_gb_s": y.dram_gb_s,
            "a_gb_s": x.dram_gb_s,
            "b_dram_mhz": y.dram_mhz,
            "a_dram_mhz": x.dram_mhz,
        }
    if x.dram_bytes and y.dram_bytes and y.dram_bytes > x.dram_bytes * 1.10:
        return CAUSE_MORE_DRAM_BYTES, {"b_bytes": y.dram_bytes, "a_bytes": x.dram_bytes}
    if x.occupancy_pct and y.occupancy_pct and y.occupancy_pct < x.occupancy_pct * 0.9:
        return CAUSE_LOWER_OCCUPANCY, {"b_pct": y.occupancy_pct, "a_pct": x.occupancy_pct}
    if procs_b > procs_a:
        return CAUSE_GPU_PROCESSES, {"processes": procs_b}
    return CAUSE_NONE_NAMED, {}


def _counters(x: KernelSummary, y: KernelSummary) -> list[Finding]:
    """Every counter of the kernel that carries the effect that moved beyond a few percent."""
    out = []
    for counter, attr in COUNTERS.items():
        a_value, b_value = getattr(x, attr), getattr(y, attr)
        if a_value and b_value and abs(b_value / a_value - 1) >= CLOCK_STEP:
            out.append(Finding(DETAIL_COUNTER, {"counter": counter, "b": b_value, "a": a_value}))
    return out
