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
    assert descent[4] == "10.00" and descent[6] == "0.909"  # 10 µs against the sustained 11
    flat_row = [p.strip() for p in rows[1].strip("|").split("|")]
    assert flat_row[5] == "1.000" and flat_row[6] == "1.000"
    assert "beyond ±5% of the sustained state where settling stops: 1 (torch-fp8 512x2048x6144)" in text
    assert "power limit 700.0 W" in text
    assert descent[7:] == ["600", "600", "1500", "1500"]  # NVML's watts and MHz where it stopped and at the end
    assert f"settling would take {float(descent[3]) + float(flat_row[3]):.0f} GPU ms over the 2 cases" in text
