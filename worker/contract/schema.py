"""The records a worker writes and the controller reads: one JSON object per line of results.jsonl.

This module is shared by both sides, so it imports nothing heavier than pydantic.

Schema history (bump SCHEMA_VERSION on any change a reader must know about; the controller keeps a
loader for every older version in orchestrator/formats.py, and a worker of any version may write a
run's records: reruns use the worker the run started with):
  1  first version: `facts` and `case` records. The case id hashed the whole CaseSpec but the label,
     timing options included, so a run with other timing settings matched nothing.
  2  CaseSpec.workload ("gemm"). The case id is the identity of what is measured (IDENTITY_FIELDS:
     workload, backend, shape, dtypes, seed, label) and never how it is timed; timing options stay in
     each record's `case.timing`, and diff shows them as settings that differ.
  3  TimingOptions.rounds; Stats.rounds: each case is timed in independent rounds spread over the sweep
     (every round prepares and warms again), with per round its median and the environment it ran in
     (GPU clock, temperature, throttling; CPU load and steal). diff builds its interval from the
     variation between rounds. A record of an older version has no rounds.
  4  CaseSpec.kernel_sha256: a backend defined in the user's own Python file (a sweep's
     `{name, file}` backend) names the sha256 of that file's bytes; it travels inside the worker
     bundle, and diff reports a changed hash as a setting that differs. Not part of the case id.
  5  The MoE layer workload: CaseSpec.workload "moe" with CaseSpec.moe (experts, top_k, the routing
     and the per-expert token counts it drew; M is the tokens); part of the case id when present.
     Speed of light: FactsRecord.calibration (the GPU's measured peaks per operand family and its
     copy bandwidth, with the datasheet's beside them) and Metrics.sol_us / pct_sol / sol_bound from
     those measured peaks; WorkerParams.calibration (cached | fresh | off).
  6  TimingOptions.settle_ms: before its samples a GPU timing runs the case on its own until the GPU is
     in the case's own clock and power state (issue 21: a large GEMM read up to 5% differently after a
     heavy case). Stats.settle_ms and RoundStats.settle_ms say how long it ran. A record of an older
     version was not settled (settle_ms 0).
  7  A record per finished round: a case timed in several rounds writes a record after each round that
     is not its last, with `complete: false` and its rounds so far (a run stopped midway keeps them; a
     rerun times only the rounds still missing, and the controller joins them: worker/contract/rounds.py). The
     status `hung`: a case stopped at its own limit (WorkerParams.case_timeout_s) while the host went
     on with the next one. Records travel on a channel of their own (worker/contract/protocol.py).
  8  TimingOptions.state (settled | burst) and cooldown_ms: a burst timing samples after an idle
     cool-down, before the power controller acts. RoundStats.timing_phases (where a round's timing went)
     and the integrity checks' results (Correctness.integrity, RoundStats.integrity_s). A record of an
     older version was settled.
  9  Head-to-head and rounds until sure (issue 40). In each round, right after the contenders of a shape
     were each timed on their own, their graphs are replayed interleaved (TimingOptions.head_to_head);
     RoundStats.pair_id names that timing and RoundStats.paired_us holds the case's samples of it, so
     rounds with one pair_id are pairs, sample by sample. RoundStats.sm_clock_stream_mhz:
     the SM clock of the round's samples read in the stream (worker/measure/streamclock.py), beside NVML's
     sm_clock_mhz. TimingOptions.min_rounds and round_target / pair_target: a case gets rounds until its
     interval is that narrow, between min_rounds and `rounds` (now the cap); Stats.rounds_stop says why
     it stopped. A record of an older version was timed alone, in a fixed number of rounds.
     WorkerParams.cases_in_run: the supervisor runs the built-ins and the user's kernel files in worker
     processes of their own, each with its part of the cases; progress counts to the whole.
  10 TimingOptions.fresh_inputs: when true, a later round of a GPU case builds anew, on input sets
     allocated afresh (the contenders of a shape share each round's), instead of replaying round 1's
     graph. A record of an older version replayed round 1's graph (fresh_inputs false, the default).
  11 The GPU's power against its limit: RoundStats.power_w and HealthSnapshot.power_instant_w (NVML's
     latest instantaneous board power after the samples; HealthSnapshot.power_w is NVML's averaged
     reading) and FactsRecord.power_limit_w (the enforced limit). A heavy GEMM may draw more than the
     limit for its first second of load, and reads slower once the controller pulls it under
     (benchmarks/RESULTS.md, "On an H100 at 44088a6"). A record of an older version has none of them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 11

# hung: stopped at the case's own time limit (the host went on with its next case).
Status = Literal["ok", "unsupported", "unavailable", "failed", "crashed", "hung"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TimingOptions(_Strict):
    """How a case is timed. Recorded with each case, never part of its id: runs with other timing
    settings still match case by case, and diff says which settings differ."""

    # graph: CUDA-graph replay timed by events; events: per-call CUDA events; cupti: the same graph, each
    # sample the summed GPU time of a call's kernels from CUPTI's trace (launch gaps out by construction)
    mode: Literal["graph", "events", "cupti"] = "graph"
    l2: Literal["hot", "cold"] = "cold"
    # Eager calls before the graph is captured (at least 3). A case's correctness check has already run it
    # (JIT builds, lazy allocations), and settling brings the GPU state, so a longer warm-up only costs
    # wall time (benchmarks/RESULTS.md, issue 40: the seed sweep at 5 and at 25 ms).
    warmup_ms: float = Field(default=5.0, ge=0)
    min_samples: int = Field(default=10, ge=3)
    max_samples: int = Field(default=200, ge=3)
    target_rel_ci: float = Field(default=0.01, gt=0, lt=1)
    budget_s: float = Field(default=0.5, gt=0)
    calls_per_sample: int = Field(default=0, ge=0)  # 0: chosen so one sample lasts ~2 ms (worker/measure/timing.py)
    # GPU time the case runs on its own before its samples, so it is measured in its own clock and power
    # state, not in what the case before it left (worker/measure/timing.py settle); 0 turns it off.
    settle_ms: float = Field(default=100.0, ge=0)
    # Independent timings of each case, spread over the sweep: a case's number is the median of its
    # rounds, and how much rounds differ is what a comparison between runs is judged against. A case gets
    # rounds until it is sure: at least `min_rounds`, then until its interval (of its time, or of its time
    # x in-stream SM clock) is within ±round_target and each of its head-to-head ratios within
    # ±pair_target, at most `rounds`. min_rounds == rounds: a fixed count.
    rounds: int = Field(default=3, ge=1, le=50)
    min_rounds: int = Field(default=2, ge=1, le=50)
    round_target: float = Field(default=0.02, gt=0, lt=1)
    pair_target: float = Field(default=0.01, gt=0, lt=1)
    # The contenders of a shape (the backends of a sweep on one GPU) timed interleaved in every round, in
    # the same GPU state (worker/measure/interleave.py); false: each case timed on its own.
    head_to_head: bool = True
    # true: each later round of a graph-timed case on a GPU allocates its input sets afresh (the last
    # round's still held, so the new ones sit elsewhere in memory) and captures a new graph over them, so a
    # case's rounds sample where its inputs sit and its capture, as separate runs do. false (the default):
    # later rounds replay round 1's graph; measured on an H100, fresh inputs cost a seed sweep ~1 s and
    # did not make separate runs agree better (benchmarks/RESULTS.md, docs/TIMING.md).
    fresh_inputs: bool = False
    # settled: sampled in the clock and power state the case's own load holds the GPU in (after settling);
    # burst: sampled right after `cooldown_ms` idle, before the power controller acts (~50 ms of load on
    # the H200), as FlashInfer's benchmarks cool the GPU between cases: the burst clock's number.
    state: Literal["settled", "burst"] = "settled"
    cooldown_ms: float = Field(default=500.0, ge=0)


class MoeSpec(_Strict):
    """An MoE layer's expert GEMMs: which tokens reach which expert (worker/contract/routing.py). The counts are
    stored, so the record says which per-expert M ran whatever a later sampler would draw."""

    experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    routing: Literal["uniform", "zipf", "file"]
    skew: Optional[float] = None  # zipf's exponent
    source: str = ""  # the counts file's name, for routing "file"
    counts: list[int]  # tokens per expert, len == experts

    @model_validator(mode="after")
    def _consistent(self) -> "MoeSpec":
        if len(self.counts) != self.experts:
            raise ValueError(f"{len(self.counts)} counts for {self.experts} experts")
        if any(c < 0 for c in self.counts) or not any(self.counts):
            raise ValueError("counts must be >= 0 and not all zero")
        if self.top_k > self.experts:
            raise ValueError("top_k must not exceed experts")
        return self


class CaseSpec(_Strict):
    """One kernel on one shape: what the controller plans and the worker runs. For the MoE workload,
    m is the layer's tokens, n and k each expert's output and input width, and `moe` the routing."""

    workload: Literal["gemm", "moe"] = "gemm"
    backend: str
    # No upper bound here: the sweep loader refuses sizes beyond 32 bits, and a run stored before it did
    # must still read (the history index leaves such a result out and names it).
    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    label: str = ""
    out_dtype: Literal["bfloat16", "float16"] = "bfloat16"
    seed: int = 0
    timing: TimingOptions = Field(default_factory=TimingOptions)
    # A user-defined backend: the sha256 of its file (worker/user/k<sha[:16]>.py in the bundle).
    kernel_sha256: Optional[str] = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    moe: Optional[MoeSpec] = None

    @model_validator(mode="after")
    def _workload_fits(self) -> "CaseSpec":
        if (self.workload == "moe") != (self.moe is not None):
            raise ValueError("an MoE case (workload 'moe') and only it has 'moe'")
        return self

    @property
    def case_id(self) -> str:
        return case_id_of(self)


# What a case measures. Its id hashes these and nothing else: how it is timed is not what it is.
# `moe` joins them only when present, so every GEMM case keeps the id it always had.
IDENTITY_FIELDS = ("workload", "backend", "m", "n", "k", "out_dtype", "seed", "label")


def case_id_of(case: CaseSpec) -> str:
    """Stable hash of the case's identity (IDENTITY_FIELDS, and `moe` when set)."""
    identity = {f: getattr(case, f) for f in IDENTITY_FIELDS}
    if case.moe is not None:
        identity["moe"] = case.moe.model_dump(mode="json")
    return identity_hash(identity)


