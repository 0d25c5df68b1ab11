"""CUPTI timing's building block (worker/measure/cupti.py) on the CPU: the trace of graph replays, as kineto hands
it over, split into replays (by each activity's cudaGraphLaunch, else by count), summed per call, and
refused when it cannot be attributed. The trace comes from fakes shaped like torch's _KinetoEvent; the
lent GPU's real trace is read by benchmarks/fidelity/cupti_check.py."""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from worker.measure import cupti
from worker.measure.cupti import CuptiError, DeviceActivity, read_trace, split_replays

QUANT = "void nvfp4::quantize_kernel<(int)16>(...)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def trace(
    replays: int,
    calls: int,
    call: list[tuple[str, int]],
    *,
    gap_ns: int = 20_000,
    first_launch: int = 100,
    jitter=lambda r: 0,
) -> tuple[list[DeviceActivity], list[int]]:
    """`replays` replays of `calls` calls, each call the activities `call` ((name, ns) in order), back to back
    within a replay, `gap_ns` between replays; replay r launched with correlation id first_launch + 2r."""
    acts, launches, t = [], [], 1_000_000
    for r in range(replays):
        corr = first_launch + 2 * r
        launches.append(corr)
        for _ in range(calls):
            for name, ns in call:
                ns += jitter(r)
                acts.append(DeviceActivity(name, t, t + ns, "kernel", corr))
                t += ns + 500  # the gap between two graph nodes
        t += gap_ns
    return acts, launches


def test_each_activity_goes_to_the_replay_whose_graph_launch_it_names():
    acts, launches = trace(4, 3, [(QUANT, 2000), (GEMM, 10_000)], jitter=lambda r: 100 * r)
    random.Random(1).shuffle(acts)  # the buffer's order is not time order
    got = split_replays(acts, launches, calls_per_replay=3, replays=3, skip=1)
    assert got.split_by == "launch" and got.kernels == [QUANT, GEMM]
    # Replay r's call is 12000 + 200 r ns of kernels; its span adds the node gaps (2 per call, 1 at the end).
    assert got.per_call_us == pytest.approx([12.2, 12.4, 12.6])
    assert got.span_us[0] == pytest.approx((3 * 12_200 + 5 * 500) / 3 / 1e3)


def test_a_launch_seen_twice_runtime_and_driver_api_is_one_replay():
    acts, launches = trace(3, 2, [(GEMM, 8000)])
    doubled = [x for c in launches for x in (c, c + 1)]  # cuGraphLaunch beside cudaGraphLaunch, never named
    got = split_replays(acts, doubled, calls_per_replay=2, replays=3)
    assert got.split_by == "launch" and got.per_call_us == pytest.approx([8.0, 8.0, 8.0])


def test_without_launches_replays_are_told_apart_by_count_in_time_order():
    acts, _ = trace(5, 4, [(QUANT, 1000), (GEMM, 5000)])
    unlinked = [DeviceActivity(a.name, a.start_ns, a.end_ns, a.kind, 0) for a in reversed(acts)]
    got = split_replays(unlinked, [], calls_per_replay=4, replays=4, skip=1)
    assert got.split_by == "count" and got.per_call_us == pytest.approx([6.0] * 4) and not got.notes
    # Launches that the activities do not name: still by count, and the trace's oddity is said.
    got = split_replays(unlinked, [7, 8, 9, 10, 11], calls_per_replay=4, replays=5)
    assert got.split_by == "count" and "told apart by count" in got.notes[0]


def test_a_call_of_several_kernels_and_a_memset_is_their_sum():
    call = [("Memset (Device)", 700), (QUANT, 2300), (GEMM, 9000)]
    acts, launches = trace(2, 8, call)
    acts = [
        DeviceActivity(
            a.name, a.start_ns, a.end_ns, "gpu_memset" if a.name.startswith("Memset") else "kernel", a.correlation
        )
        for a in acts
    ]
    got = split_replays(acts, launches, calls_per_replay=8, replays=2)
    assert got.per_call_us == pytest.approx([12.0, 12.0]) and got.kernels == [n for n, _ in call]


