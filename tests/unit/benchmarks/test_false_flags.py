"""benchmarks/detection/false_flags.py: which stored sweeps pair up as A/A, and its report over a real lease."""

from pathlib import Path

import pytest

from benchmarks.detection.false_flags import main, pairs_of

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def test_sweeps_of_one_file_pair_each_with_each_and_slowed_ones_with_their_base():
    runs = [
        "20261205-1-glm5-tp8-a",
        "20261205-2-glm5-tp8-b",
        "20261205-3-see-h2h-a",
        "20261205-4-see-h2h-b",
        "20261205-5-see-h2h-c",
        *[f"20261205-6{i}-see-across-{i}" for i in range(9)],
        "20261205-7-jit-x",
    ]
    pairs = pairs_of(runs)
    assert pairs["A/A seed"] == [("20261205-1-glm5-tp8-a", "20261205-2-glm5-tp8-b")]
    assert len(pairs["A/A h2h"]) == 3
    base = [f"20261205-6{i}-see-across-{i}" for i in range(3)]
    assert pairs["A/A across"] == [(base[0], base[1]), (base[0], base[2]), (base[1], base[2])]
    # base i against slowed i, for each padding in turn
    assert pairs["slowed across"][0] == (base[0], "20261205-63-see-across-3")
    assert pairs["slowed across"][3] == (base[0], "20261205-66-see-across-6")
    assert len(pairs["slowed across"]) == 6
    # head-to-head sweep i against sweep j's +pad kernel, both ways
    assert len(pairs["slowed h2h"]) == 6 and ("20261205-4-see-h2h-b", "20261205-3-see-h2h-a") in pairs["slowed h2h"]
    assert all("jit" not in a + b for kind in pairs.values() for a, b in kind)


def test_a_second_across_step_pairs_its_own_base_and_slowed_sweeps():
    runs = [f"20261206-{i:02d}-see-across-{i}" for i in range(18)]
    pairs = pairs_of(runs)
    assert len(pairs["A/A across"]) == 6 and (runs[9], runs[10]) in pairs["A/A across"]
    assert len(pairs["slowed across"]) == 12 and (runs[9], runs[12]) in pairs["slowed across"]
    # never a second step's base taken for a slowed sweep of the first
    assert all(not (a in runs[:9]) ^ (b in runs[:9]) for a, b in pairs["slowed across"])


def test_the_report_over_a_stored_lease_counts_every_cell_and_lists_each_false_flag(tmp_path, capsys):
    lease = RESULTS / "slowdowns-seed-h100-s18b.runs.tar.xz"
    out = tmp_path / "ff.md"
    assert main([str(lease), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text
    rows = {}
    for line in text.split("Every A/A cell flagged:")[0].splitlines():
        if line.startswith("| slowdowns-seed-h100-s18b |"):
            parts = [part.strip() for part in line.strip("|").split("|")]
            rows[parts[1]] = parts[2:]
    assert set(rows) == {"time alone", "with anchor"}
    # 2 seed sweeps x 48 ok cases; 3 h2h sweeps, 3 pairs x 36; 3 base sweeps, 3 pairs x 12; 6 slowed pairs
    # x 12; 6 ordered pairs of h2h sweeps x 12 +pad rows
    for cells in rows.values():
        assert [c.split(",")[0] for c in cells] == ["48", "108", "36", "72", "72"]
    # the anchor (mm, beside the +pad kernel in each process) flags more of the real +2% than the time alone
    slowed = {j: int(cells[4].split(",")[1]) for j, cells in rows.items()}
    assert slowed["with anchor"] > slowed["time alone"]
    false = [line for line in text.split("Every A/A cell flagged:")[1].splitlines() if line.startswith("| slowdowns")]
    flagged = sum(int(n) for cells in rows.values() for c in cells[:3] for n in c.split(",")[1:])
    assert len(false) == flagged


def test_a_missing_archive_is_one_line_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "nope.runs.tar.xz")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_timing_variant_s_sweeps_pair_only_among_themselves():
    runs = [
        "20261206-1-see-across-a",
        "20261206-2-see-across-b",
        "20261206-3-see-across-fresh-inputs-false-c",
        "20261206-4-see-across-fresh-inputs-false-d",
    ]
    assert pairs_of(runs)["A/A across"] == [(runs[0], runs[1])]
    assert pairs_of(runs, "fresh-inputs-false")["A/A across"] == [(runs[2], runs[3])]


def test_other_anchor_spreads_are_judgments_of_their_own_and_a_bad_list_is_refused(tmp_path, capsys):
    lease = RESULTS / "slowdowns-seed-h100-s18b.runs.tar.xz"
    assert main([str(lease), "--anchor-sd", "0,0.003"]) == 0
    text = capsys.readouterr().out.split("Every A/A cell flagged:")[0]
    rows = {}
    for line in text.splitlines():
        if line.startswith("| slowdowns-seed-h100-s18b |"):
            parts = [part.strip() for part in line.strip("|").split("|")]
            rows[parts[1]] = int(parts[6].split(",")[1])
    assert set(rows) == {"time alone", "with anchor, spread 0", "with anchor"}
    # no spread between processes: narrower intervals, at least as many of the real +2% flagged
    assert rows["with anchor, spread 0"] >= rows["with anchor"] >= rows["time alone"]
    with pytest.raises(SystemExit) as stop:
        main([str(lease), "--anchor-sd", "0.003,x"])
    assert stop.value.code == 2
    assert "comma-separated" in capsys.readouterr().err


def test_a_flag_whose_anchor_moved_the_same_way_says_so(tmp_path, capsys):
    # s28a: one head-to-head process ran mm, mm_again and mm_pad at 256x2048 3-4% slower than the others;
    # its pairs are FASTER on their time, and the anchor (mm) beside them moved the same way
    assert main([str(RESULTS / "slowdowns-seed-h100-s28a.runs.tar.xz")]) == 0
    text = capsys.readouterr().out
    false = [line for line in text.split("Every A/A cell flagged:")[1].splitlines() if line.startswith("| slowdowns")]
    moved = [line for line in false if "moved with it, the anchor's own B/A" in line]
    assert moved and all("| with anchor | A/A h2h |" in line and "| 256×2048 | FASTER |" in line for line in moved)
    assert f"- with anchor: {len(moved)} of its 10 flags, the anchor itself moved the same way" in text


def test_the_seed_sweeps_fp8_cases_may_be_judged_against_torch_fp8(capsys):
    # s29b: six seed sweeps; against torch-fp8 its flashinfer-fp8-cublas cases are anchored (the family rule
    # kept them off torch-bf16), and the anchor adds flags at 64 and 256x2048 that the time alone does not make
    lease = str(RESULTS / "slowdowns-seed-h100-s29b.runs.tar.xz")
    assert main([lease, "--seed-anchor", "torch-fp8"]) == 0
    text = capsys.readouterr().out
    assert "(torch-fp8 in the seed sweeps;" in text
    false = [line for line in text.split("Every A/A cell flagged:")[1].splitlines() if line.startswith("| slowdowns")]
    added = [line for line in false if "| with anchor | A/A seed | flashinfer-fp8-cublas |" in line]
    assert added and all("| anchor |" in line for line in added)
    assert not any("| time alone | A/A seed |" in line for line in false)
    assert main([lease]) == 0  # against torch-bf16 (the default) the same sweeps flag nothing
    assert "| with anchor | A/A seed |" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main([lease, "--seed-anchor", "reference-nvfp4"])  # an oracle is no anchor
    assert stop.value.code == 2
