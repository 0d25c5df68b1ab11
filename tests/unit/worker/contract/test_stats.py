"""A timing's statistics (worker/contract/stats.py)."""

from __future__ import annotations

import pytest

from worker.contract.stats import median_ci, quantile, summarize


def test_timing_statistics():
    samples = [10.0, 11.0, 9.0, 10.5, 9.5, 10.0, 30.0]
    s = summarize(samples, method="x", calls_per_sample=1, l2="hot")
    assert s.median_us == 10.0 and s.n == 7 and s.samples_us == samples
    assert s.p10_us == pytest.approx(quantile(sorted(samples), 0.1))
    lo, hi = median_ci(sorted(samples))
    assert lo <= s.median_us <= hi
    assert s.rel_ci == pytest.approx((hi - lo) / 2 / 10.0)
    tight = summarize([5.0] * 50, method="x", calls_per_sample=1, l2="hot")
    assert tight.rel_ci == 0.0