@pytest.mark.parametrize(
    "mangle, words",
    [
        (lambda acts: [], "no GPU activity during 3 replays"),
        (lambda acts: acts[:-1], "not a whole number per replay"),
        (lambda acts: acts + [DeviceActivity("stray", 10**12, 10**12 + 5, "kernel", 0)] * 2, "not a whole number"),
        (
            lambda acts: [
                DeviceActivity(QUANT if i == 7 else a.name, a.start_ns, a.end_ns, a.kind, 0) for i, a in enumerate(acts)
            ],
            "replay 2 of 3 ran other GPU work than replay 1",
        ),
        (
            lambda acts: [
                DeviceActivity(QUANT if i == 1 else a.name, a.start_ns, a.end_ns, a.kind, 0) for i, a in enumerate(acts)
            ],
            "calls of one replay ran different GPU work",
        ),
    ],
)
def test_a_trace_that_cannot_be_attributed_is_refused_with_why(mangle, words):
    acts, _ = trace(3, 4, [(GEMM, 5000)])
    unlinked = [DeviceActivity(a.name, a.start_ns, a.end_ns, a.kind, 0) for a in acts]
    with pytest.raises(CuptiError, match=words):
        split_replays(mangle(unlinked), [], calls_per_replay=4, replays=3)


def test_a_replay_of_activities_that_do_not_divide_into_its_calls_is_refused():
    acts, launches = trace(2, 1, [(QUANT, 1000), (GEMM, 5000), (GEMM, 5000)])
    with pytest.raises(CuptiError, match="not a whole number per call of its 2 calls"):
        split_replays(acts, launches, calls_per_replay=2, replays=2)


# -- reading kineto's events ------------------------------------------------------------------------------
def kineto(name: str, device, kind, start: int, end: int, corr: int, annotation: bool = False):
    fields = dict(
        name=lambda: name,
        device_type=lambda: device,
        start_ns=lambda: start,
        end_ns=lambda: end,
        correlation_id=lambda: corr,
        is_user_annotation=lambda: annotation,
    )
    if kind is not None:
        fields["activity_type"] = lambda: kind
    return SimpleNamespace(**fields)


@pytest.mark.parametrize("typed", [True, False], ids=["activity_type", "older torch"])
def test_the_trace_keeps_gpu_work_and_graph_launches_only(typed):
    k = (lambda kind: kind) if typed else (lambda kind: None)
    events = [
        kineto("cudaGraphLaunch", DeviceType.CPU, k("cuda_runtime"), 50, 60, 11),
        kineto("cuGraphLaunch", DeviceType.CPU, k("cuda_driver"), 52, 58, 12),
        kineto("cudaGraphLaunch", DeviceType.CPU, k("cuda_runtime"), 10, 20, 9),
        kineto("cudaDeviceSynchronize", DeviceType.CPU, k("cuda_runtime"), 61, 90, 13),
        kineto(GEMM, DeviceType.CUDA, k("kernel"), 100, 200, 11),
        kineto("Memcpy DtoD (Device -> Device)", DeviceType.CUDA, k("gpu_memcpy"), 200, 220, 11),
        kineto("Context Sync", DeviceType.CUDA, k("cuda_sync"), 220, 300, 13),
        kineto("replay", DeviceType.CUDA, k("gpu_user_annotation"), 90, 230, 0, annotation=True),
    ]
    acts, launches = read_trace(events)
    assert [a.name for a in acts] == [GEMM, "Memcpy DtoD (Device -> Device)"]
    assert acts[0] == DeviceActivity(GEMM, 100, 200, "kernel", 11) and acts[0].duration_ns == 100
    assert launches == [9, 11, 12]  # in the order they were made


# -- the profiler session ------------------------------------------------------------------------------------
def test_on_this_cpu_cupti_timing_says_why_it_cannot_run():
    why = cupti.available()
    assert why and "no CUDA GPU" in why
    with pytest.raises(CuptiError, match="no CUDA GPU"):
        cupti.kernel_samples_us(lambda: None, 4, 3)
    with pytest.raises(ValueError):
        cupti.kernel_samples_us(lambda: None, 0, 3)


