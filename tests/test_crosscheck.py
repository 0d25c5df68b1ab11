"""`fleetbench crosscheck` (issue 30) on the CPU: each peer's ladder as the host runs it (default settings,
then L2 state, launch, clock state and statistic matched to fleetbench's one at a time), against stand-in
timers with the installed signatures' shapes whose figures follow a known model of each factor; the gaps
and their causes as the controller judges them; and the command end to end on local hosts, where the
cases run on this CPU (the peers then say why they did not run). The lent GPU runs the real timers:
`bash benchmarks/device_check.sh crosscheck`."""

from __future__ import annotations

import contextlib
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_output import cli_json
from storedruns import write_ok_attempt

from benchmarks.harness.polling import wait_until
from orchestrator.analysis import crosscheck as judgement
from orchestrator.analysis.crosscheck import summarize
from orchestrator.cli import main
from orchestrator.config.inventory import load_inventory
from orchestrator.config.sweep import Sweep
from orchestrator.execution.launch import prepare_run
from orchestrator.planning.plan import build_plan, new_run_id
from orchestrator.runs.crosschecks import load_crosschecks
from orchestrator.runs.store import RunStore
from orchestrator.views.crosscheck import compare_peer, summary_text
from worker.contract.crosscheck import CrosscheckOptions, CrosscheckRecord, FleetbenchTiming, Method, PeerResult, Timed
from worker.contract.schema import CaseRecord, CaseSpec, FactsRecord, TimingOptions
from worker.contract.stats import summarize as summarize_samples
from worker.tools import crosscheck as xc
from worker.tools.crosscheck import CaseBench

# The stand-ins' model of one call of the case: 10 µs of kernels; FlashInfer's flush leaves L2 dirty
# (+5%); per-call events add 2 µs of launch; a GPU timed from idle runs at its burst clock (-4%), and so
# does a timer's first RAMP_MS after its own capture (the GPU idles while a timer captures its graph).
KERNEL_US, FLUSH, LAUNCH_US, BURST, RAMP_MS = 10.0, 1.05, 2.0, 0.96, 150


class Bench(CaseBench):
    """CaseBench with the GPU's parts taken out: what it ran is logged, the case is a counter of input sets."""

    def __init__(self, n_sets: int = 4, l2: str = "cold", settle_ms: float = 100.0, method: str = "cuda-graph"):
        self.log: list = []
        case = CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144, timing=TimingOptions(l2=l2, settle_ms=settle_ms))
        super().__init__(lambda i: self.log.append(("set", i)), n_sets, case)
        self.calls = 8
        self.ours = FleetbenchTiming(
            method=Method(),
            timing_method=method,
            median_us=KERNEL_US,
            mean_us=KERNEL_US,
            samples_us=[KERNEL_US],
            calls_per_sample=self.calls,
            n_sets=n_sets,
        )

    def idle(self):
        self.log.append("idle")

    def settle(self):
        if self.settles:
            self.log.append("settle")

    def side_stream(self):
        self.log.append("side stream")
        return contextlib.nullcontext()

    def eager_ms(self, call) -> float:
        return KERNEL_US / 1e3  # the stand-ins launch as fast as the GPU runs

    def state(self) -> str:
        return next(e for e in reversed(self.log) if e in ("idle", "settle"))

    def sets(self, calls: list, i: int) -> list[int]:
        """The input sets the i-th timer call ran (until the next call began)."""
        until = calls[i + 1]["since"] if i + 1 < len(calls) else len(self.log)
        return [e[1] for e in self.log[calls[i]["since"] : until] if isinstance(e, tuple)]


def per_call_us(bench: Bench, flush: bool, graph: bool) -> float:
    us = KERNEL_US * (FLUSH if flush else 1.0) * (BURST if bench.state() == "idle" else 1.0)
    return us + (0.0 if graph else LAUNCH_US)


