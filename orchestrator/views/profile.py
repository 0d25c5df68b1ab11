"""What `profile` and `diff --across-hosts --profile` show, as output.Documents: each profiled kernel's
counters, each profile's time per call beside the sweep's, and the counter diffs of flagged cases."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from ..analysis import profile as analysis
from ..runs import ncureport
from .output import Document, Section
from .tables import US_DIGITS, significant

KERNEL_HEADERS = [
    "host",
    "case",
    "kernel",
    "per call",
    "µs",
    "SM %",
    "DRAM %",
    "occupancy %",
    "SM MHz",
    "DRAM MHz",
    "registers",
    "smem KB",
]
CALL_HEADERS = [
    "host",
    "case",
    "status",
    "kernels",
    "ncu µs",
    "ncu SM MHz",
    "sweep µs",
    "sweep SM MHz",
    "ncu / sweep",
    "at sweep's clock / sweep",
    "note",
]
_STATUS_STYLE = {"ok": "green", "failed": "bold red", "no-ncu": "yellow", "no-permission": "yellow"}


def _n(value: Optional[float], fmt: str = ".0f") -> str:
    return "" if value is None else format(value, fmt)


def case_text(case) -> str:
    return f"{case.backend} {case.m}x{case.n}x{case.k}"


# limit code (runs/ncureport.py LIMIT_*) -> its words
LIMIT_WORDS = {
    ncureport.LIMIT_MAX_KERNELS: "ncu stopped at {max_kernels} kernels (--max-kernels): the calls are not all profiled",
    ncureport.LIMIT_INDIVISIBLE: "{launches} kernel launches do not divide into {calls} calls: no time per call",
    ncureport.LIMIT_KERNEL_FILTER: "only kernels whose name matches {regex!r} (--kernel)",
}


def limit_text(limit) -> str:
    """What a profile's summary leaves out (runs/ncureport.py Limit, or its stored dict) in words."""
    code, facts = (limit["code"], limit["facts"]) if isinstance(limit, dict) else (limit.code, limit.facts)
    return LIMIT_WORDS[code].format(**facts)


def summary_notes(summary: Optional[dict]) -> list[str]:
    """A stored summary's notes in words: its limits (STORED_PROFILE_FORMAT 2), or the notes a format 1
    file stored already worded."""
    summary = summary or {}
    if "limits" in summary:
        return [limit_text(x) for x in summary["limits"]]
    return list(summary.get("notes", []))


def _clocks(p) -> tuple:
    """(ncu's SM MHz over the call's kernels, time-weighted; µs per call at the sweep's SM clock)."""
    summary = p.summary or {}
    cycles, per_call = summary.get("per_call_cycles"), summary.get("per_call_us")
    return (cycles / per_call if cycles and per_call else None), analysis.at_clock_us(summary, p.sweep_sm_clock_mhz)


def profile_entry(p) -> dict:
    """One stored profile as JSON data (runs/profiles.StoredProfile)."""
    summary = p.summary or {}
    per_call = summary.get("per_call_us")
    ncu_mhz, at_sweep_clock = _clocks(p)
    return {
        "slot": p.slot,
        "case_id": p.case_id,
        "backend": p.record.case.backend,
        "m": p.record.case.m,
        "n": p.record.case.n,
        "k": p.record.case.k,
        "label": p.record.case.label,
        "status": p.record.status,
        "reason": p.record.reason,
        "problem": p.problem,
        "per_call_us": per_call,
        "sweep_median_us": p.sweep_median_us,
        "ncu_over_sweep": per_call / p.sweep_median_us if per_call and p.sweep_median_us else None,
        "ncu_sm_mhz": ncu_mhz,
        "sweep_sm_clock_mhz": p.sweep_sm_clock_mhz,
        "at_sweep_clock_us": at_sweep_clock,
        "at_sweep_clock_over_sweep": at_sweep_clock / p.sweep_median_us
        if at_sweep_clock and p.sweep_median_us
        else None,
        "kernels": summary.get("kernels", []),
        "notes": summary_notes(summary),
        "run": p.record.run.model_dump(mode="json") if p.record.run else None,
        "ncu": p.record.ncu,
        "ncu_version": p.record.ncu_version,
        "argv": p.record.argv,
        "stored": str(p.path),
        "report": str(p.report) if p.report else None,
    }


