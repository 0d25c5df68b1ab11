"""One self-contained HTML report of a run (optionally against another): plots, host facts, verdicts.

Plots are drawn with matplotlib (Agg) into PNGs embedded as data URIs, so the file opens anywhere,
offline, with no scripts.
"""
from __future__ import annotations

import base64
import io
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Optional

from . import __version__
from .atomicfile import write_atomic
from .diff import across_hosts, compare_sides, resolve_side
from .merge import Row, merged_rows
from .render import template_environment
from .store import now_iso

REPORT_TEMPLATE = "report.html.j2"
MAX_PLOTTED_CASES = 40
MAX_TREND_CASES = 12


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _families(rows: list[Row]) -> dict[tuple[int, int], list[Row]]:
    fam: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for r in rows:
        fam[(r.n, r.k)].append(r)
    return dict(sorted(fam.items()))


def _fleet_series(rows: list[Row], value) -> dict[str, list[tuple[int, float, float, float]]]:
    """backend -> [(M, fleet median, min, max)] over the hosts' ok rows."""
    by: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        v = value(r)
        if r.status == "ok" and v is not None:
            by[r.backend][r.m].append(v)
    return {b: [(m, statistics.median(vs), min(vs), max(vs)) for m, vs in sorted(ms.items())] for b, ms in by.items()}


