"""Physics as a check (issue 41): a case timed faster than its GPU's speed of light, beyond the margin,
is `impossible` (worker/check/physics.py); an honest one never is. The numbers are the H200's: its calibration
(benchmarks/results/calibration-h200.json) and the version-keyed cache of issue 41 (1.12 / 1.37 / 3.46 µs
for 16 / 256 / 1024 x 2048 x 6144 bf16: 534%, 591% and 934% of speed of light)."""

from __future__ import annotations

import pytest
from support.h200 import CAL, H200

from worker.check import integrity
from worker.check.physics import MARGIN, impossible, roofs
from worker.contract.metrics import gemm_metrics, moe_metrics


def work(m: int, n: int = 2048, k: int = 6144, family: str = "bf16"):
    """(flops, bytes, speed of light in µs at CAL) of an M x N x K GEMM, as the runner counts them."""
    metrics = gemm_metrics(m, n, k, family, 1.0, H200, calibration=CAL)
    return metrics.flops, metrics.bytes, metrics.sol_us


@pytest.mark.parametrize("m, median_us, pct", [(16, 1.12, 534), (256, 1.37, 591), (1024, 3.46, 934)])
def test_the_version_keyed_cache_of_issue_41_is_impossible_with_its_numbers_named(m, median_us, pct):
    flops, nbytes, _ = work(m)
    found = impossible(flops, nbytes, "bf16", median_us, CAL, H200)
    assert found is not None and found.check == "impossible" and found.check in integrity.CHECKS
    text = str(found)
    shown = round(100 * max(flops / CAL.tflops["bf16"] / 1e12, nbytes / CAL.tb_s / 1e12) * 1e6 / median_us)
    assert abs(shown - pct) <= 3  # the issue's medians are rounded to 3 digits
    assert text.startswith(f"integrity (impossible): {median_us:.2f} µs is {shown}% of this GPU's speed of light")
    assert "calibrated 797 TFLOPS bf16 / calibrated 4.24 TB/s copy" in text and "margin 50%" in text


def test_the_reason_reads_as_a_sentence_with_the_speed_of_light_it_was_held_against():
    flops, nbytes, sol = work(1024)
    assert sol == pytest.approx(32.3, abs=0.05)  # math-bound: 25.8 GFLOP at 797 TFLOPS
    assert impossible(flops, nbytes, "bf16", 3.46, CAL, H200).text == (
        "3.46 µs is 934% of this GPU's speed of light (32.31 µs for 25.8 GFLOP and 41.9 MB at the calibrated "
        "797 TFLOPS bf16 / calibrated 4.24 TB/s copy; margin 50%): faster than the hardware can go, not a result"
    )


@pytest.mark.parametrize("m", [16, 256, 1024])
@pytest.mark.parametrize("pct", [50, 81, 95, 100, 134, 149])
def test_honest_speeds_pass_up_to_the_margin(m, pct):
    """81%: the best settled honest kernels on the H200; 94-95%: the best at the burst clock; 134%: the
    H200's top clock against its power-limited calibration, the most any honest kernel could reach."""
    flops, nbytes, sol = work(m)
    assert impossible(flops, nbytes, "bf16", sol * 100 / pct, CAL, H200) is None


@pytest.mark.parametrize("m", [16, 1024])
def test_just_beyond_the_margin_is_impossible(m):
    flops, nbytes, sol = work(m)
    assert impossible(flops, nbytes, "bf16", sol / (1 + MARGIN) * 0.99, CAL, H200) is not None
    assert impossible(flops, nbytes, "bf16", sol / (1 + MARGIN) * 1.01, CAL, H200) is None


def test_memory_bound_cases_are_held_to_the_memory_roof():
    """The decode GEMM (16x2048x6144) is memory-bound: its speed of light is its bytes at the copy
    bandwidth (6.0 µs), far above its math (0.5 µs); 1.12 µs passes the math roof and fails this one."""
    flops, nbytes, sol = work(16)
    assert sol == pytest.approx(nbytes / 4.2394e12 * 1e6, rel=1e-4) and sol > 10 * flops / 797.5e12 * 1e6
    assert impossible(flops, nbytes, "bf16", 1.12, CAL, H200) is not None


