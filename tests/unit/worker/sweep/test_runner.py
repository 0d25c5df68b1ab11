"""The case runner on the CPU (worker/sweep/runner.py): what it runs and refuses, a record per round,
a failing case recorded while the loop goes on, rounds already timed kept, graphs kept between rounds;
when a unit's rounds stop (sure, at the cap, or a fixed count); the order of a round's cases; health judged
over the samples, on the simulated `torch.cuda` of tests/support/simcuda.py."""

from __future__ import annotations

import json
import random
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from support.roundrecords import rounds_record
from support.simcuda import L2_BYTES, SimGpu, install

from orchestrator.runs.records import parse_line
from worker.contract.schema import CaseSpec, Stats, TimingOptions
from worker.measure import timing
from worker.sweep import runner as runner_mod
from worker.sweep.runner import CaseRunner, rounds_decision

# Exactly 3 rounds (min_rounds == rounds): the tests below count the records a case writes.
FAST = TimingOptions(budget_s=0.05, warmup_ms=1, min_samples=3, max_samples=10, min_rounds=3)


def test_fp4_backends_are_never_imported_on_a_device_below_10(monkeypatch):
    for mod in [m for m in sys.modules if m.startswith("worker.backends.")]:
        monkeypatch.delitem(sys.modules, mod)
    runner = runner_mod.CaseRunner("cpu")
    for name in ("flashinfer-fp4-cutlass", "sgl-fp4-cutlass", "torch-nvfp4"):
        rec = runner.run(CaseSpec(backend=name, m=16, n=64, k=128, timing=FAST))
        assert rec.status == "unsupported" and "compute capability" in rec.reason
    assert "worker.backends.flashinfer_gemm" not in sys.modules
    assert "worker.backends.sgl_gemm" not in sys.modules


def test_cpu_cases_are_measured_and_checked():
    runner = runner_mod.CaseRunner("cpu")
    for backend in ("torch-bf16", "reference-nvfp4"):
        rec = runner.run(CaseSpec(backend=backend, m=16, n=64, k=128, timing=FAST))
        assert rec.status == "ok", rec.reason
        assert rec.correctness.verdict == "pass"
        assert rec.timing.method == "cpu-wallclock" and rec.timing.n >= 3
        assert rec.timing.samples_us and rec.metrics.tflops > 0


def test_an_exception_in_a_case_is_recorded_and_the_loop_goes_on(tmp_path, monkeypatch):
    from worker.backends import torch_gemm
    from worker.contract.schema import WorkerParams

    def boom(spec, sets, out_dtype):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(torch_gemm, "prepare", boom)
    params = WorkerParams(
        run_id="r",
        host="h",
        device="cpu",
        cases=[
            CaseSpec(backend="torch-bf16", m=16, n=64, k=128, timing=FAST),
            CaseSpec(backend="reference-nvfp4", m=16, n=64, k=128, timing=FAST),
        ],
    )
    results = tmp_path / "results.jsonl"
    runner_mod.run_params(params, results)
    records = [parse_line(line) for line in results.read_text().splitlines()]
    assert records[0].kind == "facts"
    assert records[1].status == "failed" and "kernel exploded" in records[1].reason
    assert "Traceback" in records[1].traceback
    # A record per round: two with the rounds so far, then the complete one.
    assert [(r.status, r.complete, len(r.timing.rounds)) for r in records[2:]] == [
        ("ok", False, 1),
        ("ok", False, 2),
        ("ok", True, 3),
    ]
    # A second pass runs nothing: every case already has its final record.
    runner_mod.run_params(params, results)
    assert len(results.read_text().splitlines()) == 5


def test_a_case_with_rounds_already_timed_times_only_those_missing(tmp_path):
    """A worker stopped after a case's first round keeps it; the next one goes on from there."""
    from worker.contract.schema import WorkerParams

    case = CaseSpec(backend="torch-bf16", m=16, n=64, k=128, timing=FAST)
    params = WorkerParams(run_id="r", host="h", device="cpu", cases=[case])
    results = tmp_path / "results.jsonl"
    runner_mod.run_params(params, results)
    lines = results.read_text().splitlines()
    first_round = parse_line(lines[1])
    assert not first_round.complete and len(first_round.timing.rounds) == 1
    results.write_text("\n".join(lines[:2]) + "\n")  # as if the host died in round 2
    runner_mod.run_params(params, results)
    final = parse_line(results.read_text().splitlines()[-1])
    assert final.complete and len(final.timing.rounds) == 3
    assert final.timing.rounds[0] == first_round.timing.rounds[0]  # kept, not timed again
    assert len(results.read_text().splitlines()) == 4  # facts, round 1, round 2, complete