def profile_document(profiles: list) -> Document:
    kernel_rows, call_rows, notes = [], [], []
    for p in profiles:
        case = case_text(p.record.case)
        summary = p.summary or {}
        for k in summary.get("kernels", []):
            kernel_rows.append(
                [
                    p.slot,
                    case,
                    k["short"],
                    _n(k["per_call"], "g"),
                    significant(k["time_us"], US_DIGITS),
                    _n(k["sm_pct"]),
                    _n(k["dram_pct"]),
                    _n(k["occupancy_pct"]),
                    _n(k["sm_mhz"]),
                    _n(k["dram_mhz"]),
                    _n(k["registers"]),
                    "" if k["smem_bytes"] is None else significant(k["smem_bytes"] / 1e3, 3),
                ]
            )
        entry = profile_entry(p)
        note = p.record.reason or p.problem or "; ".join(summary_notes(summary)) or f"stored in {p.path.parent}"
        call_rows.append(
            [
                p.slot,
                case,
                p.record.status,
                str(len(summary.get("kernels", []))) if summary else "",
                significant(entry["per_call_us"], US_DIGITS),
                _n(entry["ncu_sm_mhz"]),
                significant(p.sweep_median_us, US_DIGITS),
                _n(p.sweep_sm_clock_mhz),
                _n(entry["ncu_over_sweep"], ".3f"),
                _n(entry["at_sweep_clock_over_sweep"], ".3f"),
                note,
            ]
        )
    sections = []
    if kernel_rows:
        sections.append(
            Section(
                KERNEL_HEADERS,
                kernel_rows,
                title="kernels under ncu (medians over their launches)",
                right=("per call", "µs", "SM %", "DRAM %", "occupancy %", "SM MHz", "DRAM MHz", "registers", "smem KB"),
                optional=("DRAM MHz", "smem KB", "registers", "occupancy %"),
            )
        )
    sections.append(
        Section(
            CALL_HEADERS,
            call_rows,
            title="per call of the case: the kernels' time beside the sweep's median",
            right=(
                "kernels",
                "ncu µs",
                "ncu SM MHz",
                "sweep µs",
                "sweep SM MHz",
                "ncu / sweep",
                "at sweep's clock / sweep",
            ),
            styles={2: _STATUS_STYLE},
            optional=("kernels", "note"),
            caption="ncu times each kernel alone, after its own replay passes: often at a higher SM "
            "clock than the sweep's back-to-back calls; `at sweep's clock` is its SM cycles "
            "over the sweep's SM clock (NVML, median of the case's rounds)",
        )
    )
    data = [profile_entry(p) for p in profiles]
    records = [{k: v for k, v in d.items() if k not in ("kernels", "notes", "run", "argv")} for d in data]
    return Document(sections, data=data, records=records, notes=notes, kind="profile")


def counter_diff_document(comparisons: list[dict]) -> Document:
    """The counter diffs of `diff --across-hosts --profile`: per flagged case, B (the flagged host) against
    A (the host closest to the fleet median) and the likely cause."""
    rows, notes = [], []
    for c in comparisons:
        sweep_ratio = "" if c.get("sweep_ratio") is None else f"{c['sweep_ratio']:.3f}"
        rows.append(
            [
                c["case"],
                c["b_slot"],
                c["a_slot"] or "",
                sweep_ratio,
                significant(c.get("a_us"), US_DIGITS),
                significant(c.get("b_us"), US_DIGITS),
                "" if c.get("ratio") is None else f"{c['ratio']:.3f}",
                c["cause"],
            ]
        )
        notes += [f"{c['b_slot']} {c['case']}: {d}" for d in c.get("details", [])]
    section = Section(
        ["case", "flagged host (B)", "median host (A)", "sweep B/A", "ncu A µs", "ncu B µs", "ncu B/A", "likely cause"],
        rows,
        title="flagged cases profiled: the counters of B beside A",
        right=("sweep B/A", "ncu A µs", "ncu B µs", "ncu B/A"),
    )
    records = [{k: v for k, v in c.items() if k not in ("details", "kernels")} for c in comparisons]
    return Document([section], data={"comparisons": comparisons}, records=records, notes=notes, kind="fleet-profile")


# -- the counter diff in words --------------------------------------------------------------------------
@dataclass
class CounterDiff:
    """A counter diff (analysis/profile.py CounterFindings) as stored and shown: its cause and details
    worded."""

    a_us: Optional[float]
    b_us: Optional[float]
    ratio: Optional[float]
    cause: str  # the likely cause, one line
    details: list[str] = field(default_factory=list)  # every other difference worth knowing
    kernels: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


