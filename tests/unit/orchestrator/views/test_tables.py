"""The tables' documents (orchestrator/views/tables.py): a row's note."""

from __future__ import annotations


def test_a_noisy_rows_note_gives_its_interval_up_to_100_percent_then_says_wider():
    from orchestrator.analysis.merge import Row
    from orchestrator.views.tables import _note

    row = Row(
        run_id="r",
        host="h",
        gpu=None,
        slot="h",
        gpu_name=None,
        label="",
        backend="b",
        m=1,
        n=1,
        k=1,
        status="ok",
        reason="",
        rel_ci=0.3,
    )
    assert _note(row) == "noisy (CI ±30%)"
    assert _note(Row(**{**row.as_dict(), "rel_ci": 2736.9})) == "noisy (CI wider than ±100%)"
    assert _note(Row(**{**row.as_dict(), "rel_ci": 0.01})) == ""


def test_a_row_sure_of_its_work_while_its_time_moved_says_so_rather_than_noisy():
    from orchestrator.analysis.merge import Row
    from orchestrator.views.tables import _note

    base = dict(run_id="r", host="h", gpu=None, slot="h", gpu_name=None, label="", backend="b", m=1, n=1, k=1)
    sure = Row(**base, status="ok", reason="", rel_ci=0.3, rounds=2, rounds_stop="target")
    assert _note(sure) == (
        "its time moved between rounds (CI ±30%) with the SM clock; its work (time × in-stream clock) held, "
        "so it stopped sure"
    )
    capped = Row(**base, status="ok", reason="", rel_ci=0.3, rounds=3, rounds_stop="cap")
    assert _note(capped) == "noisy (CI ±30%)"