def test_hot_l2_timing_is_held_to_the_math_roof_alone():
    """Hot L2 serves operands from L2, faster than DRAM: the memory roof does not bound it, and the
    reason says so; the math roof still does."""
    flops, nbytes, _ = work(16)
    assert impossible(flops, nbytes, "bf16", 1.12, CAL, H200, l2="hot") is None
    flops, nbytes, _ = work(1024)
    found = impossible(flops, nbytes, "bf16", 3.46, CAL, H200, l2="hot")
    assert found is not None and "calibrated 797 TFLOPS bf16; hot L2: the math roof alone" in found.text
    assert "TB/s" not in found.text


def test_without_a_calibration_the_datasheet_peaks_are_used_and_named():
    flops, nbytes, _ = work(1024)
    found = impossible(flops, nbytes, "bf16", 3.46, None, H200)
    assert found is not None and "at the datasheet 989 TFLOPS bf16 / datasheet 4.80 TB/s" in found.text
    assert "calibrated" not in found.text
    sol_sheet = max(flops / 989.4e12, nbytes / 4.8e12) * 1e6
    assert impossible(flops, nbytes, "bf16", sol_sheet * 0.95, None, H200) is None  # 105%: honest at boost


def test_a_family_the_calibration_lacks_takes_the_datasheet_for_that_roof_only():
    """fp4 cannot be calibrated on SM90 and the H200's datasheet has no fp4 figure: the memory roof alone,
    calibrated. A family with a datasheet figure but no calibrated one takes it, named."""
    tflops, tb_s, words = roofs("fp4", CAL, H200)
    assert tflops is None and tb_s == CAL.tb_s and words == "calibrated 4.24 TB/s copy"
    flops, nbytes, _ = work(16, family="fp4")
    assert impossible(flops, nbytes, "fp4", 0.5, CAL, H200) is not None
    no_fp8 = CAL.model_copy(update={"tflops": {"bf16": 797.5}})
    assert roofs("fp8", no_fp8, H200)[2] == "datasheet 1979 TFLOPS fp8 / calibrated 4.24 TB/s copy"


@pytest.mark.parametrize("device_name", [None, "", "cpu"])
def test_a_cpu_has_no_check(device_name):
    flops, nbytes, _ = work(1024)
    assert impossible(flops, nbytes, "bf16", 1e-3, CAL, device_name) is None
    assert impossible(flops, nbytes, "bf16", 1e-3, None, device_name) is None


def test_a_gpu_with_neither_calibration_nor_datasheet_is_not_judged():
    flops, nbytes, _ = work(1024)
    assert impossible(flops, nbytes, "bf16", 1e-3, None, "Some Future GPU") is None
    assert impossible(flops, nbytes, "bf16", 1e-3, CAL, "Some Future GPU") is not None  # its calibration is enough


@pytest.mark.parametrize("median_us", [0.0, -1.0, float("nan")])
def test_a_median_that_is_not_a_time_is_not_judged_here(median_us):
    flops, nbytes, _ = work(16)
    assert impossible(flops, nbytes, "bf16", median_us, CAL, H200) is None


def test_a_moe_layer_is_held_to_its_own_work():
    """All expert GEMMs of a layer: every active expert's weights read once (worker/contract/metrics.py moe_metrics)."""
    counts = [8, 0, 16, 8] * 64
    metrics = moe_metrics(counts, 2048, 6144, "bf16", 1.0, H200, calibration=CAL)
    assert impossible(metrics.flops, metrics.bytes, "bf16", metrics.sol_us * 1.05, CAL, H200) is None
    found = impossible(metrics.flops, metrics.bytes, "bf16", metrics.sol_us / 5, CAL, H200)
    assert found is not None and "500% of this GPU's speed of light" in found.text
