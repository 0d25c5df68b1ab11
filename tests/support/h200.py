"""The H200 as issue 41 measured it: its name, its calibration (benchmarks/results/calibration-h200.json)
and a facts record of it, for the tests that judge a time against its speed of light."""

from __future__ import annotations

from worker.contract.schema import Calibration, FactsRecord

H200 = "NVIDIA H200"
CAL = Calibration(
    key="vm|GPU-1|driver 580|torch 2.11",
    measured_at="2026-12-03T13:52:20+00:00",
    cached=False,
    tflops={"bf16": 797.4983440973059, "fp8": 1464.1788383265657},
    tb_s=4.23940060557135,
)


def h200_facts(**kw) -> FactsRecord:
    """A facts record of an H200 with CAL (`kw` overrides its fields)."""
    fields = dict(device="cuda", gpu_name=H200, compute_capability="9.0", calibration=CAL)
    return FactsRecord(hostname="h", python="3.12", platform="linux", worker_version="0.3", **{**fields, **kw})