def fake_flashinfer(monkeypatch, bench: Bench, *, with_graph: bool = True, version: str = "0.7.2.post1") -> list:
    """flashinfer.testing.bench_gpu_time with the installed parameters (without use_cuda_graph for an old
    one): calls fn as many times as it would capture or time, returns ms per iteration. Returns its calls."""
    calls = []

    def bench_gpu_time(
        fn,
        dry_run_iters=None,
        repeat_iters=None,
        dry_run_time_ms=25,
        repeat_time_ms=100,
        l2_flush=None,
        l2_flush_size_mb=None,
        l2_flush_device=None,
        sleep_after_run=False,
        enable_cupti=False,
        use_cuda_graph=False,
        num_iters_within_graph=10,
        input_args=(),
        input_kwargs=None,
        cold_l2_cache=True,
        aggregate_op=max,
    ):
        calls.append(
            {
                "cold_l2_cache": cold_l2_cache,
                "num_iters_within_graph": num_iters_within_graph,
                "use_cuda_graph": use_cuda_graph,
                "dry_run_time_ms": dry_run_time_ms,
                "since": len(bench.log),
            }
        )
        for _ in range(num_iters_within_graph if use_cuda_graph else 5):
            fn()
        # After its capture (or from idle) its timed calls run at the burst clock unless its dry run outlasts it
        burst = dry_run_time_ms < RAMP_MS and (use_cuda_graph or bench.state() == "idle")
        us = KERNEL_US * (FLUSH if cold_l2_cache else 1.0) * (BURST if burst else 1.0) + (
            0.0 if use_cuda_graph else LAUNCH_US
        )
        return [us / 1e3] * 7 + [us * 1.5 / 1e3]  # a slow outlier: the median ignores it

    if not with_graph:
        exec_ns: dict = {}
        exec(
            "def bench_gpu_time(fn, dry_run_time_ms=25, repeat_time_ms=100, cold_l2_cache=True):\n"
            "    return impl(fn, dry_run_time_ms=dry_run_time_ms, cold_l2_cache=cold_l2_cache)",
            {"impl": bench_gpu_time},
            exec_ns,
        )
        timer = exec_ns["bench_gpu_time"]
    else:
        timer = bench_gpu_time
    package = types.ModuleType("flashinfer")
    package.__version__ = version
    testing = types.ModuleType("flashinfer.testing")
    testing.bench_gpu_time = timer
    package.testing = testing
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, "flashinfer.testing", testing)
    return calls


def fake_triton(monkeypatch, bench: Bench, modes=("min", "max", "mean", "median", "all")) -> list:
    """triton.testing.do_bench_cudagraph: hot unless fn rotates, a graph (no launch cost), ten replays of
    `rep` ms each right after its capture: those that start within RAMP_MS of it run at the burst clock."""
    calls = []

    def do_bench_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
        calls.append({"return_mode": return_mode, "rep": rep, "since": len(bench.log)})
        assert return_mode in modes
        for _ in range(8):
            fn()
        times = [KERNEL_US * (BURST if i * rep < RAMP_MS else 1.0) / 1e3 for i in range(10)]
        times[-1] *= 2  # one slow replay: the mean feels it, the median does not
        return times if return_mode == "all" else float(np.mean(times) if return_mode == "mean" else np.median(times))

    package = types.ModuleType("triton")
    package.__version__ = "3.5.0"
    testing = types.ModuleType("triton.testing")
    testing.do_bench_cudagraph = do_bench_cudagraph
    package.testing = testing
    monkeypatch.setitem(sys.modules, "triton", package)
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    return calls


def judged(bench: Bench, peer: PeerResult):
    record = CrosscheckRecord(
        case_id=bench.case.case_id, case=bench.case, status="ok", fleetbench=bench.ours, peers=[peer]
    )
    return compare_peer("h1", record, peer)


