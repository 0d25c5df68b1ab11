"""`fleetbench crosscheck`'s params (what the controller asks) and records (what a host sends back, kept
in a run's crosschecks). The timers' running is worker/tools/crosscheck.py's."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from .cases import CasesParams, ControllerData
from .schema import CaseSpec

# History of the crosscheck params and records (bump on any change a reader must know about):
#   1  first version (fleetbench crosscheck, issue 30).
CROSSCHECK_FORMAT = 1

PEERS = ("flashinfer", "triton")
PeerName = Literal["flashinfer", "triton"]
Step = Literal["default", "statistic", "l2", "launch", "clock"]


class CrosscheckOptions(ControllerData):
    peers: list[PeerName] = Field(default_factory=lambda: list(PEERS))
    cupti: bool = True  # fleetbench's own graph timed by CUPTI too: kernel time beside replay time


class CrosscheckParams(CasesParams):
    format: int = CROSSCHECK_FORMAT
    options: CrosscheckOptions = Field(default_factory=CrosscheckOptions)


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a stored record is read by every later version


class Method(_Read):
    """How one timing was taken, factor by factor (the words the table shows)."""

    l2: str = ""
    launch: str = ""
    clock: str = ""
    statistic: Literal["median", "mean"] = "median"


class Timed(_Read):
    """One run of a timer in one setting: per-call samples in µs, as the timer gave them."""

    step: Step
    call: str  # the call as made, e.g. "bench_gpu_time(fn, cold_l2_cache=False)"
    method: Method
    samples_us: list[float] = Field(default_factory=list)
    value_us: Optional[float] = None  # the method's statistic of the samples; None: the run failed
    reason: str = ""  # why there is no value
    notes: list[str] = Field(default_factory=list)  # what the timer warned, and how the statistic was had
    # The median SM clock NVML read while the timer ran (the clock step only: a reading thread could slow
    # a timer that launches call by call); None where not read.
    sm_clock_mhz: Optional[float] = None


class PeerResult(_Read):
    peer: str  # "flashinfer" | "triton"
    timer: str  # the function, e.g. "flashinfer.testing.bench_gpu_time"
    status: Literal["ok", "unavailable", "unsupported", "failed"]
    reason: str = ""
    version: str = ""
    signature: str = ""  # inspect.signature of the timer, as installed
    runs: list[Timed] = Field(default_factory=list)
    unmatched: list[str] = Field(default_factory=list)  # factors this timer cannot match to fleetbench's, and why
    notes: list[str] = Field(default_factory=list)


class FleetbenchTiming(_Read):
    method: Method
    timing_method: str  # Stats.method: "cuda-graph", "cuda-events", "cpu-wallclock"
    median_us: float
    mean_us: float
    samples_us: list[float]
    calls_per_sample: int
    n_sets: int
    settle_ms: Optional[float] = None
    sm_clock_mhz: Optional[float] = None  # the median SM clock while fleetbench timed the case (NVML)
    # The same case's graph, its kernels as CUPTI records them: the median over replays of the summed
    # activity time per call, and of first start to last end per call; None with a reason when not traced.
    kernels_us: Optional[float] = None
    span_us: Optional[float] = None
    kernels: list[str] = Field(default_factory=list)
    cupti_split_by: str = ""
    cupti_reason: str = ""
    cupti_notes: list[str] = Field(default_factory=list)  # e.g. CUPTI left attached for later timings


class CrosscheckRecord(_Read):
    kind: Literal["crosscheck"] = "crosscheck"
    format: int = CROSSCHECK_FORMAT
    case_id: str
    case: CaseSpec
    status: Literal["ok", "failed", "unsupported", "unavailable"]
    reason: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    device: str = ""
    gpu_name: str = ""
    sm_clock_locked_mhz: Optional[int] = None
    fleetbench: Optional[FleetbenchTiming] = None
    peers: list[PeerResult] = Field(default_factory=list)
