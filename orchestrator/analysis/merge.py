"""Pure analysis of a stored run: one row per planned (slot, case), where each case stands over its attempts.

A case's records are joined across attempts (worker/contract/rounds.py: rounds timed apart become one result; a
later failure never hides a complete result). A case with no record in any attempt still gets a row
(status `missing`) whose reason is the host's outcome, and one whose rounds were cut short gets a row
`incomplete` with what it has, so a table never silently drops what did not run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from worker.contract.rounds import rounds_in
from worker.contract.schema import CaseSpec

from ..runs.slots import SlotData, load_slots
from ..runs.store import RunStore

# Why a row is not a whole result, beyond its record's own words (Row.notes); views/tables.py words each.
ROW_NOT_RUN = "not-run"  # the case has no record, and its host's attempt ended ok
ROW_HOST_ENDED = "host-ended"  # outcome, error: the case has no record; how its host's attempt ended
ROW_CUT_SHORT = "cut-short"  # rounds, planned, attempt, outcome ("" when that attempt ended ok): rounds cut short
ROW_OTHER_SOFTWARE = "other-software"  # attempt, changed: the row's numbers are that attempt's alone
# watts, limit_w, rounds: a round's samples ended with the GPU drawing more than its enforced power limit
ROW_OVER_POWER = "over-power-limit"
OVER_POWER_LIMIT = 0.01  # a reading this share above the limit is over it (at the limit, readings scatter)


@dataclass
class RowNote:
    """One of the ROW_* codes and the facts its words need."""

    code: str
    facts: dict = field(default_factory=dict)


@dataclass
class Row:
    run_id: str
    host: str
    gpu: Optional[int]
    slot: str
    gpu_name: Optional[str]
    label: str
    backend: str
    m: int  # for an MoE layer: its tokens
    n: int
    k: int
    status: str
    reason: str  # what the host said of the case (its record's), where the row keeps it; shown with `notes`
    workload: str = "gemm"
    experts: Optional[int] = None  # MoE layer: experts, top_k, routing and what it drew
    top_k: Optional[int] = None
    routing: Optional[str] = None
    active_experts: Optional[int] = None  # experts that received at least one token
    max_expert_m: Optional[int] = None  # the most tokens any one expert received
    # MoE: which kind of kernel ran (reference | loop | grouped | fused): a fused row times a whole MoE
    # block (n = 3 * intermediate, k = hidden), never one GEMM, and is never set beside one
    kernel: Optional[str] = None
    median_us: Optional[float] = None
    # How many rounds the case got and why it stopped there (format >= 9: target | cap | fixed)
    rounds: Optional[int] = None
    rounds_stop: Optional[str] = None
    p10_us: Optional[float] = None
    p90_us: Optional[float] = None
    rel_ci: Optional[float] = None
    n_samples: Optional[int] = None
    method: Optional[str] = None
    l2: Optional[str] = None
    tflops: Optional[float] = None
    tb_per_s: Optional[float] = None
    pct_peak: Optional[float] = None  # % of the datasheet's peak math for the case's operand family
    sol_us: Optional[float] = None  # speed of light at this GPU's measured peaks (worker/measure/calibrate.py)
    pct_sol: Optional[float] = None  # 100 * sol_us / median_us
    sol_bound: Optional[str] = None  # math | memory: which peak sets sol_us
    rel_err: Optional[float] = None
    cosine: Optional[float] = None
    verdict: Optional[str] = None
    integrity: Optional[str] = None  # "pass", or the integrity checks failed, "+"-joined (worker/check/integrity.py)
    tainted: Optional[bool] = None
    # NVML's latest instantaneous board power after the samples (it refreshes about every 100 ms), the highest
    # of the rounds (format >= 11)
    power_w: Optional[float] = None
    attempt: Optional[int] = None
    case_id: str = ""
    notes: list[RowNote] = field(default_factory=list)  # views/tables.py words them after `reason`

    def as_dict(self) -> dict:
        return asdict(self)


def _case_fields(case: CaseSpec) -> dict:
    """What a row says about its case beyond backend and shape (the MoE layer's routing)."""
    if case.moe is None:
        return {"workload": case.workload}
    from worker.contract.catalog import CATALOG
    from worker.contract.routing import describe

    moe = case.moe
    spec = CATALOG.get(case.backend)
    return {
        "workload": case.workload,
        "experts": moe.experts,
        "top_k": moe.top_k,
        "routing": describe(moe.routing, moe.skew, moe.source),
        "active_experts": sum(1 for c in moe.counts if c),
        "max_expert_m": max(moe.counts),
        "kernel": spec.kernel if spec is not None and spec.kernel else None,
    }


def merged_rows(store: RunStore, slots: Optional[list[SlotData]] = None) -> list[Row]:
    """Rows of `slots` (default: every slot of the run, read from the store)."""
    rows = []
    for data in load_slots(store) if slots is None else slots:
        gpu_name = data.facts.gpu_name if data.facts else None
        for case in data.planned:
            found = data.records.get(case.case_id)
            if found is None:
                why = RowNote(ROW_NOT_RUN)
                if data.outcome is not None and data.outcome.outcome != "ok":
                    why = RowNote(ROW_HOST_ENDED, {"outcome": data.outcome.outcome, "error": data.outcome.error})
                rows.append(
                    Row(
                        run_id=store.run_id,
                        host=data.host,
                        gpu=data.gpu,
                        slot=data.slot,
                        gpu_name=gpu_name,
                        label=case.label,
                        backend=case.backend,
                        m=case.m,
                        n=case.n,
                        k=case.k,
                        status="missing",
                        reason="",
                        notes=[why],
                        case_id=case.case_id,
                        **_case_fields(case),
                    )
                )
                continue
            attempt, rec = found
            t, mt, c = rec.timing, rec.metrics, rec.correctness
            status, reason, notes = rec.status, rec.reason, []
            if rec.status == "ok" and not rec.complete:
                status, reason = "incomplete", ""
                ended = data.outcome is not None and data.outcome.attempt == attempt and data.outcome.outcome != "ok"
                notes.append(
                    RowNote(
                        ROW_CUT_SHORT,
                        {
                            "rounds": rounds_in(rec),
                            "planned": case.timing.rounds,
                            "attempt": attempt,
                            "outcome": data.outcome.outcome if ended else "",
                        },
                    )
                )
            if attempt in data.changed:  # a rerun on other software: this row's numbers are that attempt's alone
                notes.append(RowNote(ROW_OTHER_SOFTWARE, {"attempt": attempt, "changed": data.changed[attempt]}))
            power = max((r.power_w for r in t.rounds if r.power_w is not None), default=None) if t else None
            limit = data.facts.power_limit_w if data.facts else None
            over_w = limit * (1 + OVER_POWER_LIMIT) if limit else None
            if power is not None and over_w is not None and power > over_w:
                over = sum(1 for r in t.rounds if r.power_w is not None and r.power_w > over_w)
                notes.append(RowNote(ROW_OVER_POWER, {"watts": power, "limit_w": limit, "rounds": over}))
            rows.append(
                Row(
                    run_id=store.run_id,
                    host=data.host,
                    gpu=data.gpu,
                    slot=data.slot,
                    gpu_name=gpu_name,
                    label=case.label,
                    backend=case.backend,
                    m=case.m,
                    n=case.n,
                    k=case.k,
                    status=status,
                    reason=reason,
                    notes=notes,
                    median_us=t.median_us if t else None,
                    rounds=rounds_in(rec) if t else None,
                    rounds_stop=t.rounds_stop if t else None,
                    p10_us=t.p10_us if t else None,
                    p90_us=t.p90_us if t else None,
                    rel_ci=t.rel_ci if t else None,
                    n_samples=t.n if t else None,
                    method=t.method if t else None,
                    l2=t.l2 if t else None,
                    tflops=mt.tflops if mt else None,
                    tb_per_s=mt.tb_per_s if mt else None,
                    pct_peak=mt.pct_peak_flops if mt else None,
                    sol_us=mt.sol_us if mt else None,
                    pct_sol=mt.pct_sol if mt else None,
                    sol_bound=mt.sol_bound if mt else None,
                    rel_err=c.rel_err if c else None,
                    cosine=c.cosine if c else None,
                    verdict=c.verdict if c else None,
                    integrity=integrity_text(c),
                    tainted=rec.health.tainted if rec.health else None,
                    power_w=power,
                    attempt=attempt,
                    case_id=case.case_id,
                    **_case_fields(case),
                )
            )
    return rows


def integrity_text(check) -> Optional[str]:
    """A record's integrity outcome as a row shows it: "pass", the names of the integrity checks it failed
    ("+"-joined), or None for a record without those checks (a worker before issue 31, or none judged)."""
    if check is None or check.integrity is None:
        return None
    return "+".join(check.integrity) or "pass"


@dataclass
class PivotRow:
    """One shape on one host slot, every backend side by side."""

    slot: str
    label: str
    m: int
    n: int
    k: int
    cells: dict  # backend -> Row
    block: bool = False  # fused MoE blocks: never in one row with single GEMMs of the same n and k

    def speedup(self, backend: str, baseline: str) -> Optional[float]:
        """baseline latency / backend latency (> 1: backend is faster), when both are ok."""
        a, b = self.cells.get(baseline), self.cells.get(backend)
        if not a or not b or a.status != "ok" or b.status != "ok" or not a.median_us or not b.median_us:
            return None
        return a.median_us / b.median_us


def fleet_rows(rows: list[Row]) -> list[Row]:
    """One row per case over the hosts: the median of the hosts' ok results (status ok when any host
    has one), so a pivot of a fleet shows one line per shape rather than one per host."""
    import statistics

    slots = {r.slot for r in rows}
    if len(slots) <= 1:
        return rows
    by_case: dict[tuple, list[Row]] = {}
    for r in rows:
        by_case.setdefault((r.label, r.backend, r.m, r.n, r.k, r.routing), []).append(r)
    out = []
    for group in by_case.values():
        ok = [r for r in group if r.status == "ok" and r.median_us is not None]
        first = ok[0] if ok else group[0]

        def med(field):
            values = [getattr(r, field) for r in ok if getattr(r, field) is not None]
            return statistics.median(values) if values else None

        out.append(
            Row(
                run_id=first.run_id,
                host="fleet",
                gpu=None,
                slot=f"fleet ({len(ok)}/{len(group)} hosts)",
                gpu_name=first.gpu_name,
                label=first.label,
                backend=first.backend,
                m=first.m,
                n=first.n,
                k=first.k,
                status=first.status,
                reason=first.reason,
                notes=first.notes,
                workload=first.workload,
                experts=first.experts,
                top_k=first.top_k,
                routing=first.routing,
                kernel=first.kernel,
                active_experts=first.active_experts,
                max_expert_m=first.max_expert_m,
                median_us=med("median_us"),
                tflops=med("tflops"),
                pct_sol=med("pct_sol"),
                verdict="fail" if any(r.verdict == "fail" for r in ok) else first.verdict,
                case_id=first.case_id,
            )
        )
    return out


def pivot_by_backend(rows: list[Row]) -> tuple[list[str], list[PivotRow]]:
    """(backends in first-seen order, one PivotRow per (slot, label, m, n, k), fused MoE blocks apart)."""
    backends: list[str] = []
    pivot: dict[tuple, PivotRow] = {}
    for r in rows:
        if r.backend not in backends:
            backends.append(r.backend)
        key = (r.slot, r.label, r.m, r.n, r.k, r.kernel == "fused")
        if key not in pivot:
            pivot[key] = PivotRow(slot=r.slot, label=r.label, m=r.m, n=r.n, k=r.k, cells={}, block=key[-1])
        pivot[key].cells[r.backend] = r
    return backends, list(pivot.values())
