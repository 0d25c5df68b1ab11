"""diff against an anchor timed beside each case: the ratio of the two ratios settles a change the time
leaves AMBIGUOUS when the GPU state moved both, only where it agrees with the case's own interval, and
never where what the anchor depends on differs between the sides."""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.analysis import diff as judge
from orchestrator.analysis.diff import Side
from orchestrator.runs.slots import SlotData
from orchestrator.views.diffnotes import compare_sides
from worker.contract.schema import CaseRecord, CaseSpec, FactsRecord, RoundStats, Stats, TimingOptions

THRESHOLD = 0.015
SHAPE = dict(m=64, n=2048, k=6144)


def record(backend: str, medians: list[float], opts: TimingOptions, m=SHAPE["m"], throttle=()) -> CaseRecord:
    """A case timed in rounds of these medians, each round one interleaved timing of 12 cycles (pair id
    p<i>) whose samples sit within ±0.2% of its median."""
    spec = CaseSpec(backend=backend, timing=opts, **{**SHAPE, "m": m})
    per_round = [[us * (1 + 0.001 * ((i % 5) - 2)) for i in range(12)] for us in medians]
    rounds = [
        RoundStats(median_us=us, n=len(s), rel_ci=0.002, pair_id=f"p{i}", paired_us=s, throttle_reasons=list(throttle))
        for i, (us, s) in enumerate(zip(medians, per_round))
    ]
    stats = Stats(
        method="cuda-graph",
        median_us=statistics.median(medians),
        p10_us=min(medians),
        p90_us=max(medians),
        mean_us=statistics.fmean(medians),
        stdev_us=statistics.stdev(medians),
        n=sum(map(len, per_round)),
        rel_ci=0.002,
        calls_per_sample=8,
        l2="cold",
        samples_us=[x for r in per_round for x in r],
        rounds=rounds,
    )
    return CaseRecord(case_id=spec.case_id, case=spec, status="ok", started_at="t", duration_s=0.0, timing=stats)


def facts(torch="2.11.0") -> FactsRecord:
    return FactsRecord(
        hostname="h", python="3.12", platform="linux", worker_version="1", device="cuda", gpu_name="H100", torch=torch
    )


def side(
    label: str,
    anchor_us: list[float],
    effect: float,
    opts=None,
    torch="2.11.0",
    tmp=Path("."),
    worker="w1",
    ms=(SHAPE["m"],),
    kernel_us=None,
    throttle=(),
    anchor="torch-bf16",
    kernel="mm",
) -> Side:
    """One host's run: the anchor (torch-bf16) and a kernel (mm) timed beside it at each M of `ms`, the GPU
    state moving both from round to round; the kernel `effect` times the anchor (or `kernel_us`)."""
    opts = opts or TimingOptions()
    kernel_us = kernel_us or [us * effect for us in anchor_us]
    recs = [
        r
        for m in ms
        for r in (record(anchor, anchor_us, opts, m, throttle), record(kernel, kernel_us, opts, m, throttle))
    ]
    store = SimpleNamespace(
        dir=tmp / label, manifest=lambda: SimpleNamespace(worker_sha256=worker), read_bytes=Path.read_bytes
    )
    return Side(store=store, slots=[slot_of("h", recs, torch)], label=label)


def slot_of(host: str, recs: list[CaseRecord], torch: str) -> SlotData:
    """One host's slot holding these records (attempt 1), its facts those of `facts(torch)`."""
    return SlotData(
        slot=host,
        host=host,
        gpu=None,
        planned=[r.case for r in recs],
        records={r.case_id: (1, r) for r in recs},
        facts=facts(torch),
        outcome=None,
        problems=[],
    )


# The GPU state moves each round by ±4% (a power-capped GEMM), so the time cannot resolve 3%.
A_US = [100.0, 104.0, 96.0]
B_US = [102.0, 98.0, 106.0]


def mm_row(cmp):
    return next(c for c in cmp.cases if c.backend == "mm")


def test_a_real_3pct_the_time_leaves_ambiguous_is_slower_against_the_anchor(tmp_path):
    a, b = side("a", A_US, 1.0, tmp=tmp_path), side("b", B_US, 1.03, tmp=tmp_path)
    on_time = mm_row(compare_sides(a, b, THRESHOLD, None))
    assert on_time.verdict == "AMBIGUOUS" and on_time.anchor_ratio is None
    row = mm_row(compare_sides(a, b, THRESHOLD, "torch-bf16"))
    assert row.verdict == "SLOWER" and row.judged_on == "anchor"
    assert row.anchor_low > 1 + THRESHOLD and row.anchor_ratio == pytest.approx(1.03, abs=0.002)
    assert "against torch-bf16 timed beside it 1.030" in row.note and "judged on it" in row.note
    # the anchor's own row is judged on its time alone
    base = next(c for c in compare_sides(a, b, THRESHOLD, "torch-bf16").cases if c.backend == "torch-bf16")
    assert base.anchor == "" and base.judged_on == "time"