def identity_hash(identity: dict) -> str:
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


class RoundStats(_Strict):
    """One round of a case: its median, and the environment it was timed in (None: not known here)."""

    median_us: float
    n: int
    rel_ci: float
    sm_clock_mhz: Optional[int] = None
    temperature_c: Optional[int] = None
    throttle_reasons: list[str] = Field(default_factory=list)  # slowdown reasons seen during the round
    gpu_processes: Optional[int] = None  # other processes computing on the GPU at the round's end
    load_per_core: Optional[float] = None  # the host's 1-minute load average / its CPUs, at the round's end
    steal_pct: Optional[float] = None  # CPU time stolen by the hypervisor during the round, in percent
    host_ref_us: Optional[float] = (
        None  # a fixed pure-Python loop, best of 10 (3 on a GPU), at the round's end: the CPU's speed
    )
    settle_ms: Optional[float] = None  # GPU time the round ran the case before its samples (format >= 6)
    # Where the round's wall time went (format >= 7): inputs and the backend prepared, the oracle check
    # (round 1 only), the timing itself (warm-up, capture, settling, samples), and the health and
    # environment probes around it. benchmarks/cost/sweep_cost.py adds them up over a run. A later round that
    # replays the graph its first round built (worker/sweep/runner.py) reads 0 for prepare, warm-up and capture.
    prepare_s: Optional[float] = None
    check_s: Optional[float] = None
    timing_s: Optional[float] = None
    probe_s: Optional[float] = None
    # Of timing_s (graph timing): warmup_s, capture_s, settle_s or cooldown_s, samples_s (worker/measure/timing.py).
    timing_phases: Optional[dict[str, float]] = None
    # What the integrity checks added (issue 31): of check_s and timing_s, all but the one call a result
    # check makes anyway (JIT builds and lazy set-up land in that call).
    integrity_s: Optional[float] = None
    # Format >= 9. The SM clock the samples ran at, read in the timer's stream (cycles over nanoseconds per
    # SM, worker/measure/streamclock.py); NVML's sm_clock_mhz reads 10-25% high under the power cap.
    sm_clock_stream_mhz: Optional[float] = None
    # The head-to-head timing this round took part in (worker/measure/interleave.py): right after the contenders
    # of a shape were each timed on their own in this round, their graphs were replayed interleaved, one
    # sample of each per cycle; `paired_us` holds this case's samples of it, and the rounds of cases with
    # the same pair_id pair position by position. None: no contender to pair with.
    pair_id: Optional[str] = None
    paired_us: Optional[list[float]] = None
    # Format >= 11. NVML's latest instantaneous board power after the samples (HealthSnapshot.power_instant_w;
    # NVML refreshes it about every 100 ms); above FactsRecord.power_limit_w the GPU was in a state it leaves
    # within about a second of load.
    power_w: Optional[float] = None


