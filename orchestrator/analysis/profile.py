"""Nsight Compute's report, read: ncu's CSV -> one entry per profiled kernel launch -> a profile's summary
(per kernel: time, SM / DRAM throughput, occupancy, clocks, registers, shared memory) -> the counter
diff of two profiles of one case, which names the likely cause of the slower side.

Pure: text and records in, data out. The CSV is what ncu printed (worker/profile.py stores it verbatim
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


@dataclass
class ProfileSummary:
    """A profiled case: its kernels, and per call of the case the kernels' time added up (`per_call_us`,
    None when ncu stopped before the last call's kernels or the launches do not divide into the calls), and
    their SM cycles (`per_call_cycles`: each kernel's time at the SM clock ncu measured it at)."""

    kernels: list[KernelSummary]
    calls: int
    launches: int
    per_call_us: Optional[float]
    notes: list[str] = field(default_factory=list)
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
    notes = []
    complete = bool(launches) and calls > 0 and all(len(g) % calls == 0 for g in groups.values())
    if max_kernels and len(launches) >= max_kernels:
        complete = False
        notes.append(f"ncu stopped at {max_kernels} kernels (--max-kernels): the calls are not all profiled")
    elif launches and not complete:
        notes.append(f"{len(launches)} kernel launches do not divide into {calls} calls: no time per call")
    if kernel_regex:
        notes.append(f"only kernels whose name matches {kernel_regex!r} (--kernel)")
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
        kernels=kernels, calls=calls, launches=len(launches), per_call_us=per_call, notes=notes, per_call_cycles=cycles
    )


def at_clock_us(summary: Optional[dict], sm_mhz: Optional[float]) -> Optional[float]:
    """A profile's time per call had its kernels run at `sm_mhz` (their SM cycles over that clock): ncu runs
    each kernel alone, after its own replay passes, so it often runs at a higher SM clock than the sweep's
    back-to-back calls, which a heavy kernel holds at the power limit. An estimate for kernels bound by the
    SM clock; a kernel waiting on DRAM scales less."""
    cycles = (summary or {}).get("per_call_cycles")
    return cycles / sm_mhz if cycles and sm_mhz else None


def summary_of(record) -> ProfileSummary:
    """The summary of a stored ok ProfileRecord (worker/profile.py). Raises ProfileFormatError."""
    calls = record.run.calls if record.run is not None and record.run.calls else record.options.calls
    return summarize(parse_ncu_csv(record.csv), calls, record.options.max_kernels, record.options.kernel_regex)


# -- the counter diff of two profiles -------------------------------------------------------------------
CLOCK_STEP = 0.03  # a clock 3% apart is a difference worth naming
MEMORY_BOUND_PCT = 60.0  # DRAM (or the memory system) this busy: the kernel waits on memory
SAME_UNDER_NCU = 0.03  # kernels within this of each other under ncu: their own execution is not slower

# The likely cause of B's slower time (CounterFindings.cause.code); views/profile.py words each.
CAUSE_CANNOT_COMPARE = "cannot-compare"  # notes: why a side has no time per call
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
        return Finding(CAUSE_CANNOT_COMPARE, {"notes": a.notes + b.notes}), []
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
