"""benchmarks/fidelity/variant_shift.py: which stored sweeps pair up, and its report over a real lease."""

from pathlib import Path

from benchmarks.fidelity.variant_shift import ACROSS, WITHIN_A, WITHIN_B, main, pairs_of

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
LEASE = RESULTS / "slowdowns-seed-h100-s31a.runs.tar.xz"


def test_runs_pair_within_each_side_and_each_before_with_each_after_never_a_variant_not_named():
    runs = [
        "20261207-3-glm5-tp8-default-c",
        "20261207-1-glm5-tp8-a",
        "20261207-2-glm5-tp8-b",
        "20261207-4-glm5-tp8-warmup-5-d",
        "20261207-5-glm5-tp8-warmup-5-min-samples-6-e",
        "20261207-6-glm5-tp8-warmup-5-f",
        "20261207-0-jit-x",
    ]
    pairs = pairs_of(runs, ["glm5-tp8", "glm5-tp8-default"], ["glm5-tp8-warmup-5"])
    within_a = [(a, b) for g, a, b in pairs if g == WITHIN_A]
    assert within_a == [
        ("20261207-1-glm5-tp8-a", "20261207-2-glm5-tp8-b"),
        ("20261207-1-glm5-tp8-a", "20261207-3-glm5-tp8-default-c"),
        ("20261207-2-glm5-tp8-b", "20261207-3-glm5-tp8-default-c"),
    ]
    assert [(a, b) for g, a, b in pairs if g == WITHIN_B] == [
        ("20261207-4-glm5-tp8-warmup-5-d", "20261207-6-glm5-tp8-warmup-5-f")
    ]
    across = [(a, b) for g, a, b in pairs if g == ACROSS]
    assert len(across) == 6 and all("warmup" not in a and b.endswith(("warmup-5-d", "warmup-5-f")) for a, b in across)
    assert not any("min-samples" in a + b or "jit" in a + b for _, a, b in pairs)


def test_the_report_over_a_stored_lease_judges_every_pair_on_its_36_built_in_cells(tmp_path, capsys):
    out = tmp_path / "shift.md"
    assert main([str(LEASE), "--a", "glm5-tp8,glm5-tp8-default", "--b", "glm5-tp8-warmup-5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text[:-1]  # printed with one newline more
    rows = [
        line.strip("|").split("|")
        for line in text.splitlines()
        if line.startswith("| A against") or line.startswith("| B against")
    ]
    # 3 runs before (two seed, one tradeoff default), 2 after: 3 + 1 + 6 pairs
    assert [r[0].strip() for r in rows].count(ACROSS) == 6 and len(rows) == 10
    for r in rows:
        cells, geomean = int(r[3]), float(r[4])
        low, high = (float(x) for x in r[5].split(","))
        assert cells == 36 and low <= geomean <= high
    assert "- A against B: 6 pairs" in text and "- B against B: 1 pair," in text


def test_a_lease_without_runs_of_a_side_or_a_sweep_on_both_sides_is_one_line_and_exit_2(capsys):
    assert main([str(LEASE), "--a", "glm5-tp8", "--b", "glm5-tp8-rounds-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "glm5-tp8-warmup-5" in err  # names the sweeps it has
    assert main([str(LEASE), "--a", "glm5-tp8", "--b", "glm5-tp8"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
