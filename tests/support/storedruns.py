"""Results written into a stored run's folder as a host would leave them: for tests of the commands that
read a run (profile, crosscheck) without running a sweep first."""

from __future__ import annotations

import json


def write_ok_attempt(store, job, lines: list[str]) -> None:
    """Attempt 1 of `job` finished every case: its records (`lines`, one JSON each) and its outcome."""
    d = store.attempt_dir(job.slot, 1)
    d.mkdir(parents=True)
    (d / "results.jsonl").write_text("\n".join(lines) + "\n")
    (d / "outcome.json").write_text(
        json.dumps(
            {
                "slot": job.slot,
                "host": job.host.name,
                "attempt": 1,
                "outcome": "ok",
                "cases_total": len(job.cases),
                "cases_done": len(job.cases),
            }
        )
    )
