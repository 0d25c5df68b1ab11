"""Nsight Compute's report, read: ncu's CSV -> one entry per profiled kernel launch -> a profile's summary
(per kernel: time, SM / DRAM throughput, occupancy, clocks, registers, shared memory), the form a stored
profile keeps (runs/profiles.py).

Pure: text and records in, data out. The CSV is what ncu printed (worker/tools/profile.py stores it verbatim
in each record), so a later reader can parse a stored profile again. Both of ncu's CSV layouts are read:
the raw page (a column per metric, a row of units under the header) and the details page (a row per
metric, with its unit); units are converted from whatever ncu printed (`nsecond`, `usecond`,
`cycle/nsecond`, `Ghz`, `Kbyte/block` ...), and a unit this reader does not know leaves the value out
rather than guessing its scale.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from typing import Optional

# field -> (metric names in order of preference, dimension)
METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "time_us": (("gpu__time_duration.sum",), "time"),
    "sm_pct": (("sm__throughput.avg.pct_of_peak_sustained_elapsed",), "pct"),
    "memory_pct": (("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",), "pct"),
    "dram_pct": (
        (
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        ),
        "pct",
    ),
    "occupancy_pct": (("sm__warps_active.avg.pct_of_peak_sustained_active",), "pct"),
    "theoretical_occupancy_pct": (("sm__maximum_warps_per_active_cycle_pct",), "pct"),
    "sm_mhz": (
        (
            "sm__cycles_elapsed.avg.per_second",
            "gpc__cycles_elapsed.avg.per_second",
            "smsp__cycles_elapsed.avg.per_second",
        ),
        "frequency",
    ),
    "dram_mhz": (("dram__cycles_elapsed.avg.per_second",), "frequency"),
    "registers": (("launch__registers_per_thread",), "count"),
    "smem_static_bytes": (("launch__shared_mem_per_block_static",), "bytes"),
    "smem_dynamic_bytes": (("launch__shared_mem_per_block_dynamic",), "bytes"),
    "dram_read_bytes": (("dram__bytes_read.sum",), "bytes"),
    "dram_write_bytes": (("dram__bytes_write.sum",), "bytes"),
    "waves": (("launch__waves_per_multiprocessor",), "count"),
}
# To the units this module reports in: µs, MHz, bytes, %.
_TIME = {
    "nsecond": 1e-3,
    "ns": 1e-3,
    "usecond": 1.0,
    "us": 1.0,
    "µs": 1.0,
    "msecond": 1e3,
    "ms": 1e3,
    "second": 1e6,
    "s": 1e6,
}
_FREQUENCY = {
    "hz": 1e-6,
    "khz": 1e-3,
    "mhz": 1.0,
    "ghz": 1e3,
    "cycle/second": 1e-6,
    "cycle/msecond": 1e-3,
    "cycle/usecond": 1.0,
    "cycle/nsecond": 1e3,
}
_BYTES = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12, "kib": 1024.0, "mib": 1024.0**2}
IDENTITY = ("Kernel Name", "Block Size", "Grid Size")


class ProfileFormatError(ValueError):
    """ncu's CSV is not one this reader understands."""


def number(text: str) -> Optional[float]:
    """ncu's printed number ("14,240", "48.23", "4.0e-05"); None for "n/a" and the like."""
    text = (text or "").strip().replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def convert(value: Optional[float], unit: str, dimension: str) -> Optional[float]:
    """`value` in `unit` in this module's unit for `dimension`; None when the unit is not one it knows."""
    if value is None:
        return None
    unit = unit.strip()
    if dimension == "pct":
        return value if unit in ("%", "") else None
    if dimension == "count":
        return value
    if dimension == "time":
        factor = _TIME.get(unit.lower())
    elif dimension == "frequency":
        factor = _FREQUENCY.get(unit.lower())
    else:  # bytes, per block or not
        factor = _BYTES.get(unit.lower().split("/")[0])
    return None if factor is None else value * factor


