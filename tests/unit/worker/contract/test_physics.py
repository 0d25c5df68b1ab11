"""Physics judged again outside the kernel's process (worker/contract/physics.py recheck): the controller
judges a user kernel's record against the host's facts, never more strictly than the worker did. The
numbers are the H200's (tests/support/h200.py)."""

from __future__ import annotations

import pytest
from support.h200 import h200_facts

from worker.contract.physics import recheck
from worker.contract.schema import CaseSpec, RoundStats
from worker.contract.stats import summarize

# -- judged again outside the kernel's process (worker/contract/physics.py recheck) -------------------
USER_FILE = "a" * 64


def timed(median_us: float, paired: list | None = None):
    """A timing of one round at `median_us` (with its paired samples, when given)."""
    stats = summarize([median_us] * 5, method="cuda-graph", calls_per_sample=100, l2="cold")
    one = RoundStats(median_us=median_us, n=5, rel_ci=0.0, paired_us=paired)
    return stats.model_copy(update={"rounds": [one]})


def test_a_user_kernel_is_held_to_the_family_that_allows_the_most():
    """Its FAMILY is its own code: outside its process it is held to fp8's roofs on the H200 (17.6 µs at
    1024x2048x6144, below bf16's 32.3), so a bf16 kernel the worker let through never fails here."""
    user = CaseSpec(backend="mine", m=1024, n=2048, k=6144, kernel_sha256=USER_FILE)
    assert recheck(user, timed(12.0), h200_facts()) is None  # 269% of bf16's, 147% of fp8's speed of light
    why = recheck(user, timed(3.46), h200_facts())
    assert why is not None and why.startswith("3.46 µs is 509% of this GPU's speed of light (17.60 µs")
    assert "at the calibrated 1464 TFLOPS fp8 / calibrated 4.24 TB/s copy" in why
    builtin = CaseSpec(backend="torch-bf16", m=1024, n=2048, k=6144)
    assert "calibrated 797 TFLOPS bf16" in recheck(builtin, timed(12.0), h200_facts())  # a built-in: its own


@pytest.mark.parametrize("cc, judged", [("10.0", False), ("9.0", True)])
def test_fp4_allows_more_only_where_the_gpu_runs_it(cc, judged):
    """A B200's datasheet: 3 µs is 191% of fp8's speed of light at 1024x2048x6144, 95% of fp4's; a user's
    FP4 kernel runs from compute capability 10.0 only."""
    user = CaseSpec(backend="mine", m=1024, n=2048, k=6144, kernel_sha256=USER_FILE)
    facts = h200_facts(gpu_name="NVIDIA B200", compute_capability=cc, calibration=None)
    assert (recheck(user, timed(3.0), facts) is not None) is judged


def test_the_fastest_figure_of_a_record_is_judged():
    """A forged record may hide its number anywhere a figure is read from: a round's paired samples too."""
    user = CaseSpec(backend="mine", m=1024, n=2048, k=6144, kernel_sha256=USER_FILE)
    assert recheck(user, timed(40.0, paired=[40.0] * 5), h200_facts()) is None
    why = recheck(user, timed(40.0, paired=[1.0] * 5), h200_facts())
    assert why is not None and why.startswith("1.00 µs is 1760%")


def test_without_a_gpu_to_judge_by_nothing_is_judged_again():
    user = CaseSpec(backend="mine", m=1024, n=2048, k=6144, kernel_sha256=USER_FILE)
    assert recheck(user, timed(1e-3), h200_facts(device="cpu", gpu_name=None, calibration=None)) is None
    assert recheck(user, timed(1e-3), None) is None and recheck(user, None, h200_facts()) is None
