"""Verdicts from rounds, table-driven on synthetic records: an interval from the variation between a
case's rounds (not between consecutive samples of one run), and UNSTABLE when the environment moved as
much as the effect."""

from __future__ import annotations

import pytest

from orchestrator.analysis import diff as judge
from orchestrator.views.diffnotes import compare_records
from worker.contract.schema import CaseRecord, CaseSpec, RoundStats
from worker.contract.stats import combine_rounds, summarize

CASE = CaseSpec(backend="torch-bf16", m=1024, n=2048, k=6144, label="syn")
THRESHOLD = 0.03


def record(
    medians: list[float],
    *,
    clock=None,
    load=None,
    steal=None,
    throttle=(),
    gpu_processes=None,
    samples_per_round=40,
    within=0.002,
) -> CaseRecord:
    """A case timed in len(medians) rounds; each round's samples sit tightly (±within) around its median."""
    rounds = []
    for med in medians:
        xs = [med * (1 + within * ((i % 9) - 4) / 4) for i in range(samples_per_round)]
        stats = summarize(xs, method="cuda-graph", calls_per_sample=100, l2="cold")
        one = RoundStats(
            median_us=stats.median_us,
            n=stats.n,
            rel_ci=stats.rel_ci,
            sm_clock_mhz=clock,
            load_per_core=load,
            steal_pct=steal,
            throttle_reasons=list(throttle),
            gpu_processes=gpu_processes,
        )
        rounds.append(stats.model_copy(update={"rounds": [one]}))
    return CaseRecord(
        case_id=CASE.case_id, case=CASE, status="ok", timing=combine_rounds(rounds), started_at="t", duration_s=1.0
    )


STEADY = [100.0, 100.8, 99.4, 100.3, 99.7]
VERDICTS = [
    # (A, B, verdict, words in the note)
    (record(STEADY), record([x * 1.002 for x in STEADY[::-1]]), "SAME", ""),
    (record(STEADY), record([x * 1.10 for x in STEADY]), "SLOWER", ""),
    (record(STEADY), record([x * 0.90 for x in STEADY]), "FASTER", ""),
    # Rounds that disagree by ±8% cannot confirm a 5% change, however tight each round's samples are:
    # the samples of one run alone would have called it SLOWER.
    (record([100, 108, 93, 104, 96]), record([105, 113, 98, 109, 101]), "AMBIGUOUS", ""),
    (
        record(STEADY, clock=1980),
        record([x * 1.10 for x in STEADY], clock=1755),
        "UNSTABLE",
        "SM clock A 1980 MHz, B 1755 MHz",
    ),
    (
        record(STEADY, clock=1980),
        record([x * 1.10 for x in STEADY], clock=1965),
        "SLOWER",
        "",
    ),  # clock moved 0.8%: not it
    (
        record(STEADY),
        record([x * 1.10 for x in STEADY], throttle=["sw_thermal"]),
        "UNSTABLE",
        "GPU throttled (sw_thermal)",
    ),
    (
        record(STEADY, load=0.2),
        record([x * 1.10 for x in STEADY], load=1.4),
        "UNSTABLE",
        "CPU load per core A 0.20, B 1.40",
    ),
    (record(STEADY, load=0.2), record([x * 1.10 for x in STEADY], load=0.3), "SLOWER", ""),
    (record(STEADY, steal=0.0), record([x * 0.9 for x in STEADY], steal=6.5), "UNSTABLE", "CPU steal 6.5%"),
    (
        record(STEADY, gpu_processes=0),
        record([x * 1.1 for x in STEADY], gpu_processes=2),
        "UNSTABLE",
        "2 other processes on the GPU",
    ),
]


@pytest.mark.parametrize("a, b, verdict, words", VERDICTS)
def test_verdict_from_rounds(a, b, verdict, words):
    diff = compare_records("k", a, b, THRESHOLD)
    assert diff.verdict == verdict, diff
    assert words in diff.note
    assert diff.ci_low <= diff.ratio <= diff.ci_high


