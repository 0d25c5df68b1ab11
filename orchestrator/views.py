"""What each command shows, as output.Documents: a run's rows, the pivot, a comparison, the fleet view,
the inventory and the stored runs. Pure: data in, documents out; output.write prints them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .output import Document, Section

if TYPE_CHECKING:  # `history` draws documents without loading the run readers (pydantic)
    from .merge import Row

_STATUS_STYLE = {"ok": "green", "unsupported": "dim", "unavailable": "yellow", "failed": "bold red",
                 "crashed": "bold red", "missing": "red"}
_VERDICT_STYLE = {"SLOWER": "bold red", "FASTER": "green", "AMBIGUOUS": "yellow", "UNSTABLE": "yellow"}


def _num(v: Optional[float], fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def _note(row: Row) -> str:
    parts = []
    if row.reason:
        parts.append(row.reason)
    if row.tainted:
        parts.append("TAINTED: GPU throttled during timing")
    if row.rel_ci is not None and row.rel_ci > 0.05:
        # Beyond ±100% the exact width says nothing more (the rounds disagree wildly); JSON keeps it.
        parts.append(f"noisy (CI ±{row.rel_ci:.0%})" if row.rel_ci <= 1 else "noisy (CI wider than ±100%)")
    return "; ".join(parts)


ROW_HEADERS = ["host", "label", "backend", "M", "N", "K", "status", "median µs", "TFLOPS", "% SoL", "rel_err",
               "check", "note"]


def _sol(row: Row) -> str:
    """% of speed of light, with the bound that sets it (m: math, b: memory bandwidth)."""
    return "" if row.pct_sol is None else f"{row.pct_sol:.0f}% {'m' if row.sol_bound == 'math' else 'b'}"


def rows_document(rows: list[Row], title: str = "") -> Document:
    cells = [[r.slot, r.label, r.backend, str(r.m), str(r.n), str(r.k), r.status, _num(r.median_us, ".2f"),
              _num(r.tflops, ".1f"), _sol(r), _num(r.rel_err, ".2e"), r.verdict or "", _note(r)] for r in rows]
    section = Section(ROW_HEADERS, cells, title=title,
                      right=("M", "N", "K", "median µs", "TFLOPS", "% SoL", "rel_err"), styles={6: _STATUS_STYLE},
                      optional=("rel_err", "TFLOPS", "% SoL", "check", "label", "N", "K"),
                      caption="% SoL: speed of light (this GPU's measured peaks) / median; "
                              "m = math-bound, b = memory-bound" if any(r.pct_sol is not None for r in rows) else "")
    data = [r.as_dict() for r in rows]
    return Document([section], data=data, records=data, kind="rows")


# -- pivot: backends side by side ---------------------------------------------------------------------
_SHORT = {"unsupported": "unsupp.", "unavailable": "n/a", "failed": "FAILED", "crashed": "CRASHED",
          "missing": "missing"}


def _pivot_cell(row: Optional[Row], speedup: Optional[float], best: bool = False) -> str:
    if row is None:
        return ""
    if row.status != "ok":
        return _SHORT.get(row.status, row.status) + "*"
    text = ("BEST " if best else "") + f"{row.median_us:.2f} µs {row.tflops:.0f} TF"
    if row.pct_sol is not None:
        text += f" {row.pct_sol:.0f}%SoL"
    if row.verdict == "fail":
        text += " WRONG"
    if speedup is not None:
        text += f" ×{speedup:.2f}"
    return text


def pivot_document(rows: list[Row], baseline: Optional[str] = None, per_host: bool = False) -> Document:
    """Per shape, each backend's median latency and TFLOPS (and speedup over `baseline`) side by side,
    the fastest correct one marked BEST; by default one line per shape for the whole fleet (the median
    over hosts), with per_host one per host. A cell that did not run is marked `*` and explained under
    the table; a backend that ran nowhere is one note instead of a column."""
    from .errors import InputError
    from .merge import fleet_rows, pivot_by_backend

    all_backends = list(dict.fromkeys(r.backend for r in rows))
    if baseline is not None and baseline not in all_backends:
        raise InputError(f"--baseline {baseline!r} is not in this run (backends: {', '.join(all_backends)})")
    ran = {r.backend for r in rows if r.status not in ("unsupported", "unavailable")}
    nowhere = sorted({(r.backend, r.status, r.reason) for r in rows if r.backend not in ran})
    rows = [r for r in rows if r.backend in ran]
    backends, pivot = pivot_by_backend(rows if per_host else fleet_rows(rows))
    records = []
    for p in pivot:
        rec = {"slot": p.slot, "label": p.label, "m": p.m, "n": p.n, "k": p.k}
        for b in backends:
            cell = p.cells.get(b)
            rec[f"{b}.status"] = cell.status if cell else ""
            rec[f"{b}.median_us"] = cell.median_us if cell else None
            rec[f"{b}.tflops"] = cell.tflops if cell else None
            rec[f"{b}.pct_sol"] = cell.pct_sol if cell else None
            if baseline:
                rec[f"{b}.speedup_vs_{baseline}"] = p.speedup(b, baseline)
        records.append(rec)
    def fastest(p) -> Optional[str]:
        ok = [(c.median_us, b) for b, c in p.cells.items() if c.status == "ok" and c.median_us and c.verdict != "fail"]
        return min(ok)[1] if len(ok) > 1 else None

    body = []
    for p in pivot:
        best = fastest(p)
        body.append([p.slot, p.label, str(p.m), str(p.n), str(p.k),
                     *[_pivot_cell(p.cells.get(b), p.speedup(b, baseline) if baseline else None, b == best)
                       for b in backends]])
        records[len(body) - 1]["best"] = best
    notes = sorted({f"{r.backend}: {_SHORT.get(r.status, r.status)}* = {r.reason}" for r in rows
                    if r.status != "ok" and r.reason})
    notes += [f"{b}: {status} on every host and shape ({reason}); not shown" for b, status, reason in
              sorted({(b, s, why) for b, s, why in nowhere})]
    legend = ("cells: median latency, TFLOPS, BEST = the fastest correct backend of the row" + (", % of speed of light" if any(r.pct_sol is not None for r in rows) else "") + (f", speedup over {baseline} (×>1: faster)" if baseline else "")
              + "; WRONG = failed the correctness check")
    section = Section(["host", "label", "M", "N", "K", *backends], body, caption=legend)
    return Document([section], data=records, records=records, notes=notes, kind="pivot")


# -- diff and fleet outliers --------------------------------------------------------------------------
def comparison_summary(cmp) -> str:
    """The closing count: every verdict, rows on one side only included."""
    names = {"ONLY-A": "only in A", "ONLY-B": "only in B", "NOT-RUN": "not run on either side"}
    return (f"A = {cmp.a}, B = {cmp.b}, threshold ±{cmp.threshold:.1%}: "
            + ", ".join(f"{n} {names.get(v, v)}" for v, n in cmp.counts().items()))


UNCHANGED = ("SAME", "NOT-RUN")


def comparison_document(cmp, only_changed: bool = False) -> Document:
    """Facts and settings that differ, then one row per case (with only_changed, none that is SAME or
    was run on neither side), then per backend the geometric mean of B/A."""
    f = lambda v, p: "" if v is None else format(v, p)  # noqa: E731
    summary = comparison_summary(cmp)
    shown = [c for c in cmp.cases if not (only_changed and c.verdict in UNCHANGED)]
    case_rows = [[c.host, c.label, c.backend, str(c.m), str(c.n), str(c.k), f(c.a_us, ".2f"),
                  f(c.b_us, ".2f"), f(c.ratio, ".3f"),
                  "" if c.ci_low is None else f"{c.ci_low:.3f}–{c.ci_high:.3f}", f(c.p_value, ".2g"), c.verdict, c.note]
                 for c in shown]
    sections = []
    if cmp.facts:
        sections.append(Section(["fact", "A", "B"], [[d.field, d.a, d.b] for d in cmp.facts],
                                title="host facts that differ (numbers below may differ because of these)"))
    if cmp.settings:
        sections.append(Section(["setting", "A", "B"], [[d.field, d.a, d.b] for d in cmp.settings],
                                title="settings that differ (cases match across them)"))
    title = summary + (f" (showing the {len(shown)} that changed or did not compare)" if only_changed else "")
    sections.append(Section(["host", "label", "backend", "M", "N", "K", "A µs", "B µs", "B/A", "95% CI", "p",
                             "verdict", "note"], case_rows, title=title, styles={11: _VERDICT_STYLE}))
    backends = cmp.by_backend()
    sections.append(Section(["backend", "cases compared", "geomean B/A", "slower", "faster", "not ok"],
                            [[b["backend"], str(b["compared"]), f(b["geomean_ratio"], ".3f"), str(b["slower"]),
                              str(b["faster"]), str(b["not_ok"])] for b in backends],
                            title="per backend (geometric mean of B/A over the cases timed on both sides)",
                            right=("cases compared", "geomean B/A", "slower", "faster", "not ok")))
    data = {"a": cmp.a, "b": cmp.b, "threshold": cmp.threshold, "summary": cmp.counts(),
            "facts": [vars(x) for x in cmp.facts], "settings": [vars(x) for x in cmp.settings],
            "cases": [c.as_dict() for c in shown], "backends": backends}
    return Document(sections, data=data, records=[c.as_dict() for c in shown], headline=summary, kind="diff")


def fleet_document(report) -> Document:
    host_rows = [[slot, str(h["cases"]), str(h["flagged"]), f"{h['score']:.0%}", "OUTLIER" if h["outlier"] else ""]
                 for slot, h in report.hosts.items()]
    dev_rows = [[d.slot, d.backend, str(d.m), str(d.n), str(d.k), f"{d.median_us:.2f}", f"{d.fleet_median_us:.2f}",
                 f"{d.median_us / d.fleet_median_us:.3f}", f"{d.robust_z:+.1f}"] for d in report.deviations]
    sections = [Section(["host", "cases", "flagged", "score", ""], host_rows,
                        title=f"hosts vs the fleet median (flag: |robust z| > 3.5 and off by > {report.threshold:.0%})")]
    if dev_rows:
        sections.append(Section(["host", "backend", "M", "N", "K", "µs", "fleet µs", "ratio", "robust z"], dev_rows,
                                title="cases that make them so"))
    if report.calibration:
        sections.append(Section(
            ["host", "GPU", "peak", "measured", "fleet median", "ratio", ""],
            [[c["slot"], c["gpu_name"], c["peak"], f"{c['value']:.2f}", f"{c['fleet_median']:.2f}", f"{c['ratio']:.3f}",
              "SLOW GPU" if c["flagged"] else ""] for c in report.calibration],
            title="calibration (each GPU's own measured peaks): a host slow here is the machine, not the kernel"))
    records = [{"slot": d.slot, "backend": d.backend, "m": d.m, "n": d.n, "k": d.k, "median_us": d.median_us,
                "fleet_median_us": d.fleet_median_us, "robust_z": d.robust_z} for d in report.deviations]
    data = {"threshold": report.threshold, "hosts": report.hosts, "deviations": [d.as_dict() for d in report.deviations],
            "calibration": report.calibration}
    return Document(sections, data=data, records=records, kind="fleet")


# -- inventory and stored runs --------------------------------------------------------------------------
def inventory_document(hosts) -> Document:
    def gpus(h) -> str:
        if h.slurm is not None:  # Slurm picks them: how many each job asks for
            return f"{h.slurm.gpus} per job" if h.slurm.gpus else ""
        return ",".join(map(str, h.gpus)) if h.gpus else ""

    rows = [[h.name, h.transport, h.address, h.python, h.workdir, gpus(h), ",".join(h.labels)] for h in hosts]
    data = [h.public_view() for h in hosts]
    return Document([Section(["host", "transport", "address", "python", "workdir", "gpus", "labels"], rows)],
                    data=data, records=[{**d, "env": ",".join(d["env"])} for d in data], kind="inventory")


CHECK_COLUMNS = ("host", "ready", "python", "venv", "worker", "torch", "flashinfer", "sgl-kernel", "GPU", "CC",
                 "driver", "CUDA", "free disk GB", "GPU procs", "problem")


def host_check_document(statuses, skew: list[str]) -> Document:
    rows = []
    for s in statuses:
        f = s.facts
        rows.append([s.name, "yes" if s.ready else f"no ({s.state})", f.get("python") or "",
                     {True: "yes", False: "no"}.get(f.get("in_venv"), ""),
                     f"{f.get('worker_version', '')} {str(f.get('worker_sha256', ''))[:12]}".strip(),
                     f.get("torch") or "-", f.get("flashinfer") or "-", f.get("sgl_kernel") or "-",
                     f.get("gpu_name") or f.get("device") or "", f.get("compute_capability") or "",
                     f.get("driver") or "", f.get("cuda") or "", str(f.get("free_disk_gb", "")),
                     "" if f.get("gpu_processes") is None else str(f["gpu_processes"]), s.problem])
    styles = {1: {r[1]: ("green" if r[1] == "yes" else "red") for r in rows}}
    data = [vars(s) for s in statuses]
    records = [{"host": s.name, "ready": s.ready, "state": s.state, "problem": s.problem,
                **{k: v for k, v in s.facts.items() if not isinstance(v, (dict, list))}} for s in statuses]
    return Document([Section(list(CHECK_COLUMNS), rows, styles=styles)], data=data, records=records,
                    kind="host-check")


def history_document(hist) -> Document:
    """Points oldest first per series; steps marked on the first point at a new level and listed."""
    rows = [[p.run_id, p.created_at[:16].replace("T", " "), p.host, p.backend, p.label, str(p.m), str(p.n), str(p.k),
             f"{p.median_us:.2f}", "" if p.rel_ci is None else f"±{p.rel_ci:.1%}",
             "" if p.pct_sol is None else f"{p.pct_sol:.0f}%", p.torch or "", p.flashinfer or "", p.step]
            for p in hist.points]
    sections = [Section(["run", "started (UTC)", "host", "backend", "label", "M", "N", "K", "median µs", "CI",
                         "% SoL", "torch", "flashinfer", "step"], rows,
                        right=("M", "N", "K", "median µs", "CI", "% SoL"))]
    step_rows = [[s.host, s.backend, s.label, str(s.m), str(s.n), str(s.k), st["run_id"], f"{st['before']:.2f}",
                  f"{st['after']:.2f}", f"×{st['ratio']:.3f}", f"{st['low']:.3f}–{st['high']:.3f}",
                  "NEW, SLOWER" if s.new_slower and st is s.steps[-1] else ""]
                 for s in hist.steps for st in s.steps]
    if step_rows:
        sections.append(Section(["host", "backend", "label", "M", "N", "K", "at run", "before µs", "after µs", "ratio",
                                 "95% interval", ""], step_rows,
                                title=f"steps (beyond ±{hist.threshold:.0%} and 4 standard errors of the series' noise)"))
    notes = [] if hist.points else ["no stored result matches this selection"]
    points = [p.as_dict() for p in hist.points]
    return Document(sections, data=hist.as_dict(points), records=points, notes=notes, kind="history")


def runs_document(entries: list[dict]) -> Document:
    rows = [[e["run_id"], e["sweep"], str(e["hosts"]), str(e["cases"]), e["summary"]] for e in entries]
    return Document([Section(["run", "sweep", "hosts", "cases", "outcomes"], rows)], data=entries, records=entries,
                    kind="runs")