def test_noop_cases_never_import_torch(tmp_path):
    import subprocess

    from worker.contract.schema import WorkerParams

    params = tmp_path / "p.json"
    params.write_text(
        WorkerParams(
            run_id="r", host="h", device="cpu", cases=[CaseSpec(backend="noop", m=1, n=16, k=16)]
        ).model_dump_json()
    )
    code = (
        "import sys; from pathlib import Path; from worker.sweep.runner import load_params, run_params; "
        f"run_params(load_params(Path({str(params)!r})), Path({str(tmp_path / 'r.jsonl')!r})); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert records[0]["kind"] == "facts" and records[1]["status"] == "ok"


class _Sets(list):
    """Input sets a test can hold a weak reference to."""


def _kept_runner(monkeypatch, budget: int):
    """A CUDA runner without a GPU: preparing and timing are stand-ins that count what they build; each
    build allocates 100 bytes."""
    from types import SimpleNamespace

    r = runner_mod.CaseRunner.__new__(runner_mod.CaseRunner)
    r.device, r.calibration, r.probe, r.l2, r.kept, r.keep_budget = (
        SimpleNamespace(device="cuda"),
        None,
        None,
        None,
        {},
        budget,
    )
    allocated = [0]
    built = []
    made, prepared = [], []  # weak references to every input set built; per prepare, which were alive then
    r.test_prepared = prepared
    monkeypatch.setattr(r, "_allocated", lambda: allocated[0])

    def prepare(case, spec, generation=1):
        allocated[0] += 100
        prepared.append((case.case_id, [ref() is not None for ref in made]))
        sets = _Sets([("a", "b")])
        made.append(weakref.ref(sets))
        return (lambda i: None), sets, 1

    def time_(case, fn, n_sets, guard=None, graph=None, keep=None):
        if graph is None:
            built.append(case.case_id)
            graph = object()
            if keep is not None:
                keep(graph)
        stats = Stats(
            method="cuda-graph",
            median_us=10.0,
            p10_us=10,
            p90_us=10,
            mean_us=10,
            stdev_us=0,
            n=3,
            rel_ci=0.0,
            calls_per_sample=8,
            l2="cold",
            samples_us=[10.0],
        )
        from worker.contract.schema import RoundStats

        return runner_mod.RoundTiming(
            stats.model_copy(update={"rounds": [RoundStats(median_us=10.0, n=3, rel_ci=0.0)]}), None
        )

    monkeypatch.setattr(r, "_prepare", prepare)
    monkeypatch.setattr(r, "_time", time_)
    monkeypatch.setattr(r, "_guard", lambda *a, **k: SimpleNamespace(seconds=0.0, watched=None))
    return r, built, allocated


def test_later_rounds_replay_the_kept_graph_within_the_budget_and_build_their_own_beyond_it(monkeypatch):
    from types import SimpleNamespace

    opts = TimingOptions(rounds=3, fresh_inputs=False)
    cases = [CaseSpec(backend="torch-bf16", m=m, n=256, k=512, timing=opts) for m in (16, 32)]
    r, built, _ = _kept_runner(monkeypatch, budget=150)  # room for one case's 100 bytes, not two
    for case in cases:  # round 1 of each, as CaseRunner._measure keeps what it built
        before = r._allocated()
        fn, sets, n_sets = r._prepare(case, None)
        r._keep(case, fn, sets, n_sets, SimpleNamespace(watched=None), [object()], before)
    assert list(r.kept) == [cases[0].case_id]
    stats, _, _ = r.again(cases[0], 8)
    assert stats.rounds[0].prepare_s == 0.0 and built == []  # replayed round 1's graph
    r.again(cases[1], 8)
    assert built == [cases[1].case_id] and list(r.kept) == [cases[0].case_id]  # built its own, no room to keep
    r.release(cases[0].case_id)  # the first case ended
    r.again(cases[1], 8)
    assert built == [cases[1].case_id] * 2 and list(r.kept) == [cases[1].case_id]  # room now: kept
    r.again(cases[1], 8)
    assert built == [cases[1].case_id] * 2
    r.release()
    assert r.kept == {}


def test_with_fresh_inputs_each_later_round_builds_anew_while_the_last_rounds_inputs_are_still_held(monkeypatch):
    from types import SimpleNamespace

    case = CaseSpec(backend="torch-bf16", m=16, n=256, k=512, timing=TimingOptions(rounds=3, fresh_inputs=True))
    r, built, allocated = _kept_runner(monkeypatch, budget=10**6)
    before = r._allocated()
    fn, sets, n_sets = r._prepare(case, None)
    r._keep(case, fn, sets, n_sets, SimpleNamespace(watched=None), [object()], before)
    del fn, sets
    first = r.kept[case.case_id]
    stats, _, _ = r.again(case, 8, 2)
    assert built == [case.case_id] and stats.rounds[0].prepare_s >= 0.0
    # round 2's inputs were made while round 1's were alive (so they sit elsewhere), then round 1's let go
    assert r.test_prepared[-1] == (case.case_id, [True])
    assert r.kept[case.case_id] is not first and r.kept[case.case_id].nbytes == 100
    del first
    r.again(case, 8, 3)
    assert built == [case.case_id] * 2 and r.test_prepared[-1] == (case.case_id, [False, True])


def test_out_of_memory_with_graphs_kept_frees_them_and_tries_the_round_once_more(monkeypatch):
    r, built, _ = _kept_runner(monkeypatch, budget=10**6)
    case = CaseSpec(backend="torch-bf16", m=16, n=256, k=512, timing=TimingOptions(rounds=3))
    r.kept["other"] = runner_mod.Kept(None, None, 1, None, object(), 100)
    calls = []

    class OutOfMemoryError(RuntimeError):
        pass

    def again(case, cps, generation=2):
        calls.append(len(r.kept))
        if len(calls) == 1:
            raise OutOfMemoryError("CUDA out of memory")
        return "timed"

    monkeypatch.setattr(r, "_again", again)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert r.again(case, 8) == "timed" and calls == [1, 0]
    calls.clear()
    with pytest.raises(OutOfMemoryError):  # nothing kept to free: the error is the round's
        r.again(case, 8)


def test_rounds_stop_when_sure_at_the_cap_or_at_a_fixed_count():
    opts = TimingOptions(rounds=4, min_rounds=2, round_target=0.01)
    assert rounds_decision([rounds_record([(10.0, None, None)], opts)]) is None  # below min_rounds
    assert rounds_decision([rounds_record([(10.0, None, None), (10.01, None, None)], opts)]) == "target"
    apart = [(10.0, None, None), (11.0, None, None)]
    assert rounds_decision([rounds_record(apart, opts)]) is None  # 10% apart: another round
    assert rounds_decision([rounds_record(apart * 2, opts)]) == "cap"
    fixed = TimingOptions(rounds=3, min_rounds=3)
    assert rounds_decision([rounds_record(apart[:1] * 3, fixed)]) == "fixed"


def test_a_power_capped_case_whose_cycles_hold_still_is_sure_though_its_time_moves():
    opts = TimingOptions(rounds=4, min_rounds=2, round_target=0.01)
    # time x clock: 10.0 x 1500 and 11.0 x 1363.6 are the same 15000 cycles
    moved = [(10.0, 1500.0, None), (11.0, 15000.0 / 11.0, None)]
    assert rounds_decision([rounds_record(moved, opts)]) == "target"
    moved_no_clock = [(10.0, None, None), (11.0, None, None)]
    assert rounds_decision([rounds_record(moved_no_clock, opts)]) is None


def test_a_run_whose_rounds_agree_lends_a_two_round_case_the_confidence_its_own_two_rounds_lack():
    from worker.contract.pairing import log_variance, median_prior, work_per_round

    opts = TimingOptions(rounds=3, min_rounds=2, round_target=0.02)
    # 0.5% apart in time and in work: t with 1 degree of freedom makes that ±3.2%, not sure
    case = rounds_record([(10.0, 1850.0, None), (10.05, 1850.0, None)], opts)
    assert rounds_decision([case]) is None
    quiet = [rounds_record([(8.0 + i, 1850.0, None), ((8.0 + i) * 1.001, 1850.0, None)], opts) for i in range(5)]
    prior = median_prior([log_variance(work_per_round(r.timing)) for r in quiet])
    assert rounds_decision([case], prior) == "target"
    # a run whose rounds move 5% makes the case less sure, not more
    noisy = [rounds_record([(8.0 + i, 1850.0, None), ((8.0 + i) * 1.05, 1850.0, None)], opts) for i in range(5)]
    assert rounds_decision([case], median_prior([log_variance(work_per_round(r.timing)) for r in noisy])) is None


def test_contenders_stop_together_only_when_their_head_to_head_interval_is_narrow_enough():
    opts = TimingOptions(rounds=4, min_rounds=2, round_target=0.05, pair_target=0.005)
    rng = random.Random(3)
    a_s = [[10.0 * (1 + rng.gauss(0, 0.001)) for _ in range(20)] for _ in range(2)]
    b_close = [[x * 1.02 for x in r] for r in a_s]
    a = rounds_record([(10.0, None, "p1"), (10.0, None, "p2")], opts, samples=a_s)
    b = rounds_record([(10.2, None, "p1"), (10.2, None, "p2")], opts, backend="torch-fp8", samples=b_close)
    assert rounds_decision([a, b]) == "target"
    b_noisy = [[x * (1.02 + rng.gauss(0, 0.05)) for x in r] for r in a_s]
    b = rounds_record([(10.2, None, "p1"), (10.2, None, "p2")], opts, backend="torch-fp8", samples=b_noisy)
    assert rounds_decision([a, b]) is None


def test_every_round_runs_the_lightest_case_first_whatever_order_the_sweep_lists():
    """A case's predecessor is the same in every run of a sweep (forward, reversed or shuffled in the
    file), so no round's value depends on the order the user wrote: light cases first, the heaviest last,
    ties by case id."""
    import random

    from worker.contract.schema import CaseSpec
    from worker.sweep.runner import round_order

    todo = [CaseSpec(backend=b, m=m, n=2048, k=6144) for m in (16, 64, 256, 1024) for b in ("torch-bf16", "torch-fp8")]
    load = {c.case_id: c.m / 1024 * (0.5 if c.backend == "torch-fp8" else 1.0) for c in todo}
    shuffled = list(todo)
    random.Random(7).shuffle(shuffled)
    orders = [round_order(o, lambda c: load[c.case_id]) for o in (todo, todo[::-1], shuffled)]
    assert orders[0] == orders[1] == orders[2]
    assert [load[c.case_id] for c in orders[0]] == sorted(load.values())
    assert orders[0][-1].m == 1024 and orders[0][-1].backend == "torch-bf16"


def test_rounds_are_ranked_by_measured_load_once_measured(tmp_path, monkeypatch):
    """Round 1 is ranked by each case's math at the calibrated peak (a prediction); later rounds by what
    round 1 measured: a case that turned out slow (light load) moves ahead of one that ran at its peak."""
    from worker.contract.schema import Calibration, CaseRecord, CaseSpec, RoundStats, Stats, TimingOptions
    from worker.sweep import runner as runner_mod

    opts = TimingOptions(rounds=2)
    big = CaseSpec(backend="torch-bf16", m=1024, n=2048, k=6144, timing=opts)
    small = CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144, timing=opts)
    oracle = CaseSpec(backend="reference-nvfp4", m=1024, n=2048, k=6144, timing=opts)
    r = runner_mod.CaseRunner("cpu")
    r.calibration = Calibration(key="k", measured_at="t", cached=False, tflops={"bf16": 800.0}, tb_s=4.0)
    seen: list[tuple[int, str]] = []
    measured = {big.case_id: 1000.0, small.case_id: 12.0, oracle.case_id: 700.0}  # big: far off its peak

    def run(case):
        seen.append((1, case.case_id))
        stats = Stats(
            method="cpu-wallclock",
            median_us=measured[case.case_id],
            p10_us=1,
            p90_us=1,
            mean_us=1,
            stdev_us=0,
            n=3,
            rel_ci=0.0,
            calls_per_sample=1,
            l2="hot",
            samples_us=[1.0],
        )
        return CaseRecord(
            case_id=case.case_id,
            case=case,
            status="ok",
            started_at="t",
            duration_s=0.0,
            timing=stats.model_copy(update={"rounds": [RoundStats(median_us=stats.median_us, n=3, rel_ci=0.0)]}),
        )

    def again(case, calls_per_sample=0, generation=2):
        seen.append((2, case.case_id))
        rec = run(case)
        seen.pop()
        return rec.timing, None, 0.0

    monkeypatch.setattr(r, "run", run)
    monkeypatch.setattr(r, "again", again)
    runner_mod._run_cases(r, [big, oracle, small], set(), 3, tmp_path / "r.jsonl", tmp_path / "inflight")
    first = [cid for rnd, cid in seen if rnd == 1]
    second = [cid for rnd, cid in seen if rnd == 2]
    assert first == [oracle.case_id, small.case_id, big.case_id]  # the oracle is off the tensor cores: 0
    # at 800 TFLOPS big's math takes 32 us: 0.8 of the peak predicted, 0.03 measured; small's 0.04
    assert second == [oracle.case_id, big.case_id, small.case_id]


