"""Worker logic on the CPU: support decisions, verdicts, timing statistics, records."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from orchestrator.runs.records import parse_line
from worker.check.verify import THRESHOLDS, verdict
from worker.contract.catalog import CATALOG, support_problem
from worker.contract.metrics import gemm_metrics
from worker.contract.schema import IDENTITY_FIELDS, CaseSpec, Stats, TimingOptions
from worker.contract.stats import median_ci, quantile, summarize
from worker.host.health import assess, decode_reasons
from worker.sweep import runner as runner_mod

# Exactly 3 rounds (min_rounds == rounds): the tests below count the records a case writes.
FAST = TimingOptions(budget_s=0.05, warmup_ms=1, min_samples=3, max_samples=10, min_rounds=3)


@pytest.mark.parametrize(
    "backend,cc,expected",
    [
        (
            "flashinfer-fp4-cutlass",
            (9, 0),
            "needs compute capability >= 10.0, host has 9.0 (this kernel: 10.0, 10.3, 10.7, 11.0, 12.0, 12.1 only)",
        ),
        (
            "sgl-fp4-cutlass",
            (9, 0),
            "needs compute capability >= 10.0, host has 9.0 (this kernel: 10.0, 10.3, 12.0 only)",
        ),
        ("torch-nvfp4", (8, 9), "needs compute capability >= 10.0, host has 8.9"),
        ("flashinfer-fp4-trtllm", (12, 0), "supports compute capability 10.0, 10.3, 10.7 only, host has 12.0"),
        ("flashinfer-fp4-b12x", (10, 0), "supports compute capability 12.0, 12.1 only, host has 10.0"),
        ("torch-fp8", None, "needs a CUDA GPU with compute capability >= 8.9; host has none (CPU)"),
        ("flashinfer-fp4-cutlass", (12, 0), None),
        ("sgl-fp4-cutlass", (12, 0), None),
        ("torch-bf16", None, None),
        ("reference-nvfp4", None, None),
    ],
)
def test_support_is_decided_from_capability_before_anything_runs(backend, cc, expected):
    assert support_problem(CATALOG[backend], 16, 2048, 6144, cc) == expected


def test_shape_constraints_are_unsupported_with_the_rule():
    assert support_problem(CATALOG["sgl-fp4-cutlass"], 16, 2048, 6160, (12, 0)) == "needs K % 32 == 0 (K=6160)"
    assert support_problem(CATALOG["sgl-fp4-cutlass"], 16, 2050, 6144, (12, 0)) == "needs N % 32 == 0 (N=2050)"
    assert support_problem(CATALOG["reference-nvfp4"], 16, 64, 40, None) == "needs K % 16 == 0 for NVFP4 blocks (K=40)"


def test_fp4_backends_are_never_imported_on_a_device_below_10(monkeypatch):
    for mod in [m for m in sys.modules if m.startswith("worker.backends.")]:
        monkeypatch.delitem(sys.modules, mod)
    runner = runner_mod.CaseRunner("cpu")
    for name in ("flashinfer-fp4-cutlass", "sgl-fp4-cutlass", "torch-nvfp4"):
        rec = runner.run(CaseSpec(backend=name, m=16, n=64, k=128, timing=FAST))
        assert rec.status == "unsupported" and "compute capability" in rec.reason
    assert "worker.backends.flashinfer_gemm" not in sys.modules
    assert "worker.backends.sgl_gemm" not in sys.modules


def test_a_missing_library_is_unavailable_with_its_import_error():
    from worker.backends import availability_problem
    from worker.contract.catalog import BackendSpec

    spec = BackendSpec(name="x", module="torch_gemm", family="bf16", import_name="no_such_module_fleetbench")
    assert availability_problem(spec) == "no_such_module_fleetbench is not installed"


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


def test_zeros_wrong_layout_and_nan_fail_loudly():
    torch.manual_seed(0)
    a, b = torch.randn(32, 128), torch.randn(64, 128)
    ref = a @ b.T
    th = THRESHOLDS["bf16"]
    assert verdict(ref.to(torch.bfloat16), ref, None, th).verdict == "pass"
    zeros = verdict(torch.zeros_like(ref), ref, None, th)
    assert zeros.verdict == "fail" and "all zeros" in zeros.detail and zeros.cosine == 0.0
    swapped = verdict(a @ torch.randn(64, 128).T, ref, None, th)
    assert swapped.verdict == "fail" and "rel_err" in swapped.detail
    nan = ref.clone()
    nan[0, 0] = float("nan")
    bad = verdict(nan, ref, None, th)
    assert bad.verdict == "fail" and "NaN" in bad.detail
    json.dumps(bad.model_dump())  # stays valid JSON


def test_fp4_thresholds_accept_nvfp4_error_and_reject_a_wrong_scale():
    from worker.check import nvfp4

    torch.manual_seed(0)
    a, b = torch.randn(64, 512), torch.randn(128, 512)
    out = nvfp4.reference_gemm(a, b).to(torch.bfloat16)
    good = verdict(out, nvfp4.reference_gemm(a, b), a @ b.T, THRESHOLDS["fp4"])
    assert good.verdict == "pass" and 0.05 < good.rel_err_bf16 < 0.3
    scaled = verdict(out * 1.5, nvfp4.reference_gemm(a, b), a @ b.T, THRESHOLDS["fp4"])
    assert scaled.verdict == "fail"  # cosine alone would miss a wrong global scale; rel_err does not


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


def test_metrics_count_fp4_scale_bytes_and_peak():
    m = gemm_metrics(16, 2048, 6144, "fp4", 10.0, "NVIDIA RTX PRO 6000 Blackwell Server Edition")
    flops = 2 * 16 * 2048 * 6144
    assert m.tflops == pytest.approx(flops / 10e-6 / 1e12)
    assert m.bytes == pytest.approx((16 + 2048) * 6144 * (0.5 + 1 / 16) + 16 * 2048 * 2)
    assert m.pct_peak_flops == pytest.approx(100 * m.tflops / 2015.2)
    assert gemm_metrics(16, 64, 64, "bf16", 1.0, None).pct_peak_flops is None


def test_health_taints_on_clock_drop_or_new_throttling():
    from worker.contract.schema import HealthSnapshot

    before = HealthSnapshot(sm_clock_mhz=1980, throttle_reasons=["sw_power_cap"])
    assert not assess(before, HealthSnapshot(sm_clock_mhz=1950, throttle_reasons=["sw_power_cap"])).tainted
    dropped = assess(before, HealthSnapshot(sm_clock_mhz=1500))
    assert dropped.tainted and "1980 -> 1500" in dropped.taint_reason
    hot = assess(before, HealthSnapshot(sm_clock_mhz=1980, throttle_reasons=decode_reasons(0x20 | 0x4)))
    assert hot.tainted and "sw_thermal" in hot.taint_reason
    # Under the power cap the controller moves the clock on its own: the case's sustained state, no taint.
    assert not assess(before, HealthSnapshot(sm_clock_mhz=1470, throttle_reasons=["sw_power_cap"])).tainted


def test_case_id_is_what_is_measured_never_how_it_is_timed():
    a = CaseSpec(backend="torch-bf16", m=16, n=64, k=128, label="x")
    timed_otherwise = CaseSpec(
        backend="torch-bf16",
        m=16,
        n=64,
        k=128,
        label="x",
        timing=TimingOptions(l2="hot", budget_s=0.35, min_samples=50, mode="events"),
    )
    assert a.case_id == timed_otherwise.case_id
    for change in (
        {"label": "y"},
        {"backend": "torch-fp8"},
        {"m": 32},
        {"n": 32},
        {"k": 64},
        {"out_dtype": "float16"},
        {"seed": 1},
    ):
        assert a.model_copy(update=change).case_id != a.case_id, change
    assert a.case_id == CaseSpec.model_validate_json(a.model_dump_json()).case_id
    # A new timing option (a field the schema gains later) cannot change any id: ids hash identity only.
    assert set(IDENTITY_FIELDS).isdisjoint(TimingOptions.model_fields)


def test_records_round_trip_through_the_controller_parser():
    rec = runner_mod.crashed_record(CaseSpec(backend="torch-bf16", m=1, n=2, k=16), "worker process killed by SIGSEGV")
    back = parse_line(rec.model_dump_json())
    assert back == rec
    stats = Stats(
        method="m",
        median_us=1,
        p10_us=1,
        p90_us=1,
        mean_us=1,
        stdev_us=0,
        n=1,
        rel_ci=0,
        calls_per_sample=1,
        l2="hot",
        samples_us=[1.0],
    )
    assert Stats.model_validate_json(stats.model_dump_json()) == stats


def test_gpu_lock_serializes_and_names_the_holder(tmp_path):
    from worker.host.gpulock import GpuLockTimeout, gpu_lock

    with gpu_lock("run-A", "host1", 0, lock_dir=tmp_path, ids=["GPU-1234"]) as held:
        assert held == "GPU-1234"
        with pytest.raises(GpuLockTimeout, match="locked by run run-A \\(host host1"):
            with gpu_lock("run-B", "host2", 0.3, lock_dir=tmp_path, ids=["GPU-1234"]):
                pass
        with gpu_lock("run-C", "host3", 0, lock_dir=tmp_path, ids=["GPU-other"]) as other:
            assert other == "GPU-other"  # another GPU is another lock
    with gpu_lock("run-B", "host2", 0, lock_dir=tmp_path, ids=["GPU-1234"]):
        pass  # released when the holder left
    with gpu_lock("run-D", "h", 0, lock_dir=tmp_path, ids=[]) as none:
        assert none is None  # nothing to lock on a CPU host


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


def test_cuda_home_is_the_same_for_a_shell_and_an_ssh_session(tmp_path):
    """FlashInfer's JIT build files name the toolkit's path; a shell (PATH through a symlink) and an SSH
    session (another PATH) must give the worker the same one, or each rebuilds the other's modules."""
    from worker.host.buildenv import stable_build_env

    real = tmp_path / "cuda-13.0"
    (real / "bin").mkdir(parents=True)
    nvcc = real / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    (tmp_path / "cuda").symlink_to(real)
    link = tmp_path / "cuda"
    home = {"HOME": str(tmp_path / "home")}
    shell = stable_build_env({**home, "PATH": f"{link / 'bin'}:/usr/bin"})
    other = stable_build_env({**home, "PATH": f"/usr/bin:{real / 'bin'}"})
    named = stable_build_env({**home, "PATH": "/usr/bin", "CUDA_HOME": str(link)})  # the H200's shell: via a symlink
    via_cuda_path = stable_build_env({**home, "PATH": "/usr/bin", "CUDA_PATH": str(link)})
    assert shell == other == named == via_cuda_path == {"CUDA_HOME": str(real)}
    assert stable_build_env({**home, "PATH": "/usr/bin", "CUDA_HOME": str(real)}) == {}  # already one spelling
    assert (
        stable_build_env({"HOME": str(tmp_path / "h2"), "PATH": "/usr/bin", "CUDA_HOME": str(tmp_path / "none")}) == {}
    )  # no toolkit: untouched