@pytest.mark.parametrize(
    "anchor, kernel, anchored",
    [
        ("torch-bf16", "torch-fp8", False),  # fp8 against a bf16 anchor: another family, never anchored
        ("torch-bf16", "flashinfer-fp4-cutlass", False),
        ("torch-fp8", "flashinfer-fp8-cublas", True),  # the fp8 anchor judges an fp8 case
        ("torch-bf16", "mm", True),  # a user kernel's family is not in its record: not refused on it
    ],
)
def test_the_anchor_judges_only_cases_of_its_operand_family(tmp_path, anchor, kernel, anchored):
    a = side("a", A_US, 1.0, tmp=tmp_path, anchor=anchor, kernel=kernel)
    b = side("b", B_US, 1.03, tmp=tmp_path, anchor=anchor, kernel=kernel)
    row = next(c for c in compare_sides(a, b, THRESHOLD, anchor).cases if c.backend == kernel)
    if anchored:
        assert row.verdict == "SLOWER" and row.judged_on == "anchor"
        assert row.anchor_ratio == pytest.approx(1.03, abs=0.002)
    else:
        assert row.verdict == "AMBIGUOUS" and row.judged_on == "time"
        assert row.anchor_ratio is None and "against" not in row.note


def test_the_same_kernel_beside_the_anchor_is_not_flagged_however_the_state_moved(tmp_path):
    cmp = compare_sides(side("a", A_US, 1.0, tmp=tmp_path), side("b", B_US, 1.0, tmp=tmp_path), THRESHOLD, "torch-bf16")
    row = mm_row(cmp)
    assert row.verdict not in ("SLOWER", "FASTER")
    assert row.anchor_ratio == pytest.approx(1.0, abs=1e-9) and row.anchor_agrees


def test_the_interval_knows_the_ratio_moves_between_processes(tmp_path):
    # one pair of pairs, each side's own error tiny: the interval is still at least the processes' spread
    tight = SimpleNamespace(log_ratio=0.0, log_se=1e-6, df=math.inf)
    found = judge._process_spread(tight, judge.ANCHOR_PROCESS_SD)
    assert found.log_se == pytest.approx(judge.ANCHOR_PROCESS_SD, rel=1e-3)

    def half_width(sd):
        a, b = side("a", A_US, 1.0, tmp=tmp_path), side("b", B_US, 1.0, tmp=tmp_path)
        row = mm_row(compare_sides(a, b, THRESHOLD, "torch-bf16", anchor_process_sd=sd))
        return (math.log(row.anchor_high) - math.log(row.anchor_low)) / 2

    # both sides' spread, in quadrature, at z >= 1.96; a larger spread given widens it
    assert half_width(None) >= 0.999 * 1.96 * math.sqrt(2) * judge.ANCHOR_PROCESS_SD
    assert half_width(0.01) > half_width(None) > half_width(0.0)


def test_an_anchor_outside_the_case_s_own_interval_judges_nothing():
    time = judge.LogInterval(0.0, -0.01, 0.01, 1.0)
    anchored = judge.LogInterval(0.05, 0.045, 0.055, 0.0)
    assert not judge.anchor_agrees(anchored, time, None, THRESHOLD)
    inside = judge.LogInterval(0.005, 0.002, 0.008, 0.0)
    assert judge.anchor_agrees(inside, time, None, THRESHOLD)


def test_a_work_interval_vetoes_the_anchor_only_where_the_work_may_judge_the_row():
    """The anchored point within the time's wide interval but outside a tight work interval: the work
    vetoes it where the row may be judged on its work (clock-bound, or the clocks within half the
    threshold), not where the clocks parted and the time did not follow them."""
    time = judge.LogInterval(0.07, -0.02, 0.16, 1.0)
    work = judge.LogInterval(0.11, 0.10, 0.12, 1.0)
    anchored = judge.LogInterval(0.087, 0.078, 0.096, 0.0)

    def split(clock_ratio, clock_bound):
        return judge.ClockSplit(1600.0, 1600.0 * clock_ratio, clock_ratio, work, clock_bound)

    assert not judge.anchor_agrees(anchored, time, split(0.965, True), THRESHOLD)  # clock-bound: work judges
    assert not judge.anchor_agrees(anchored, time, split(0.996, False), THRESHOLD)  # clocks within 0.75%
    assert judge.anchor_agrees(anchored, time, split(0.965, False), THRESHOLD)  # clocks 3.5% apart, not bound
    assert not judge.anchor_agrees(judge.LogInterval(0.2, 0.19, 0.21, 0.0), time, split(0.965, False), THRESHOLD)