@pytest.mark.parametrize("clocks, tainted", [((1980, 1500, 1490), False), ((1980, 1980, 1500), True)])
def test_health_is_judged_over_the_samples_not_over_the_settling(monkeypatch, clocks, tainted):
    """Settling lets a heavy GEMM bring the GPU to its power-limited clock (1980 -> ~1500 MHz on the
    H200); that fall is the state the case is measured in, not a throttled measurement. A fall during
    the samples still taints. Snapshots: before the warm-up, after settling, after the samples."""
    from worker.contract.schema import HealthSnapshot

    gpu = SimGpu()
    install(monkeypatch, gpu)
    runner = CaseRunner.__new__(CaseRunner)
    runner.device = SimpleNamespace(device="cuda", l2_bytes=L2_BYTES)
    readings = iter(clocks)
    runner.probe = SimpleNamespace(snapshot=lambda: HealthSnapshot(sm_clock_mhz=next(readings)))
    runner.timer = timing.Timer()
    case = CaseSpec(
        backend="torch-bf16", m=64, n=256, k=256, timing=TimingOptions(warmup_ms=0, budget_s=1, rounds=1, settle_ms=5)
    )
    sets = [object() for _ in range(4)]
    stats, health, _ = runner._time(case, lambda i: gpu.call(id(sets[i]), 1 << 20), len(sets))
    assert health.tainted is tainted and stats.settle_ms >= 5
    assert health.before.sm_clock_mhz == clocks[1]