# -- the ladders, as the host runs them ------------------------------------------------------------------
def test_flashinfer_is_run_as_a_user_calls_it_then_matched_one_setting_at_a_time(monkeypatch):
    bench = Bench()
    calls = fake_flashinfer(monkeypatch, bench)
    peer = xc.flashinfer_runs(bench)
    assert peer.status == "ok" and peer.version == "0.7.2.post1" and "cold_l2_cache" in peer.signature
    assert [r.step for r in peer.runs] == ["default", "l2", "launch", "clock"]
    default, l2, launch, clock = calls
    assert default["cold_l2_cache"] and not default.get("use_cuda_graph")  # its own defaults: flush, events
    assert bench.sets(calls, 0) == [0] * 5  # a closure over one set of inputs
    assert not l2["cold_l2_cache"] and bench.sets(calls, 1) == [0, 1, 2, 3, 0]  # fleetbench's rotation
    assert bench.sets(calls, 2) == [0, 1, 2, 3] * 2  # a graph of 8 calls captures two whole rotations
    assert launch["use_cuda_graph"] and launch["num_iters_within_graph"] == 8  # fleetbench's calls per sample
    assert [bench.log[c["since"] - 1] for c in calls] == ["idle", "idle", "idle", "settle"]
    assert peer.runs[0].call == "bench_gpu_time(fn)"
    assert peer.runs[3].call == (
        "bench_gpu_time(fn, cold_l2_cache=False, use_cuda_graph=True, num_iters_within_graph=8, dry_run_time_ms=200)"
    )  # its own untimed calls outlast the burst after its capture
    assert [c["dry_run_time_ms"] for c in calls] == [25, 25, 25, 200]
    assert peer.runs[0].value_us == pytest.approx(KERNEL_US * FLUSH * BURST + LAUNCH_US)  # its median, not the outlier
    assert any("cupti-python is not installed" in n for n in peer.notes)
    c = judged(bench, peer)
    assert c.raw_ratio == pytest.approx(1.208) and c.matched_ratio == pytest.approx(1.0) and c.verdict == "attributed"
    assert c.factors["l2"] == pytest.approx((KERNEL_US * FLUSH * BURST + 2) / (KERNEL_US * BURST + 2))
    assert c.factors["launch"] == pytest.approx((KERNEL_US * BURST + 2) / (KERNEL_US * BURST))
    assert c.factors["clock"] == pytest.approx(BURST)
    assert c.causes[0] == "launch overhead +20.8% (per-call CUDA events vs graph replay of 8 calls)"
    assert [x.split(" ")[0] for x in c.causes] == ["launch", "L2", "clock"]
    assert "clock state -4.0% (from idle vs settled, then 200 ms of its own untimed calls)" in c.explanation


def test_triton_is_run_as_a_user_calls_it_then_matched(monkeypatch):
    bench = Bench()
    calls = fake_triton(monkeypatch, bench)
    peer = xc.triton_runs(bench)
    assert [r.step for r in peer.runs] == ["default", "statistic", "l2", "clock"]  # already a graph: no launch step
    assert [c["return_mode"] for c in calls] == ["all"] * 3 and "side stream" in bench.log
    assert bench.sets(calls, 0) == [0] * 8 and bench.sets(calls, 1) == [0, 1, 2, 3] * 2
    assert peer.runs[0].method.statistic == "mean" and peer.runs[1].samples_us == peer.runs[0].samples_us
    # its replays of 20 ms right after its capture: 8 of 10 at the burst clock; the clock step's of 100 ms: 2
    assert [c["rep"] for c in calls] == [20, 20, 100] and peer.runs[-1].call.endswith("rep=100)")
    c = judged(bench, peer)
    assert c.factors["statistic"] == pytest.approx((8 * BURST + 3) / 10 / BURST)  # its mean felt the slow replay
    assert c.factors["l2"] == pytest.approx(1.0) and c.factors["clock"] == pytest.approx(BURST)
    assert c.matched_ratio == pytest.approx(1.0) and c.verdict == "attributed"
    assert [x.split(" ")[0] for x in c.causes] == ["statistic", "clock"]  # L2 moved nothing here: not named