@pytest.mark.parametrize(
    "a, b, environment",
    [
        (record(STEADY, clock=1980), record([x * 1.10 for x in STEADY], clock=1755), judge.ENV_SM_CLOCK),
        (record(STEADY), record([x * 1.10 for x in STEADY], throttle=["sw_thermal"]), judge.ENV_THROTTLED),
        (record(STEADY, load=0.2), record([x * 1.10 for x in STEADY], load=1.4), judge.ENV_CPU_LOAD),
        (record(STEADY, steal=0.0), record([x * 0.9 for x in STEADY], steal=6.5), judge.ENV_CPU_STEAL),
        (
            record(STEADY, gpu_processes=0),
            record([x * 1.1 for x in STEADY], gpu_processes=2),
            judge.ENV_GPU_PROCESSES,
        ),
        (record(STEADY, load=0.2), record([x * 1.10 for x in STEADY], load=0.3), None),
    ],
)
def test_the_environment_that_moved_is_a_code_with_its_numbers_apart_from_its_words(a, b, environment):
    diff = judge.compare_records("k", a, b, THRESHOLD)
    assert diff.note == ""  # the words are the view's (views/diffnotes.py)
    moved = [f.facts["moved"] for f in diff.findings if f.code == judge.NOTE_ENVIRONMENT]
    assert [m.code for m in moved] == ([environment] if environment else [])
    if environment == judge.ENV_SM_CLOCK:
        assert moved[0].facts == {"a_mhz": 1980.0, "b_mhz": 1755.0}


def test_a_rows_findings_are_codes_in_the_order_its_note_words_them():
    a, b = record(STEADY), record([x * 1.10 for x in STEADY])
    one_round = lambda r: r.model_copy(update={"timing": r.timing.model_copy(update={"rounds": r.timing.rounds[:1]})})  # noqa: E731
    diff = judge.compare_records("k", one_round(a), b.model_copy(update={"complete": False}), THRESHOLD)
    assert [f.code for f in diff.findings] == [judge.NOTE_INCOMPLETE, judge.NOTE_ONE_ROUND]
    assert diff.findings[0].facts == {"side": "B", "rounds": 5} and "findings" not in diff.as_dict()
    assert [f.code for f in judge.compare_records("k", a, None, THRESHOLD).findings] == [judge.NOTE_ONLY_IN]
    failed = b.model_copy(update={"status": "failed", "timing": None})
    (not_ok,) = judge.compare_records("k", a, failed, THRESHOLD).findings
    assert not_ok.code == judge.NOTE_NOT_OK and not_ok.facts["b"] == "failed" and not_ok.facts["b_integrity"] == []
    assert judge.compare_records("k", a, a, THRESHOLD, same_run=True).findings == []
    assert [f.code for f in judge.compare_records("k", a, a, THRESHOLD).findings] == [judge.NOTE_SAME_MEASUREMENT]


def test_within_run_samples_alone_would_have_cried_wolf():
    """The same AMBIGUOUS pair, judged the old way (one round of all samples), reads as a confirmed change:
    why intervals come from rounds."""
    a, b = record([100, 108, 93, 104, 96]), record([105, 113, 98, 109, 101])
    one_round = lambda r: r.model_copy(update={"timing": r.timing.model_copy(update={"rounds": r.timing.rounds[:1]})})  # noqa: E731
    old = compare_records("k", one_round(a), one_round(b), THRESHOLD)
    assert "one round" in old.note and old.verdict == "SLOWER"


def test_combined_rounds_keep_every_round_and_report_their_spread():
    r = record([100.0, 110.0, 90.0])
    assert r.timing.median_us == pytest.approx(100.0, rel=1e-3) and len(r.timing.rounds) == 3
    assert r.timing.n == 120 and 0.1 < r.timing.rel_ci < 0.5  # t(2) interval of three rounds 10% apart: wide