def test_lead_in_replays_are_traced_and_discarded(monkeypatch):
    """The session as kernel_samples_us drives it, with a profiler that records what each replay did: the
    lead-in replays run inside the trace (the GPU busy from its start) and only the last `replays` count."""
    import torch

    events: list = []
    clock = iter(range(10**6, 10**9, 50_000))

    def replay() -> None:
        corr = len(events) + 1
        events.append(kineto("cudaGraphLaunch", DeviceType.CPU, "cuda_runtime", 0, 1, corr))
        slow = 2000 if sum(e.name() == "cudaGraphLaunch" for e in events) == 1 else 0  # the first replay: slow
        for _ in range(2):
            start = next(clock)
            events.append(kineto(GEMM, DeviceType.CUDA, "kernel", start, start + 5000 + slow, corr))

    class FakeProfile:
        def __init__(self, activities):
            self.profiler = SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: list(events)))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(cupti, "available", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    got = cupti.kernel_samples_us(replay, calls_per_replay=2, replays=5, lead_in_ms=5.0)
    launches = sum(e.name() == "cudaGraphLaunch" for e in events)
    assert launches > 5 and len(got.per_call_us) == 5  # the lead-in ran, and is not among the samples
    assert got.per_call_us == pytest.approx([5.0] * 5) and got.split_by == "launch"
    events.clear()
    once = cupti.kernel_samples_us(replay, calls_per_replay=2, replays=1, lead_in_ms=0)
    assert once.per_call_us == pytest.approx([7.0])  # no lead-in: the first (slow) replay is the sample


@pytest.mark.parametrize(
    "cuda, env, teardown, stays",
    [
        ("13.0", None, "1", ""),
        ("12.6", None, "1", ""),
        ("13.0", "1", "1", ""),
        ("13.0", "0", "0", "TEARDOWN_CUPTI=0 in the environment"),  # the caller's choice is kept, and said
        ("12.4", None, None, "CUDA 12.4 cannot tear CUPTI down safely"),  # torch's own rule for CUDA graphs
    ],
)
def test_cupti_is_torn_down_after_a_trace_where_it_is_safe(cuda, env, teardown, stays, monkeypatch):
    """Kineto keeps CUPTI attached after a trace unless TEARDOWN_CUPTI=1, and an attached CUPTI slows
    every later timing of the process (benchmarks/fidelity/cupti_after.py): the trace asks for teardown."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", cuda)
    if env is None:
        monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    else:
        monkeypatch.setenv("TEARDOWN_CUPTI", env)
    why = cupti.ask_for_teardown()
    assert os.environ.get("TEARDOWN_CUPTI") == teardown
    assert (why == "") == (stays == "") and stays in why
    if stays:
        assert "later timings in this process run with it" in why


def test_a_trace_that_records_nothing_after_a_teardown_is_taken_again_once(monkeypatch):
    import torch

    traces: list = []

    class FakeProfile:
        def __init__(self, activities):
            recorded = [] if not traces else [kineto(GEMM, DeviceType.CUDA, "kernel", 0, 5000, 0)]
            traces.append(recorded)
            self.profiler = SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: list(recorded)))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(cupti, "available", lambda: None)
    monkeypatch.setattr(cupti, "ask_for_teardown", lambda: "")
    monkeypatch.setattr(cupti, "RETRACE_WAIT_S", 0.0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    got = cupti.kernel_samples_us(lambda: None, calls_per_replay=1, replays=1, lead_in_ms=0)
    assert len(traces) == 2 and got.per_call_us == pytest.approx([5.0])
    assert any("traced again" in n for n in got.notes)
    traces.clear()
    traces.append("a first trace that recorded")  # the next trace records: no retry
    cupti.kernel_samples_us(lambda: None, calls_per_replay=1, replays=1, lead_in_ms=0)
    assert len(traces) == 2
    monkeypatch.setattr(
        FakeProfile,
        "__init__",
        lambda self, activities: (
            traces.append([]),
            setattr(self, "profiler", SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: []))),
        )[-1],
    )
    traces.clear()
    with pytest.raises(CuptiError, match="no GPU activity"):  # twice nothing: refused, never a third
        cupti.kernel_samples_us(lambda: None, calls_per_replay=1, replays=1, lead_in_ms=0)
    assert len(traces) == 2
