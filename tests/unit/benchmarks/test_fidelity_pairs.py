"""benchmarks/fidelity/fidelity.py: the head-to-head ratio of torch-fp8 and flashinfer-fp8-cublas held against
the ratio of their references, over a stored H200 seed sweep (no GPU: the references are made up here)."""

import tarfile
from pathlib import Path

import pytest

from benchmarks.fidelity.fidelity import PAIR, paired_against_references
from orchestrator.analysis.headtohead import DEFAULT_TIE, contests_of
from orchestrator.runs.slots import load_slots
from orchestrator.runs.store import RunStore

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
SEED_RUN = "20261205-085417-glm5-tp8-8469"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("lease")
    with tarfile.open(RESULTS / "slowdowns-seed-h200-s16.runs.tar.xz") as tar:
        tar.extractall(where, members=[m for m in tar.getmembers() if m.name.startswith(SEED_RUN)], filter="data")
    return where / SEED_RUN


def contests(run: Path):
    return [c for slot in load_slots(RunStore(run)) for c in contests_of(slot, *PAIR, DEFAULT_TIE)]


def rows(lines: list[str]) -> list[list[str]]:
    return [[p.strip() for p in line.strip("|").split("|")] for line in lines if line.startswith("| 1 |")]


def test_references_in_the_paired_ratio_agree_on_every_shape_and_two_percent_off_on_none(run):
    a, b = PAIR
    found = contests(run)
    assert len(found) == 12 and all(c.ratio is not None for c in found)  # every seed shape was paired

    def refs(factor: float) -> dict:
        out = {}
        for c in found:
            out[(a, c.m, c.n, c.k)] = 10.0
            out[(b, c.m, c.n, c.k)] = 10.0 * c.ratio * factor
        return out

    same = paired_against_references([run], refs(1.0))
    assert rows(same) and all(r[-1] == "+0.0%" for r in rows(same))
    assert same[-1] == "- run 1: paired within 1% of the references' ratio on 12 of 12 shapes"
    off = paired_against_references([run], refs(1.02))
    assert all(r[-1] == "-2.0% **" for r in rows(off))
    assert off[-1] == "- run 1: paired within 1% of the references' ratio on 0 of 12 shapes"


def test_each_row_shows_the_runs_own_medians_beside_the_pairs(run):
    a, b = PAIR
    found = {(c.m, c.n): c for c in contests(run)}
    refs = {(x, c.m, c.n, c.k): 10.0 for c in found.values() for x in (a, b)}
    for r in rows(paired_against_references([run], refs)):
        c = found[(int(r[1]), int(r[2]))]
        assert r[4] == f"{c.ratio:.4f} [{c.low:.4f}, {c.high:.4f}]"
        assert r[5] == f"{c.b_us / c.a_us:.4f}"
        assert r[6] == "1.0000"
    # a shape without a reference is left out, not guessed
    del refs[(a, 16, 768, 6144)]
    assert len(rows(paired_against_references([run], refs))) == 11


def test_a_pair_off_its_references_times_by_their_clocks_agrees_with_their_work(run):
    """Two references that ran at clocks 5% apart (the power cap, each in its own state) read a times' ratio
    5% off the pairs', which share one clock; their work (time x clock) holds no clock, and agrees."""
    a, b = PAIR
    found = contests(run)
    refs, works = {}, {}
    for c in found:
        refs[(a, c.m, c.n, c.k)], works[(a, c.m, c.n, c.k)] = 10.0, 10.0 * 1500.0
        refs[(b, c.m, c.n, c.k)] = 10.0 * c.ratio * 1.05  # B's own clock 5% lower than A's
        works[(b, c.m, c.n, c.k)] = refs[(b, c.m, c.n, c.k)] * 1500.0 / 1.05
    lines = paired_against_references([run], refs, works=works)
    assert "of their work" in lines[0] and lines[2].endswith(
        "| B/A of the references' work | paired / references' work |"
    )
    got = rows(lines)
    assert len(got) == 12 and all(r[7] == "-4.8% **" and r[9] in ("+0.0%", "-0.0%") for r in got)
    assert lines[-1] == (
        "- run 1: paired within 1% of the references' ratio on 0 of 12 shapes; of their work's on 12 of 12"
    )
    # a shape whose references have no clock gets no work columns' figures, and is not counted for them
    del works[(b, 16, 768, 6144)]
    lines = paired_against_references([run], refs, works=works)
    assert lines[-1].endswith("of their work's on 11 of 11")
    unclocked = [r for r in rows(lines) if (r[1], r[2]) == ("16", "768")]
    assert len(unclocked) == 1 and len(unclocked[0]) == 10 and unclocked[0][8:] == ["", ""]
