"""A case beside the other timers (worker/tools/crosscheck.py), on the simulated `torch.cuda` of
tests/support/simcuda.py."""

from __future__ import annotations

import pytest
from support.simcuda import graphs_counted

from worker.measure import timing


@pytest.mark.parametrize("mode", ["graph", "cupti"])
def test_crosscheck_settles_and_traces_the_graph_fleetbench_timed_without_capturing_it_again(monkeypatch, mode):
    """worker/tools/crosscheck.py CaseBench: fleetbench's timing of the case builds its graph once; settling
    before a peer (and CUPTI) replays that graph, so no capture follows the timing, in `timing.mode: cupti`
    too, whose figure is named for what it is (kernel time, not a replay; never per-call events)."""
    from worker.measure import cupti
    from worker.tools.crosscheck import CaseBench

    monkeypatch.setattr(cupti, "available", lambda: None)
    monkeypatch.setattr(
        cupti,
        "kernel_samples_us",
        lambda replay, calls, replays, lead_in_ms=0: cupti.KernelSamples(
            per_call_us=[9.0] * replays, span_us=[9.5] * replays, kernels=["gemm"], split_by="launch", notes=[]
        ),
    )
    gpu, graphs, case, n_sets, fn = graphs_counted(monkeypatch, mode=mode, rounds=1)
    timed_with = []  # graphs built when fleetbench's timing returned
    real_time_cuda = timing.Timer.time_cuda

    def time_cuda(*args, **kwargs):
        timed = real_time_cuda(*args, **kwargs)
        timed_with.append(len(graphs))
        return timed

    monkeypatch.setattr(timing.Timer, "time_cuda", time_cuda)
    bench = CaseBench(fn, n_sets, case)
    ours = bench.fleetbench(cupti=False)
    built = len(graphs)
    assert built == timed_with[-1]  # nothing captured after the timing
    assert bench.graph is graphs[-1] and bench.calls == ours.calls_per_sample == len(bench.graph.nodes)
    assert ours.method.launch == (
        f"graph replay of {ours.calls_per_sample} calls"
        if mode == "graph"
        else f"kernel time (CUPTI) of a graph of {ours.calls_per_sample} calls, no launch gaps"
    )
    before = gpu.now_us
    bench.settle()
    assert len(graphs) == built and gpu.now_us - before >= case.timing.settle_ms * 1e3  # replayed, not captured