class Stats(_Strict):
    """Per-call latency statistics in microseconds, and the raw samples they come from. With several
    rounds: median_us is the median of the rounds' medians, rel_ci the between-round half-width, and
    the samples are those of every round."""

    method: str  # e.g. "cuda-graph", "cuda-events", "cpu-wallclock"
    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    stdev_us: float
    n: int
    rel_ci: float  # half-width of the median's 95% confidence interval, relative to the median
    calls_per_sample: int
    l2: Literal["hot", "cold"]
    samples_us: list[float]
    rounds: list[RoundStats] = Field(default_factory=list)  # empty in records of format < 3
    settle_ms: Optional[float] = None  # GPU ms the case ran before its samples, all rounds (None: CPU)
    # mode cupti: the same graph's per-call time by event-timed replay, beside the kernel time (median)
    replay_median_us: Optional[float] = None
    # Why the case got the rounds it got (format >= 9): "target" (its intervals narrow enough), "cap" (the
    # `rounds` cap reached first), "fixed" (min_rounds == rounds). None: timed before rounds until sure.
    rounds_stop: Optional[Literal["target", "cap", "fixed"]] = None


class Correctness(_Strict):
    """Verdict of a kernel's output against the oracle (and, informationally, against bf16)."""

    verdict: Literal["pass", "fail"]
    reference: str  # what `rel_err` is measured against
    rel_err: float
    cosine: float
    max_rel_err: float
    min_cosine: float
    rel_err_bf16: Optional[float] = None  # against the unquantized bf16 product
    cosine_bf16: Optional[float] = None
    max_rel_err_bf16: Optional[float] = None
    min_cosine_bf16: Optional[float] = None
    detail: str = ""
    # The integrity checks the kernel failed (worker/check/integrity.py: cached, wrote-inputs, lazy, side-stream,
    # untimed, l2-persistence); [] when it passed them all; None from a worker before them (issue 31).
    integrity: Optional[list[str]] = None