def test_a_tool_running_flashinfer_itself_takes_the_workers_build_variables(tmp_path, monkeypatch):
    """A benchmark that calls FlashInfer in its own process (or starts `python -m worker run` itself) from
    the H200's shell (CUDA_HOME through a symlink) rebuilt the JIT module the sweeps had built, and the next
    sweep rebuilt it back (~25 s each): adopt_build_env gives it the worker child's variables."""
    from worker.host.buildenv import adopt_build_env

    real = tmp_path / "cuda-13.0"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (real / "bin" / "nvcc").chmod(0o755)
    (tmp_path / "cuda").symlink_to(real)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert adopt_build_env() == {"CUDA_HOME": str(real)}
    assert os.environ["CUDA_HOME"] == str(real)
    assert adopt_build_env() == {}  # already the worker's


def test_a_session_without_the_compiler_variables_gets_the_hosts_last_ones(tmp_path):
    """Measured on the H200: its shell sets CC/CXX, an SSH session does not, and FlashInfer rebuilt its
    JIT module (~40 s) at every switch because the compiler in the build file changed."""
    from worker.host.buildenv import describe_added, encode_added, record_path, stable_build_env

    gcc = tmp_path / "opt-gcc" / "gcc"
    gcc.parent.mkdir()
    gcc.write_text("#!/bin/sh\n")
    gcc.chmod(0o755)
    home = str(tmp_path / "home")
    no_toolkit = str(tmp_path / "no-cuda")  # so that this machine's own toolkit stays out of the test
    shell = {
        "HOME": home,
        "PATH": "/usr/bin:/bin",
        "CUDA_HOME": no_toolkit,
        "CC": str(gcc),
        "FLASHINFER_EXTRA_CFLAGS": "-O3,-g",
    }
    ssh = {"HOME": home, "PATH": "/usr/bin:/bin", "CUDA_HOME": no_toolkit}
    assert stable_build_env(shell) == {}  # the shell's own values: nothing added, but remembered
    assert json.loads(record_path(shell).read_text()) == {
        "CC": str(gcc),
        "CUDA_HOME": no_toolkit,
        "FLASHINFER_EXTRA_CFLAGS": "-O3,-g",
    }
    added = stable_build_env(ssh)
    assert added == {"CC": str(gcc), "FLASHINFER_EXTRA_CFLAGS": "-O3,-g"}
    notes = describe_added(encode_added(added, ssh), {**ssh, **added})
    assert len(notes) == 2 and f"CC={gcc}" in notes[0] and "had none" in notes[0]
    # A session that names its own compiler keeps it and becomes what the host remembers.
    assert stable_build_env({**ssh, "CC": "/bin/sh"}) == {"FLASHINFER_EXTRA_CFLAGS": "-O3,-g"}
    assert stable_build_env(ssh)["CC"] == "/bin/sh"
    # A remembered compiler that is gone is not handed on; a torn record is ignored, never fatal.
    stable_build_env(shell)
    gcc.unlink()
    assert "CC" not in stable_build_env(ssh)
    record_path(ssh).write_text('{"CC": ')
    assert stable_build_env(ssh) == {}
    # Nothing to remember where the home is read-only: the run goes on.
    assert stable_build_env({"HOME": "/proc/none", "PATH": "/usr/bin", "CUDA_HOME": no_toolkit, "CC": "/bin/sh"}) == {}


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
    monkeypatch.setattr(r, "_allocated", lambda: allocated[0])

    def prepare(case, spec):
        allocated[0] += 100
        return (lambda i: None), [("a", "b")], 1

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

    opts = TimingOptions(rounds=3)
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


def test_out_of_memory_with_graphs_kept_frees_them_and_tries_the_round_once_more(monkeypatch):
    r, built, _ = _kept_runner(monkeypatch, budget=10**6)
    case = CaseSpec(backend="torch-bf16", m=16, n=256, k=512, timing=TimingOptions(rounds=3))
    r.kept["other"] = runner_mod.Kept(None, None, 1, None, object(), 100)
    calls = []

    class OutOfMemoryError(RuntimeError):
        pass

    def again(case, cps):
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
