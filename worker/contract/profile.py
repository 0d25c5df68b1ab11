"""`fleetbench profile`'s params (what the controller asks) and records (what a host sends back, kept in a
run's profiles), and what the profiled process says it did. The running is worker/tools/profile.py's."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from .cases import CasesParams, ControllerData
from .schema import CaseSpec

# History of the profile params and records (bump on any change a reader must know about):
#   1  first version (fleetbench profile, issue 32).
PROFILE_FORMAT = 1

ProfileStatus = Literal["ok", "failed", "no-ncu", "no-permission"]


class ProfileOptions(ControllerData):
    calls: int = Field(default=3, ge=1, le=100)  # calls of the case inside the profiled range
    kernel_regex: str = ""  # ncu --kernel-name regex: only kernels whose function name matches
    max_kernels: int = Field(default=64, ge=1)  # ncu --launch-count: a case of many kernels stops here
    ncu: str = ""  # the ncu to use; "" finds it (FLEETBENCH_NCU, PATH, NCU_PLACES)
    case_timeout_s: float = Field(default=900.0, gt=0)  # one case under ncu, its import included


class ProfileParams(CasesParams):
    format: int = PROFILE_FORMAT
    options: ProfileOptions = Field(default_factory=ProfileOptions)


class ProfiledRun(BaseModel):
    """What the profiled process says it did (written by `profile-case`, read by `profile`)."""

    model_config = ConfigDict(extra="ignore")
    status: Literal["ok", "failed"] = "failed"
    reason: str = ""
    device: str = ""
    gpu_name: str = ""
    calls: int = 0  # calls of the case inside the profiled range
    n_sets: int = 0  # input sets the case rotates through (cold L2)
    settle_ms: Optional[float] = None
    # NVML's reading right before the range opened: the clock state the profiled calls started in.
    sm_clock_mhz: Optional[int] = None
    mem_clock_mhz: Optional[int] = None
    throttle_reasons: list[str] = Field(default_factory=list)
    gpu_processes: Optional[int] = None  # other compute processes on the GPU


class ProfileRecord(BaseModel):
    """One case profiled on one host: the verdict, the ncu used, and the report's data as ncu's own CSV
    (its raw page), which the controller parses (orchestrator/runs/ncureport.py)."""

    model_config = ConfigDict(extra="ignore")  # a stored record is read by every later version
    kind: Literal["profile"] = "profile"
    format: int = PROFILE_FORMAT
    case_id: str
    case: CaseSpec
    status: ProfileStatus
    reason: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    ncu: str = ""
    ncu_version: str = ""
    argv: list[str] = Field(default_factory=list)  # the ncu command line, as run
    extra_metrics: list[str] = Field(default_factory=list)  # asked beyond `--set basic` (EXTRA_METRICS, or none)
    options: ProfileOptions = Field(default_factory=ProfileOptions)
    report: str = ""  # the .ncu-rep on the host (the controller fetches it)
    report_bytes: int = 0
    report_sha256: str = ""
    csv: str = ""  # `ncu --import REPORT --csv --page raw --print-units base`
    log_tail: list[str] = Field(default_factory=list)  # ncu's last lines (its ==PROF== / ==ERROR== lines)
    run: Optional[ProfiledRun] = None
