"""Every on-disk format fleetbench has written, and how today's code reads each one.

A run folder is a record for years: readers never interpret it with today's sweep expansion or today's
case ids. Each older version has one upgrade step to the next, applied in order when a file is read, so
the rest of the controller only ever sees the current version. A version newer than this reader is
refused with a message that says what to do.

Manifest history (MANIFEST_VERSION, runs/<id>/manifest.json):
  1  fleetbench 0.1.0: the sweep spec and per job the case ids; readers re-expanded the stored sweep
     with their own code to learn what the ids meant (so a later change to expansion or to the case id
     silently emptied the tables of older runs).
  2  the planned cases are stored as data (`cases`: case id -> CaseSpec), with the worker settings
     (`worker`) and the sweep's name; the sweep spec stays as a record of what was asked for.
  3  the cases' timing options have `rounds` and the run's worker writes records of format 3; the
     manifest's shape is that of format 2 (`stall_timeout` may be stored).
  4  cases may name a user kernel file by hash (`kernel_sha256`; the file travels in the run's worker
     bundle); otherwise the shape of format 3.
  5  worker settings have `calibration` (cached | fresh | off: speed of light); a run of an older
     format had none ("off"), and its worker writes records without it.
  6  the cases' timing options have `settle_ms` (worker/measure/timing.py settle); a run of an older format was
     not settled (0), and its worker rejects the field.
  7  worker settings have `case_timeout_s` and `build_timeout_s` (a hung case is stopped at its own
     limit), and a job's params `lock_clocks` (the host's `clocks: lock`); the run's worker writes a
     record per finished round and sends records on a channel of their own. A run of an older format
     had no case limit, and its worker rejects the fields.
  8  the cases' timing options have `state` (settled | burst) and `cooldown_ms`; otherwise the shape of
     format 7. A run of an older format was settled, and its worker rejects the fields.
  9  the cases' timing options have `min_rounds`, `round_target`, `pair_target` and `head_to_head`
     (rounds until sure, contenders timed interleaved: worker/contract/schema.py format 9); otherwise the shape
     of format 8. A case of an older format was timed alone in a fixed number of rounds
     (head_to_head false, min_rounds = rounds), and its worker rejects the fields.
  10 the cases' timing options have `fresh_inputs` (true: each later round builds on input sets
     allocated afresh); otherwise the shape of format 9. A case of an older format replayed round 1's graph in
     its later rounds (fresh_inputs false), and its worker rejects the field.
  11 the run's worker writes records of format 11 (the GPU's power against its limit); otherwise the shape
     of format 10.
Record history (results.jsonl): see SCHEMA_VERSION in worker/contract/schema.py; upgraded here by `upgrade_record`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
from typing import Callable

from worker.contract.schema import IDENTITY_FIELDS, SCHEMA_VERSION, identity_hash

from ..errors import InputError

MANIFEST_VERSION = 11
# A CaseSpec's fields before format 2, with the defaults fleetbench 0.1.0 filled in.
_CASE_DEFAULTS = {"workload": "gemm", "label": "", "out_dtype": "bfloat16", "seed": 0}


class NewerFormat(ValueError):
    """A stored file of a format newer than this reader: a later fleetbench wrote it."""

    def __init__(self, what: str, version: int, current: int):
        super().__init__(
            f"{what} version {version} is newer than this fleetbench reads ({current}): "
            "upgrade fleetbench on this controller"
        )
        self.version, self.current = version, current


def written_by_newer(version: int, current: int) -> str:
    """The one sentence for a run (or a file of it) that a newer fleetbench wrote."""
    return (
        f"written by a newer fleetbench (format {version}; this one reads up to {current}): "
        "upgrade fleetbench to read it"
    )


def check_version(version, current: int, what: str) -> int:
    """The version of a stored file, if this reader can read it; raises ValueError saying what to do
    (NewerFormat for a version newer than `current`)."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{what} version {version!r} is not a positive integer")
    if version > current:
        raise NewerFormat(what, version, current)
    return version


