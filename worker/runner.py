"""Run cases one by one: support check, seeded inputs, correctness verdict, timing, one JSON line each.

A case that raises is recorded as failed (with the traceback tail) and the loop goes on. Each record is
appended, flushed and fsynced as its case ends, so a dying host loses at most the case in flight; the
id of that case is kept in `<results>.inflight` for the supervisor to name it.
"""
from __future__ import annotations

import importlib
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

from .backends import CATALOG, availability_problem, support_problem
from .protocol import EXIT_CANNOT_START, append_line, done_case_ids, emit_progress, has_facts, heartbeat, now_iso
from .schema import CaseRecord, CaseSpec, FactsRecord, WorkerParams

# Fault injection for reliability tests: "<action>:<backend>:<m>[,...]" with action one of
# segv (the process dies by SIGSEGV), exit (dies with status 1), hang (stops answering),
# garbage (a corrupt line lands in results.jsonl and on the stream). Unset in normal use.
FAULT_ENV = "FLEETBENCH_FAULT"
# Cold-L2 rotation: input sets totalling at least this many L2 sizes, within these bounds.
COLD_L2_FACTOR = 3
MAX_SETS = 64


def append_record(path: Path, record: CaseRecord | FactsRecord) -> None:
    append_line(path, record.model_dump_json())