_WHAT = "{short} {b_us:.4g} µs on B vs {a_us:.4g} µs on A ({pct_us})"
# cause code -> its words; {what}: the kernel that carries the effect and its time on each side.
CAUSE_WORDS = {
    analysis.CAUSE_CANNOT_COMPARE: "cannot compare: {notes}",
    analysis.CAUSE_DIFFERENT_KERNEL: "a different kernel: B runs {listed_b} where A runs {listed_a}",
    analysis.CAUSE_MORE_KERNELS: "B runs more kernels per call: {listed_b}, which A does not run",
    analysis.CAUSE_FEWER_KERNELS: "B runs fewer kernels per call: A also runs {listed_a}",
    analysis.CAUSE_LAUNCH_COUNT: "B launches the same kernels a different number of times per call: {moved}",
    analysis.CAUSE_NO_KERNEL_TIME: "the same kernels; ncu gave no time for {kernel_name}",
    analysis.CAUSE_LAUNCH_CONFIG: "the same kernel with another launch configuration (grid {grid[0]} vs {grid[1]}, "
    "block {block[0]} vs {block[1]}, {registers[0]:g} vs {registers[1]:g} registers): {what}",
    "launch-config-unknown-registers": "the same kernel with another launch configuration: {what}",
    analysis.CAUSE_OUTSIDE_KERNELS: "under ncu the kernels take the same time on both (B/A {ratio:.3f} per call): the "
    "slowdown lies outside the kernels' own execution (gaps between launches, the host's CPU, or another "
    "process on the GPU when the sweep ran)",
    analysis.CAUSE_SM_CLOCK: "the same kernel, slower at a lower SM clock: {b_mhz:.0f} MHz on B vs {a_mhz:.0f} MHz "
    "on A ({pct_mhz}); {what}",
    analysis.CAUSE_MEMORY_BOUND: "memory-bound (DRAM {dram_pct:.0f}% busy on A) at lower bandwidth on B: {bandwidth}; {what}",
    analysis.CAUSE_MORE_DRAM_BYTES: "the same kernel moves {pct_bytes} more DRAM bytes on B (its caches serve less: "
    "another process, or another L2 state); {what}",
    analysis.CAUSE_LOWER_OCCUPANCY: "the same kernel at lower achieved occupancy on B: {b_pct:.0f}% vs {a_pct:.0f}% "
    "(another process on the SMs?); {what}",
    analysis.CAUSE_GPU_PROCESSES: "another process on B's GPU ({processes}); {what}",
    analysis.CAUSE_NONE_NAMED: "the same kernel at the same clocks and occupancy is slower on B; the counters name no "
    "cause: {what}",
}
DETAIL_WORDS = {
    analysis.DETAIL_GPU_PROCESSES: "{b} other processes on B's GPU while it was profiled (A: {a})",
    analysis.DETAIL_NVML_CLOCK: "NVML SM clock as the range opened: B {b_mhz} MHz, A {a_mhz} MHz",
    analysis.DETAIL_THROTTLED: "B's GPU throttled as the range opened ({reasons})",
    analysis.DETAIL_COUNTER: "{label}: B {b:.4g}{unit}, A {a:.4g}{unit} ({pct})",
}
# counter -> (its name, its unit as printed after a value)
COUNTER_WORDS = {
    "sm-clock": ("SM clock", " MHz"),
    "dram-clock": ("DRAM clock", " MHz"),
    "sm-throughput": ("SM throughput", "%"),
    "dram-throughput": ("DRAM throughput", "%"),
    "occupancy": ("achieved occupancy", "%"),
    "dram-bytes": ("DRAM bytes", ""),
    "dram-bandwidth": ("DRAM bandwidth", " GB/s"),
}


def _pct_change(b: float, a: float) -> str:
    return f"{(b / a - 1):+.0%}"


def _listed(kernels: list) -> str:
    return ", ".join(f"{analysis.short_name(n, 48)} ({us:.4g} µs per call)" for n, us in kernels)