def test_a_slower_time_stays_slower_whatever_the_anchor_says(tmp_path):
    # a GPU slower in every round: the anchor moved with the kernel, which is still slower
    a = side("a", [100.0, 100.2, 99.8], 1.0, tmp=tmp_path)
    b = side("b", [110.0, 110.2, 109.8], 1.0, tmp=tmp_path)
    row = mm_row(compare_sides(a, b, THRESHOLD, "torch-bf16"))
    assert row.verdict == "SLOWER" and row.judged_on == "time"
    assert row.anchor_ratio == pytest.approx(1.0, abs=1e-9)
    # the note names why: the anchor moved as the kernel did, not the two answering the state differently
    assert "the anchor itself moved 1.100 the same way" in row.note and "differently" not in row.note


@pytest.mark.parametrize(
    "b_kw, refused",
    [
        ({"torch": "2.12.0"}, "torch"),
        ({"opts": TimingOptions(budget_s=0.3)}, "timing.budget_s"),
        ({"worker": "w2"}, "worker_sha256"),  # a built-in anchor's code is the worker's
    ],
)
def test_no_case_is_judged_against_an_anchor_that_may_have_moved_itself(tmp_path, b_kw, refused):
    a, b = side("a", A_US, 1.0, tmp=tmp_path), side("b", B_US, 1.03, tmp=tmp_path, **b_kw)
    cmp = compare_sides(a, b, THRESHOLD, "torch-bf16")
    assert [d.field for d in cmp.anchor_refused] == [refused]
    assert cmp.anchored == 0 and mm_row(cmp).verdict == "AMBIGUOUS" and mm_row(cmp).anchor_ratio is None


def test_a_changed_user_kernel_beside_an_unchanged_worker_leaves_the_anchor_standing(tmp_path):
    # the archive's sha256 covers the user kernels it carries; the worker's own code is what timed the anchor
    from orchestrator.planning.bundle import build_worker_bundle

    worker_dir = Path(__file__).parents[4] / "worker"
    for label, kernel in (("a", b"slow = 0\n"), ("b", b"slow = 1\n")):
        (tmp_path / label).mkdir()
        bundle = build_worker_bundle(worker_dir, [kernel]).write(tmp_path / label / "worker.tar.gz")
        assert bundle.exists()
    a = side("a", A_US, 1.0, tmp=tmp_path, worker="archive-a")
    b = side("b", B_US, 1.03, tmp=tmp_path, worker="archive-b")
    cmp = compare_sides(a, b, THRESHOLD, "torch-bf16")
    assert cmp.anchor_refused == [] and mm_row(cmp).judged_on == "anchor"
    # the worker's own code changed: refused, by that name
    other = tmp_path / "other" / "worker"
    shutil.copytree(worker_dir, other, ignore=shutil.ignore_patterns("__pycache__"))
    (other / "contract" / "__init__.py").write_text("# another worker\n", encoding="utf-8")
    build_worker_bundle(other, [b"slow = 1\n"]).write(tmp_path / "b" / "worker.tar.gz")
    cmp = compare_sides(a, b, THRESHOLD, "torch-bf16")
    assert [d.field for d in cmp.anchor_refused] == ["worker code sha256"] and cmp.anchored == 0


def test_the_per_backend_effect_takes_the_anchored_ratio_where_it_agrees(tmp_path):
    ms = (16, 64, 256)
    a = side("a", A_US, 1.0, tmp=tmp_path, ms=ms)
    b = side("b", B_US, 1.03, tmp=tmp_path, ms=ms)
    cmp = compare_sides(a, b, THRESHOLD, "torch-bf16")
    (mm,) = [b for b in cmp.by_backend() if b["backend"] == "mm"]
    # the time ratio of each case is 1.03 times the state's 1.02: the effect is the kernel's alone
    assert mm["effect_on_anchor"] == 3 and mm["effect_ratio"] == pytest.approx(1.03, abs=0.002)
    assert cmp.anchored == 3


def test_an_anchored_ratio_outside_the_case_s_own_time_interval_judges_nothing(tmp_path):
    # the kernel's time held (+1.5%, AMBIGUOUS, a narrow interval) while the anchor beside it ran 5% faster:
    # the two answered the GPU state differently, and their ratio (+6.8%) is not the kernel's change
    steady = [100.0, 100.2, 99.8]
    a = side("a", steady, 1.0, tmp=tmp_path)
    b = side("b", [95.0, 95.2, 94.8], 1.0, tmp=tmp_path, kernel_us=[101.5, 101.7, 101.3])
    row = mm_row(compare_sides(a, b, THRESHOLD, "torch-bf16"))
    assert row.anchor_ratio == pytest.approx(1.068, abs=0.002) and row.anchor_low > 1 + THRESHOLD
    assert row.verdict == "AMBIGUOUS" and row.judged_on == "time" and row.anchor_agrees is False
    assert "judges nothing" in row.note and "answer the GPU state differently" in row.note
    assert "moved" not in row.note  # the anchor ran faster while the kernel's time rose: not a shared move