def case_identity(case: dict) -> str:
    """The case id of a stored CaseSpec (as a dict) under the current rules."""
    identity = {f: case.get(f, _CASE_DEFAULTS.get(f)) for f in IDENTITY_FIELDS}
    if case.get("moe") is not None:
        identity["moe"] = case["moe"]
    return identity_hash(identity)


# -- records ------------------------------------------------------------------------------------------
def _record_1_to_2(obj: dict) -> dict:
    obj = dict(obj, schema_version=2)
    if obj.get("kind") == "case" and isinstance(obj.get("case"), dict):
        case = dict(obj["case"])
        case.setdefault("workload", "gemm")
        obj["case"] = case
        obj["case_id"] = case_identity(case)
    return obj


def _timing_then(field: str, value) -> Callable[[dict], dict]:
    """A stored CaseSpec (dict) given the value a timing option had before the format that added it:
    the record says how it was timed then, rather than let today's default speak."""

    def fix(case: dict) -> dict:
        if isinstance(case.get("timing"), dict) and field not in case["timing"]:
            return dict(case, timing=dict(case["timing"], **{field: value}))
        return case

    return fix


_timed_once = _timing_then("rounds", 1)  # before format 3 every case was timed in one round
_not_settled = _timing_then("settle_ms", 0.0)  # before format 6 no timing settled
_replayed = _timing_then("fresh_inputs", False)  # before format 10 later rounds replayed round 1's graph


def _timed_alone(case: dict) -> dict:
    """Before format 9 a case was timed on its own, in exactly its `rounds` rounds."""
    timing = case.get("timing")
    if not isinstance(timing, dict):
        return case
    fixed = {"head_to_head": False, "min_rounds": timing.get("rounds", 1)}
    return dict(case, timing={**fixed, **timing})


