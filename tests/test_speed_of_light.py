"""Speed of light: the calibration (worker/measure/calibrate.py) and the metrics and views built on it.

The GPU measurements themselves run on a GPU (benchmarks/RESULTS.md, issue 16); here a fake `measure`
stands in for them so the cache, the failure paths and the arithmetic are pinned down exactly."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from orchestrator.analysis.merge import Row
from orchestrator.runs.formats import params_for_worker
from orchestrator.views.tables import pivot_document, rows_document
from worker.contract.metrics import gemm_metrics, speed_of_light
from worker.contract.schema import Calibration
from worker.measure.calibrate import calibrate

GPU = SimpleNamespace(device="cuda")
SHEET = {"bf16": 989.4, "fp8": 1978.9, "tb_s": 4.8}


class Bench:
    """A fake GPU: fixed peaks, counts what was measured; `broken` families raise."""

    def __init__(self, broken=()):
        self.calls: list[str] = []
        self.broken = set(broken)

    def __call__(self, what: str):
        self.calls.append(what)
        if what in self.broken:
            raise RuntimeError(f"no backend for {what} runs here")
        return {"copy": 4.1, "bf16": 700.0, "fp8": 1300.0}[what], f"fake {what}"


def cal(families, mode, bench, tmp_path, key="host|GPU-1|driver 580|torch 2.11"):
    return calibrate(
        GPU, set(families), mode, key=key, measure=bench, datasheet=SHEET, cache=tmp_path / "calibration.json"
    )


def test_a_calibration_is_measured_once_then_read_from_the_hosts_cache(tmp_path):
    bench = Bench()
    first = cal({"bf16"}, "cached", bench, tmp_path)
    assert first.cached is False and first.tflops == {"bf16": 700.0} and first.tb_s == 4.1
    assert first.datasheet == SHEET and sorted(bench.calls) == ["bf16", "copy"]
    again = cal({"bf16"}, "cached", bench, tmp_path)
    assert again.cached is True and again.tflops == first.tflops and len(bench.calls) == 2
    # A sweep that needs another family measures only that one and keeps the rest.
    more = cal({"bf16", "fp8"}, "cached", bench, tmp_path)
    assert bench.calls[2:] == ["fp8"] and more.tflops == {"bf16": 700.0, "fp8": 1300.0}
    # fresh measures everything again; another GPU or driver is another entry.
    cal({"bf16"}, "fresh", bench, tmp_path)
    assert sorted(bench.calls[3:]) == ["bf16", "copy"]
    cal({"bf16"}, "cached", bench, tmp_path, key="host|GPU-2|driver 580|torch 2.11")
    assert len(bench.calls) == 7
    stored = json.loads((tmp_path / "calibration.json").read_text())
    assert set(stored) == {"host|GPU-1|driver 580|torch 2.11", "host|GPU-2|driver 580|torch 2.11"}
    assert "cached" not in stored["host|GPU-1|driver 580|torch 2.11"]  # how it was read is not stored


def test_a_family_that_cannot_be_measured_is_a_problem_and_tried_again_next_time(tmp_path):
    bench = Bench(broken={"fp4"})
    got = cal({"bf16", "fp4"}, "cached", bench, tmp_path)
    assert "fp4" not in got.tflops and "no backend for fp4" in got.problems["fp4"]
    later = calibrate(
        GPU,
        {"bf16", "fp4"},
        "cached",
        key="host|GPU-1|driver 580|torch 2.11",
        measure=lambda w: (2500.0, "fake fp4") if w == "fp4" else pytest.fail(f"re-measured {w}"),
        datasheet=SHEET,
        cache=tmp_path / "calibration.json",
    )
    assert later.tflops["fp4"] == 2500.0 and later.problems == {}


def test_a_hopper_calibrates_once_says_so_and_never_announces_fp4(tmp_path):
    """Issue 27: on an H200 every run said `cached: false` and "calibrating bf16, fp4, fp8" while its bf16
    and fp8 peaks were the cached ones: FP4 cannot run below compute capability 10.0, so it was retried
    (and failed) every time. Now it is a problem without a measurement, and only what is measured is said."""
    hopper = SimpleNamespace(device="cuda", compute_capability=(9, 0))
    bench, told = Bench(), []

    def run():
        return calibrate(
            hopper,
            {"bf16", "fp8", "fp4"},
            "cached",
            key="h200",
            measure=bench,
            datasheet=SHEET,
            cache=tmp_path / "calibration.json",
            on_measure=told.append,
        )

    first = run()
    assert told == [["bf16", "copy", "fp8"]] and sorted(bench.calls) == ["bf16", "copy", "fp8"]
    assert first.cached is False and "needs compute capability >= 10.0" in first.problems["fp4"]
    again = run()
    assert told == [["bf16", "copy", "fp8"]] and len(bench.calls) == 3  # nothing measured, nothing announced
    assert again.cached is True and again.tflops == first.tflops and again.tb_s == first.tb_s
    assert again.measured_at == first.measured_at and "fp4" in again.problems


def test_a_family_retried_in_vain_is_announced_alone_and_the_peaks_stay_cached(tmp_path):
    blackwell = SimpleNamespace(device="cuda", compute_capability=(10, 0))
    bench, told = Bench(broken={"fp4"}), []

    def run():
        return calibrate(
            blackwell,
            {"bf16", "fp4"},
            "cached",
            key="b200",
            measure=bench,
            datasheet=SHEET,
            cache=tmp_path / "calibration.json",
            on_measure=told.append,
        )

    first = run()
    later = run()  # FlashInfer may have been installed since: fp4 is tried again, and only fp4
    assert told == [["bf16", "copy", "fp4"], ["fp4"]] and bench.calls.count("bf16") == 1
    assert later.cached is True and later.tflops == first.tflops and "no backend for fp4" in later.problems["fp4"]


def test_no_calibration_on_a_cpu_or_when_off_and_a_torn_cache_is_measured_again(tmp_path):
    bench = Bench()
    assert calibrate(SimpleNamespace(device="cpu"), {"bf16"}, "cached", measure=bench) is None
    assert cal({"bf16"}, "off", bench, tmp_path) is None and bench.calls == []
    (tmp_path / "calibration.json").write_text('{"host|GPU-1|driver 580|torch 2.11": {"tflops": ')
    assert cal({"bf16"}, "cached", bench, tmp_path).cached is False
    (tmp_path / "calibration.json").write_text('{"host|GPU-1|driver 580|torch 2.11": {"tflops": "x"}}')
    assert cal({"bf16"}, "cached", bench, tmp_path).tflops == {"bf16": 700.0}


def test_speed_of_light_is_the_larger_of_math_and_memory_time_at_measured_peaks():
    c = Calibration(key="k", measured_at="t", cached=False, tflops={"bf16": 500.0}, tb_s=2.0)
    # 16x2048x6144 bf16: 0.4 GFLOP (0.8 µs at 500 TFLOPS), 25.5 MB (12.7 µs at 2 TB/s): memory-bound.
    m = gemm_metrics(16, 2048, 6144, "bf16", 20.0, "NVIDIA H200", calibration=c)
    assert m.sol_bound == "memory"
    assert m.sol_us == pytest.approx(((16 + 2048) * 6144 * 2 + 16 * 2048 * 2) / 2e12 * 1e6)
    assert m.pct_sol == pytest.approx(100 * m.sol_us / 20.0)
    big = gemm_metrics(8192, 8192, 8192, "bf16", 3000.0, None, calibration=c)
    assert big.sol_bound == "math" and big.sol_us == pytest.approx(2 * 8192**3 / 500e12 * 1e6)
    # A family the GPU was not calibrated for, or no calibration: no speed of light (never the datasheet).
    assert speed_of_light(1e9, 1e6, "fp8", c) == (None, None)
    assert gemm_metrics(16, 2048, 6144, "bf16", 20.0, "NVIDIA H200").pct_sol is None


def _row(backend, median, pct_sol, bound="memory"):
    return Row(
        run_id="r",
        host="h",
        gpu=None,
        slot="h",
        gpu_name="NVIDIA H200",
        label="x",
        backend=backend,
        m=16,
        n=2048,
        k=6144,
        status="ok",
        reason="",
        median_us=median,
        tflops=1.0,
        pct_sol=pct_sol,
        sol_us=median * pct_sol / 100,
        sol_bound=bound,
        case_id=backend,
    )


def test_every_view_shows_the_percent_of_speed_of_light():
    rows = [_row("torch-bf16", 12.0, 80.0), _row("torch-fp8", 9.0, 55.5)]
    doc = rows_document(rows)
    table = doc.sections[0]
    col = table.headers.index("% SoL")
    assert [r[col] for r in table.rows] == ["80% b", "56% b"] and "speed of light" in table.caption
    assert doc.records[0]["pct_sol"] == 80.0 and doc.records[0]["sol_bound"] == "memory"
    pivot = pivot_document(rows)
    assert "80%SoL" in pivot.sections[0].rows[0][-2] and pivot.records[0]["torch-fp8.pct_sol"] == 55.5


def test_a_run_of_an_older_format_gets_params_without_calibration():
    params = {"schema_version": 5, "run_id": "r", "host": "h", "cases": [], "calibration": "fresh"}
    assert "calibration" not in params_for_worker(params, 4)
    assert params_for_worker(params, 5)["calibration"] == "fresh"


def test_a_measurement_that_killed_its_worker_is_not_retried_by_the_restarted_one(tmp_path):
    """A segfault inside a GPU library while calibrating must not take every restarted worker down."""
    key = "host|GPU-1|driver 580|torch 2.11"
    (tmp_path / "calibration.json").write_text(json.dumps({f"{key}|in flight": "fp4"}))  # what the dead one left

    def measure(what):
        if what == "fp4":
            pytest.fail("fp4 measured again after it killed a worker")
        return {"copy": 4.1, "bf16": 700.0}[what], f"fake {what}"

    got = calibrate(
        GPU, {"bf16", "fp4"}, "cached", key=key, measure=measure, datasheet=SHEET, cache=tmp_path / "calibration.json"
    )
    assert got.tflops == {"bf16": 700.0} and "died while measuring" in got.problems["fp4"]
    assert f"{key}|in flight" not in json.loads((tmp_path / "calibration.json").read_text())
    # `calibration: fresh` tries once more.
    again = calibrate(
        GPU,
        {"fp4"},
        "fresh",
        key=key,
        measure=lambda w: (2500.0, "fake") if w == "fp4" else (4.1, "x"),
        datasheet=SHEET,
        cache=tmp_path / "calibration.json",
    )
    assert again.tflops["fp4"] == 2500.0
    # ...and until then later sweeps keep it as a problem instead of dying again.
    (tmp_path / "calibration.json").write_text(json.dumps({f"{key}|in flight": "fp4"}))
    calibrate(
        GPU, {"bf16", "fp4"}, "cached", key=key, measure=measure, datasheet=SHEET, cache=tmp_path / "calibration.json"
    )
    later = calibrate(
        GPU, {"bf16", "fp4"}, "cached", key=key, measure=measure, datasheet=SHEET, cache=tmp_path / "calibration.json"
    )
    assert later.cached and "died while measuring" in later.problems["fp4"]


def test_the_oracles_get_no_speed_of_light():
    """The references compute in fp32 whatever their operand family: a tensor-core roof is not theirs."""
    from worker.contract.catalog import CATALOG
    from worker.contract.schema import CaseSpec
    from worker.sweep.runner import CaseRunner

    runner = CaseRunner("cpu")
    runner.calibration = Calibration(
        key="k", measured_at="t", cached=False, tflops={"bf16": 500.0, "fp4": 2000.0}, tb_s=2.0
    )
    for backend in ("reference-nvfp4", "torch-bf16"):
        case = CaseSpec(backend=backend, m=16, n=64, k=128)
        m = runner._metrics(case, CATALOG[backend], 10.0)
        assert (m.pct_sol is None) == (backend == "reference-nvfp4"), backend


def test_a_sweeps_calibration_setting_reaches_the_worker_and_the_manifest(tmp_path):
    import yaml

    from orchestrator.config.inventory import load_inventory
    from orchestrator.config.sweep import load_sweep
    from orchestrator.execution.remote import job_params
    from orchestrator.planning.plan import build_plan

    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(
        yaml.safe_dump(
            {"name": "s", "backends": ["torch-bf16"], "shapes": [{"m": 16, "n": 64, "k": 64}], "calibration": "fresh"}
        )
    )
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts: [{name: local, transport: local}]\n")
    plan = build_plan(list(load_inventory(inv).hosts), load_sweep(sweep_file), "r")
    assert plan.worker.calibration == "fresh" and job_params(plan, plan.jobs[0]).calibration == "fresh"
    sweep_file.write_text(sweep_file.read_text().replace("fresh", "sometimes"))
    with pytest.raises(Exception, match="calibration"):
        load_sweep(sweep_file)


def test_the_calibration_and_the_facts_come_before_any_user_code_runs(tmp_path, monkeypatch):
    """The controller judges a user kernel's records by the host's facts and calibration
    (worker/contract/physics.py recheck): the families to calibrate are read from the user's file without
    running it, so its code cannot touch what judges it before the facts are written."""
    import builtins

    from worker.backends import userkernel
    from worker.contract.schema import CaseSpec
    from worker.sweep import runner as runner_module

    monkeypatch.setattr(userkernel, "USER_DIR", tmp_path)
    sha = "b" * 64
    userkernel.file_for(sha).write_text(
        'import builtins\nbuiltins.FLEETBENCH_USER_CODE_RAN = True\nFAMILY: str = "fp8"\ndef prepare(a, b, o): ...\n'
    )
    asked = []
    monkeypatch.setattr(
        "worker.measure.calibrate.calibrate", lambda device, families, mode, **kw: asked.append(families)
    )
    cases = [
        CaseSpec(backend="torch-bf16", m=16, n=64, k=128),
        CaseSpec(backend="mine", m=16, n=64, k=128, kernel_sha256=sha),
    ]
    runner_module._calibrate(SimpleNamespace(device=GPU), cases, "cached")
    assert asked == [{"bf16", "fp8"}] and not hasattr(builtins, "FLEETBENCH_USER_CODE_RAN")
    for source, family in (
        ('FAMILY = "fp4"\n', "fp4"),
        ("FAMILY = pick()\n", None),
        ("FAMILY = 'x'\n", None),
        ("(", None),
    ):
        userkernel.file_for(sha).write_text(source)
        assert userkernel.declared_family(sha) == family, source


def test_a_peak_above_the_datasheet_is_measured_again_and_refused_when_it_stays_there(tmp_path):
    # Code under test can write the host's cache: a roof raised there must not hold its records.
    cache = tmp_path / "calibration.json"
    key = "host|GPU-1|driver 580|torch 2.11"
    cal({"bf16"}, "cached", Bench(), tmp_path)
    doc = json.loads(cache.read_text())
    doc[key]["tflops"]["bf16"] = 9000.0
    doc[key]["tb_s"] = 40.0
    cache.write_text(json.dumps(doc))
    bench = Bench()
    again = cal({"bf16"}, "cached", bench, tmp_path)
    assert sorted(bench.calls) == ["bf16", "copy"]  # measured again, not believed
    assert again.tflops == {"bf16": 700.0} and again.tb_s == 4.1 and again.problems == {}
    # A measurement that itself reads beyond the datasheet is a problem, and the datasheet stays the roof.
    inflated = calibrate(
        GPU,
        {"bf16"},
        "fresh",
        key=key,
        measure=lambda w: (1100.0, "fake") if w == "bf16" else (4.1, "fake"),
        datasheet=SHEET,
        cache=cache,
    )
    assert "bf16" not in inflated.tflops and "above the datasheet's 989.4" in inflated.problems["bf16"]
    sol_us, _ = speed_of_light(2 * 8192**3, 0, "bf16", inflated)
    assert sol_us is None  # metrics then has no calibrated roof for bf16; physics takes the datasheet's
    # Within the slack a peak stands (a GPU measured at its datasheet is no forgery).
    near = calibrate(
        GPU,
        {"bf16"},
        "fresh",
        key=key,
        measure=lambda w: (1000.0, "f") if w == "bf16" else (4.9, "f"),
        datasheet=SHEET,
        cache=cache,
    )
    assert near.tflops == {"bf16": 1000.0} and near.tb_s == 4.9
