"""The SM clock read in the stream (worker/measure/streamclock.py): the stamp kernel's arithmetic."""

from __future__ import annotations

import pytest

from worker.measure import streamclock


def test_the_stamp_arithmetic_is_cycles_over_nanoseconds_per_sm_from_its_earliest_block():
    first = [(0, 1_000, 5_000), (0, 1_400, 9_999), (1, 1_000, 7_000)]
    second = [(0, 2_001_000, 3_005_000), (1, 2_001_000, 3_207_000), (2, 5, 5)]  # SM 2 only in one stamp
    mhz = sorted(streamclock.frequencies_mhz(first, second))
    assert mhz == pytest.approx([1500.0, 1600.0])
    assert streamclock.window_mhz(first, second) == pytest.approx(1550.0)
    assert streamclock.window_mhz(first, []) is None