def test_a_hot_case_is_matched_hot_and_a_case_not_settled_is_not_settled_for_the_peer(monkeypatch):
    bench = Bench(n_sets=1, l2="hot", settle_ms=0.0)
    calls = fake_flashinfer(monkeypatch, bench)
    peer = xc.flashinfer_runs(bench)
    assert [r.step for r in peer.runs] == ["default", "l2", "launch"] and "settle" not in bench.log
    assert calls[0]["cold_l2_cache"] and not calls[1]["cold_l2_cache"]  # its flush, then hot as fleetbench
    assert peer.runs[1].method.l2 == "hot (the same inputs every call)"
    fake_triton(monkeypatch, bench)
    assert [r.step for r in xc.triton_runs(bench).runs] == ["default", "statistic"]  # nothing else to match


def test_a_case_timed_with_events_is_matched_with_events(monkeypatch):
    bench = Bench(method="cuda-events")
    calls = fake_flashinfer(monkeypatch, bench)
    peer = xc.flashinfer_runs(bench)
    assert [r.step for r in peer.runs] == ["default", "l2", "clock"] and not any(c.get("use_cuda_graph") for c in calls)
    fake_triton(monkeypatch, bench)
    triton = xc.triton_runs(bench)
    assert triton.unmatched and triton.unmatched[0].startswith("launch (do_bench_cudagraph always replays a graph")


def test_an_older_timer_without_a_parameter_fails_that_step_by_name_and_the_gap_says_what_is_unmatched(monkeypatch):
    bench = Bench()
    fake_flashinfer(monkeypatch, bench, with_graph=False)
    peer = xc.flashinfer_runs(bench)
    assert peer.status == "ok" and [r.value_us is None for r in peer.runs] == [False, False, True, True]
    assert (
        peer.runs[2].reason == "TypeError: this bench_gpu_time has no parameter use_cuda_graph, num_iters_within_graph"
    )
    assert any("has no enable_cupti" in n for n in peer.notes)
    c = judged(bench, peer)
    assert c.verdict == "unexplained" and c.matched_ratio == pytest.approx((KERNEL_US * BURST + 2) / KERNEL_US)
    assert "not matched: launch overhead (TypeError" in c.explanation and "clock state" in c.explanation


def test_a_triton_without_return_mode_all_gives_its_mean_and_says_the_statistic_is_unmatched(monkeypatch):
    bench = Bench()
    calls = fake_triton(monkeypatch, bench, modes=("min", "max", "mean", "median"))
    peer = xc.triton_runs(bench)
    assert [r.step for r in peer.runs] == ["default", "l2", "clock"]
    assert [c["return_mode"] for c in calls] == ["all", "mean", "mean", "mean"]  # "all" tried once
    assert all(r.method.statistic == "mean" for r in peer.runs)
    assert peer.unmatched == ["statistic (this do_bench_cudagraph gives its mean alone)"]
    assert any("refuses return_mode='all'" in n for n in peer.runs[0].notes)


def test_a_peer_that_is_not_installed_is_a_reason(monkeypatch):
    bench = Bench()
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    monkeypatch.setitem(sys.modules, "triton", None)
    for run in (xc.flashinfer_runs, xc.triton_runs):
        peer = run(bench)
        assert peer.status == "unavailable" and "cannot be imported here" in peer.reason and not peer.runs
        assert judged(bench, peer).verdict == "not compared"
    assert bench.log == []  # nothing ran on the GPU for them


def test_a_timer_that_raises_fails_its_step_and_the_peer_when_nothing_ran(monkeypatch):
    bench = Bench()
    fake_flashinfer(monkeypatch, bench)
    sys.modules["flashinfer.testing"].bench_gpu_time = lambda fn, cold_l2_cache=True, **kw: 1 / 0
    peer = xc.flashinfer_runs(bench)
    assert peer.status == "failed" and peer.reason == "ZeroDivisionError: division by zero"


# -- the judgement -----------------------------------------------------------------------------------------
def peer_of(*values, steps=("default", "l2", "launch", "clock"), notes=()) -> PeerResult:
    runs = [
        Timed(
            step=s,
            call="t(fn)",
            method=Method(l2="x", launch="y", clock="z"),
            samples_us=[v] if v else [],
            value_us=v,
            reason="" if v else "RuntimeError: boom",
        )
        for s, v in zip(steps, values)
    ]
    return PeerResult(peer="flashinfer", timer="t", status="ok", runs=runs, notes=list(notes))


