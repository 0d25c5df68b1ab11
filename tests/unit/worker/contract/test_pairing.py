"""The paired interval of worker/contract/pairing.py (issue 40): the wider of the scatter between and within
rounds, and a pair of two rounds borrowing the run's between-round spread."""

from __future__ import annotations

import math

import pytest

from worker.contract import pairing


def test_the_paired_interval_takes_the_wider_of_between_and_within_round_scatter():
    tight = [[0.02 + 0.001 * ((i % 3) - 1) for i in range(30)] for _ in range(3)]
    iv = pairing.pair_interval(tight)
    assert iv.ratio == pytest.approx(math.exp(0.02), rel=1e-3) and iv.rounds == 3 and iv.pairs == 90
    assert iv.half_width < 0.001
    apart = [[0.0] * 30, [0.04] * 30]  # rounds disagree: t with 1 degree of freedom
    wide = pairing.pair_interval([[x + 1e-4 * (i % 2) for i, x in enumerate(r)] for r in apart])
    assert wide.low < 1.0 < wide.high and wide.half_width > 0.1
    assert pairing.pair_interval([[0.01, 0.02] * 2]) is None  # fewer than 3 twos: no interval
    # a place that reads 1% fast, alternating with the order: the twos cancel it
    placed = [[0.02 + (0.01 if i % 2 else -0.01) for i in range(20)]]
    assert pairing.pair_interval(placed).ratio == pytest.approx(math.exp(0.02))


def test_a_pair_of_two_rounds_borrows_the_runs_between_round_spread():
    from worker.contract.pairing import pair_interval

    # two rounds whose estimates differ by 0.4%: t with 1 degree of freedom makes that about ±2.5%
    rounds = [[0.02 + 0.0005 * (-1) ** i for i in range(12)], [0.024 + 0.0005 * (-1) ** i for i in range(12)]]
    alone = pair_interval(rounds)
    assert alone.half_width > 0.02
    moderated = pair_interval(rounds, prior=0.001**2)
    assert moderated.half_width < 0.006 and moderated.low > 1.01  # a ~2.2% effect, sure
    assert abs(moderated.ratio - alone.ratio) < 1e-12  # the estimate is the same; only its interval moves
    noisy = pair_interval(rounds, prior=0.02**2)  # a run whose pairs move 2% between rounds
    assert noisy.half_width > alone.half_width / 4 and noisy.low < 1.0
