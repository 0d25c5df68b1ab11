"""Each host's effect over its cases against the fleet (analysis/hosteffect.py), in words: a table for
`diff RUN --across-hosts`, its JSON, and the line naming a host on stderr. Pure: data in, text out."""

from __future__ import annotations

from typing import Optional

from .output import Section
from .tables import READABLE_INTERVAL, ratio_text

NAMED_STYLE = {"SLOWER": "bold red", "FASTER": "green"}


def estimate_text(e) -> str:
    """`1.021 [1.017, 1.025]` (an Estimate), or its ratio alone when the interval is too wide to read."""
    if e is None:
        return ""
    if not e.low > 0 or e.high / e.low > READABLE_INTERVAL:
        return f"{ratio_text(e.ratio)} [too wide to read]"
    return f"{ratio_text(e.ratio)} [{ratio_text(e.low)}, {ratio_text(e.high)}]"


def split_text(h) -> str:
    """`clock 1.043 (1530 vs 1595 MHz) × work 1.004`: the time the clock costs (fleet MHz / host MHz) and
    the cycles per call against the fleet; either half alone when the other is not known. Each is its own
    estimate against the fleet's median host, so their product is the effect only about (exactly when
    most hosts agree on all three)."""
    parts = []
    if h.clock_factor is not None:
        parts.append(f"clock {ratio_text(h.clock_factor)} ({h.clock_mhz:.0f} vs {h.fleet_clock_mhz:.0f} MHz)")
    if h.work is not None:
        parts.append(f"work {ratio_text(h.work.ratio)} [{ratio_text(h.work.low)}, {ratio_text(h.work.high)}]")
    return " × ".join(parts)


def _mhz(v: Optional[float]) -> str:
    return "?" if v is None else f"{v:.0f}"


def cause_text(c: dict) -> str:
    """One cause (a code and its facts) in words."""
    code = c["code"]
    if code == "clock-lower":
        return f"SM clock in the stream {_mhz(c['mhz'])} vs {_mhz(c['fleet_mhz'])} MHz"
    if code == "nvml-clock-lower":
        return f"NVML SM clock {_mhz(c['mhz'])} vs {_mhz(c['fleet_mhz'])} MHz"
    if code == "temperature-higher":
        return f"GPU at {c['c']:.0f} °C vs {c['fleet_c']:.0f} °C"
    if code == "throttled":
        return f"throttled ({', '.join(c['reasons'])}) in {c['rounds']} rounds"
    if code == "power":
        return f"power {c['w']:.0f} vs {c['fleet_w']:.0f} W"
    if code == "tainted":
        return f"tainted in {c['cases']} cases"
    if code == "gpu-processes":
        return f"up to {c['max']} other processes on its GPU ({c['rounds']} rounds)"
    if code == "power-limit":
        return f"power limit {c['w']:.0f} W (fleet {c['fleet_w']:.0f} W)"
    if code == "clock-lock":
        return f"SM clock locked at {_lock(c['mhz'])}, the fleet's {_lock(c['fleet_mhz'])}"
    if code == "fact":
        return f"{c['field']} {c['value'] or 'none'} (fleet {c['fleet'] or 'none'})"
    if code == "calibration":
        return f"calibration {c['peak']} {c['value']:.2f} vs {c['fleet_median']:.2f} ({c['gpu_name']})"
    return code


def _lock(mhz: Optional[int]) -> str:
    return "not locked" if mhz is None else f"{mhz} MHz"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def nothing_text(effects) -> str:
    """The one line said when no host has an effect to estimate."""
    if effects.nothing == "hosts":
        return (
            f"host effect: nothing to estimate: {_count(effects.fleet_hosts, 'host')} with ok cases (a fleet needs 2)"
        )
    return (
        f"host effect: nothing to estimate: no host has 2 cases that {effects.min_hosts} hosts or more ran "
        f"({_count(effects.cases, 'such case')})"
    )


def named_text(h, anchor: str = "") -> str:
    """The named cell: `SLOWER`, `SLOWER (work)`, `SLOWER (judged against torch-bf16)`; "" unnamed."""
    if not h.named:
        return ""
    if h.judged_on == "work":
        return f"{h.verdict} (work)"
    if h.judged_on == "anchor":
        return f"{h.verdict} (judged against {anchor})"
    return h.verdict


def anchored_text(h) -> str:
    """The anchored estimate's cell: `1.020 [1.012, 1.028]`, or why there is none."""
    return estimate_text(h.anchored) or "none (too few cases, or its anchor's facts differ)"


def host_effect_section(effects) -> Section:
    """The table host | cases | effect [95% interval] | clock × work | (against ANCHOR) | named | likely
    cause; the anchor's column where some host has an estimate against one."""
    anchor = effects.anchor if any(h.anchored for h in effects.hosts) else ""
    rows = []
    for h in effects.hosts:
        rows.append(
            [
                h.slot,
                str(h.cases),
                estimate_text(h.effect) or "too few cases",
                split_text(h),
                *([anchored_text(h)] if anchor else []),
                named_text(h, effects.anchor),
                "; ".join(cause_text(c) for c in h.causes),
            ]
        )
    t = effects.threshold
    against = f"against {anchor}"
    headers = ["host", "cases", "effect [95% interval]", "clock × work", *([against] if anchor else [])]
    return Section(
        [*headers, "named", "likely cause"],
        rows,
        title=f"each host over its cases against the fleet (named: an interval that leaves 1 and an "
        f"effect beyond ±{t:.1%}, of the time, or of the work where that held still or the clock is within "
        f"±{t / 2:.2%} of the fleet's"
        + (
            f", or of its cases' ratios to {anchor} timed beside them where neither did and that lies within "
            "the time's (and work's) interval"
            if anchor
            else ""
        )
        + f"; cases that {effects.min_hosts} hosts or more ran)",
        right=("cases",),
        styles={len(headers): NAMED_STYLE},
        optional=("clock × work", *([against] if anchor else [])),
    )


def named_line(h, anchor: str = "") -> str:
    """stderr's line for a named host: `h3: slower than the fleet: 1.021 [1.017, 1.025] over 12 cases`;
    one judged on the anchor adds `, judged against torch-bf16 1.020 [1.012, 1.028]`."""
    way = "slower" if h.verdict == "SLOWER" else "faster"
    causes = "; ".join(cause_text(c) for c in h.causes)
    split = split_text(h)
    on_anchor = (
        f", judged against {anchor} {estimate_text(h.anchored)}" if h.judged_on == "anchor" and h.anchored else ""
    )
    return (
        f"{h.slot}: {way} than the fleet: {estimate_text(h.effect)} over {h.cases} cases"
        + on_anchor
        + (f" ≈ {split}" if split else "")
        + (f" ({causes})" if causes else "")
    )