@pytest.mark.parametrize(
    "values, verdict, named",
    [
        ((10.1, 10.05, 10.0, 10.0), "agrees", []),  # within the gap: agrees
        ((11.5, 11.5, 10.1, 10.0), "attributed", ["launch", "clock"]),  # a 15% raw gap, most of it launch
        ((10.0, 10.5, 10.0, 10.0), "agrees", ["launch", "L2"]),  # steps that cancel are still named
        ((12.0, 12.0, 11.0, 10.5), "unexplained", ["launch", "clock"]),  # 5% left with every method matched
        ((11.0, 10.7, None, 10.0), "attributed", ["clock", "L2"]),  # a step that failed: the next is against the last
    ],
)
def test_the_gap_is_judged_and_its_causes_named_largest_first(values, verdict, named):
    bench = Bench()
    c = judged(bench, peer_of(*values))
    assert c.verdict == verdict and [x.split(" ")[0] for x in c.causes] == named
    assert c.raw_ratio == pytest.approx(values[0] / KERNEL_US)
    if None not in values:
        product = c.matched_ratio
        for f in ("l2", "launch", "clock"):
            product *= c.factors[f]
        assert product == pytest.approx(c.raw_ratio)  # raw = matched x the shares


def test_the_summary_counts_cells_within_tolerance_and_attributed_gaps():
    bench = Bench()
    cs = [
        judged(bench, peer_of(*v))
        for v in ((10.1, 10.1, 10.0, 10.0), (11.5, 11.5, 10.1, 10.0), (12.0, 12.0, 11.0, 10.5))
    ]
    cs.append(judged(bench, PeerResult(peer="flashinfer", timer="t", status="unavailable", reason="not here")))
    (s,) = summarize(cs)
    assert (s.compared, s.agree_matched, s.raw_gaps, s.raw_gaps_attributed, s.not_compared) == (3, 2, 2, 1, 1)
    assert summary_text(s, 0.02, 0.03).startswith(
        "flashinfer: 2 of 3 cells (67%) within 2% of fleetbench once the methods "
        "match; 2 raw gaps beyond 3%, 1 of them attributed; 1 not compared"
    )


class FakeNvml:
    """An NVML probe whose SM clock reads from a list, then holds its last value."""

    NVML_CLOCK_SM = 0

    def __init__(self, mhz: list[int]):
        self.mhz, self.reads = list(mhz), 0

    def nvmlDeviceGetClockInfo(self, handle, which):
        self.reads += 1
        return self.mhz.pop(0) if len(self.mhz) > 1 else self.mhz[0]


def test_the_clock_a_timer_ran_at_is_read_while_it_runs_in_the_clock_step_only(monkeypatch):
    from worker.host.health import ClockSampler, NvmlProbe

    nvml = FakeNvml([1980, 1750, 1750, 1750, 1750])
    with ClockSampler(NvmlProbe(None, nvml), interval_s=0.001) as clock:
        assert wait_until(lambda: clock.readings >= 5, 10)  # read from its own thread while the block runs
    assert clock.readings >= 5 and clock.median_mhz == 1750.0
    with ClockSampler(None) as none:  # no NVML: no thread, no figure
        pass
    assert none.median_mhz is None
    bench = Bench()
    bench.probe = NvmlProbe(None, FakeNvml([1700]))
    fake_triton(monkeypatch, bench)
    runs = {r.step: r for r in xc.triton_runs(bench).runs}
    assert runs["clock"].sm_clock_mhz == 1700.0
    assert all(r.sm_clock_mhz is None for step, r in runs.items() if step != "clock")


