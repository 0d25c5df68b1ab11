"""One self-contained HTML report of a run (optionally against another): interactive plots, a host x case
heatmap, host facts, verdicts.

The plots are data, not pictures: this module turns the run into chart descriptions (JSON, embedded in
the page), and a small script of ours in the page (templates/report.js) draws them as SVG when the file
is opened: values on hover, backends and hosts switched on and off (the fleet medians are recomputed
over the hosts left on), a distinct colour and marker per backend. No library, no network: the file
opens anywhere, offline.
"""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Optional

from worker.contract.schema import FactsRecord

from .. import __version__
from ..analysis.diff import DEFAULT_ANCHOR, across_hosts, compare_sides, resolve_side
from ..analysis.merge import Row, merged_rows
from ..atomicfile import write_atomic
from ..errors import InputError
from ..planning.render import template_environment
from ..runs.profiles import latest_fleet
from ..runs.store import now_iso
from .diffnotes import worded_comparison
from .tables import step_text

REPORT_TEMPLATE = "report.html.j2"
MAX_PLOTTED_CASES = 40
MAX_TREND_CASES = 12


def _families(rows: list[Row]) -> dict[tuple[int, int], list[Row]]:
    fam: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for r in rows:
        fam[(r.n, r.k)].append(r)
    return dict(sorted(fam.items()))


def _per_host(rows: list[Row], value) -> dict[str, list[dict]]:
    """backend -> [{x: M, hosts: {slot: value}}] over the ok rows: the page takes the median over the hosts
    switched on."""
    by: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        v = value(r)
        if r.status == "ok" and v is not None:
            by[r.backend][r.m][r.slot] = round(v, 6)
    return {b: [{"x": m, "hosts": hs} for m, hs in sorted(ms.items())] for b, ms in by.items()}


def chart_tflops(rows: list[Row]) -> list[dict]:
    charts = []
    for (n, k), fam in _families(rows).items():
        series = _per_host(fam, lambda r: r.tflops)
        if series:
            charts.append(
                {
                    "kind": "fleet",
                    "title": f"TFLOPS vs M, N={n} K={k}",
                    "x_label": "M",
                    "y_label": "TFLOPS (median over the hosts on; band: min..max)",
                    "unit": "TFLOPS",
                    "series": [{"name": b, "points": pts} for b, pts in series.items()],
                }
            )
    return charts


def chart_speedups(rows: list[Row], baseline: str) -> list[dict]:
    """Per shape family, each backend's latency against the baseline's, host by host (the page divides
    the baseline's median over the hosts on by the backend's)."""
    charts = []
    for (n, k), fam in _families(rows).items():
        base = _per_host([r for r in fam if r.backend == baseline], lambda r: r.median_us).get(baseline)
        others = _per_host([r for r in fam if r.backend != baseline], lambda r: r.median_us)
        if base and others:
            charts.append(
                {
                    "kind": "speedup",
                    "title": f"Speedup over {baseline}, N={n} K={k}",
                    "x_label": "M",
                    "y_label": f"speedup over {baseline} (> 1: faster)",
                    "unit": "x",
                    "baseline": baseline,
                    "base": base,
                    "series": [{"name": b, "points": pts} for b, pts in others.items()],
                }
            )
    return charts


def chart_sol(rows: list[Row]) -> list[dict]:
    series = _per_host([r for r in rows if r.pct_sol is not None], lambda r: r.pct_sol)
    if not series:
        series = _per_host([r for r in rows if r.pct_peak is not None], lambda r: r.pct_peak)
        title, label = "% of the datasheet's peak (all shapes)", "% of the datasheet's dense peak"
    else:
        title, label = "% of speed of light (all shapes)", "% of this GPU's measured speed of light"
    if not series:
        return []
    return [
        {
            "kind": "fleet",
            "title": title,
            "x_label": "M",
            "y_label": label,
            "unit": "%",
            "series": [{"name": b, "points": pts} for b, pts in series.items()],
        }
    ]


