"""benchmarks/fidelity/fidelity.py: the runs' medians against the references, by time and by work, over the two
seed sweeps of a stored H100 lease (no GPU: the references are made up here)."""

import statistics
import tarfile
from pathlib import Path

import pytest

from benchmarks.fidelity.fidelity import baseline_timings, reference_table
from worker.contract.pairing import work_per_round

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
SEEDS = ("20261207-220056-glm5-tp8-2de7", "20261207-220114-glm5-tp8-c205")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    where = tmp_path_factory.mktemp("lease")
    with tarfile.open(RESULTS / "slowdowns-seed-h100-s31b.runs.tar.xz") as tar:
        tar.extractall(
            where, members=[m for m in tar.getmembers() if m.name.removeprefix("./").startswith(SEEDS)], filter="data"
        )
    return [where / s for s in SEEDS]


def table_rows(lines: list[str]) -> dict[tuple, list[str]]:
    out = {}
    for line in lines:
        parts = [p.strip() for p in line.strip("|").split("|")]
        if line.startswith("| ") and parts[1].isdigit():
            out[(parts[0], int(parts[1]), int(parts[2]))] = parts
    return out


def test_a_run_at_another_clock_than_its_reference_misses_by_time_and_agrees_by_work(runs):
    timings = baseline_timings(runs)
    assert len(timings) == 36 and all(set(got) == {0, 1} for got in timings.values())
    # Each reference 8% slower than run 1 by time, at a clock that makes its work run 1's own.
    refs, clocks = {}, {}
    for cell, got in timings.items():
        t = got[0].median_us * 1.08
        refs[cell] = [t, t, t]
        clocks[cell] = [statistics.median(work_per_round(got[0])) / t] * 3
    lines, ratios, works = reference_table(runs, timings, refs, clocks, 300, 3)
    rows = table_rows(lines)
    assert len(rows) == 36 and len(works) == 36
    for parts in rows.values():
        # reference µs, spread, MHz, then per run: µs, / ref, / ref work
        assert parts[8] == "0.926 **" and parts[9] == "1.000"
    assert [round(r, 3) for r in ratios[0]] == [0.926] * 36
    assert (
        lines[-2]
        == f"- run 1 ({SEEDS[0]}): 0 of 36 within ±5% of the reference; its work within ±5% of the reference's on 36 of 36"
    )
    # run 2's own rounds and clocks against the same references
    assert lines[-1].startswith(f"- run 2 ({SEEDS[1]}): ") and "its work within ±5% of the reference's on" in lines[-1]


def test_references_without_a_clock_leave_the_work_out(runs):
    timings = baseline_timings(runs)
    refs = {cell: [got[0].median_us] * 3 for cell, got in timings.items()}
    lines, ratios, works = reference_table(runs, timings, refs, {}, 300, 3)
    assert works == {}
    assert all(parts[6] == "" and parts[9] == "" for parts in table_rows(lines).values())
    assert lines[-2] == f"- run 1 ({SEEDS[0]}): 36 of 36 within ±5% of the reference"