@pytest.mark.parametrize(
    "peer_mhz, verdict, words",
    [
        # Matched 9% low, the peer's samples at a clock 10% higher: the same cycles, attributed to the clock.
        (
            1700.0,
            "attributed",
            "clock while timing -9.1% (the peer's samples at 1700 MHz vs fleetbench's 1545 MHz; "
            "at fleetbench's clock it reads +0.0%)",
        ),
        (1545.0, "unexplained", "-9.1% with every method matched"),  # the same clock: nothing explains it
        (None, "unexplained", "-9.1% with every method matched"),  # no reading: never guessed
        (2000.0, "unexplained", "-9.1% with every method matched"),  # a clock that over-explains is no explanation
    ],
)
def test_a_matched_gap_the_clock_explains_is_attributed_to_it(peer_mhz, verdict, words):
    bench = Bench()
    bench.ours = bench.ours.model_copy(update={"sm_clock_mhz": 1545.0})
    peer = peer_of(9.0, 9.0, 9.0, 10.0 * 1545 / 1700)
    peer.runs[-1].sm_clock_mhz = peer_mhz
    c = judged(bench, peer)
    assert c.verdict == verdict and c.explanation.startswith(words)
    (s,) = summarize([c])
    assert (s.agree_matched, s.agree_at_clock) == (0, int(verdict == "attributed"))
    if verdict == "attributed":
        assert c.at_fleetbench_clock_ratio == pytest.approx(1.0)
        assert "1 more at fleetbench's SM clock (the same cycles)" in summary_text(s, 0.02, 0.03)


@pytest.mark.parametrize(
    "sweep_us, verdict, words",
    [
        # fleetbench read 10.0 now, its sweep 9.0: the peer's matched 9.05 agrees with the sweep, not with now
        (
            9.0,
            "attributed",
            "fleetbench now +11.1% off its sweep's median (9 µs), which the matched peer is within +0.6% of",
        ),
        (10.0, "unexplained", "-9.5% with every method matched"),  # fleetbench now is its sweep: the peer's gap
        (9.6, "unexplained", "-9.5% with every method matched"),  # the peer 5.7% off the sweep too: no explanation
        (None, "unexplained", "-9.5% with every method matched"),  # no sweep median: never guessed
    ],
)
def test_a_matched_gap_where_fleetbench_now_strayed_from_its_own_sweep_says_so(sweep_us, verdict, words):
    bench = Bench()
    peer = peer_of(9.0, 9.0, 9.0, 9.05)
    record = CrosscheckRecord(
        case_id=bench.case.case_id, case=bench.case, status="ok", fleetbench=bench.ours, peers=[peer]
    )
    c = compare_peer("h1", record, peer, sweep_us=sweep_us)
    assert c.verdict == verdict and c.explanation.startswith(words)
    (s,) = summarize([c])
    assert (s.agree_matched, s.agree_at_clock, s.agree_with_sweep) == (0, 0, int(verdict == "attributed"))
    if verdict == "attributed":
        assert "1 more within it of fleetbench's sweep median" in summary_text(s, 0.02, 0.03)


@pytest.mark.parametrize(
    "values, status, code, named",
    [
        ((10.1, 10.05, 10.0, 10.0), "ok", judgement.WHY_AGREES, []),
        ((11.5, 11.5, 10.1, 10.0), "ok", judgement.WHY_STEPS, ["launch", "clock"]),
        ((10.6, 10.52, 10.46, 10.4), "ok", judgement.WHY_UNEXPLAINED, []),  # no step of 1%, 4% left matched
        ((None, 10.0, 10.0, 10.0), "ok", judgement.WHY_NOT_COMPARED, []),  # no default figure
        ((), "ok", judgement.WHY_NO_RUN, []),
        ((10.0,), "failed", judgement.WHY_NOT_COMPARED, []),
    ],
)
def test_the_judgement_is_a_code_with_its_facts_apart_from_its_words(values, status, code, named):
    bench = Bench()
    peer = peer_of(*values).model_copy(update={"status": status, "reason": "boom" if status != "ok" else ""})
    record = CrosscheckRecord(
        case_id=bench.case.case_id, case=bench.case, status="ok", fleetbench=bench.ours, peers=[peer]
    )
    c = judgement.compare_peer("h1", record, peer)
    assert c.why.code == code and [f.factor for f in c.named] == named, c.why
    assert c.causes == [] and c.explanation == "" and c.unmatched == []  # words are the view's
    assert {"named", "why", "missing"}.isdisjoint(c.as_dict())  # stored: the worded fields alone
    if code == judgement.WHY_UNEXPLAINED:
        assert c.why.facts["matched_ratio"] == pytest.approx(10.4 / KERNEL_US)
    if status != "ok":
        assert c.why.facts == {"reason": "boom"}