def _record_case_step(version: int, fix: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """An upgrade step to `version` + 1 that fixes the case of each case record."""

    def step(obj: dict) -> dict:
        obj = dict(obj, schema_version=version + 1)
        if obj.get("kind") == "case" and isinstance(obj.get("case"), dict):
            obj["case"] = fix(obj["case"])
        return obj

    return step


def _same_shape(version: int) -> Callable[[dict], dict]:
    """An upgrade step for a format whose successor only added optional fields."""
    return lambda obj: dict(obj, schema_version=version + 1)


_RECORD_UPGRADES: dict[int, Callable[[dict], dict]] = {
    1: _record_1_to_2,
    2: _record_case_step(2, _timed_once),
    3: _same_shape(3),
    4: _same_shape(4),
    5: _record_case_step(5, _not_settled),
    6: _same_shape(6),
    7: _same_shape(7),
    8: _record_case_step(8, _timed_alone),
    9: _record_case_step(9, _replayed),
    10: _same_shape(10),
}


def upgrade_record(obj: dict) -> dict:
    """A parsed results.jsonl line of any version, as the current version. Raises ValueError."""
    version = check_version(obj.get("schema_version"), SCHEMA_VERSION, "record schema")
    while version < SCHEMA_VERSION:
        obj = _RECORD_UPGRADES[version](obj)
        version += 1
    return obj


# -- manifests ----------------------------------------------------------------------------------------
# Format 1 readers expanded the stored sweep with fleetbench 0.1.0's code; that code is frozen here so
# a format-1 run means forever what it meant when it was written.
_V1_CATALOG = (
    "torch-bf16",
    "torch-fp8",
    "torch-nvfp4",
    "noop",
    "reference-nvfp4",
    "flashinfer-fp4-cutlass",
    "flashinfer-fp4-cudnn",
    "flashinfer-fp4-trtllm",
    "flashinfer-fp4-auto",
    "flashinfer-fp4-b12x",
    "flashinfer-fp4-cute-dsl",
    "flashinfer-fp8-cublas",
    "sgl-fp4-cutlass",
    "sgl-fp8",
)
_V1_DEEPSEEK_M = [1, 16, 64, 256, 1024, 4096, 16384]
_V1_PRESETS = {
    "glm5-tp8": [
        ("GLM-5 TP8 MoE expert", [16, 32, 64, 128, 256, 512, 1024], 2048, 6144),
        ("GLM-5 TP8 attention proj", [16, 32, 64, 128, 256], 768, 6144),
    ],
    "deepseek-r1-tp8": [
        (f"DeepSeek-R1 TP8 ({n}, {k})", _V1_DEEPSEEK_M, n, k)
        for n, k in ((512, 7168), (7168, 256), (7168, 2304), (4608, 7168))
    ],
    "deepseek-r1-tp4": [
        (f"DeepSeek-R1 TP4 ({n}, {k})", _V1_DEEPSEEK_M, n, k)
        for n, k in ((1024, 7168), (7168, 512), (7168, 4608), (9216, 7168))
    ],
}


def _as_list(v) -> list:
    return list(v) if isinstance(v, list) else [v]


def _v1_shapes(entry: dict) -> list[tuple[str, int, int, int]]:
    label = entry.get("label") or ""
    if entry.get("preset") is not None:
        return [(label or plabel, m, n, k) for plabel, ms, n, k in _V1_PRESETS[entry["preset"]] for m in ms]
    out = []
    for n in _as_list(entry["n"]):
        for k in _as_list(entry["k"]):
            moe = entry.get("moe")
            if moe is not None:
                for batch in _as_list(moe["batch"]):
                    m = math.ceil(batch * moe["top_k"] / moe["experts"])
                    out.append((f"{label} (batch {batch}, top-{moe['top_k']}/{moe['experts']})".strip(), m, n, k))
            else:
                out.extend((label, m, n, k) for m in _as_list(entry["m"]))
    return out


def _v1_cases(sweep: dict) -> dict[str, dict]:
    """Format-1 case id -> CaseSpec dict (format 1's fields), as fleetbench 0.1.0 expanded the sweep."""
    backends: list[str] = []
    for pattern in sweep["backends"]:
        globbed = any(c in pattern for c in "*?[")
        for name in fnmatch.filter(_V1_CATALOG, pattern) if globbed else [pattern]:
            if name not in backends:
                backends.append(name)
    cases: dict[str, dict] = {}
    for entry in sweep["shapes"]:
        for label, m, n, k in _v1_shapes(entry):
            for backend in backends:
                case = {
                    "backend": backend,
                    "m": m,
                    "n": n,
                    "k": k,
                    "label": label,
                    "out_dtype": sweep.get("out_dtype", "bfloat16"),
                    "seed": sweep.get("seed", 0),
                    "timing": sweep["timing"],
                }
                v1_key = json.dumps(
                    {f: v for f, v in case.items() if f != "label"}, sort_keys=True, separators=(",", ":")
                )
                v1_id = hashlib.sha256(v1_key.encode()).hexdigest()[:16]
                cases.setdefault(v1_id, case)
    return cases


def _manifest_1_to_2(data: dict) -> dict:
    sweep = data["sweep"]
    v1 = _v1_cases(sweep)
    cases: dict[str, dict] = {}
    jobs, notes = [], []
    for job in data.get("jobs", []):
        ids = []
        for old_id in job["case_ids"]:
            case = v1.get(old_id)
            if case is None:
                notes.append(f"job {job['slot']}: case {old_id} of format 1 is not in its stored sweep")
                continue
            case = {**case, "workload": "gemm"}
            new_id = case_identity(case)
            cases.setdefault(new_id, case)
            ids.append(new_id)
        jobs.append({**job, "case_ids": ids})
    return {
        **data,
        "manifest_version": 2,
        "sweep_name": sweep["name"],
        "cases": cases,
        "jobs": jobs,
        "worker": {
            "max_restarts": sweep.get("max_restarts", 2),
            "device": sweep.get("device", "auto"),
            "lock_timeout_s": data.get("lock_timeout_s", 600.0),
        },
        "format_notes": data.get("format_notes", []) + notes,
    }


def _manifest_2_to_3(data: dict) -> dict:
    # The same shape; what differs is the worker it keeps, and that its cases were timed once.
    return dict(data, manifest_version=3, cases={cid: _timed_once(case) for cid, case in data["cases"].items()})


_MANIFEST_UPGRADES: dict[int, Callable[[dict], dict]] = {
    1: _manifest_1_to_2,
    2: _manifest_2_to_3,
    3: lambda data: dict(data, manifest_version=4),
    4: lambda data: dict(data, manifest_version=5, worker={**data["worker"], "calibration": "off"}),
    5: lambda data: dict(
        data, manifest_version=6, cases={cid: _not_settled(case) for cid, case in data["cases"].items()}
    ),
    6: lambda data: dict(data, manifest_version=7),
    7: lambda data: dict(data, manifest_version=8),
    8: lambda data: dict(
        data, manifest_version=9, cases={cid: _timed_alone(case) for cid, case in data["cases"].items()}
    ),
    9: lambda data: dict(
        data, manifest_version=10, cases={cid: _replayed(case) for cid, case in data["cases"].items()}
    ),
    10: lambda data: dict(data, manifest_version=11),
}


def upgrade_manifest(data: dict, where: str) -> dict:
    """A manifest of any version, as the current version. Raises InputError naming `where`."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: not a fleetbench manifest (not a JSON object)")
    try:
        version = check_version(data.get("manifest_version"), MANIFEST_VERSION, "manifest")
        data = dict(data, written_as=data.get("written_as", version))
        while version < MANIFEST_VERSION:
            data = _MANIFEST_UPGRADES[version](data)
            version += 1
    except NewerFormat as exc:
        raise InputError(f"{where}: {written_by_newer(exc.version, exc.current)}") from None
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None
    except (KeyError, TypeError) as exc:
        raise InputError(
            f"{where}: damaged manifest (format {data.get('manifest_version')!r}): missing or malformed {exc}"
        ) from None
    return data


# -- what a run's own worker reads ----------------------------------------------------------------------
def params_for_worker(params: dict, manifest_version: int) -> dict:
    """Worker params in the form the worker of a run written as `manifest_version` reads: a rerun uses
    the worker the run started with, which rejects fields it does not know."""
    if manifest_version >= MANIFEST_VERSION:
        return params
    if manifest_version < 9:
        params = {f: v for f, v in params.items() if f != "cases_in_run"}
    if manifest_version < 7:
        params = {f: v for f, v in params.items() if f not in ("case_timeout_s", "build_timeout_s", "lock_clocks")}
    if manifest_version < 5:
        params = {f: v for f, v in params.items() if f != "calibration"}
    cases = []
    for case in params["cases"]:
        if manifest_version < 10:
            case = dict(case, timing={k: v for k, v in case["timing"].items() if k != "fresh_inputs"})
        if manifest_version < 9:
            case = dict(
                case,
                timing={
                    k: v
                    for k, v in case["timing"].items()
                    if k not in ("min_rounds", "round_target", "pair_target", "head_to_head")
                },
            )
        if manifest_version < 8:
            case = dict(case, timing={k: v for k, v in case["timing"].items() if k not in ("state", "cooldown_ms")})
        if manifest_version < 6:
            case = dict(case, timing={k: v for k, v in case["timing"].items() if k != "settle_ms"})
        if manifest_version < 5:
            case = {f: v for f, v in case.items() if f != "moe"}  # never set there
        if manifest_version < 4:
            case.pop("kernel_sha256", None)  # before format 4 (never set there)
        if manifest_version < 3:
            case["timing"] = {k: v for k, v in case["timing"].items() if k != "rounds"}
        if manifest_version < 2:
            case.pop("workload", None)
        cases.append(case)
    return {**params, "schema_version": manifest_version, "cases": cases}
