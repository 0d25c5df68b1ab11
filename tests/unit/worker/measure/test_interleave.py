"""Head-to-head timing without a GPU (issue 40): the interleaved order, settling and sampling of
worker/measure/interleave.py on stand-in graphs whose speed follows a shared simulated clock."""

from __future__ import annotations

import math
import random

from support.wanderingclock import FakeGraph, SharedGpu

from worker.contract import pairing
from worker.contract.schema import TimingOptions
from worker.measure import interleave


def test_cycles_alternate_their_order_so_no_member_is_always_first():
    assert [interleave.cycle_order(2, c) for c in range(4)] == [[0, 1], [1, 0], [1, 0], [0, 1]]
    assert [interleave.cycle_order(3, c) for c in range(4)] == [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1]]
    # over each two, every pair of members trades places
    for c in range(0, 12, 2):
        first, second = interleave.cycle_order(3, c), interleave.cycle_order(3, c + 1)
        for a in range(3):
            for b in range(a + 1, 3):
                assert (first.index(a) < first.index(b)) != (second.index(a) < second.index(b))


def test_an_interleaved_pair_sees_a_2_percent_difference_that_a_wandering_clock_hides_from_each_alone():
    random.seed(1)
    gpu = SharedGpu(seed=2, wander=0.01)
    order: list = []
    a, b = FakeGraph(gpu, 10.0, order, "a"), FakeGraph(gpu, 10.2, order, "b")
    opts = TimingOptions(settle_ms=1.0, min_samples=10, max_samples=40, budget_s=5.0)
    timed = interleave.time_group([a, b], opts, floor_ms=1.0)
    sa, sb = timed.stats
    assert sa.n == sb.n and sa.n >= 10  # one sample of each per cycle
    assert order[:4] == ["a", "b", "b", "a"]
    assert sa.n % 2 == 0  # whole twos
    iv = pairing.pair_interval([[math.log(y / x) for x, y in zip(sa.samples_us, sb.samples_us)]])
    assert iv.low > 1.01 and iv.high < 1.03  # 1.02, seen through a clock that moves ±15%
    assert timed.cycle_mhz == []  # no stamp kernel: no cycle clocks
