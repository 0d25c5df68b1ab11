"""What the controller sends every command over chosen cases of a stored run (`profile`, `crosscheck`);
each command's params (worker/contract/profile.py, worker/contract/crosscheck.py) add their own."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict

from .schema import CaseSpec


class ControllerData(BaseModel):
    # Params are written by the controller for this worker: nothing unknown is accepted.
    model_config = ConfigDict(extra="forbid")


class CasesParams(ControllerData):
    """What every such command is asked: which cases, on which host and GPU, and how long to wait for
    the GPU. Each command's params set its own `format` and add its `options`."""

    format: int
    run_id: str
    host: str
    gpu: Optional[int] = None
    device: str = "auto"
    lock_timeout_s: float = 600.0
    lock_clocks: bool = False
    cases: list[CaseSpec]
