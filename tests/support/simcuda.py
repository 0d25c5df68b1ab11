"""A simulated `torch.cuda` with a deterministic clock, standing in for the GPU so that the worker's GPU
timing runs on the CPU (issue 21).

The simulation models what was measured on an H200 (benchmarks/gpu_state/first_case.py) and what cold-L2 timing
must defeat:
- every kernel call costs `COMPUTE_US`, plus `MISS_US` when its input set is not in a 50 MB LRU "L2";
- between consecutive nodes of a graph the GPU spends `GAP_US`, but only `FIRST_GAP_US` while the
  process has run the library eagerly on at most one stream other than the default one (on the H200,
  cuBLAS graphs read ~1 us per call low in that state, and normal for the rest of the process once a
  second such stream had run it: RESULTS.md, issue 21).
- optionally (`SimGpu(tau_us=...)`), a clock and power state that follows the load: a call is slower by
  `throttle`, which relaxes towards the running kernel's own `heat` with time constant `tau_us` (on the
  H200 a large GEMM read up to 5% slower after a heavy case than after light ones).
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from types import SimpleNamespace

import torch

from worker.contract.schema import CaseSpec, TimingOptions
from worker.sweep.runner import CaseRunner

L2_BYTES = 50 * 2**20
COMPUTE_US = 10.0
MISS_US = 2.0
GAP_US = 1.0
FIRST_GAP_US = 0.0


class SimGpu:
    """The state of one simulated process: its clock, L2, streams and the graph being captured."""

    def __init__(self, tau_us: float | None = None):
        self.tau_us = tau_us  # None: no clock/power state
        self.throttle = 0.0
        self.now_us = 0.0
        self.l2: OrderedDict = OrderedDict()  # input set id -> bytes, least recently used first
        self.default = self.current = SimStream(self)
        self.capturing: list | None = None
        self.eager_streams: set = set()  # non-default streams that ran the library eagerly

    def touch(self, set_id, nbytes: int, heat: float = 0.0) -> float:
        """Cost of one call on this input set, updating the LRU (and the clock state, when modelled)."""
        hit = set_id in self.l2
        self.l2.pop(set_id, None)
        self.l2[set_id] = nbytes
        while sum(self.l2.values()) > L2_BYTES:
            self.l2.popitem(last=False)
        cost = COMPUTE_US + (0.0 if hit else MISS_US)
        if self.tau_us is None:
            return cost
        cost *= 1 + self.throttle
        self.throttle += (heat - self.throttle) * -math.expm1(-cost / self.tau_us)
        return cost

    def call(self, set_id, nbytes: int, heat: float = 0.0) -> None:
        if self.capturing is not None:
            self.capturing.append((set_id, nbytes, heat))
        else:  # eager: runs now, and the library has now run on this stream
            if self.current is not self.default:
                self.eager_streams.add(self.current.serial)
            self.now_us += self.touch(set_id, nbytes, heat) + GAP_US


SERIAL = itertools.count()  # ids of simulated streams and input sets: id() of a freed object is reused


class SimStream:
    def __init__(self, gpu: SimGpu):
        self.gpu = gpu
        self.serial = next(SERIAL)

    def wait_stream(self, other) -> None:
        pass


class SimGraph:
    def __init__(self, gpu: SimGpu):
        self.gpu = gpu
        self.nodes: list = []
        self.gap_us = GAP_US

    def replay(self) -> None:
        for set_id, nbytes, heat in self.nodes:
            self.gpu.now_us += self.gpu.touch(set_id, nbytes, heat) + self.gap_us


def install(monkeypatch, gpu: SimGpu) -> None:
    """Point the torch.cuda calls that worker.measure.timing makes at the simulation."""
    from contextlib import contextmanager

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self, stream=None):
            self.at = gpu.now_us

        def synchronize(self):
            pass

        def elapsed_time(self, end) -> float:
            return (end.at - self.at) / 1e3  # ms, as torch reports it

    @contextmanager
    def stream(s):
        before, gpu.current = gpu.current, s
        try:
            yield
        finally:
            gpu.current = before

    @contextmanager
    def graph(g, stream=None):
        s = stream or gpu.current
        g.gap_us = GAP_US if len(gpu.eager_streams) > 1 else FIRST_GAP_US
        gpu.capturing, before, gpu.current = g.nodes, gpu.current, s
        try:
            yield
        finally:
            gpu.capturing, gpu.current = None, before

    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: gpu.current)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: SimStream(gpu))
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda *a, **k: SimGraph(gpu))
    monkeypatch.setattr(torch.cuda, "graph", graph)


def graphs_counted(monkeypatch, **timing_fields):
    """A simulated GPU whose every CUDA graph is counted: (gpu, graphs built, a cold-L2 torch-bf16 case
    with `timing_fields`, its input sets, its call on set i)."""
    gpu = SimGpu()
    install(monkeypatch, gpu)
    graphs = []
    real_graph = torch.cuda.CUDAGraph
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda *a, **k: graphs.append(real_graph()) or graphs[-1])
    runner = CaseRunner.__new__(CaseRunner)
    runner.device = SimpleNamespace(device="cuda", l2_bytes=L2_BYTES)
    case = CaseSpec(
        backend="torch-bf16",
        m=64,
        n=2048,
        k=6144,
        timing=TimingOptions(l2="cold", warmup_ms=0, budget_s=5, **timing_fields),
    )
    n_sets = runner._input_sets(case, "bf16")
    sets = [next(SERIAL) for _ in range(n_sets)]
    per_set = (case.m + case.n) * case.k * 2

    def fn(i):
        return gpu.call(sets[i], per_set)

    return gpu, graphs, case, n_sets, fn
