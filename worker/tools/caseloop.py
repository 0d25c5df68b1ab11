"""The host's side of a command over chosen cases of a stored run (`profile`, `crosscheck`): the one loop that holds this GPU's lock (and its clocks, where the host
locks them) as a sweep does and sends one record per case on the protocol channel. What a case is made
to do is the command's own (worker/tools/profile.py, worker/tools/crosscheck.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Optional

from pydantic import BaseModel

from ..contract.cases import CasesParams
from ..contract.schema import CaseSpec

CaseWork = Callable[[CaseSpec], BaseModel]  # one case -> its record; never raises for what the case does


def run_each_case(params: CasesParams, purpose: str, start: Callable[[Optional[int]], CaseWork]) -> int:
    """Hold this GPU's lock (and its clocks, where the host locks them) for "`purpose` of <run>"; then
    `start(the locked SM MHz, or None)` gives what runs one case, and each case's record goes on the
    protocol channel between its start and end progress lines. Returns 0, or EXIT_GPU_BUSY when another
    sweep held the GPU past the lock timeout."""
    from ..contract.protocol import EXIT_GPU_BUSY, RECORD_PREFIX, emit_progress, heartbeat, write_line
    from ..host.clocks import CLOCK_ENV, locked_clocks
    from ..host.gpulock import CPU, GpuLockTimeout, gpu_lock

    held = contextlib.ExitStack()
    try:
        with heartbeat(state="lock-wait"):
            locked_id = held.enter_context(
                gpu_lock(
                    f"{purpose} of {params.run_id}",
                    params.host,
                    params.lock_timeout_s,
                    ids=[CPU] if params.device == "cpu" else None,
                    on_wait=lambda holder: emit_progress(event="lock-wait", holder=holder.get("run_id", "?")),
                )
            )
    except GpuLockTimeout as exc:
        print(f"fleetbench: {exc}", file=sys.stderr, flush=True)
        return EXIT_GPU_BUSY
    with held, heartbeat():
        say = lambda line: print(f"fleetbench: {line}", file=sys.stderr, flush=True)  # noqa: E731
        with locked_clocks(locked_id, params.lock_clocks, say) as mhz:
            if mhz is not None:
                os.environ[CLOCK_ENV] = str(mhz)
            run_case = start(mhz)
            for i, case in enumerate(params.cases):
                emit_progress(
                    event="start",
                    done=i,
                    total=len(params.cases),
                    case_id=case.case_id,
                    backend=case.backend,
                    m=case.m,
                    n=case.n,
                    k=case.k,
                )
                record = run_case(case)
                write_line(RECORD_PREFIX + record.model_dump_json())
                emit_progress(
                    event="end",
                    done=i + 1,
                    total=len(params.cases),
                    case_id=case.case_id,
                    status=record.status,
                    reason=record.reason[:200],
                )
    return 0