def _sharing_runner(made: list):
    def inputs(case, set_index, dev):
        made.append((case.backend, set_index))
        gen = torch.Generator().manual_seed(case.seed * 1_000_003 + set_index)
        return tuple(torch.randn(4, 8, generator=gen).to(torch.bfloat16) for _ in range(2))

    runner = CaseRunner.__new__(CaseRunner)
    runner.kept = {}
    runner.device = SimpleNamespace(device="cuda")
    runner.share_inputs = True
    runner._inputs = inputs
    return runner


def test_the_contenders_of_a_shape_read_one_input_set_on_a_gpu_and_release_it_with_the_last():
    made = []
    runner = _sharing_runner(made)
    bf16, fp8 = (CaseSpec(backend=b, m=512, n=2048, k=6144) for b in ("torch-bf16", "torch-fp8"))
    other = CaseSpec(backend="torch-bf16", m=256, n=2048, k=6144)
    alone = CaseSpec(backend="torch-bf16", m=512, n=2048, k=6144, timing=TimingOptions(head_to_head=False))
    first = runner._sets_for(bf16, 3)
    assert runner._sets_for(fp8, 3) is first and made == [("torch-bf16", s) for s in range(3)]
    assert runner._sets_for(other, 3) is not first and runner._sets_for(alone, 3) is not first
    assert len(made) == 9  # the other shape's three and the one timed alone's three
    runner.release(bf16.case_id)
    assert runner._sets_for(fp8, 3) is first  # fp8 still times on them
    runner.release(fp8.case_id)
    assert runner._sets_for(fp8, 3) is not first  # released with its last contender, made anew
    runner.share_inputs = False  # outside a sweep's units (crosscheck, profile): nothing is shared
    assert runner._sets_for(bf16, 3) is not runner._sets_for(bf16, 3)
    runner.share_inputs, runner.device = True, SimpleNamespace(device="cpu")
    assert runner._sets_for(bf16, 3) is not runner._sets_for(fp8, 3)  # a CPU times no head-to-head


