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


@dataclass
class CounterDiff:
    """Side A (the host at the fleet median, or the baseline) against B (the flagged host), one case."""

    a_us: Optional[float]  # per call of the case under ncu
    b_us: Optional[float]
    ratio: Optional[float]  # b_us / a_us
    cause: str  # the likely cause, one line
    details: list[str] = field(default_factory=list)  # every other difference worth knowing
    kernels: list[dict] = field(default_factory=list)  # per kernel name: A and B side by side

    def as_dict(self) -> dict:
        return asdict(self)


def _pct_change(b: float, a: float) -> str:
    return f"{(b / a - 1):+.0%}"


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


def explain(a: ProfileSummary, b: ProfileSummary, a_run=None, b_run=None) -> CounterDiff:
    """Why B is slower than A, as far as the counters tell: a different kernel chosen, the same kernel at
    a lower SM clock, memory-bound at lower bandwidth, with another launch configuration, at lower
    occupancy, another process on the GPU; or, when the kernels take as long on both under ncu, that the
    difference lies outside them. `a_run` / `b_run`: what each profiled process said (ProfiledRun)."""
    rows = _kernel_rows(a, b)
    ratio = b.per_call_us / a.per_call_us if a.per_call_us and b.per_call_us else None
    diff = CounterDiff(a_us=a.per_call_us, b_us=b.per_call_us, ratio=ratio, cause="", kernels=rows)
    details = diff.details
    procs_a = (a_run.gpu_processes or 0) if a_run is not None else 0
    procs_b = (b_run.gpu_processes or 0) if b_run is not None else 0
    if procs_b > procs_a:
        details.append(f"{procs_b} other processes on B's GPU while it was profiled (A: {procs_a})")
    if (
        a_run is not None
        and b_run is not None
        and a_run.sm_clock_mhz
        and b_run.sm_clock_mhz
        and abs(b_run.sm_clock_mhz / a_run.sm_clock_mhz - 1) >= CLOCK_STEP
    ):
        details.append(f"NVML SM clock as the range opened: B {b_run.sm_clock_mhz} MHz, A {a_run.sm_clock_mhz} MHz")
    if b_run is not None and b_run.throttle_reasons:
        details.append("B's GPU throttled as the range opened (" + ", ".join(b_run.throttle_reasons) + ")")
    ca, cb = _per_call(a), _per_call(b)
    if not ca or not cb:
        diff.cause = "cannot compare: " + ("; ".join(a.notes + b.notes) or "a side has no kernel")
        return diff
    only_a, only_b = [n for n in ca if n not in cb], [n for n in cb if n not in ca]
    if only_a or only_b:
        diff.cause = _kernel_set_cause(a, b, only_a, only_b)
        return diff
    moved = [n for n in ca if ca[n] != cb[n]]
    if moved:
        diff.cause = "B launches the same kernels a different number of times per call: " + ", ".join(
            f"{short_name(n)} {cb[n]:g} vs {ca[n]:g}" for n in moved
        )
        return diff
    # The same kernels: the one whose time moved most (per call) carries the effect.
    ka, kb = {k.name: k for k in a.kernels}, {k.name: k for k in b.kernels}
    name = max(ca, key=lambda n: abs(((kb[n].time_us or 0) - (ka[n].time_us or 0)) * ca[n]))
    x, y = ka[name], kb[name]
    if not x.time_us or not y.time_us:
        diff.cause = "the same kernels; ncu gave no time for " + short_name(name)
        return diff
    kernel_ratio = y.time_us / x.time_us
    what = (
        f"{short_name(name, 48)} {y.time_us:.4g} µs on B vs {x.time_us:.4g} µs on A "
        f"({_pct_change(y.time_us, x.time_us)})"
    )
    _note_counters(x, y, details)
    if x.launch_settings() != y.launch_settings():
        diff.cause = (
            f"the same kernel with another launch configuration (grid {y.grid} vs {x.grid}, block {y.block} "
            f"vs {x.block}, {y.registers:g} vs {x.registers:g} registers): {what}"
            if y.registers is not None and x.registers is not None
            else f"the same kernel with another launch configuration: {what}"
        )
    elif abs(math.log(kernel_ratio)) < math.log1p(SAME_UNDER_NCU):
        diff.cause = (
            f"under ncu the kernels take the same time on both (B/A {ratio:.3f} per call): the slowdown lies "
            "outside the kernels' own execution (gaps between launches, the host's CPU, or another "
            "process on the GPU when the sweep ran)"
        )
    elif (
        x.sm_mhz
        and y.sm_mhz
        and y.sm_mhz < x.sm_mhz * (1 - CLOCK_STEP)
        and math.log(x.sm_mhz / y.sm_mhz) >= 0.5 * math.log(kernel_ratio)
    ):
        diff.cause = (
            f"the same kernel, slower at a lower SM clock: {y.sm_mhz:.0f} MHz on B vs {x.sm_mhz:.0f} MHz "
            f"on A ({_pct_change(y.sm_mhz, x.sm_mhz)}); {what}"
        )
    elif max(x.dram_pct or 0, x.memory_pct or 0) >= MEMORY_BOUND_PCT and (
        (x.dram_mhz and y.dram_mhz and y.dram_mhz < x.dram_mhz * (1 - CLOCK_STEP))
        or (x.dram_gb_s and y.dram_gb_s and y.dram_gb_s < x.dram_gb_s * (1 - CLOCK_STEP))
    ):
        bandwidth = (
            f"{y.dram_gb_s:.0f} GB/s vs {x.dram_gb_s:.0f} GB/s"
            if x.dram_gb_s and y.dram_gb_s
            else f"DRAM clock {y.dram_mhz:.0f} MHz vs {x.dram_mhz:.0f} MHz"
        )
        diff.cause = (
            f"memory-bound (DRAM {x.dram_pct or 0:.0f}% busy on A) at lower bandwidth on B: {bandwidth}; {what}"
        )
    elif x.dram_bytes and y.dram_bytes and y.dram_bytes > x.dram_bytes * 1.10:
        diff.cause = (
            f"the same kernel moves {_pct_change(y.dram_bytes, x.dram_bytes)} more DRAM bytes on B "
            f"(its caches serve less: another process, or another L2 state); {what}"
        )
    elif x.occupancy_pct and y.occupancy_pct and y.occupancy_pct < x.occupancy_pct * 0.9:
        diff.cause = (
            f"the same kernel at lower achieved occupancy on B: {y.occupancy_pct:.0f}% vs "
            f"{x.occupancy_pct:.0f}% (another process on the SMs?); {what}"
        )
    elif procs_b > procs_a:
        diff.cause = f"another process on B's GPU ({procs_b}); {what}"
    else:
        diff.cause = (
            f"the same kernel at the same clocks and occupancy is slower on B; the counters name no cause: {what}"
        )
    return diff


