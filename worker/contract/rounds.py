"""A case's rounds as one record. Each round is written when it ends (a record with `complete: false`
until the last), so a run stopped midway keeps what it timed and a later attempt times only the rounds
still missing; the worker and the controller join them here. Pure: no torch."""

from __future__ import annotations

from typing import Optional

from .metrics import at_median
from .schema import CaseRecord, Health, Stats
from .stats import combine_rounds


def rounds_in(record: CaseRecord) -> int:
    """How many timed rounds a record holds (records before format 3 held one, without details)."""
    if record.timing is None:
        return 0
    return len(record.timing.rounds) or 1


def join_health(a: Optional[Health], b: Optional[Health]) -> Optional[Health]:
    """Tainted when any round was; the first round's state before, the last one's after."""
    if a is None or b is None:
        return a or b
    if not (a.tainted or b.tainted):
        return a
    reasons = [r for h in (a, b) if h.tainted for r in h.taint_reason.split("; ") if r]
    return Health(before=a.before, after=b.after, tainted=True, taint_reason="; ".join(dict.fromkeys(reasons)))


def add_rounds(
    record: CaseRecord, timing: Stats, health: Optional[Health], duration_s: float, planned: int
) -> CaseRecord:
    """`record` (an ok case with its rounds so far) with more rounds of the same case joined to it;
    complete once it holds `planned` rounds."""
    stats = combine_rounds([record.timing, timing])
    return record.model_copy(
        update={
            "timing": stats,
            "health": join_health(record.health, health),
            "metrics": at_median(record.metrics, stats.median_us) if record.metrics else None,
            "duration_s": round(record.duration_s + duration_s, 4),
            "complete": len(stats.rounds) >= planned,
        }
    )


def join_records(earlier: CaseRecord, later: CaseRecord, planned: int, joinable: bool = True) -> CaseRecord:
    """Two records of one case from different attempts, as what the case now stands at:
    - a complete ok record stands on its own, and a later failure does not hide it;
    - an incomplete ok record is completed by the ok rounds of a later attempt (the later attempt checked
      the result again before timing), when the two are `joinable` (the same software and GPU);
    - otherwise the later record says where the case is (a failure, a hang, a fresh result)."""
    if earlier.status == "ok" and earlier.complete and later.status != "ok":
        return earlier
    fresh = later.complete and rounds_in(later) >= planned
    if (
        joinable
        and earlier.status == "ok"
        and not earlier.complete
        and later.status == "ok"
        and not fresh
        and later.timing is not None
        and earlier.timing is not None
    ):
        joined = add_rounds(earlier, later.timing, later.health, later.duration_s, planned)
        return joined.model_copy(update={"correctness": later.correctness or earlier.correctness})
    return later