def test_an_anchor_that_moved_the_way_the_case_did_is_named_as_such():
    time = judge.LogInterval(-0.037, -0.057, -0.017, 4.0)  # the case ran 3.6% faster
    assert judge.anchor_moved_with(0.99, time) == 0.99
    assert judge.anchor_moved_with(1.01, time) is None  # the anchor's own time moved the other way


def test_the_anchor_s_move_in_a_note_is_its_own_row_s_ratio(tmp_path):
    # every number beside another agrees: the move a case's note names is the anchor's row's B/A
    a = side("a", [100.0, 100.2, 99.8], 1.0, tmp=tmp_path)
    b = side("b", [96.0, 96.2, 95.8], 1.0, tmp=tmp_path, kernel_us=[95.0, 95.1, 94.9])
    cmp = compare_sides(a, b, THRESHOLD, "torch-bf16")
    base = next(c for c in cmp.cases if c.backend == "torch-bf16")
    row = mm_row(cmp)
    assert row.verdict == "FASTER" and row.anchor_agrees is False
    assert f"the anchor itself moved {base.ratio:.3f} the same way" in row.note


def test_a_row_the_environment_unsettles_is_not_judged_on_the_anchor(tmp_path):
    a = side("a", A_US, 1.0, tmp=tmp_path)
    b = side("b", B_US, 1.03, tmp=tmp_path, throttle=("sw_power_cap",))
    cmp = compare_sides(a, b, THRESHOLD, "torch-bf16")
    row = mm_row(cmp)
    assert row.verdict == "UNSTABLE" and row.judged_on == "time" and cmp.anchored == 0
    assert "against torch-bf16 timed beside it" in row.note and "judged on it" not in row.note


def test_an_anchor_neither_side_timed_refuses_nothing(tmp_path):
    # the facts differ, but there is no anchor to distrust: no note about one
    a, b = side("a", A_US, 1.0, tmp=tmp_path), side("b", B_US, 1.03, tmp=tmp_path, torch="2.12.0")
    cmp = compare_sides(a, b, THRESHOLD, "flashinfer-fp8-cublas")
    assert cmp.anchor_refused == [] and cmp.anchored == 0


LEASE = Path(__file__).resolve().parents[4] / "benchmarks" / "results" / "slowdowns-seed-h100-s18b.runs.tar.xz"


@pytest.fixture(scope="module")
def h2h_runs(tmp_path_factory):
    """A stored lease's head-to-head sweeps (mm, mm_again and mm_pad timed together), as a runs folder."""
    import tarfile

    folder = tmp_path_factory.mktemp("lease")
    with tarfile.open(LEASE) as tar:
        tar.extractall(folder, filter="data")
    return folder, sorted(p.name for p in folder.iterdir() if "see-h2h" in p.name)


def test_diff_names_its_anchor_on_stored_sweeps_and_refuses_one_neither_side_timed(h2h_runs, capsys):
    from orchestrator.cli import main

    folder, (a, b, *_) = h2h_runs
    # two sweeps of the same kernels (A/A): no case is confirmed slower, so diff exits 0 whatever the anchor
    assert main(["diff", a, b, "--runs-dir", str(folder), "--anchor", "mm", "--format", "json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["anchor"] == "mm" and doc["anchor_refused"] == []
    rows = [c for c in doc["cases"] if c["backend"] != "mm"]
    assert rows and all(c["anchor_ratio"] is not None for c in rows)
    assert all("against mm timed beside it" in c["note"] for c in rows)
    # the default anchor, torch-bf16, is not in these sweeps: nothing is anchored, and nothing fails
    assert main(["diff", a, b, "--runs-dir", str(folder), "--format", "json"]) == 0
    assert all(c["anchor_ratio"] is None for c in json.loads(capsys.readouterr().out)["cases"])
    assert main(["diff", a, b, "--runs-dir", str(folder), "--anchor", "torch-bf17"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--anchor torch-bf17: neither side timed it" in err and "mm_pad" in err
    assert main(["diff", a, b, "--runs-dir", str(folder), "--anchor", "none", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["anchor"] == ""
    # --across-hosts takes the anchor too: this run has one host, so there is nothing to estimate, and
    # an anchor no host timed is still an input error
    args = ["diff", a, "--across-hosts", "--runs-dir", str(folder), "--format", "json"]
    assert main([*args, "--anchor", "mm"]) == 0
    effects = json.loads(capsys.readouterr().out)["host_effects"]
    assert effects["anchor"] == "mm" and effects["nothing"] == "hosts" and effects["hosts"] == []
    assert main([*args, "--anchor", "torch-bf17"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--anchor torch-bf17: no host timed it" in err