def test_a_failed_step_is_unmatched_as_its_step_and_reason():
    bench = Bench()
    peer = peer_of(12.0, 12.0, None, 10.5)
    record = CrosscheckRecord(
        case_id=bench.case.case_id, case=bench.case, status="ok", fleetbench=bench.ours, peers=[peer]
    )
    c = judgement.compare_peer("h1", record, peer)
    assert [(u.step, u.reason) for u in c.missing] == [("launch", "RuntimeError: boom")]


def test_a_stored_record_of_a_later_version_with_fields_this_one_lacks_still_reads():
    bench = Bench()
    doc = json.loads(
        CrosscheckRecord(
            case_id=bench.case.case_id, case=bench.case, status="ok", fleetbench=bench.ours, peers=[peer_of(10.0)]
        ).model_dump_json()
    )
    doc["new_field"] = 1
    doc["peers"][0]["runs"][0]["new_field"] = 2
    assert CrosscheckRecord.model_validate(doc).peers[0].runs[0].value_us == 10.0


# -- fleetbench crosscheck, end to end on local hosts ------------------------------------------------------
def hosts_file(tmp_path: Path, names=("h1",), python: str = sys.executable) -> Path:
    entries = [
        {"name": n, "transport": "local", "python": python, "workdir": str(tmp_path / f"work-{n}")} for n in names
    ]
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": entries}))
    return path


def stored_run(tmp_path: Path, inventory_path: Path, ms=(16, 32), median_us: float = 20.0) -> RunStore:
    """A run of torch-bf16 M x 64 x 128, stored as `fleetbench run` stores it (manifest, scripts, this
    tree's worker) with results written here."""
    inventory = load_inventory(inventory_path)
    sweep = Sweep(
        name="xc",
        backends=["torch-bf16"],
        shapes=[{"m": list(ms), "n": 64, "k": 128, "label": "x"}],
        timing={"budget_s": 0.05, "warmup_ms": 1, "min_samples": 3, "max_samples": 20, "rounds": 1, "settle_ms": 0},
    )
    plan = build_plan(list(inventory.hosts), sweep, new_run_id("xc"))
    store, _, _ = prepare_run(plan, sweep, inventory, tmp_path / "runs")
    for job in plan.jobs:
        lines = [
            FactsRecord(
                hostname=job.host.name, python="3.12", platform="linux", worker_version="0.2.0", device="cpu"
            ).model_dump_json()
        ]
        for case in job.cases:
            stats = summarize_samples([median_us] * 5, method="cpu-wallclock", calls_per_sample=10, l2="hot")
            lines.append(
                CaseRecord(
                    case_id=case.case_id, case=case, status="ok", timing=stats, started_at="t", duration_s=0.1
                ).model_dump_json()
            )
        write_ok_attempt(store, job, lines)
    return store


