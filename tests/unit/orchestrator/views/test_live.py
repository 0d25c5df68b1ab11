"""The live view: one line per printed state change in logs, a table on a terminal."""

from __future__ import annotations

import io

from orchestrator.execution.execute import JobEvent
from orchestrator.views.live import LiveView


def events():
    return [
        JobEvent("a", "running", total=2),
        JobEvent("b", "running", total=2),
        JobEvent("a", "syncing", total=2),
        JobEvent("a", "running", total=2),
        JobEvent("a", "running", done=1, total=2, current="noop 1x16x16"),
        JobEvent("b", "unreachable", total=2, message="connection refused by 127.0.0.1:1"),
        JobEvent("a", "ok", done=2, total=2),
    ]


def test_plain_output_prints_each_state_once():
    out = io.StringIO()
    with LiveView(out, ["a", "b"], "t") as view:
        for ev in events():
            view.update(ev)
    assert out.getvalue().splitlines() == [
        "a: running (0/2)",
        "b: running (0/2)",
        "b: unreachable (0/2) — connection refused by 127.0.0.1:1",
        "a: ok (2/2)",
    ]


def test_terminal_table_shows_the_final_states():
    out = io.StringIO()
    with LiveView(out, ["a", "b"], "fleetbench t", terminal=True) as view:
        for ev in events():
            view.update(ev)
    final = out.getvalue().rsplit("fleetbench t", 1)[-1]  # the last frame drawn
    assert "ok" in final and "2/2" in final and "unreachable" in final and "connection refused" in final


def test_off_a_terminal_a_running_host_reports_its_progress_every_few_seconds():
    out = io.StringIO()
    now = [0.0]
    with LiveView(out, ["a"], "t", clock=lambda: now[0]) as view:
        view.update(JobEvent("a", "running", total=3))
        for i, t in enumerate((1.0, 5.0, 11.0, 12.0, 22.5)):
            now[0] = t
            view.update(JobEvent("a", "running", done=i // 2, total=3, current=f"torch-bf16 {16 * (i + 1)}x64x64"))
        view.update(JobEvent("a", "ok", done=3, total=3))
    assert out.getvalue().splitlines() == [
        "a: running (0/3)",
        "a: running (1/3) — torch-bf16 48x64x64",  # 11 s after the first line
        "a: running (2/3) — torch-bf16 80x64x64",  # 22.5 s: 11.5 s after the last one
        "a: ok (3/3)",
    ]


def test_the_overall_bar_counts_the_fleet_and_estimates_from_the_rate_so_far():
    from orchestrator.views.live import overall_line

    running = [JobEvent("a", "running", done=10, total=40), JobEvent("b", "running", done=20, total=40)]
    # 30 of 80 cases in 60 s since the first host began: 50 left at 0.5 case/s -> 100 s.
    line = overall_line(running, started=100.0, now=160.0)
    assert line.startswith("[" + "#" * 11 + "-" * 19 + "] 30/80 cases (38%), 0 of 2 hosts finished")
    assert line.endswith("ETA 1m40s")
    assert overall_line([JobEvent("a", "running", total=4)], started=0.0, now=5.0).endswith(
        "ETA when the first case is done"
    )
    done = [JobEvent("a", "ok", done=4, total=4), JobEvent("b", "failed", done=1, total=4)]
    assert overall_line(done, 0.0, 9.0) == "[" + "#" * 19 + "-" * 11 + "] 5/8 cases (62%), 2 of 2 hosts finished"
    assert overall_line([JobEvent("a", "waiting")], None, 0.0) == "waiting for the hosts to start"


def test_the_terminal_view_draws_the_overall_bar_under_the_hosts():
    out = io.StringIO()
    now = [0.0]
    with LiveView(out, ["a", "b"], "fleetbench t", terminal=True, clock=lambda: now[0]) as view:
        view.update(JobEvent("a", "running", total=2))
        now[0] = 30.0
        view.update(JobEvent("a", "running", done=1, total=2))
        view.update(JobEvent("b", "running", total=2))
        view.update(JobEvent("a", "ok", done=2, total=2))
    final = out.getvalue().rsplit("fleetbench t", 1)[-1]
    assert "2/4 cases (50%), 1 of 2 hosts finished, ETA" in final