class HealthSnapshot(_Strict):
    sm_clock_mhz: Optional[int] = None
    mem_clock_mhz: Optional[int] = None
    temperature_c: Optional[int] = None
    power_w: Optional[float] = None  # NVML's board power, averaged (over ~1 s on recent GPUs)
    power_instant_w: Optional[float] = None  # NVML's instantaneous board power (format >= 11)
    throttle_reasons: list[str] = Field(default_factory=list)


class Health(_Strict):
    before: HealthSnapshot
    after: HealthSnapshot
    tainted: bool
    taint_reason: str = ""


class Metrics(_Strict):
    flops: float
    bytes: float
    tflops: float
    tb_per_s: float
    pct_peak_flops: Optional[float] = None  # against the datasheet (PEAKS in worker/contract/metrics.py)
    pct_peak_bw: Optional[float] = None
    # Speed of light from this GPU's calibration (facts): max(flops / measured peak math, bytes / measured
    # copy bandwidth); pct_sol = 100 * sol_us / median_us; sol_bound says which term is larger.
    sol_us: Optional[float] = None
    pct_sol: Optional[float] = None
    sol_bound: Optional[Literal["math", "memory"]] = None


class Calibration(_Strict):
    """The GPU's own peaks, measured on it (worker/measure/calibrate.py): what speed of light is computed from."""

    key: str  # host | GPU uuid | driver | torch: the cache entry these numbers belong to
    measured_at: str
    cached: bool  # read from the host's cache rather than measured by this run's worker
    tflops: dict[str, float] = Field(default_factory=dict)  # operand family -> measured dense TFLOPS
    tb_s: Optional[float] = None  # device-to-device copy, bytes read + written per second
    method: dict[str, str] = Field(default_factory=dict)  # family (or "copy") -> what was timed
    problems: dict[str, str] = Field(default_factory=dict)  # family -> why it was not measured
    datasheet: Optional[dict[str, float]] = None  # the vendor figures, beside (never instead of) these


