"""Kernel time from CUPTI's activity trace: the building block of the `cupti` timing method.

Graph replay timed by CUDA events measures the GPU from the replay's start event to its end event:
the kernels of every call, and whatever lies between them (the graph's own launch, the gaps between its
nodes). CUPTI records each GPU activity (kernel, memcpy, memset) with its own start and end, so the sum
of a call's activities is its kernel time with launch overhead out by construction: the figure that
FlashInfer's CUPTI timer (`bench_gpu_time(enable_cupti=True)`) and Nsight Systems report.

It is read through torch.profiler (kineto drives CUPTI; no `cupti` Python module is needed), with
ProfilerActivity.CUDA only: the raw kineto events are read directly, never parsed into FunctionEvents
(which costs tens of microseconds per event). Kernels launched by a CUDA graph carry the correlation id
of the cudaGraphLaunch that started them, so each activity is attributed to its replay by that id where
kineto reports the launch; else the activities, in time order, are split into replays by count (every
replay ends in a synchronize, so no replay's activities interleave with the next one's). A count that
does not divide, or replays that ran different kernels, is refused: those samples would be wrong.

CUPTI must leave with the trace. Kineto keeps it attached after a profiler session unless TEARDOWN_CUPTI=1
(pytorch#146604): every later launch and graph replay of the process then pays CUPTI's instrumentation,
which slows short kernels measurably (benchmarks/fidelity/cupti_after.py). So the trace asks for teardown where
torch itself allows it with CUDA graphs (CUDA 12.6 and later); where it cannot, or the caller set
TEARDOWN_CUPTI=0, the samples say that later timings in the process ran with CUPTI attached.

A call's activities are summed, never merged: two kernels of one call running at once on two streams
count twice (the `span` beside the sum, first start to last end, bounds their union).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from .tuning import TUNING

# kineto's activity types that are work the GPU did for a call; not its synchronizations ("cuda_sync":
# Context Sync, Stream Sync) nor record_function ranges projected onto the GPU ("gpu_user_annotation").
WORK_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
NOT_WORK_NAMES = ("Context Sync", "Stream Sync", "Event Sync")  # for a torch without activity_type()
RETRACE_WAIT_S = 0.5


class CuptiError(RuntimeError):
    """CUPTI timing cannot give samples here or for this replay; the message says why."""


@dataclass(frozen=True)
class DeviceActivity:
    """One piece of GPU work in the trace (kineto's view of a CUPTI activity record)."""

    name: str
    start_ns: int
    end_ns: int
    kind: str = "kernel"  # one of WORK_KINDS
    correlation: int = 0  # the CUPTI correlation id of the API call that launched it (0: not known)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class KernelSamples:
    """Per replay: the summed durations of its GPU activities per call, and first start to last end per
    call; the activities of one call (their names, in order); how replays were told apart."""

    per_call_us: list[float]
    span_us: list[float]
    kernels: list[str]
    split_by: str  # "launch" (each activity's cudaGraphLaunch) or "count" (time order)
    notes: list[str] = field(default_factory=list)


def available() -> Optional[str]:
    """None when CUPTI timing can run in this process, else why not (one line)."""
    try:
        import torch
    except ImportError as exc:
        return f"torch cannot be imported: {exc}"
    if not torch.cuda.is_available():
        return "no CUDA GPU: CUPTI traces CUDA work only"
    try:
        from torch.profiler import ProfilerActivity, supported_activities
    except ImportError as exc:
        return f"this torch has no torch.profiler: {exc}"
    if not torch.autograd.kineto_available():
        return f"torch {torch.__version__} was built without kineto (its CUPTI tracer)"
    if ProfilerActivity.CUDA not in supported_activities():
        return f"torch {torch.__version__}'s profiler cannot trace CUDA here (ProfilerActivity.CUDA unsupported)"
    return None


def kernel_samples_us(
    replay: Callable[[], None],
    calls_per_replay: int,
    replays: int,
    lead_in_ms: float = TUNING.cupti_lead_in_ms,
) -> KernelSamples:
    """Trace `replays` calls of `replay()` (each one graph replay of `calls_per_replay` calls of the case,
    synchronized after it) after replays for `lead_in_ms` (discarded: Tuning.cupti_lead_in_ms); per
    replay, the kernel time per call. Raises CuptiError when CUPTI cannot run here, records nothing, or
    its records cannot be told apart replay by replay."""
    if calls_per_replay < 1 or replays < 1:
        raise ValueError(f"calls_per_replay ({calls_per_replay}) and replays ({replays}) must be at least 1")
    problem = available()
    if problem:
        raise CuptiError(problem)
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    stays = ask_for_teardown()
    for attempt in (1, 2):
        lead_in = 0
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            deadline = time.perf_counter() + lead_in_ms / 1e3
            while lead_in_ms > 0 and (lead_in == 0 or time.perf_counter() < deadline):
                replay()
                torch.cuda.synchronize()
                lead_in += 1
            for _ in range(replays):
                replay()
                torch.cuda.synchronize()
        activities, launches = read_trace(prof.profiler.kineto_results.events())
        if activities or stays or attempt == 2:
            break
        # A trace that starts right after a torn-down one can record nothing (seen on the H200 in 4 of 48
        # back-to-back traces): a whole new trace, once, after the teardown had time to finish.
        time.sleep(RETRACE_WAIT_S)
    got = split_replays(activities, launches, calls_per_replay, replays, skip=lead_in)
    if stays:
        got.notes.append(stays)
    if attempt == 2:
        got.notes.append(
            "the first trace recorded no GPU activity (CUPTI re-initialised after its teardown): traced again"
        )
    return got


def ask_for_teardown() -> str:
    """Set TEARDOWN_CUPTI=1 for kineto unless the caller chose otherwise or this CUDA cannot tear CUPTI
    down safely with graphs. Returns "" when CUPTI will leave, else why it stays. Call it before the
    process's first trace: kineto reads it when a trace starts too, and a process that traced with CUPTI
    kept then switched to teardown crashed its next graph replay on the H200 (unspecified launch failure)."""
    import os

    import torch

    chosen = os.environ.get("TEARDOWN_CUPTI")
    if chosen is not None and chosen != "1":
        return (
            f"TEARDOWN_CUPTI={chosen} in the environment: CUPTI stays attached after this trace, and later "
            "timings in this process run with it (slower launches)"
        )
    version = tuple(int(p) for p in (torch.version.cuda or "0.0").split(".")[:2] if p.isdigit())
    if version < (12, 6):
        # torch's own rule (torch/profiler/profiler.py): before 12.6, re-initialising CUPTI after a teardown
        # crashes processes that use CUDA graphs.
        return (
            f"CUDA {torch.version.cuda} cannot tear CUPTI down safely with CUDA graphs (12.6 and later can): "
            "CUPTI stays attached after this trace, and later timings in this process run with it"
        )
    os.environ["TEARDOWN_CUPTI"] = "1"
    return ""


def read_trace(events) -> tuple[list[DeviceActivity], list[int]]:
    """(the GPU work, the correlation ids of the graph launches in the order they were made) from raw
    kineto events (torch's _KinetoEvent)."""
    from torch.autograd import DeviceType

    activities, launches = [], []
    for e in events:
        kind = e.activity_type() if hasattr(e, "activity_type") else None
        if e.device_type() == DeviceType.CUDA:
            if kind is not None and kind not in WORK_KINDS:
                continue
            if kind is None and (e.name() in NOT_WORK_NAMES or e.is_user_annotation()):
                continue
            activities.append(DeviceActivity(e.name(), e.start_ns(), e.end_ns(), kind or "kernel", e.correlation_id()))
        elif "GraphLaunch" in e.name():  # cudaGraphLaunch (runtime API) or cuGraphLaunch (driver API)
            launches.append((e.start_ns(), e.correlation_id()))
    return activities, [c for _, c in sorted(launches)]


def split_replays(
    activities: Sequence[DeviceActivity], launches: Sequence[int], calls_per_replay: int, replays: int, skip: int = 0
) -> KernelSamples:
    """The activities of `skip + replays` replays, each of `calls_per_replay` calls, as samples of the
    last `replays` (module docstring): by the graph launch each activity names when every activity
    names one of exactly that many launches, else by count in time order. Raises CuptiError when there
    is nothing, the count does not divide, or replays (or the calls of one replay) ran different work."""
    total = skip + replays
    if not activities:
        raise CuptiError(
            f"CUPTI recorded no GPU activity during {total} replays (this driver's CUPTI does not "
            "trace the kernels of CUDA graphs, or another profiler such as nsys or ncu holds it)"
        )
    ordered = sorted(activities, key=lambda a: (a.start_ns, a.end_ns))
    notes: list[str] = []
    referenced = {a.correlation for a in ordered}
    used = [c for c in dict.fromkeys(launches) if c in referenced]  # a launch seen twice (runtime + driver API)
    if len(used) == total and referenced <= set(used):
        index = {c: i for i, c in enumerate(used)}
        groups: list[list[DeviceActivity]] = [[] for _ in range(total)]
        for a in ordered:
            groups[index[a.correlation]].append(a)
        split_by = "launch"
    else:
        if launches:
            notes.append(
                f"{len(used)} graph launches named by the trace's activities for {total} replays: "
                "replays told apart by count instead"
            )
        if len(ordered) % total:
            raise CuptiError(
                f"CUPTI recorded {len(ordered)} GPU activities over {total} replays, not a whole "
                "number per replay: they cannot be told apart (records lost from the trace buffer, "
                "or GPU work outside the replays)"
            )
        size = len(ordered) // total
        groups = [ordered[i * size : (i + 1) * size] for i in range(total)]
        split_by = "count"
    kept = groups[skip:]
    first = kept[0]
    if not first:
        raise CuptiError(f"CUPTI recorded no GPU activity of replay {skip + 1} of {total}")
    if len(first) % calls_per_replay:
        raise CuptiError(
            f"a replay ran {len(first)} GPU activities, not a whole number per call of its {calls_per_replay} calls"
        )
    per_call = len(first) // calls_per_replay
    kernels = [a.name for a in first[:per_call]]
    one_call = collections.Counter(kernels)
    if collections.Counter(a.name for a in first) != _times(one_call, calls_per_replay):
        raise CuptiError(
            f"the {calls_per_replay} calls of one replay ran different GPU work: "
            f"{_differences(collections.Counter(a.name for a in first), _times(one_call, calls_per_replay))}"
        )
    expected = collections.Counter(a.name for a in first)
    for i, group in enumerate(kept[1:], start=2):
        got = collections.Counter(a.name for a in group)
        if got != expected:
            raise CuptiError(
                f"replay {i} of {replays} ran other GPU work than replay 1 "
                f"({_differences(got, expected)}): its records cannot be attributed"
            )
    per_call_us = [sum(a.duration_ns for a in g) / calls_per_replay / 1e3 for g in kept]
    span_us = [(max(a.end_ns for a in g) - min(a.start_ns for a in g)) / calls_per_replay / 1e3 for g in kept]
    return KernelSamples(per_call_us=per_call_us, span_us=span_us, kernels=kernels, split_by=split_by, notes=notes)


def _times(counts: collections.Counter, n: int) -> collections.Counter:
    return collections.Counter({name: c * n for name, c in counts.items()})


def _differences(got: collections.Counter, expected: collections.Counter) -> str:
    parts = [
        f"{name[:60]}: {got.get(name, 0)} vs {expected.get(name, 0)}"
        for name in sorted(set(got) | set(expected))
        if got.get(name, 0) != expected.get(name, 0)
    ]
    return "; ".join(parts[:3]) + ("; ..." if len(parts) > 3 else "")