def chart_roofline(rows: list[Row], slots) -> list[dict]:
    """Per GPU model with a calibration: achieved TFLOPS against arithmetic intensity (FLOP per byte
    moved), each case's fleet median, under the roofs min(measured peak, intensity x measured
    bandwidth) of each operand family."""
    cal_by_model = {}
    for s in slots:
        if s.facts is not None and s.facts.calibration is not None and s.facts.calibration.tb_s:
            cal_by_model.setdefault(s.facts.gpu_name or "?", s.facts.calibration)
    charts = []
    for model, cal in cal_by_model.items():
        ok = [r for r in rows if r.status == "ok" and r.gpu_name == model and r.tflops and r.tb_per_s]
        if not ok:
            continue
        points: dict[str, dict[tuple, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
        for r in ok:
            points[r.backend][(r.m, r.n, r.k)].append((r.tflops / r.tb_per_s, r.tflops))
        series = [
            {
                "name": b,
                "points": [
                    {
                        "x": statistics.median(p[0] for p in pts),
                        "y": statistics.median(p[1] for p in pts),
                        "what": f"{m}x{n}x{k}",
                    }
                    for (m, n, k), pts in cases.items()
                ],
            }
            for b, cases in points.items()
        ]
        roofs = [
            {"name": f"{fam} roof ({peak:.0f} TFLOPS)", "peak": peak, "tb_s": cal.tb_s}
            for fam, peak in sorted(cal.tflops.items())
        ]
        charts.append(
            {
                "kind": "roofline",
                "title": f"Roofline, {model}: measured roofs ({cal.tb_s:.2f} TB/s copy)",
                "x_label": "arithmetic intensity (FLOP / byte moved)",
                "y_label": "achieved TFLOPS",
                "unit": "TFLOPS",
                "series": series,
                "roofs": roofs,
            }
        )
    return charts


def chart_heatmap(rows: list[Row], causes: Optional[dict] = None) -> list[dict]:
    """Host x case: each host's median against the fleet median of that case (cases ok on 2+ hosts); a cell
    whose case was profiled (`diff --across-hosts --profile`) carries the counter diff's likely cause."""
    by_case: dict[tuple, dict[str, float]] = defaultdict(dict)
    case_ids: dict[tuple, str] = {}
    for r in rows:
        if r.status == "ok" and r.median_us:
            by_case[(r.backend, r.m, r.n, r.k, r.label)][r.slot] = r.median_us
            case_ids[(r.backend, r.m, r.n, r.k, r.label)] = r.case_id
    cases = [(key, hosts) for key, hosts in by_case.items() if len(hosts) >= 2]
    if not cases:
        return []
    slots = sorted({slot for _, hosts in cases for slot in hosts})
    cols = []
    for (backend, m, n, k, label), hosts in cases:
        med = statistics.median(hosts.values())
        cells = {slot: {"us": round(us, 4), "ratio": round(us / med, 5)} for slot, us in hosts.items()}
        for slot, cell in cells.items():
            cause = (causes or {}).get((slot, case_ids[(backend, m, n, k, label)]))
            if cause:
                cell["profile"] = cause
        cols.append({"case": f"{backend} {m}x{n}x{k}", "label": label, "median_us": round(med, 4), "cells": cells})
    return [
        {
            "kind": "heatmap",
            "title": "Each host against the fleet median, per case (red: slower)",
            "hosts": slots,
            "cases": cols,
        }
    ]


def chart_comparison(cmp) -> list[dict]:
    cases = [c for c in cmp.cases if c.ratio is not None and c.ratio > 0]
    if not cases:
        return []
    # The cases that moved most, either way (half as slow moved as much as twice as slow); the table
    # below lists all of them.
    cases = sorted(cases, key=lambda c: abs(math.log(c.ratio)), reverse=True)[:MAX_PLOTTED_CASES]
    return [
        {
            "kind": "forest",
            "title": f"{cmp.b} vs {cmp.a}: the {len(cases)} cases that moved most",
            "x_label": "B / A latency, 95% CI, log scale (right of 1: B slower)",
            "threshold": cmp.threshold,
            "rows": [
                {
                    "name": f"{c.host + ' ' if c.host else ''}{c.backend} {c.m}x{c.n}x{c.k}",
                    "ratio": c.ratio,
                    "lo": c.ci_low,
                    "hi": c.ci_high,
                    "verdict": c.verdict,
                    "a_us": c.a_us,
                    "b_us": c.b_us,
                }
                for c in cases
            ],
        }
    ]


def chart_headtohead(run_id: str, slots, tie: Optional[float] = None) -> list[dict]:
    """Every two backends timed together (analysis/headtohead.py): per shape B/A from their paired samples
    with its interval and winner, over the fleet and per host; the page draws the pair the reader picks,
    at first the first two backends of the sweep that were timed together."""
    from ..analysis.headtohead import DEFAULT_TIE, backends_of, head_to_head, pair_index
    from .versus import clocks_note, fleet_line, winner_text

    tie = DEFAULT_TIE if tie is None else tie
    timed = {together for _, together in pair_index(slots).slots_of}
    backends = backends_of(slots)
    pairs = []
    for i, a in enumerate(backends):
        for b in backends[i + 1 :]:
            if frozenset((a, b)) not in timed:
                continue
            h2h = head_to_head(run_id, slots, a, b, tie)
            rows = []
            for f in h2h.fleet:
                shape = f"{f.m}x{f.n}x{f.k}" + (f" {f.label}" if f.label else "")
                of_shape = [c for c in h2h.contests if (c.label, c.m, c.n, c.k) == (f.label, f.m, f.n, f.k)]
                scopes = ([("", f)] if len(h2h.slots) > 1 else []) + [(c.slot, c) for c in of_shape]
                for host, x in scopes:
                    name = f"{shape} {host or 'fleet'}" if len(h2h.slots) > 1 else shape
                    rows.append(
                        {
                            "name": name,
                            "host": host,
                            "ratio": x.ratio,
                            "lo": x.low,
                            "hi": x.high,
                            "winner": x.winner,
                            "verdict": winner_text(x.winner, a, b),
                            "a_us": x.a_us,
                            "b_us": x.b_us,
                            "pairs": x.pairs,
                            "rounds": x.rounds,
                            "note": clocks_note(x) if host and x.clocks_apart else "",  # a host's Contest
                        }
                    )
            pairs.append({"a": a, "b": b, "line": fleet_line(h2h), "rows": rows})
    if not pairs:
        return []
    return [
        {
            "kind": "headtohead",
            "title": "Head-to-head: B/A per shape from the samples timed together (pick a pair)",
            "x_label": "B / A latency, 95% CI from the pairs, log scale (left of 1: B faster; grey: tie band)",
            "tie": tie,
            "pairs": pairs,
            "selected": 0,
        }
    ]


def chart_history(runs_dir: Path, rows: list[Row], threshold: float) -> list[dict]:
    """Trend charts: each of this run's ok cases (up to MAX_TREND_CASES, those that moved most first)
    over every stored run, one line per host, steps marked."""
    from ..analysis.history import Selection, history
    from ..runs.index import RunIndex

    try:
        index = RunIndex.open(runs_dir)
        try:
            hist = history(index, Selection(), threshold, with_steps=True)
        finally:
            index.close()
    except (sqlite3.Error, OSError, ValueError, ArithmeticError) as exc:  # whatever the index holds or lacks
        raise InputError(
            f"--history: the history index of {runs_dir} cannot be read ({exc}); the report "
            "without --history needs no index"
        ) from None
    wanted = {r.case_id for r in rows if r.status == "ok"}
    series: dict[str, list] = defaultdict(list)
    for p in hist.points:
        if p.case_id in wanted:
            series[p.series].append(p)
    by_case: dict[str, dict[str, list]] = defaultdict(dict)
    for pts in series.values():
        if len(pts) >= 2:
            by_case[pts[0].case_id][pts[0].host] = pts
    if not by_case:
        return []

    def spread(hosts: dict) -> float:
        values = [p.median_us for pts in hosts.values() for p in pts]
        return max(values) / min(values)

    chosen = sorted(by_case.items(), key=lambda kv: -spread(kv[1]))[:MAX_TREND_CASES]
    runs = sorted({p.run_id for hosts in by_case.values() for pts in hosts.values() for p in pts})
    charts = []
    for _, hosts in chosen:
        first = next(iter(hosts.values()))[0]
        charts.append(
            {
                "kind": "trend",
                "title": f"History ({len(charts) + 1} of the {len(chosen)} cases of this run "
                f"that moved most over {len(runs)} stored runs): "
                f"{first.backend} {first.m}x{first.n}x{first.k}",
                "x_label": f"stored runs, oldest first ({len(runs)})",
                "y_label": "µs (median of rounds)",
                "unit": "µs",
                "runs": runs,
                "series": [
                    {
                        "name": host,
                        "points": [
                            {"x": runs.index(p.run_id), "y": p.median_us, "run": p.run_id, "step": step_text(p)}
                            for p in pts
                        ],
                    }
                    for host, pts in sorted(hosts.items())
                ],
            }
        )
    return charts


def page_data(charts: list[dict], rows: list[Row]) -> str:
    """The charts as JSON for a <script type="application/json"> element: '<' is escaped so no value (a
    label is user text) can end the element."""
    hosts = sorted({r.slot for r in rows})
    backends = list(dict.fromkeys(r.backend for r in rows))
    text = json.dumps({"hosts": hosts, "backends": backends, "charts": charts}, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def significant(value: Optional[float], digits: int) -> str:
    """`value` to `digits` significant digits, in plain notation and never cutting its integer part:
    0.000412, 3.213, 272.6, 12346 ("" for None). A CPU's 0.004 TFLOPS is not 0.0."""
    if value is None:
        return ""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


METHOD_NAMES = {"cuda-graph": "CUDA-graph replay", "cuda-events": "CUDA events", "cpu-wallclock": "CPU wall clock"}
METHODS_SHORT = {"cuda-graph": "graph", "cuda-events": "events", "cpu-wallclock": "CPU clock"}


def _measured_side(runs_dir: Path, ref: str):
    """The side `ref` names; InputError for a dry run of `render`, where nothing was measured."""
    side = resolve_side(runs_dir, ref)
    if side.store.manifest().dry_run:
        raise InputError(
            f"run {side.store.run_id} is a dry run of `fleetbench render`: nothing ran, so there is "
            "nothing to report (report a run made by `fleetbench run`)"
        )
    return side


def write_report(
    runs_dir: Path,
    run_ref: str,
    against: Optional[str],
    output: Path,
    threshold: float,
    with_history: bool = False,
    baseline: Optional[str] = None,
) -> Path:
    """Write the report of `run_ref` to `output`; returns the path. Raises InputError for a run that cannot
    be reported (dry run, unknown baseline), an output that is a folder or not writable, or an unreadable
    history index."""
    if output.is_dir():
        raise InputError(f"-o {output}: is a folder; name the HTML file to write (e.g. -o {output / 'report.html'})")
    side = _measured_side(runs_dir, run_ref)
    store = side.store
    rows = merged_rows(store, side.slots)  # the side holds the slots asked for, results read once
    backends = list(dict.fromkeys(r.backend for r in rows))
    if baseline is not None and baseline not in backends:
        raise InputError(f"--baseline {baseline!r} is not in run {store.run_id} (backends: {', '.join(backends)})")
    baseline = baseline or ("torch-bf16" if "torch-bf16" in backends else (backends[0] if backends else ""))
    counts = {}
    for r in rows:
        if r.method:
            counts[r.method] = counts.get(r.method, 0) + 1
    methods = (
        ", ".join(f"{METHOD_NAMES.get(m, m)} ({n} results)" for m, n in counts.items()) or "nothing (no timed result)"
    )
    # The counter diffs of the run's latest `diff --across-hosts --profile`, shown beside their outliers.
    fleet_profiles = latest_fleet(store) if len(side.slots) >= 3 else []
    causes = {(c["b_slot"], c["case_id"]): c["cause"] for c in fleet_profiles}
    charts = (
        chart_tflops(rows)
        + chart_speedups(rows, baseline)
        + chart_sol(rows)
        + chart_heatmap(rows, causes)
        + chart_roofline(rows, side.slots)
        + chart_headtohead(store.run_id, side.slots)
    )
    if with_history:
        charts += chart_history(runs_dir, rows, threshold)
    comparison = None
    if against:
        comparison = worded_comparison(
            compare_sides(_measured_side(runs_dir, against), side, threshold, DEFAULT_ANCHOR)
        )
        charts += chart_comparison(comparison)
    # A host that never said what it is (unreachable, stopped before its facts) gets every fact blank.
    no_facts = dict.fromkeys(set(FactsRecord.model_fields) - {"kind", "schema_version"})
    facts = [
        {
            "slot": s.slot,
            "facts": s.facts.model_dump(exclude={"kind", "schema_version"}) if s.facts else no_facts,
            "outcome": s.outcome.outcome if s.outcome else "not run",
            "error": s.outcome.error if s.outcome else "",
        }
        for s in side.slots
    ]
    fleet = across_hosts(side, threshold) if len(side.slots) >= 3 else None
    html = (
        template_environment()
        .get_template(REPORT_TEMPLATE)
        .render(
            run_id=store.run_id,
            sweep=store.manifest().sweep_name,
            generated=now_iso(),
            version=__version__,
            rows=rows,
            methods_short=METHODS_SHORT,
            charts=charts,
            data=page_data(charts, rows),
            script=_script(),
            facts=facts,
            comparison=comparison,
            fleet=fleet,
            fleet_profiles=fleet_profiles,
            baseline=baseline,
            methods=methods,
            threshold=threshold,
            sig=significant,
        )
    )
    try:
        write_atomic(output, html.encode("utf-8"))
    except OSError as exc:
        raise InputError(f"-o {output}: cannot write the report there ({exc.strerror or exc})") from None
    return output


def _script() -> str:
    """The page's renderer (templates/report.js), inlined: the report is one file."""
    from ..config.resources import templates_dir

    script = (templates_dir() / "report.js").read_text(encoding="utf-8")
    assert "</script" not in script.lower()  # it would end its own element
    return script
