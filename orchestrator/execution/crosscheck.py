"""Crosscheck cases of a stored run on their own hosts: what `fleetbench crosscheck` adds to the path it
shares with `profile` (storedcases.py). The host runs the run's own worker with `crosscheck`, which times
each case beside its peers (worker/tools/crosscheck.py); the controller stores each record as it comes, with the
sweep's median of that case on that slot beside it (runs/crosschecks.py).
"""

from __future__ import annotations

from worker.contract.crosscheck import CrosscheckParams, CrosscheckRecord

from ..runs.crosschecks import FOLDERS, StoredCrosscheck, write_crosscheck
from .storedcases import CaseJob, CasePlan, WorkerCommand

CASE_ALLOWANCE_S = 120.0  # one case: fleetbench's timing, CUPTI, and each peer's ladder


def store_crosscheck(
    plan: CasePlan, job: CaseJob, number: int, record: CrosscheckRecord, transport
) -> StoredCrosscheck:
    """Store one case's record with the run's median of that case on that slot (None: it has none)."""
    timing = plan.sweep.get((job.slot, record.case_id))
    return write_crosscheck(plan.store, job.slot, number, record, timing.median_us if timing else None)


CROSSCHECK = WorkerCommand(
    results=FOLDERS,
    activity="crosscheck",
    doing="crosschecking {case}",
    params_type=CrosscheckParams,
    case_limit_s=lambda options: CASE_ALLOWANCE_S,
    store=store_crosscheck,
)
