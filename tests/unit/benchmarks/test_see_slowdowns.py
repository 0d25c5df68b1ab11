"""benchmarks/detection/see_slowdowns.py: a timing variant's sweeps are named for it, and its stored runs
are found by that exact name; the calibration chooses a padding every pass read at the target."""

import argparse
from pathlib import Path

import pytest
import yaml

from benchmarks.detection.see_slowdowns import (
    choose_confirmed,
    choose_pad,
    stored_runs,
    sweep_file,
    sweep_of,
    timing_setting,
    variant_name,
)


def test_a_variant_s_sweep_carries_its_timing_and_a_name_of_its_own(tmp_path):
    assert timing_setting("fresh_inputs=false") == ("fresh_inputs", False)
    assert timing_setting("round_target=0.01") == ("round_target", 0.01)
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        timing_setting("fresh_inputs")
    name = variant_name("see-across", {"fresh_inputs": False})
    assert name == "see-across-fresh-inputs-false" and variant_name("see-across", {}) == "see-across"
    doc = yaml.safe_load(
        sweep_file(tmp_path, name, [{"name": "mm", "file": "mm.py"}], {"fresh_inputs": False}).read_text()
    )
    assert doc["name"] == name and doc["timing"]["fresh_inputs"] is False and doc["timing"]["l2"] == "cold"


def test_stored_runs_match_the_sweep_name_exactly(tmp_path):
    for run in ("20261206-000001-see-across-ab12", "20261206-000002-see-across-fresh-inputs-false-cd34"):
        (tmp_path / run).mkdir()
    assert sweep_of("20261206-000001-see-across-ab12") == "see-across"
    assert [p.rsplit("/", 1)[-1] for p in stored_runs(tmp_path, "see-across")] == ["20261206-000001-see-across-ab12"]
    assert len(stored_runs(tmp_path, "see-across-fresh-inputs-false")) == 1


def test_a_padding_is_chosen_only_where_every_pass_read_the_target():
    # H200 64x2048 (session 16): 192 columns read 1.0199 on the mean, and the sweeps read that copy 1.010.
    passes = {64: [1.008, 1.010], 128: [1.016, 1.014], 192: [1.024, 1.016], 256: [1.021, 1.022], 320: [1.03, 1.025]}
    assert choose_pad(passes, 0.02) == 256
    assert choose_pad(passes, 0.025) == 320
    # None reaches: the padding whose slowest pass read the most, never one only a lucky pass read high.
    assert choose_pad({64: [1.001, 1.012], 128: [1.008, 1.009]}, 0.02) == 128


def test_a_padding_the_settled_reading_puts_below_the_target_is_passed_over():
    passes = {64: [1.012, 1.011], 128: [1.022, 1.021], 192: [1.031, 1.030], 256: [1.041, 1.040]}
    settled_reads = {128: 1.016, 192: 1.024, 256: 1.035}
    confirmed: dict[int, float] = {}
    assert choose_confirmed(passes, 0.02, settled_reads.__getitem__, confirmed) == 192
    assert confirmed == {128: 1.016, 192: 1.024} and passes[128] == [1.022, 1.021, 1.016]
    # Already confirmed for +2%: +3% reads only the paddings it has not confirmed yet.
    assert choose_confirmed(passes, 0.03, settled_reads.__getitem__, confirmed) == 256
    assert confirmed[256] == 1.035
    # Nothing confirms: the padding whose least reading is highest, once every candidate was read.
    assert choose_confirmed({64: [1.03], 128: [1.04]}, 0.02, lambda p: 1.01, {}) in (64, 128)


def test_the_copy_s_flags_are_counted_by_its_size_at_each_shape():
    from types import SimpleNamespace

    from benchmarks.detection.see_slowdowns import by_copy_size

    def row(m, ratio, flag):
        return {"m": m, "n": 2048, "mm_pad": SimpleNamespace(ratio=ratio), "mm_pad_flag": flag}

    rows = [
        row(16, 1.021, "slower"),
        row(16, 1.024, "slower"),
        row(256, 1.0005, "-"),  # one sweep read this shape's copy short; its median is still 1.05
        row(256, 1.06, "slower"),
        row(256, 1.05, "slower"),
        row(64, 1.01, "-"),
        {"m": 128, "n": 2048, "mm_pad": None, "mm_pad_flag": "not ok: failed"},
    ]
    line = by_copy_size(rows)
    assert "< 1.020: 0 of 1 (1 shapes)" in line
    assert "1.020–1.035: 2 of 2 (1 shapes)" in line
    assert "> 1.035: 2 of 3 (1 shapes)" in line


@pytest.mark.parametrize(
    "runs, chosen, message",
    [
        (18, 3, "expected 9 per across step (3 x 3: --repeat x settings), and --set 1..2"),
        (10, 1, "10 see-across runs"),
        (0, 1, "0 see-across runs"),
    ],
)
def test_across_stored_names_the_steps_it_holds_when_the_set_asked_for_is_not_there(tmp_path, runs, chosen, message):
    from benchmarks.detection.see_slowdowns import main

    for i in range(runs):
        (tmp_path / f"20261207-0{i:05d}-see-across-{i:04x}").mkdir()
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
        main(["across", "--stored", "--runs-dir", str(tmp_path), "--set", str(chosen)])


def test_h2h_stored_judges_every_sweep_or_the_set_asked_for(tmp_path, monkeypatch):
    from benchmarks.detection import see_slowdowns

    names = [f"20261207-0{i:05d}-see-h2h-{i:04x}" for i in range(6)]
    for n in names:
        (tmp_path / n).mkdir()
    judged = []

    def records_of(run_dir):
        judged.append(Path(run_dir).name)
        return {}, None

    monkeypatch.setattr(see_slowdowns, "records_of", records_of)
    see_slowdowns.main(["h2h", "--stored", "--runs-dir", str(tmp_path)])
    assert judged == names
    judged.clear()
    see_slowdowns.main(["h2h", "--stored", "--runs-dir", str(tmp_path), "--set", "2"])
    assert judged == names[3:]
    with pytest.raises(SystemExit, match=r"6 see-h2h runs .* expected 3 per set, and --set 1\.\.2"):
        see_slowdowns.main(["h2h", "--stored", "--runs-dir", str(tmp_path), "--set", "3"])


def test_set_without_stored_is_refused(tmp_path, capsys):
    from benchmarks.detection.see_slowdowns import main

    with pytest.raises(SystemExit):
        main(["h2h", "-i", "hosts.yaml", "--runs-dir", str(tmp_path), "--set", "2"])
    assert "--set picks among stored runs: it needs --stored" in capsys.readouterr().err
