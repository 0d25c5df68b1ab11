"""What `profile` and `diff --across-hosts --profile` show, as output.Documents: each profiled kernel's
counters, each profile's time per call beside the sweep's, and the counter diffs of flagged cases."""

from __future__ import annotations

from typing import Optional

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


def _clocks(p) -> tuple:
    """(ncu's SM MHz over the call's kernels, time-weighted; µs per call at the sweep's SM clock)."""
    from ..analysis.profile import at_clock_us

    summary = p.summary or {}
    cycles, per_call = summary.get("per_call_cycles"), summary.get("per_call_us")
    return (cycles / per_call if cycles and per_call else None), at_clock_us(summary, p.sweep_sm_clock_mhz)


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
        "notes": summary.get("notes", []),
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
        note = p.record.reason or p.problem or "; ".join(summary.get("notes", [])) or f"stored in {p.path.parent}"
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
