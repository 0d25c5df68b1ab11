"""The outcome judgement (orchestrator/runs/outcome.py), as a table: what was observed of an attempt, its
outcome and the words its error must hold."""

from __future__ import annotations

import pytest

from orchestrator.runs.outcome import AttemptEnd, judge
from worker.contract import protocol

# -- the outcome judgement, as a table ------------------------------------------------------------------
JUDGEMENTS = [
    # (what was observed, outcome, words the error must hold)
    (AttemptEnd(total=4, done=4), "ok", ""),
    (AttemptEnd(total=4, done=4, exit_code=3), "ok", ""),  # every case has a record: the host did its work
    (AttemptEnd(total=4, done=2, cancelled=True), "interrupted", "interrupted; 2 of 4"),
    (AttemptEnd(total=4, done=4, cancelled=True), "ok", ""),
    (AttemptEnd(total=4, done=0, started=False, stderr_tail="OSError: boom"), "failed", "OSError: boom"),
    (AttemptEnd(total=4, done=1, started=False), "partial", "could not be started"),
    (AttemptEnd(total=4, done=1, timed_out=True, exit_code=-1, timeout_s=30), "timeout", "30 s limit; 3 of 4"),
    (AttemptEnd(total=4, done=0, exit_code=-1), "unreachable", "connection lost"),
    (AttemptEnd(total=4, done=3, exit_code=-1), "partial", "connection lost during the run; 1 of 4"),
    (
        AttemptEnd(total=4, done=0, exit_code=127, hello_seen=False, python="/v/bin/python"),
        "failed",
        "remote interpreter not found: /v/bin/python",
    ),
    (
        AttemptEnd(total=4, done=0, exit_code=126, hello_seen=False, python="/v/bin/python"),
        "failed",
        "not executable: /v/bin/python",
    ),
    (AttemptEnd(total=4, done=0, exit_code=127, hello_seen=True, stderr_tail="x"), "failed", "x; 4 of 4"),
    (
        AttemptEnd(total=4, done=0, exit_code=protocol.EXIT_GPU_BUSY, stderr_tail="GPU 0 is locked by run r1"),
        "failed",
        "GPU 0 is locked by run r1",
    ),
    (AttemptEnd(total=4, done=0, exit_code=1, fetched=None), "failed", "results could not be fetched"),
    (
        AttemptEnd(total=4, done=2, exit_code=protocol.EXIT_INCOMPLETE, stderr_tail="giving up"),
        "partial",
        "giving up; 2 of 4",
    ),
    (AttemptEnd(total=4, done=0, exit_code=1), "failed", "exit status 1; 4 of 4"),
]


@pytest.mark.parametrize("end, outcome, words", JUDGEMENTS)
def test_judge(end, outcome, words):
    got, error = judge(end)
    assert got == outcome and words in error and (error == "") == (outcome == "ok")