class FactsRecord(_Strict):
    """What the host is: stored with every host's results so diffs can explain themselves."""

    kind: Literal["facts"] = "facts"
    schema_version: int = SCHEMA_VERSION
    hostname: str
    python: str
    platform: str
    worker_version: str
    device: str  # "cuda" or "cpu"
    gpu_name: Optional[str] = None
    compute_capability: Optional[str] = None  # "9.0"
    sm_count: Optional[int] = None
    gpu_memory_gb: Optional[float] = None
    l2_cache_mb: Optional[float] = None
    driver: Optional[str] = None
    cuda: Optional[str] = None
    torch: Optional[str] = None
    flashinfer: Optional[str] = None
    sgl_kernel: Optional[str] = None
    triton: Optional[str] = None
    visible_devices: Optional[str] = None
    notes: list[str] = Field(default_factory=list)
    calibration: Optional[Calibration] = None
    # The SM clock the sweep ran at when the inventory had it locked (`clocks: lock`; None: not locked,
    # the GPU's own clock management ran, as in serving). Format >= 7.
    sm_clock_locked_mhz: Optional[int] = None
    # The GPU's enforced power limit when the worker started (NVML), in watts. Format >= 11.
    power_limit_w: Optional[float] = None


class CaseRecord(_Strict):
    """The outcome of one case: exactly one status, always with a reason unless ok."""

    kind: Literal["case"] = "case"
    schema_version: int = SCHEMA_VERSION
    case_id: str
    case: CaseSpec
    status: Status
    reason: str = ""
    timing: Optional[Stats] = None
    metrics: Optional[Metrics] = None
    correctness: Optional[Correctness] = None
    health: Optional[Health] = None
    traceback: Optional[str] = None
    started_at: str
    duration_s: float
    # False: written after a round while more rounds of the case were to come (format >= 7).
    complete: bool = True


Record = Annotated[Union[FactsRecord, CaseRecord], Field(discriminator="kind")]


class WorkerParams(_Strict):
    """The data a rendered script hands to the worker (written as JSON beside the script)."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    host: str
    gpu: Optional[int] = None
    cases: list[CaseSpec]
    max_restarts: int = 2
    lock_timeout_s: float = 0.0
    device: Literal["auto", "cuda", "cpu"] = "auto"
    # Speed-of-light peaks: the host's cached calibration (measured when missing), a fresh one, or none.
    calibration: Literal["cached", "fresh", "off"] = "cached"
    # Seconds one round of a case may take before the supervisor stops it as hung and goes on with the
    # next case; time while a compiler runs under the worker (a first JIT build) counts against
    # build_timeout_s instead (format >= 7).
    # Lock the SM clock for the sweep (the host's `clocks: lock`; worker/host/clocks.py). Format >= 7.
    lock_clocks: bool = False
    case_timeout_s: float = Field(default=300.0, gt=0)
    build_timeout_s: float = Field(default=1800.0, gt=0)
    # The host's cases in the whole run, where these params are one part of them (the supervisor runs the
    # built-ins and the user's kernel files in processes of their own): what progress counts to. Format >= 9.
    cases_in_run: Optional[int] = None
