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