def test_cases_are_crosschecked_with_the_runs_own_worker_stored_and_shown_again(tmp_path, capsys):
    store = stored_run(tmp_path, hosts_file(tmp_path))
    code = main(["crosscheck", str(store.dir), "--m", "16", "--peer", "triton", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = cli_json(out)
    assert doc["kind"] == "crosscheck" and doc["tolerance"] == 0.02 and doc["gap"] == 0.03
    (ours,) = doc["fleetbench"]
    assert ours["slot"] == "h1" and ours["m"] == 16 and ours["sweep_median_us"] == pytest.approx(20.0)
    assert ours["median_us"] > 0 and ours["now_over_sweep"] == pytest.approx(ours["median_us"] / 20.0)
    assert ours["cupti_reason"] == "the case ran on the CPU"
    (peer,) = doc["comparisons"]  # --peer triton: FlashInfer not asked
    assert peer["peer"] == "triton" and peer["verdict"] == "not compared"
    assert "times CUDA kernels; this case ran on the CPU" in peer["explanation"]
    assert "crosschecks stored in" in err and "crosschecking torch-bf16 16x64x128 (1/1)" in err
    (stored,), problems = load_crosschecks(store)
    assert not problems and stored.record.fleetbench.timing_method == "cpu-wallclock"
    params = json.loads((stored.path.parent / "params.json").read_text())
    assert params["options"] == {"peers": ["triton"], "cupti": True} and len(params["cases"]) == 1
    assert main(["crosscheck", str(store.dir), "--all", "--stored", "--format", "md"]) == 0  # nothing runs
    table = capsys.readouterr().out
    assert "torch-bf16 16x64x128" in table and "32x64x128" not in table  # only what was crosschecked
    assert main(["crosscheck", str(store.dir), "--all", "--format", "csv"]) == 0  # both cases, both peers
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("slot,case_id,backend") and len(rows) == 1 + 2 * 2
    assert len(load_crosschecks(store, latest_only=True)[0]) == 2 and len(load_crosschecks(store)[0]) == 3


def test_crosscheck_needs_a_selection_a_measured_case_and_a_run_whose_worker_can(tmp_path, stored_runs, capsys):
    inv = hosts_file(tmp_path)
    store = stored_run(tmp_path, inv)
    assert main(["crosscheck", str(store.dir)]) == 2
    assert "say which cases to crosscheck" in capsys.readouterr().err
    assert main(["crosscheck", f"{store.dir}:h1", "--m", "4096"]) == 2
    assert "no case that is ok on h1 matches" in capsys.readouterr().err
    assert main(["crosscheck", str(store.dir), "--all", "--stored"]) == 2
    assert "no stored crosscheck of the selected cases" in capsys.readouterr().err
    old = stored_runs / "runs-v2" / "20261203-082541-smoke-2f18"
    host = json.loads((old / "manifest.json").read_text())["jobs"][0]["host"]
    assert main(["crosscheck", f"{old}:{host}", "--all", "-i", str(inv)]) == 2
    assert "whose worker cannot crosscheck" in capsys.readouterr().err


def test_a_host_that_cannot_start_fails_alone_with_one_line(tmp_path, capsys):
    inv = hosts_file(tmp_path, names=("h1", "h2"))
    store = stored_run(tmp_path, inv, ms=(16,))
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"][1]["python"] = str(tmp_path / "no-python")
    inv.write_text(yaml.safe_dump(doc))
    code = main(["crosscheck", str(store.dir), "--all", "--peer", "flashinfer", "-i", str(inv), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert [o["slot"] for o in cli_json(out)["fleetbench"]] == ["h1"]
    (line,) = [x for x in err.splitlines() if x.startswith("h2: ")]
    assert "interpreter not found" in line and "no-python" in line


def test_a_case_the_worker_cannot_run_is_its_record(tmp_path):
    from worker.sweep.runner import CaseRunner

    runner = CaseRunner("cpu")
    record = xc.check_case(runner, CaseSpec(backend="no-such-backend", m=1, n=1, k=1), CrosscheckOptions())
    assert record.status == "failed" and "unknown backend 'no-such-backend'" in record.reason and not record.peers


def test_showing_stored_crosschecks_imports_neither_the_ssh_stack_nor_torch(tmp_path):
    import os
    import subprocess

    store = stored_run(tmp_path, hosts_file(tmp_path), ms=(16,))
    assert main(["crosscheck", str(store.dir), "--all", "--peer", "triton", "--format", "json"]) == 0
    code = (
        "import json, sys\nfrom orchestrator.cli import main\n"
        f"rc = main(['crosscheck', {str(store.dir)!r}, '--all', '--stored', '--format', 'json'])\n"
        "print(json.dumps([rc, sorted({m.split('.')[0] for m in sys.modules})]), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    rc, modules = json.loads(proc.stderr.strip().splitlines()[-1])
    assert rc == 0 and not set(modules) & {"paramiko", "fabric", "invoke", "torch", "rich"}