def _rows(text: str) -> list[list[str]]:
    """The CSV rows from the header (the line naming the kernel) on: a profiled program's own output and
    ncu's ==PROF== lines may come first."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), None)
    if start is None:
        raise ProfileFormatError('no CSV header with a "Kernel Name" column')
    return list(csv.reader(io.StringIO("\n".join(lines[start:]))))


def parse_ncu_csv(text: str) -> list[dict]:
    """One dict per profiled kernel launch, in launch order: `name`, `block`, `grid`, `id` and each field
    of METRICS found (None when ncu gave no value, or one in a unit this reader does not know)."""
    rows = _rows(text)
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    if "Metric Name" in col and "Metric Value" in col:  # the details page: a row per metric
        launches: dict[str, dict] = {}
        for row in rows[1:]:
            if len(row) < len(header):
                continue
            launch = launches.setdefault(
                row[col["ID"]], {"id": row[col["ID"]], **{k: row[col[k]] for k in IDENTITY}, "metrics": {}}
            )
            launch["metrics"][row[col["Metric Name"]]] = (
                row[col["Metric Value"]],
                row[col.get("Metric Unit", -1)] if "Metric Unit" in col else "",
            )
        raw = list(launches.values())
    else:  # the raw page: a column per metric, a row of units first
        body = rows[1:]
        units = body[0] if body and body[0] and not body[0][col["ID"]].strip() else [""] * len(header)
        if body and units is body[0]:
            body = body[1:]
        raw = []
        for row in body:
            if len(row) < len(header) or not row[col["ID"]].strip():
                continue
            raw.append(
                {
                    "id": row[col["ID"]],
                    **{k: row[col[k]] for k in IDENTITY if k in col},
                    "metrics": {name: (row[i], units[i] if i < len(units) else "") for name, i in col.items()},
                }
            )
    out = []
    for launch in raw:
        entry = {
            "id": launch["id"],
            "name": launch.get("Kernel Name", ""),
            "block": launch.get("Block Size", ""),
            "grid": launch.get("Grid Size", ""),
        }
        for name, (candidates, dimension) in METRICS.items():
            entry[name] = None
            for metric in candidates:
                if metric in launch["metrics"]:
                    value, unit = launch["metrics"][metric]
                    entry[name] = convert(number(value), unit, dimension)
                    break
        out.append(entry)
    return out


def short_name(name: str, width: int = 72) -> str:
    """A kernel's demangled name made readable: no `void`, no argument list, a template wrapper's inner
    kernel name (cutlass::Kernel2<cutlass_80_tensorop_...> -> cutlass_80_tensorop_...), cut in the middle."""
    text = re.sub(r"^void\s+", "", name.strip())
    depth, cut = 0, len(text)
    for i in range(len(text) - 1, -1, -1):  # the argument list: the last top-level parenthesis group
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    text = text[:cut] if cut > 0 else text
    inner = re.fullmatch(r"[\w:]+<\s*([A-Za-z_]\w*)\s*>", text)
    if inner:
        text = inner.group(1)
    if len(text) > width and "<" in text:  # a template too long to read: its name (the full one is in JSON)
        text = text[: text.index("<")] + "<…>"
    return text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-(width // 2) :]


# -- a profile's summary --------------------------------------------------------------------------------
@dataclass
class KernelSummary:
    """One kernel of a profile: medians over its launches (launch settings from its first)."""

    name: str
    short: str
    launches: int
    per_call: Optional[float]  # launches per call of the case
    time_us: Optional[float]
    sm_pct: Optional[float] = None
    memory_pct: Optional[float] = None
    dram_pct: Optional[float] = None
    occupancy_pct: Optional[float] = None
    theoretical_occupancy_pct: Optional[float] = None
    sm_mhz: Optional[float] = None
    dram_mhz: Optional[float] = None
    registers: Optional[float] = None
    smem_bytes: Optional[float] = None
    dram_bytes: Optional[float] = None
    dram_gb_s: Optional[float] = None  # achieved DRAM bandwidth: bytes read and written over its time
    waves: Optional[float] = None
    grid: str = ""
    block: str = ""

    def launch_settings(self) -> tuple:
        return (self.grid, self.block, self.registers, self.smem_bytes)


# What a summary leaves out, and why it may have no time per call (ProfileSummary.limits); views/profile.py
# words each.
LIMIT_MAX_KERNELS = "max-kernels"  # max_kernels: ncu stopped there (--max-kernels), not every call profiled
LIMIT_INDIVISIBLE = "indivisible"  # launches, calls: the launches do not divide into the calls
LIMIT_KERNEL_FILTER = "kernel-filter"  # regex: only the kernels whose name matches it (--kernel)


@dataclass
class Limit:
    """One of the LIMIT_* codes and the facts its words need."""

    code: str
    facts: dict = field(default_factory=dict)


@dataclass
class ProfileSummary:
    """A profiled case: its kernels, and per call of the case the kernels' time added up (`per_call_us`,
    None when ncu stopped before the last call's kernels or the launches do not divide into the calls), and
    their SM cycles (`per_call_cycles`: each kernel's time at the SM clock ncu measured it at)."""

    kernels: list[KernelSummary]
    calls: int
    launches: int
    per_call_us: Optional[float]
    limits: list[Limit] = field(default_factory=list)
    per_call_cycles: Optional[float] = None

    def as_dict(self) -> dict:
        return asdict(self)


def _median(values: list) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(launches: list[dict], calls: int, max_kernels: int = 0, kernel_regex: str = "") -> ProfileSummary:
    """The kernels of `launches` (parse_ncu_csv), grouped by name in order of first launch."""
    groups: dict[str, list[dict]] = {}
    for launch in launches:
        groups.setdefault(launch["name"], []).append(launch)
    limits = []
    complete = bool(launches) and calls > 0 and all(len(g) % calls == 0 for g in groups.values())
    if max_kernels and len(launches) >= max_kernels:
        complete = False
        limits.append(Limit(LIMIT_MAX_KERNELS, {"max_kernels": max_kernels}))
    elif launches and not complete:
        limits.append(Limit(LIMIT_INDIVISIBLE, {"launches": len(launches), "calls": calls}))
    if kernel_regex:
        limits.append(Limit(LIMIT_KERNEL_FILTER, {"regex": kernel_regex}))
    kernels = []
    for name, group in groups.items():

        def med(key: str) -> Optional[float]:
            return _median([g[key] for g in group])

        smem = [
            (g["smem_static_bytes"] or 0) + (g["smem_dynamic_bytes"] or 0)
            for g in group
            if g["smem_static_bytes"] is not None or g["smem_dynamic_bytes"] is not None
        ]
        moved = [
            g["dram_read_bytes"] + g["dram_write_bytes"]
            for g in group
            if g["dram_read_bytes"] is not None and g["dram_write_bytes"] is not None
        ]
        time_us = med("time_us")
        dram_bytes = _median(moved)
        kernels.append(
            KernelSummary(
                name=name,
                short=short_name(name),
                launches=len(group),
                per_call=len(group) / calls if complete else None,
                time_us=time_us,
                sm_pct=med("sm_pct"),
                memory_pct=med("memory_pct"),
                dram_pct=med("dram_pct"),
                occupancy_pct=med("occupancy_pct"),
                theoretical_occupancy_pct=med("theoretical_occupancy_pct"),
                sm_mhz=med("sm_mhz"),
                dram_mhz=med("dram_mhz"),
                registers=group[0]["registers"],
                smem_bytes=smem[0] if smem else None,
                dram_bytes=dram_bytes,
                dram_gb_s=dram_bytes / time_us / 1e3 if dram_bytes is not None and time_us else None,
                waves=group[0]["waves"],
                grid=group[0]["grid"],
                block=group[0]["block"],
            )
        )
    per_call = cycles = None
    if complete and all(k.time_us is not None for k in kernels):
        per_call = sum(k.time_us * k.per_call for k in kernels)
        if all(k.sm_mhz for k in kernels):
            cycles = sum(k.time_us * k.sm_mhz * k.per_call for k in kernels)  # µs x MHz
    return ProfileSummary(
        kernels=kernels,
        calls=calls,
        launches=len(launches),
        per_call_us=per_call,
        limits=limits,
        per_call_cycles=cycles,
    )


def summary_of(record) -> ProfileSummary:
    """The summary of a stored ok ProfileRecord (worker/tools/profile.py). Raises ProfileFormatError."""
    calls = record.run.calls if record.run is not None and record.run.calls else record.options.calls
    return summarize(parse_ncu_csv(record.csv), calls, record.options.max_kernels, record.options.kernel_regex)
