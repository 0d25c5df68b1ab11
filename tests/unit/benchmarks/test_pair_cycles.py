"""benchmarks/detection/pair_cycles.py: head-to-head verdicts from fewer sampled cycles, over a stored lease."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.detection.pair_cycles import main, sampled_cycles

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def _stats(paired: list[float]) -> SimpleNamespace:
    """What paired_rounds reads of a Stats: its rounds' pair_id and paired samples."""
    return SimpleNamespace(rounds=[SimpleNamespace(pair_id="p1", paired_us=paired)])


def test_fewer_cycles_drop_the_rounds_last_cycles_and_keep_the_settling_tail():
    # 4 tail cycles, then the 12 sampled: keeping 8 sampled drops the last 4
    a = _stats([10.0] * 16)
    b = _stats([10.0 + i for i in range(16)])
    kept = sampled_cycles(a, b, 8)
    assert len(kept) == 1 and len(kept[0]) == 12
    assert kept == [logs[:12] for logs in sampled_cycles(a, b, 12)]


def test_the_report_over_a_stored_lease(tmp_path, capsys):
    out = tmp_path / "pc.md"
    assert main([str(RESULTS / "slowdowns-seed-h100-s30a.runs.tar.xz"), "--cycles", "12,6", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.read_text().strip() == text.strip()
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| slowdowns-seed-h100-s30a |")]
    assert [r[1].strip() for r in rows] == ["12", "6"]
    # 3 head-to-head sweeps x 12 shapes; with all 12 cycles, the figures the lease's own step reported
    assert [r[3].strip() for r in rows] == ["36", "36"]
    full = rows[0]
    assert full[4].strip() == "36" and full[5].strip() == "0" and full[7].strip() == "31"
    assert float(rows[1][6].strip().rstrip("%")) >= float(full[6].strip().rstrip("%"))  # fewer cycles, wider


def test_bad_input_is_refused(tmp_path, capsys):
    assert main([str(tmp_path / "nope.runs.tar.xz")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as stop:
        main([str(RESULTS / "slowdowns-seed-h100-s30a.runs.tar.xz"), "--cycles", "7"])
    assert stop.value.code == 2
