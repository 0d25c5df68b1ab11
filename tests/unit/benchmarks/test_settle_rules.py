"""benchmarks/gpu_state/settle_trace.py `rules`: the worker's settling rule judged offline on traces."""

import json
import sys

from benchmarks.gpu_state import settle_trace


def trace(us_at, ms=1000.0, cps=200, watts_at=lambda ms: 600.0):
    """A made-up trace: one replay of `cps` calls after another, each reading us_at(its start ms), with
    NVML's (clock, reasons, watts) on every 4th as the trace step records them."""
    rows, gpu_ms = [], 0.0
    while gpu_ms < ms:
        us = us_at(gpu_ms)
        row = [gpu_ms, us]
        if len(rows) % 4 == 0:
            row += [1500, 0, watts_at(gpu_ms)]
        rows.append(row)
        gpu_ms += us * cps / 1e3
    return {"backend": "torch-fp8", "shape": "512x2048x6144", "cps": cps, "replays": rows}


def flat(ms):
    return 10.0


def late_descent(ms):
    """Burst until 50 ms, a plateau to 150 ms, then slower by 10% over the next 250 ms: the shape of the
    power-capped fp8 GEMM's trace (benchmarks/RESULTS.md)."""
    if ms < 50:
        return 9.0
    if ms < 150:
        return 10.0
    return 10.0 + min(1.0, (ms - 150) / 250)


def test_settling_stops_on_a_flat_trace_at_its_floor_and_reads_it():
    stop = settle_trace.settle_stop(trace(flat)["replays"], 200, floor_ms=100, limit_ms=100)
    assert stop is not None
    ms, tail = stop
    assert 100 <= ms < 110 and set(tail) == {10.0}


def test_a_plateau_before_a_late_descent_fools_the_rule_and_the_report_says_so(tmp_path, capsys, monkeypatch):
    t = trace(late_descent)
    ms, tail = settle_trace.settle_stop(t["replays"], t["cps"], floor_ms=100, limit_ms=100)
    assert 100 <= ms < 150 and set(tail) == {10.0}  # stopped on the plateau
    doc = {"ms": 1000, "ref_from": 700, "power_limit_w": 700.0, "traces": {"shuffled": [t, trace(flat)]}}
    path = tmp_path / "settle-trace.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "rules.md"
    monkeypatch.setattr(sys, "argv", ["settle_trace", "rules", str(path), "--out", str(out)])
    assert settle_trace.main() == 0
    text = out.read_text()
    assert text.strip() in capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| shuffled |")]
    descent = [p.strip() for p in rows[0].strip("|").split("|")]
    assert descent[3] == "100" and descent[5] == "10.00" and descent[7] == "0.909"  # 10 µs against the sustained 11
    flat_row = [p.strip() for p in rows[1].strip("|").split("|")]
    assert flat_row[6] == "1.000" and flat_row[7] == "1.000"
    assert "beyond ±5% of the sustained state where settling stops: 1 (torch-fp8 512x2048x6144)" in text
    assert "power limit 700.0 W" in text
    assert descent[8:] == ["600", "600", "1500", "1500"]  # NVML's watts and MHz where it stopped and at the end
    assert f"settling would take {float(descent[4]) + float(flat_row[4]):.0f} GPU ms over the 2 cases" in text


def test_settle_stop_is_the_workers_own_rule_replayed():
    """The same per-call times through worker/measure/timing.py `_settle` stop at the same GPU ms with the
    same tail; a trace that never stops drifting is reported as drifting, not as settled."""
    from worker.measure.timing import _settle

    for shape in (flat, late_descent):
        t = trace(shape)
        reps = iter(t["replays"])
        done = _settle(lambda: next(reps)[1], t["cps"], 100.0)
        ms, tail = settle_trace.settle_stop(t["replays"], t["cps"], floor_ms=100, limit_ms=100)
        assert abs(ms - done.spent_ms) < 1e-9 and tail == done.tail
    climbing = trace(lambda ms: 10.0 + ms / 20.0, ms=1200)  # +1% every 2 ms of GPU time, to the end
    assert settle_trace.settle_stop(climbing["replays"], climbing["cps"], floor_ms=100, limit_ms=100) is None


def test_light_cases_settle_the_light_floor_unless_they_follow_a_heavy_one():
    """As Timer.settle_floor: with the GPU's peaks a case whose first replay uses < heavy_load of its
    family's peak is light (10 ms), except right after a heavy case; without peaks every case is heavy."""
    from worker.measure.tuning import TUNING

    def case(backend, flops, us):
        return {"backend": backend, "flops": flops, "replays": [[0.0, us]]}

    # bf16 peak 800 TFLOPS: 8e8 flops in 10 us use 10% of it; 4e9 flops in 10 us 50%
    rows = [case("torch-bf16", 8e8, 10.0), case("torch-bf16", 4e9, 10.0), case("torch-fp8", 8e8, 10.0)]
    rows.append(case("torch-fp8", 8e8, 10.0))
    got = settle_trace.floors(rows, 100.0, {"bf16": 800.0, "fp8": 1600.0})
    assert got == [TUNING.light_settle_ms, 100.0, 100.0, TUNING.light_settle_ms]
    assert settle_trace.floors(rows, 100.0, {}) == [100.0] * 4
