"""A stored run's slots read back: per job, where each case stands across its attempts (their records
joined within the same software), its facts, its latest outcome and what did not read.

A record of a kernel from the user's own file came from the process that ran the user's code, which
could have written it (worker/contract/physics.py): its timing is judged again here, against its case as
the run planned it and the host's facts, and an impossible one reads as failed (`impossible`) for every
reader (show, diff, report, history, rerun). The record itself stays in results.jsonl as it came.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from worker.contract.physics import recheck
from worker.contract.rounds import join_records
from worker.contract.schema import SCHEMA_VERSION, CaseRecord, CaseSpec, Correctness, FactsRecord

from ..errors import InputError
from .formats import written_by_newer
from .outcome import HostOutcome
from .records import parse_results
from .store import RunStore


@dataclass
class SlotData:
    slot: str
    host: str
    gpu: Optional[int]
    planned: list[CaseSpec]
    records: dict[str, tuple[int, CaseRecord]]  # case_id -> (attempt, record)
    facts: Optional[FactsRecord]
    outcome: Optional[HostOutcome]
    problems: list[str]
    # attempt -> how its host differed from the slot's first attempt (library versions, driver, GPU)
    changed: dict[int, str] = field(default_factory=dict)


# What must be the same for two attempts' numbers to be one result (as pyperf checks metadata before it
# merges runs): a rerun after a library upgrade is kept apart, and its rows say so.
CHECKED_FACTS = ("gpu_name", "compute_capability", "driver", "cuda", "torch", "flashinfer", "sgl_kernel", "triton")


def facts_change(before: Optional[FactsRecord], after: Optional[FactsRecord]) -> str:
    """'' when both attempts ran on the same software and GPU, else what changed ("flashinfer 0.7.2 -> 0.7.3")."""
    if before is None or after is None:
        return ""
    return ", ".join(
        f"{key} {getattr(before, key)} -> {getattr(after, key)}"
        for key in CHECKED_FACTS
        if getattr(before, key) != getattr(after, key)
    )


def load_slots(store: RunStore) -> list[SlotData]:
    """Every job of the run with where each case stands across attempts (worker/contract/rounds.py
    join_records, within attempts on the same software); what it planned comes from the manifest.
    InputError when a newer fleetbench wrote results into it: read with this one, its cases would look
    never run, and a rerun would measure them again into a run this one cannot read."""
    manifest = store.manifest()
    cases_by_id = store.planned_cases()
    slots = []
    for job in manifest.jobs:
        slot = job.slot
        attempts = store.attempts(slot)
        planned: list[CaseSpec] = [cases_by_id[cid] for cid in job.case_ids]
        records: dict[str, tuple[int, CaseRecord]] = {}
        facts = first_facts = None
        facts_of: dict[int, Optional[FactsRecord]] = {}
        changed: dict[int, str] = {}
        problems: list[str] = [n for n in manifest.format_notes if n.startswith(f"job {slot}:")]
        for attempt in attempts:
            results = store.attempt_dir(slot, attempt) / "results.jsonl"
            parsed = parse_results(results, store)
            if parsed.newer is not None:
                raise InputError(
                    f"run {store.run_id} ({results.relative_to(store.dir)}): "
                    + written_by_newer(parsed.newer, SCHEMA_VERSION)
                )
            facts = parsed.facts or facts
            facts_of[attempt] = parsed.facts
            first_facts = first_facts or parsed.facts
            change = facts_change(first_facts, parsed.facts)
            if change:
                changed[attempt] = change
            problems.extend(f"attempt {attempt}: {p}" for p in parsed.problems)
            latest: dict[str, CaseRecord] = {}  # within an attempt, a case's last line says where it stands
            for rec in parsed.cases:
                if rec.case_id not in cases_by_id:
                    problems.append(
                        f"attempt {attempt}: a record of a case this run did not plan "
                        f"({rec.case.backend} {rec.case.m}x{rec.case.n}x{rec.case.k})"
                    )
                    continue
                latest[rec.case_id] = rec
            for cid, rec in latest.items():
                previous = records.get(cid)
                if previous is None:
                    records[cid] = (attempt, rec)
                    continue
                # Rounds run on other software are never one result with earlier ones.
                same_software = not facts_change(facts_of.get(previous[0]), parsed.facts)
                joined = join_records(previous[1], rec, cases_by_id[cid].timing.rounds, joinable=same_software)
                if joined is not previous[1]:
                    records[cid] = (
                        attempt,
                        joined.model_copy(update={"case": cases_by_id[cid]}) if joined is not rec else rec,
                    )
        for cid, (attempt, rec) in records.items():
            records[cid] = (attempt, judged_outside(rec, cases_by_id[cid], facts_of.get(attempt) or facts))
        outcome = store.outcome(slot, attempts[-1]) if attempts else None
        slots.append(
            SlotData(
                slot=slot,
                host=job.host,
                gpu=job.gpu,
                planned=planned,
                records=records,
                facts=facts,
                outcome=outcome,
                problems=problems,
                changed=changed,
            )
        )
    return slots


RECHECKED = "re-checked outside the kernel's process"


def judged_outside(rec: CaseRecord, planned: CaseSpec, facts: Optional[FactsRecord]) -> CaseRecord:
    """`rec` as it reads once judged outside the process that wrote it: a record of a kernel from the
    user's file whose timing is faster than its GPU can go (worker/contract/physics.py recheck, for the
    case the run planned, on the host of `facts`) is failed with integrity `impossible`, its numbers
    dropped, as the worker fails one it catches itself; any other record is `rec`."""
    if not planned.kernel_sha256 or rec.timing is None:
        return rec
    why = recheck(planned, rec.timing, facts)
    if why is None:
        return rec
    reason = f"integrity (impossible): {why}; {RECHECKED}"
    # A record without a verdict gets a failed one that says so (its error a sentinel, as the worker's
    # verify.no_result writes for a call with nothing to judge), so its integrity reads like any other.
    check = rec.correctness or Correctness(
        verdict="fail",
        reference="none: the record came without a verdict",
        rel_err=1e30,
        cosine=0.0,
        max_rel_err=0.0,
        min_cosine=1.0,
    )
    check = check.model_copy(
        update={
            "verdict": "fail",
            "integrity": list(dict.fromkeys([*(check.integrity or []), "impossible"])),
            "detail": "; ".join([reason, check.detail] if check.detail else [reason]),
        }
    )
    return rec.model_copy(
        update={
            "status": "failed",
            "reason": reason,
            "timing": None,
            "metrics": None,
            "correctness": check,
            "complete": True,
        }
    )
