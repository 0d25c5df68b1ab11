"""A run's manifest as a typed record: the whole plan of a run (its cases, jobs with their limits, worker
settings, scripts and hosts), read through one loader (`load_manifest`: any stored format, upgraded by
formats.upgrade_manifest, then validated here).

Readers use its fields, never dict keys; what a stored run may lack gets its default here (the limits'
values: defaults.py).
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worker.contract.schema import CaseSpec

from ..config import defaults
from ..errors import InputError



class _Stored(BaseModel):
    # A manifest is a record for years: fields a later version added are read, none is dropped on load.
    model_config = ConfigDict(extra="ignore", frozen=True)


class StoredWorker(_Stored):
    max_restarts: int = 2
    device: str = "auto"
    lock_timeout_s: float = defaults.LOCK_TIMEOUT_S
    calibration: str = "off"  # before format 5 no run had speed of light
    case_timeout_s: float = defaults.CASE_TIMEOUT_S  # before format 7 no case had a limit of its own
    build_timeout_s: float = defaults.BUILD_TIMEOUT_S


class StoredScript(_Stored):
    path: str
    sha256: str


class StoredJob(_Stored):
    slot: str
    host: str
    gpu: Optional[int] = None
    case_ids: list[str]
    timeout_s: Optional[float] = None  # before format 7: resolved when the job ran
    stall_timeout_s: Optional[float] = None


class Manifest(_Stored):
    manifest_version: int
    written_as: int  # the format the run was written in (its worker reads params of that format)
    run_id: str
    created_at: Optional[str] = None
    dry_run: bool = False
    fleetbench_version: Optional[str] = None
    controller_python: Optional[str] = None
    sweep_name: str = ""
    sweep_path: Optional[str] = None
    sweep: dict[str, Any] = Field(default_factory=dict)  # what was asked for, as a record
    inventory_path: Optional[str] = None
    hosts: list[dict[str, Any]] = Field(default_factory=list)  # Host.public_view() of each host
    per_gpu: str = "all"
    stall_timeout: float = defaults.STALL_TIMEOUT_S
    worker: StoredWorker = Field(default_factory=StoredWorker)
    worker_sha256: str = ""
    scripts: dict[str, StoredScript] = Field(default_factory=dict)
    cases: dict[str, CaseSpec] = Field(default_factory=dict)
    user_kernels: dict[str, Any] = Field(default_factory=dict)
    jobs: list[StoredJob] = Field(default_factory=list)
    format_notes: list[str] = Field(default_factory=list)  # what an upgrade could not carry over

    def stored_host(self, name: str) -> Optional[dict[str, Any]]:
        return next((h for h in self.hosts if h.get("name") == name), None)


def load_manifest(data: dict, where: str) -> Manifest:
    """The typed manifest of a stored (and already upgraded) manifest; InputError naming the field."""
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{where}: damaged manifest: field '{loc}': {first['msg']}") from None
    for job in manifest.jobs:
        unknown = [cid for cid in job.case_ids if cid not in manifest.cases]
        if unknown:
            raise InputError(f"{where}: damaged manifest: job {job.slot} names cases that are not stored "
                             f"({', '.join(unknown[:3])})")
    return manifest