class CaseRunner:
    """Holds what every case on this device shares: device facts and the NVML probe."""

    def __init__(self, device_wanted: str = "auto"):
        from .env import detect_device

        self.device = detect_device(device_wanted)
        self.probe = None
        if self.device.device == "cuda":
            from .health import NvmlProbe

            self.probe = NvmlProbe.for_current_device()

    def run(self, case: CaseSpec) -> CaseRecord:
        started_at, t0 = now_iso(), time.perf_counter()

        def record(status: str, reason: str = "", **fields) -> CaseRecord:
            return CaseRecord(case_id=case.case_id, case=case, status=status, reason=reason,
                              started_at=started_at, duration_s=round(time.perf_counter() - t0, 4), **fields)

        spec = CATALOG.get(case.backend)
        if spec is None:
            return record("failed", f"unknown backend {case.backend!r} (this worker knows: {', '.join(CATALOG)})")
        problem = support_problem(spec, case.m, case.n, case.k, self.device.compute_capability)
        if problem:
            return record("unsupported", problem)
        problem = availability_problem(spec)
        if problem:
            return record("unavailable", problem)
        if spec.name == "noop":
            return record("ok", "no-op: nothing was measured")
        try:
            return self._measure(case, spec, record)
        except Exception as exc:
            tb = traceback.format_exc()
            return record("failed", f"{type(exc).__name__}: {exc}"[:500], traceback=tb[-4000:])

    def _measure(self, case: CaseSpec, spec, record) -> CaseRecord:
        import torch

        from . import nvfp4
        from .backends.fp8 import dequantized_product
        from .health import assess
        from .metrics import gemm_metrics
        from .timing import time_cpu, time_cuda
        from .verify import REFERENCE_SELF, THRESHOLDS, verdict

        dev = self.device.device
        out_dtype = getattr(torch, case.out_dtype)
        n_sets = self._input_sets(case, spec.family)
        sets = [self._inputs(case, s, dev) for s in range(n_sets)]
        module = importlib.import_module(f"worker.backends.{spec.module}")
        fn = module.prepare(spec, sets, out_dtype)

        a, b = sets[0]
        out = fn(0)
        if dev == "cuda":
            torch.cuda.synchronize()
        bf16_ref = a.float() @ b.float().T
        if case.backend == "reference-nvfp4":
            check = verdict(out, bf16_ref, None, REFERENCE_SELF)
        else:
            oracle = {"bf16": lambda: bf16_ref, "fp8": lambda: dequantized_product(a, b),
                      "fp4": lambda: nvfp4.reference_gemm(a, b)}[spec.family]()
            check = verdict(out, oracle, bf16_ref, THRESHOLDS[spec.family])
        del out
        if check.verdict == "fail":
            # A wrong answer is not timed: a fast wrong kernel is not a result.
            return record("failed", f"wrong result: {check.detail}", correctness=check)

        health = None
        if dev == "cuda":
            before = self.probe.snapshot() if self.probe else None
            stats = time_cuda(fn, n_sets, case.timing)
            if self.probe and before is not None:
                health = assess(before, self.probe.snapshot())
        else:
            stats = time_cpu(fn, n_sets, case.timing)
        metrics = gemm_metrics(case.m, case.n, case.k, spec.family, stats.median_us,
                               self.device.name or None, out_bytes=torch.empty((), dtype=out_dtype).element_size())
        del fn, sets
        return record("ok", "", timing=stats, metrics=metrics, correctness=check, health=health)

    def _input_sets(self, case: CaseSpec, family: str) -> int:
        if self.device.device != "cuda" or case.timing.l2 == "hot" or not self.device.l2_bytes:
            return 1
        per_set = (case.m + case.n) * case.k * {"bf16": 2, "fp8": 1, "fp4": 0.5625}[family]
        return max(2, min(MAX_SETS, math.ceil(COLD_L2_FACTOR * self.device.l2_bytes / per_set) + 1))

    @staticmethod
    def _inputs(case: CaseSpec, set_index: int, dev: str):
        import torch

        gen = torch.Generator(device=dev)
        gen.manual_seed(case.seed * 1_000_003 + set_index)
        a = torch.randn((case.m, case.k), generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
        b = torch.randn((case.n, case.k), generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
        return a, b


def run_params(params: WorkerParams, results: Path) -> int:
    """Run every case without a record yet, beating all the while (protocol.heartbeat: torch's import and
    the CUDA start-up included). Returns 0 (failures are records, not exit codes), or EXIT_CANNOT_START
    when this host's Python lacks what any case needs."""
    from .env import collect_facts

    with heartbeat():
        try:
            runner = CaseRunner(params.device)
        except ImportError as exc:  # the host's Python lacks what every case needs: retrying cannot help
            print(f"fleetbench: the worker cannot start with {sys.executable}: {type(exc).__name__}: {exc} "
                  "(install the worker's dependencies there, e.g. `fleetbench provision`)", file=sys.stderr, flush=True)
            return EXIT_CANNOT_START
        if not has_facts(results):
            append_record(results, collect_facts(runner.device))
        done = done_case_ids(results)
        todo = [c for c in params.cases if c.case_id not in done]
        inflight = results.with_name(results.name + ".inflight")
        _run_cases(runner, todo, done, len(params.cases), results, inflight)
        inflight.unlink(missing_ok=True)
    return 0


def _run_cases(runner: "CaseRunner", todo: list[CaseSpec], done: set[str], total: int, results: Path,
               inflight: Path) -> None:
    for case in todo:
        emit_progress(event="start", done=len(done), total=total, case_id=case.case_id,
                      backend=case.backend, m=case.m, n=case.n, k=case.k)
        inflight.write_text(case.case_id, encoding="utf-8")
        _inject_fault(case, results)
        rec = runner.run(case)
        append_record(results, rec)
        done.add(case.case_id)
        emit_progress(event="end", done=len(done), total=total, case_id=case.case_id, status=rec.status,
                      reason=rec.reason[:200], median_us=rec.timing.median_us if rec.timing else None)


def _inject_fault(case: CaseSpec, results: Path) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    import signal

    for item in spec.split(","):
        action, _, target = item.partition(":")
        backend, _, m = target.partition(":")
        if backend != case.backend or (m and int(m) != case.m):
            continue
        if action == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif action == "exit":
            os._exit(1)
        elif action == "hang":
            while True:
                time.sleep(3600)
        elif action == "garbage":
            append_line(results, '{"kind": "case", "schema_version": 1, "oops"')


def load_params(path: Path) -> WorkerParams:
    return WorkerParams.model_validate_json(Path(path).read_text(encoding="utf-8"))


def crashed_record(case: CaseSpec, reason: str) -> CaseRecord:
    return CaseRecord(case_id=case.case_id, case=case, status="crashed", reason=reason,
                      started_at=now_iso(), duration_s=0.0)


def find_case(params: WorkerParams, case_id: str) -> Optional[CaseSpec]:
    return next((c for c in params.cases if c.case_id == case_id), None)