def _kernel_set_cause(a: ProfileSummary, b: ProfileSummary, only_a: list[str], only_b: list[str]) -> str:
    ka, kb = {k.name: k for k in a.kernels}, {k.name: k for k in b.kernels}

    def listed(names: list[str], kernels: dict) -> str:
        return ", ".join(
            f"{short_name(n, 48)} ({(kernels[n].time_us or 0) * (kernels[n].per_call or 0):.4g} µs per call)"
            for n in names
        )

    if only_a and only_b:
        return f"a different kernel: B runs {listed(only_b, kb)} where A runs {listed(only_a, ka)}"
    if only_b:
        return f"B runs more kernels per call: {listed(only_b, kb)}, which A does not run"
    return f"B runs fewer kernels per call: A also runs {listed(only_a, ka)}"


def _note_counters(x: KernelSummary, y: KernelSummary, details: list[str]) -> None:
    """Every counter of the kernel that carries the effect that moved beyond a few percent."""
    for label, a_value, b_value, unit in (
        ("SM clock", x.sm_mhz, y.sm_mhz, " MHz"),
        ("DRAM clock", x.dram_mhz, y.dram_mhz, " MHz"),
        ("SM throughput", x.sm_pct, y.sm_pct, "%"),
        ("DRAM throughput", x.dram_pct, y.dram_pct, "%"),
        ("achieved occupancy", x.occupancy_pct, y.occupancy_pct, "%"),
        ("DRAM bytes", x.dram_bytes, y.dram_bytes, ""),
        ("DRAM bandwidth", x.dram_gb_s, y.dram_gb_s, " GB/s"),
    ):
        if a_value and b_value and abs(b_value / a_value - 1) >= CLOCK_STEP:
            details.append(f"{label}: B {b_value:.4g}{unit}, A {a_value:.4g}{unit} ({_pct_change(b_value, a_value)})")