def test_with_fresh_inputs_each_round_s_contenders_share_that_round_s_sets():
    made = []
    runner = _sharing_runner(made)
    fresh = TimingOptions(fresh_inputs=True)
    bf16, fp8 = (CaseSpec(backend=b, m=512, n=2048, k=6144, timing=fresh) for b in ("torch-bf16", "torch-fp8"))
    first = runner._sets_for(bf16, 2, 1)
    assert runner._sets_for(fp8, 2, 1) is first
    second = runner._sets_for(bf16, 2, 2)  # round 2's first contender: anew, round 1's still alive
    assert second is not first and runner._sets_for(fp8, 2, 2) is second and len(made) == 4
    runner.release(bf16.case_id)  # the users carried over: fp8 still times on round 2's sets
    assert runner._sets_for(fp8, 2, 2) is second and len(made) == 4
    replayed = [CaseSpec(backend=b, m=512, n=2048, k=6144) for b in ("a", "b")]
    kept = runner._sets_for(replayed[0], 2, 1)
    assert runner._sets_for(replayed[1], 2, 2) is kept  # fresh_inputs off (the default): one set for every round


def test_a_contender_that_wrote_into_the_shared_inputs_is_undone_before_another_times_on_them():
    runner = _sharing_runner([])
    bf16, fp8 = (CaseSpec(backend=b, m=512, n=2048, k=6144) for b in ("torch-bf16", "torch-fp8"))
    sets = runner._sets_for(bf16, 2)
    runner._sets_for(fp8, 2)
    kept = [t.clone() for pair in sets for t in pair]
    assert runner.restore_shared(fp8) is None  # untouched: nothing to say
    sets[1][0].zero_()  # bf16's kernel used operand A of set 1 as scratch
    found = runner.restore_shared(fp8)
    assert found and "512x2048x6144" in found and "restored from the seed" in found
    assert all(torch.equal(t, k) for t, k in zip((t for pair in sets for t in pair), kept))
    assert runner._sets_for(fp8, 2) is sets  # the same tensors, put back in place (kept graphs read them)