def plot_tflops(rows: list[Row]) -> list[dict]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    for (n, k), fam in _families(rows).items():
        series = _fleet_series(fam, lambda r: r.tflops)
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for backend, pts in series.items():
            ms = [p[0] for p in pts]
            ax.plot(ms, [p[1] for p in pts], marker="o", label=backend)
            ax.fill_between(ms, [p[2] for p in pts], [p[3] for p in pts], alpha=0.15)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M")
        ax.set_ylabel("TFLOPS (fleet median; band: min..max over hosts)")
        ax.set_title(f"N={n}, K={k}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        plots.append({"title": f"TFLOPS vs M, N={n} K={k}", "src": _png(fig)})
    return plots


def plot_speedups(rows: list[Row], baseline: str) -> list[dict]:
    import matplotlib.pyplot as plt

    plots = []
    for (n, k), fam in _families(rows).items():
        base = {m: v for m, v, _, _ in _fleet_series([r for r in fam if r.backend == baseline], lambda r: r.median_us).get(baseline, [])}
        series = _fleet_series([r for r in fam if r.backend != baseline], lambda r: r.median_us)
        if not base or not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for backend, pts in series.items():
            xs = [m for m, *_ in pts if m in base]
            ax.plot(xs, [base[m] / v for m, v, _, _ in pts if m in base], marker="o", label=backend)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M")
        ax.set_ylabel(f"speedup over {baseline} (>1 faster)")
        ax.set_title(f"N={n}, K={k}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        plots.append({"title": f"Speedup over {baseline}, N={n} K={k}", "src": _png(fig)})
    return plots


def plot_peak(rows: list[Row]) -> list[dict]:
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.status == "ok" and r.pct_peak is not None]
    if not ok:
        return []
    series = _fleet_series(ok, lambda r: r.pct_peak)
    fig, ax = plt.subplots(figsize=(7, 4))
    for backend, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M")
    ax.set_ylabel("% of the device's dense peak")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return [{"title": "% of peak (all shapes)", "src": _png(fig)}]


def plot_roofline(rows: list[Row], slots) -> list[dict]:
    """Per GPU model with a calibration: achieved TFLOPS against arithmetic intensity (FLOP per byte
    moved), each case's fleet median, under the roofs min(measured peak, intensity × measured
    bandwidth) of each operand family."""
    import matplotlib.pyplot as plt
    import numpy as np

    cal_by_model = {}
    for s in slots:
        if s.facts is not None and s.facts.calibration is not None and s.facts.calibration.tb_s:
            cal_by_model.setdefault(s.facts.gpu_name or "?", s.facts.calibration)
    plots = []
    for model, cal in cal_by_model.items():
        ok = [r for r in rows if r.status == "ok" and r.gpu_name == model and r.tflops and r.tb_per_s]
        if not ok:
            continue
        points: dict[str, dict[tuple, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
        for r in ok:
            points[r.backend][(r.m, r.n, r.k)].append((r.tflops / r.tb_per_s, r.tflops))
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        ai = np.logspace(0, 4, 200)
        for fam, peak in sorted(cal.tflops.items()):
            ax.plot(ai, np.minimum(peak, ai * cal.tb_s), linewidth=1, linestyle="--", label=f"{fam} roof ({peak:.0f} TF)")
        for backend, cases in points.items():
            xs = [statistics.median(p[0] for p in pts) for pts in cases.values()]
            ys = [statistics.median(p[1] for p in pts) for pts in cases.values()]
            ax.scatter(xs, ys, s=14, label=backend)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
        ax.set_ylabel("achieved TFLOPS")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="lower right")
        plots.append({"title": f"Roofline, {model}: measured roofs ({cal.tb_s:.2f} TB/s copy)", "src": _png(fig)})
    return plots


def plot_comparison(cmp) -> list[dict]:
    import matplotlib.pyplot as plt

    cases = [c for c in cmp.cases if c.ratio is not None]
    if not cases:
        return []
    # The cases that moved most; the table below lists all of them.
    cases = sorted(cases, key=lambda c: abs(c.ratio - 1), reverse=True)[:MAX_PLOTTED_CASES]
    fig, ax = plt.subplots(figsize=(8, max(3, 0.3 * len(cases))))
    colors = {"SLOWER": "tab:red", "FASTER": "tab:green", "SAME": "tab:gray", "AMBIGUOUS": "tab:orange",
              "UNSTABLE": "tab:purple"}
    seen = set()
    for i, c in enumerate(cases):
        ax.errorbar([c.ratio], [i], xerr=[[c.ratio - c.ci_low], [max(0.0, c.ci_high - c.ratio)]], fmt="o",
                    color=colors.get(c.verdict, "black"), markersize=4,
                    label=c.verdict if c.verdict not in seen else None)
        seen.add(c.verdict)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvspan(1 - cmp.threshold, 1 + cmp.threshold, color="gray", alpha=0.15, label=f"±{cmp.threshold:.0%}")
    ax.set_yticks(range(len(cases)), [f"{c.host + ' ' if c.host else ''}{c.backend} {c.m}x{c.n}x{c.k}" for c in cases],
                  fontsize=8)
    ax.legend(fontsize=8, loc="best")
    ax.set_xlabel("B / A latency, 95% CI (right of 1: B slower)")
    return [{"title": f"{cmp.b} vs {cmp.a}: the {len(cases)} cases that moved most", "src": _png(fig)}]


def plot_history(runs_dir: Path, rows: list[Row], threshold: float) -> list[dict]:
    """Trend plots: each of this run's ok cases (up to MAX_TREND_CASES, those that moved most first)
    over every stored run, one line per host, steps marked."""
    import matplotlib.pyplot as plt

    from .history import Selection, history
    from .index import RunIndex

    index = RunIndex.open(runs_dir)
    try:
        hist = history(index, Selection(), threshold, with_steps=True)
    finally:
        index.close()
    wanted = {r.case_id for r in rows if r.status == "ok"}
    series: dict[str, list] = defaultdict(list)
    for p in hist.points:
        if p.case_id in wanted:
            series[p.series].append(p)
    by_case: dict[str, dict[str, list]] = defaultdict(dict)
    for key, pts in series.items():
        if len(pts) >= 2:
            by_case[pts[0].case_id][pts[0].host] = pts
    if not by_case:
        return []

    def spread(hosts: dict) -> float:
        values = [p.median_us for pts in hosts.values() for p in pts]
        return max(values) / min(values)

    chosen = sorted(by_case.items(), key=lambda kv: -spread(kv[1]))[:MAX_TREND_CASES]
    runs = sorted({p.run_id for hosts in by_case.values() for pts in hosts.values() for p in pts})
    cols = 3
    fig, axes = plt.subplots((len(chosen) + cols - 1) // cols, cols, figsize=(11, 2.6 * ((len(chosen) + cols - 1) // cols)),
                             squeeze=False)
    for ax, (case_id, hosts) in zip(axes.flat, chosen):
        first = next(iter(hosts.values()))[0]
        for host, pts in sorted(hosts.items()):
            xs = [runs.index(p.run_id) for p in pts]
            ax.plot(xs, [p.median_us for p in pts], marker="o", markersize=3, label=host)
            for x, p in zip(xs, pts):
                if p.step:
                    ax.axvline(x - 0.5, color="tab:red", linewidth=0.8, linestyle="--")
                    ax.annotate(p.step.replace("step ", ""), (x, p.median_us), fontsize=7, color="tab:red")
        ax.set_title(f"{first.backend} {first.m}x{first.n}x{first.k}", fontsize=8)
        ax.set_ylabel("median µs", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        if len(hosts) > 1:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(chosen):]:
        ax.axis("off")
    fig.supxlabel(f"stored runs, oldest first ({runs[0]} … {runs[-1]})", fontsize=8)
    fig.tight_layout()
    return [{"title": f"History: the {len(chosen)} cases of this run that moved most over {len(runs)} stored runs "
                      "(red: a step)", "src": _png(fig)}]


METHOD_NAMES = {"cuda-graph": "CUDA-graph replay", "cuda-events": "CUDA events", "cpu-wallclock": "CPU wall clock"}


def write_report(runs_dir: Path, run_ref: str, against: Optional[str], output: Path, threshold: float,
                 with_history: bool = False, baseline: Optional[str] = None) -> Path:
    side = resolve_side(runs_dir, run_ref)
    store = side.store
    rows = merged_rows(store, side.slots)  # the side holds the slots asked for, results read once
    backends = list(dict.fromkeys(r.backend for r in rows))
    if baseline is not None and baseline not in backends:
        from .errors import InputError

        raise InputError(f"--baseline {baseline!r} is not in run {store.run_id} (backends: {', '.join(backends)})")
    baseline = baseline or ("torch-bf16" if "torch-bf16" in backends else (backends[0] if backends else ""))
    counts = {}
    for r in rows:
        if r.method:
            counts[r.method] = counts.get(r.method, 0) + 1
    methods = ", ".join(f"{METHOD_NAMES.get(m, m)} ({n} results)" for m, n in counts.items()) or "nothing (no timed result)"
    plots = plot_tflops(rows) + plot_speedups(rows, baseline) + plot_peak(rows) + plot_roofline(rows, side.slots)
    if with_history:
        plots += plot_history(runs_dir, rows, threshold)
    comparison = None
    if against:
        comparison = compare_sides(resolve_side(runs_dir, against), side, threshold)
        plots += plot_comparison(comparison)
    facts = [{"slot": s.slot, "facts": s.facts.model_dump(exclude={"kind", "schema_version"}) if s.facts else {},
              "outcome": s.outcome.outcome if s.outcome else "not run",
              "error": s.outcome.error if s.outcome else ""} for s in side.slots]
    fleet = across_hosts(side, threshold) if len(side.slots) >= 3 else None
    html = template_environment().get_template(REPORT_TEMPLATE).render(
        run_id=store.run_id, sweep=store.manifest()["sweep"]["name"], generated=now_iso(), version=__version__,
        rows=rows, plots=plots, facts=facts, comparison=comparison, fleet=fleet, baseline=baseline, methods=methods,
        threshold=threshold,
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(output, html.encode("utf-8"))
    return output