def cause_text(cause) -> str:
    """The likely cause of a counter diff (a Finding: a CAUSE_* code and its facts) in words."""
    f = cause.facts
    words = dict(f)
    if cause.code == analysis.CAUSE_CANNOT_COMPARE:
        words["notes"] = "; ".join(limit_text(x) for x in f["limits"]) or "a side has no kernel"
    if "only_a" in f:
        words.update(listed_a=_listed(f["only_a"]), listed_b=_listed(f["only_b"]))
    if "moved" in f:
        words["moved"] = ", ".join(f"{analysis.short_name(n)} {b:g} vs {a:g}" for n, b, a in f["moved"])
    if "kernel" in f:
        words["kernel_name"] = analysis.short_name(f["kernel"])
    if "b_us" in f:
        short = analysis.short_name(f["kernel"], 48)
        words["what"] = _WHAT.format(
            short=short, b_us=f["b_us"], a_us=f["a_us"], pct_us=_pct_change(f["b_us"], f["a_us"])
        )
    if "b_mhz" in f:
        words["pct_mhz"] = _pct_change(f["b_mhz"], f["a_mhz"])
    if "b_bytes" in f:
        words["pct_bytes"] = _pct_change(f["b_bytes"], f["a_bytes"])
    if cause.code == analysis.CAUSE_MEMORY_BOUND:
        words["bandwidth"] = (
            f"{f['b_gb_s']:.0f} GB/s vs {f['a_gb_s']:.0f} GB/s"
            if f["a_gb_s"] and f["b_gb_s"]
            else f"DRAM clock {f['b_dram_mhz']:.0f} MHz vs {f['a_dram_mhz']:.0f} MHz"
        )
    code = cause.code
    if code == analysis.CAUSE_LAUNCH_CONFIG and None in f["registers"]:
        code = "launch-config-unknown-registers"
    return CAUSE_WORDS[code].format(**words)


def detail_text(detail) -> str:
    """One other difference of a counter diff (a Finding: a DETAIL_* code and its facts) in words."""
    f = detail.facts
    words = dict(f)
    if detail.code == analysis.DETAIL_THROTTLED:
        words["reasons"] = ", ".join(f["reasons"])
    if detail.code == analysis.DETAIL_COUNTER:
        label, unit = COUNTER_WORDS[f["counter"]]
        words.update(label=label, unit=unit, pct=_pct_change(f["b"], f["a"]))
    return DETAIL_WORDS[detail.code].format(**words)


def counter_diff(findings) -> CounterDiff:
    """A counter diff's findings (analysis/profile.py CounterFindings) in words."""
    return CounterDiff(
        a_us=findings.a_us,
        b_us=findings.b_us,
        ratio=findings.ratio,
        cause=cause_text(findings.cause),
        details=[detail_text(d) for d in findings.details],
        kernels=findings.kernels,
    )


def explain(a, b, a_run=None, b_run=None) -> CounterDiff:
    """Why B is slower than A as far as the counters tell (analysis/profile.py diagnose), in words: two
    ProfileSummary and what each profiled process said (ProfiledRun)."""
    return counter_diff(analysis.diagnose(a, b, a_run, b_run))


# -- a flagged case of `diff --across-hosts --profile` ---------------------------------------------------
def flagged_comparison(d, ref, a, b, case) -> dict:
    """One flagged case's counter diff as stored and shown: `d` the outlier's deviation
    (analysis/diff.py HostDeviation), `ref` the median host's slot (None: no other host ran the case),
    `a` / `b` the StoredProfile of the median and the flagged host (None: none came back), `case` its
    CaseSpec. Its `cause` says why when the two cannot be compared."""
    entry = {
        "case_id": d.case_key,
        "case": case_text(case),
        "label": case.label,
        "b_slot": d.slot,
        "a_slot": ref,
        "sweep_b_us": d.median_us,
        "fleet_median_us": d.fleet_median_us,
        "sweep_a_us": a.sweep_median_us if a else None,
        "robust_z": d.robust_z,
        "sweep_ratio": d.median_us / a.sweep_median_us if a and a.sweep_median_us else None,
        "a_profile": str(a.path) if a else None,
        "b_profile": str(b.path) if b else None,
        "a_us": None,
        "b_us": None,
        "ratio": None,
        "details": [],
        "kernels": [],
    }
    why = _not_comparable(a, b, ref)
    if not why:
        try:
            a_summary, b_summary = ncureport.summary_of(a.record), ncureport.summary_of(b.record)
            entry.update(explain(a_summary, b_summary, a.record.run, b.record.run).as_dict())
        except ncureport.ProfileFormatError as exc:
            why = f"ncu's CSV cannot be read: {exc}"
    if why:
        entry["cause"] = f"not profiled: {why}"
    return entry


def _not_comparable(a, b, ref) -> str:
    if ref is None:
        return "no other host ran the case"
    for side, p in (("the median host", a), ("the flagged host", b)):
        if p is None:
            return f"{side} gave no profile"
        if p.record.status != "ok":
            return f"{side} ({p.slot}): {p.record.reason}"
    return ""