@pytest.mark.parametrize("m,n", [(16, 768), (512, 2048), (1024, 2048)])
def test_an_oracle_rotates_through_enough_sets_for_the_fp32_it_streams_and_no_more(m, n):
    runner = CaseRunner.__new__(CaseRunner)
    runner.device = SimpleNamespace(device="cuda", l2_bytes=L2_BYTES)
    k = 6144
    oracle = CaseSpec(backend="reference-nvfp4", m=m, n=n, k=k)
    kernel = CaseSpec(backend="flashinfer-fp4-cutlass", m=m, n=n, k=k)
    sets = runner._input_sets(oracle, "fp4")
    streamed = (m + n) * k * 4  # both operands in fp32, every call
    # The other calls between two uses of a set stream the cold-L2 factor's worth of L2s ...
    assert (sets - 1) * streamed >= runner_mod.COLD_L2_FACTOR * L2_BYTES
    # ... and one set fewer would not: no more sets (and calls per sample) than coldness needs.
    assert sets == 2 or (sets - 2) * streamed < runner_mod.COLD_L2_FACTOR * L2_BYTES
    assert sets < runner._input_sets(kernel, "fp4")


def test_a_worker_run_process_ends_without_teardown_once_every_record_is_written(tmp_path):
    """`python -m worker run` ends through os._exit (worker/__main__.py end_process): what the interpreter
    would run at exit (here an atexit handler a sitecustomize registers) never runs, and every record,
    the last round included, is already in the results."""
    import os
    import subprocess

    from worker.contract.schema import WorkerParams

    params = tmp_path / "p.json"
    case = CaseSpec(backend="torch-bf16", m=16, n=64, k=128, timing=FAST)
    params.write_text(WorkerParams(run_id="r", host="h", device="cpu", cases=[case]).model_dump_json())
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "teardown-ran"
    (site / "sitecustomize.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
    )
    repo = str(Path(runner_mod.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), repo])}
    results = tmp_path / "r.jsonl"
    argv = [sys.executable, "-m", "worker", "run", "--params", str(params), "--results", str(results)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    records = [parse_line(line) for line in results.read_text().splitlines()]
    assert records[-1].complete and len(records[-1].timing.rounds) == 3
    # A process that ends as usual in the same environment does leave the marker: the check above can fail.
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, timeout=60)
    assert marker.exists()
