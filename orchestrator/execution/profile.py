"""Profile cases of a stored run on their own hosts: what `fleetbench profile` and `diff --across-hosts
--profile` add to the path they share with `crosscheck` (storedcases.py). The host runs the run's own
worker with `profile`, which profiles each case under ncu (worker/tools/profile.py) and leaves each report in
its remote folder; after the run the controller fetches each report and stores record, summary and
report in the run's folder (runs/profiles.py). Ctrl-C stops the launcher's process group on the host:
the worker, ncu and the profiled process.
"""

from __future__ import annotations

import hashlib
import statistics
from typing import Optional

from worker.contract.profile import ProfileParams, ProfileRecord
from worker.contract.schema import Stats

from ..runs.ncureport import ProfileFormatError, summary_of
from ..runs.profiles import FOLDERS, StoredProfile, write_profile
from ..transport import Transport, bounded
from .storedcases import CaseJob, CasePlan, WorkerCommand

# A report of a few kernels is a few MB: fetching it may take longer than a cleanup step.
FETCH_LIMIT_S = 120.0


def store_profile(
    plan: CasePlan, job: CaseJob, number: int, record: ProfileRecord, transport: Transport
) -> StoredProfile:
    """Fetch the record's report (when there is one), parse its CSV, store all three with the run's median
    and SM clock of that case on that slot."""
    local = FOLDERS.job_dir(plan.store, job.slot, number)
    report, problems, summary = None, [], None
    if record.status == "ok" and record.report:
        target = local / f"{record.case_id}.ncu-rep"
        fetched = bounded(lambda: transport.get(record.report, target), FETCH_LIMIT_S)
        if fetched and target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == record.report_sha256:
            report = target
        else:
            target.unlink(missing_ok=True)
            problems.append(f"its report could not be fetched: it stays on the host at {record.report}")
    if record.status == "ok":
        try:
            summary = summary_of(record).as_dict()
        except ProfileFormatError as exc:
            problems.append(f"ncu's CSV cannot be read: {exc}")
    timing = plan.sweep.get((job.slot, record.case_id))
    sweep = (timing.median_us, _sm_clock(timing)) if timing else (None, None)
    return write_profile(plan.store, job.slot, number, record, summary, sweep, report, "; ".join(problems))


def _sm_clock(timing: Stats) -> Optional[float]:
    """NVML's SM clock over the run's rounds of a case (median; None: not read)."""
    clocks = [r.sm_clock_mhz for r in timing.rounds if r.sm_clock_mhz]
    return float(statistics.median(clocks)) if clocks else None


PROFILE = WorkerCommand(
    results=FOLDERS,
    activity="profiling",
    doing="profiling {case} under ncu",
    params_type=ProfileParams,
    case_limit_s=lambda options: options.case_timeout_s,
    store=store_profile,
    files_on_host=True,
    limit_option="--timeout",
    gpu_holders="another sweep or profile",
)
