"""benchmarks/detection/calibration_vs_sweeps.py: the calibration's +2% effect per shape beside the median of
the head-to-head sweeps' paired B/A, counted apart either way."""

from benchmarks.detection.calibration_vs_sweeps import calibrated, leases, report, swept

CAL = """## Calibrated slowdowns
| M×N×K | mm µs | +2%: columns (mean effect, least pass) | +3%: columns (mean effect, least pass) | ladder |
|---|---:|---|---|---|
| 256×2048×6144 | 18.62 | 256 (1.0441, least 1.0400) | 256 (1.0441, least 1.0400) | 64: 0.998 |
| 16×768×6144 | 7.89 | 256 (1.0258) | 320 (1.0420) | 64: 1.011 |
| 64×2048×6144 | 9.10 | 320 (1.0251, settled 1.0213, least 1.0204) | 384 (1.0330, settled 1.0311, least 1.0302) | 64: 1.004 |
"""
H2H = """| sweep | M×N×K | mm µs | rounds (stop) | A/A B/A [95%] | flag | +pad B/A [95%] | ± | flag | +pad ratio of medians |
|---|---|---:|---|---|---|---|---:|---|---:|
| 1 | 16×768×6144 | 8.72 | 2 (target) | 0.9997 [0.9983, 1.0012] | - | 1.0212 [1.0197, 1.0227] | 0.14% | slower | 1.0170 |
| 1 | 256×2048×6144 | 17.72 | 3 (cap) | 1.0033 [0.9976, 1.0091] | - | 1.0029 [0.9922, 1.0137] | 1.08% | - | 0.9882 |
| 2 | 256×2048×6144 | 17.78 | 3 (cap) | 1.0001 [0.9964, 1.0038] | - | 1.0055 [0.9924, 1.0189] | 1.33% | - | 0.9899 |
| 3 | 256×2048×6144 | 17.80 | 2 (target) | 0.9986 [0.9967, 1.0005] | - | 1.0109 [1.0094, 1.0124] | 0.15% | - | 0.9965 |
"""


def test_both_formats_of_the_calibration_and_the_sweeps_median(tmp_path):
    assert calibrated(CAL) == {(256, 2048, 6144): 1.0441, (16, 768, 6144): 1.0258, (64, 2048, 6144): 1.0251}
    assert swept(H2H) == {(16, 768, 6144): 1.0212, (256, 2048, 6144): 1.0055}
    (tmp_path / "slowdowns-calibrate-h100-x.md").write_text(CAL)
    (tmp_path / "slowdowns-h2h-h100-x.md").write_text(H2H)
    (tmp_path / "slowdowns-h2h-h100-nocal.md").write_text(H2H)  # no calibration stored: left out
    found = leases(tmp_path)
    assert [tag for tag, _, _ in found] == ["h100-x"]
    text = report(found, 0.01)
    assert "| h100-x | 1.026 / 1.021 | **1.044 / 1.006** |" in text
    assert "16×768 0 / 0; 256×2048 1 / 0" in text
