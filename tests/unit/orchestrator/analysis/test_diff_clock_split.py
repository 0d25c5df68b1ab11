"""diff's clock split (issue 40): B/A = clock x work from the SM clock read in the stream. A power-capped
case whose time moves with the clock from round to round, but whose cycles per call hold still, is
judged on its work; a slower clock is still slower, the split only names why."""

from __future__ import annotations

from orchestrator.views.diffnotes import compare_records
from worker.contract.schema import CaseRecord, CaseSpec, RoundStats, Stats

SPEC = CaseSpec(backend="torch-bf16", m=1024, n=2048, k=6144)


def record(rounds: list[tuple[float, float]], nvml: int = 1980) -> CaseRecord:
    """A case timed in rounds of (µs, in-stream MHz), each round's samples tight around its median."""
    samples = [us * (1 + d) for us, _ in rounds for d in (-0.001, 0.0, 0.001)]
    stats = Stats(
        method="cuda-graph",
        median_us=sorted(us for us, _ in rounds)[len(rounds) // 2],
        p10_us=1,
        p90_us=1,
        mean_us=1,
        stdev_us=0,
        n=len(samples),
        rel_ci=0.0,
        calls_per_sample=50,
        l2="cold",
        samples_us=samples,
        rounds=[
            RoundStats(median_us=us, n=3, rel_ci=0.002, sm_clock_stream_mhz=mhz, sm_clock_mhz=nvml)
            for us, mhz in rounds
        ],
    )
    return CaseRecord(case_id=SPEC.case_id, case=SPEC, status="ok", started_at="t", duration_s=0.0, timing=stats)


def power_capped(cycles: float, clocks: list[float]) -> CaseRecord:
    """Rounds at these clocks, each needing `cycles` per call within ±0.3% (what the H200 showed)."""
    return record([(cycles * (1 + d) / mhz, mhz) for mhz, d in zip(clocks, (-0.003, 0.0, 0.003))])


def test_a_3_percent_slower_kernel_is_seen_in_its_cycles_where_the_clock_hides_it_in_its_time():
    a = power_capped(56_000.0, [1283.0, 1450.0, 1607.0])
    b = power_capped(56_000.0 * 1.03, [1600.0, 1300.0, 1440.0])
    row = compare_records("k", a, b, 0.01)
    assert row.judged_on == "work" and row.verdict == "SLOWER"
    assert row.clock_bound and 1.015 < row.work_low < 1.03 < row.work_high < 1.045
    assert row.ci_low < 1.0 < row.ci_high  # the time alone could not say
    assert "judged on the work" in row.note and "× work 1.030" in row.note


def test_the_same_kernel_under_a_wandering_clock_is_not_flagged():
    a = power_capped(56_000.0, [1283.0, 1450.0, 1607.0])
    b = power_capped(56_000.0, [1600.0, 1300.0, 1440.0])
    row = compare_records("k", a, b, 0.01)
    assert row.verdict in ("SAME", "AMBIGUOUS") and row.judged_on == "time"


def test_a_slower_clock_is_still_slower_and_the_split_names_it():
    a = record([(30.0, 1600.0), (30.03, 1600.0), (29.97, 1600.0)])
    b = record([(31.5, 1523.8), (31.53, 1523.8), (31.47, 1523.8)])  # the same cycles at a 5% lower clock
    row = compare_records("k", a, b, 0.01)
    assert row.verdict == "SLOWER" and row.judged_on == "time"
    assert abs(row.clock_ratio - 1.05) < 0.001 and abs(row.work_ratio - 1.0) < 0.002
    assert "clock 1.050 (1524 vs 1600 MHz)" in row.note


def test_without_the_clock_in_the_stream_nothing_is_split():
    a = record([(10.0, 1500.0), (10.01, 1500.0)])
    b = record([(10.5, 1500.0), (10.49, 1500.0)]).model_copy()
    b.timing.rounds[0] = b.timing.rounds[0].model_copy(update={"sm_clock_stream_mhz": None})
    row = compare_records("k", a, b, 0.01)
    assert row.clock_ratio is None and row.judged_on == "time" and row.verdict == "SLOWER"


def light(us: float, drift: list[tuple[float, float]]) -> CaseRecord:
    """A light case over two rounds whose clock slid (the GPU warming over a sweep), its time with it,
    plus a little noise of its own: (clock, noise) per round."""
    return record([(us * 1850.0 / mhz * (1 + e), mhz) for mhz, e in drift])


def test_a_side_of_similar_cases_lends_two_round_cases_the_degrees_of_freedom_they_lack():
    from orchestrator.analysis.diff import work_prior

    drift_a, drift_b = [(1872.0, -0.002), (1855.0, 0.002)], [(1873.0, 0.003), (1846.0, -0.003)]
    side_a = [light(8.0 + i, drift_a) for i in range(8)]
    side_b = [light((8.0 + i) * 1.03, drift_b) for i in range(8)]
    alone = compare_records("k", side_a[0], side_b[0], 0.015)
    assert alone.verdict == "AMBIGUOUS"  # two rounds a side: t with 1-2 degrees of freedom
    priors = (work_prior(side_a), work_prior(side_b))
    row = compare_records("k", side_a[0], side_b[0], 0.015, priors=priors)
    assert row.verdict == "SLOWER" and row.judged_on == "work"
    assert 1.015 < row.work_low < 1.03 < row.work_high


def test_a_moderated_spread_never_turns_an_identical_kernel_into_a_finding():
    from orchestrator.analysis.diff import work_prior

    drift_a, drift_b = [(1872.0, -0.002), (1855.0, 0.002)], [(1873.0, 0.003), (1846.0, -0.003)]
    side_a = [light(8.0 + i, drift_a) for i in range(8)]
    side_b = [light(8.0 + i, drift_b) for i in range(8)]
    priors = (work_prior(side_a), work_prior(side_b))
    for a, b in zip(side_a, side_b):
        assert compare_records("k", a, b, 0.015, priors=priors).verdict in ("SAME", "AMBIGUOUS")


def test_a_side_of_fewer_than_three_cases_has_no_prior():
    from orchestrator.analysis.diff import work_prior

    assert work_prior([light(8.0, [(1872.0, 0.0), (1855.0, 0.001)])] * 2) is None


def two_level(levels: list[float]) -> CaseRecord:
    """A cell that runs at two levels from round to round at one clock (the H100's bf16 128×2048): each
    round's cycles at the level it drew."""
    return record([(us, 1875.0) for us in levels])


def test_a_cell_at_two_levels_is_not_lent_the_spread_of_the_run_s_steady_cases():
    """One identical kernel, each side drawing the slow level in one round of three: the run's steady
    cases would lend it a spread it does not have (its own is 40 times theirs), and its work would read
    SLOWER; not moderated, it is not judged (the false flags of docs/COMPARING.md, "Moderated")."""
    from orchestrator.analysis.diff import hypervariable, work_per_round, work_prior

    steady = [light(8.0 + i, [(1872.0, -0.002), (1855.0, 0.002), (1860.0, 0.0)]) for i in range(8)]
    a, b = two_level([14.59, 15.79, 14.59]), two_level([15.72, 14.47, 15.78])
    priors = (work_prior(steady), work_prior(steady))
    assert hypervariable(work_per_round(a.timing), priors[0]) and hypervariable(work_per_round(b.timing), priors[1])
    row = compare_records("k", a, b, 0.015, priors=priors)
    assert row.verdict in ("SAME", "AMBIGUOUS") and row.work_low < 1.0 < row.work_high
    # a steady case of the same run is still moderated: within F's 99% point of the prior
    assert not hypervariable(work_per_round(steady[0].timing), priors[0])


def test_hypervariable_needs_a_prior_and_two_rounds():
    from orchestrator.analysis.diff import hypervariable

    assert not hypervariable([27.4, 29.5, 27.3], None)
    assert not hypervariable([27.4], 1e-6)
    assert hypervariable([27.4, 29.5, 27.3], 1e-6)
    assert not hypervariable([27.40, 27.41, 27.39], 1e-6)
