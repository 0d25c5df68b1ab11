"""Profiling a case of a stored run under Nsight Compute (issue 32), against a stand-in `ncu` on PATH: the
ncu command line and its filters, the report read back and parsed, the counter diff of an outlier
against the fleet's median host, a host without ncu, counters not permitted, a host that fails while the
others go on, and Ctrl-C. The stand-in runs the real profiled process (the case, on this CPU) and answers
with a report in ncu's own CSV shape; the lent GPU's real ncu is exercised by benchmarks/fleet/profile_check.py."""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_output import cli_json
from conftest import processes_under, start_cli
from storedruns import write_ok_attempt

from orchestrator.analysis import profile as ap
from orchestrator.analysis.profile import at_clock_us
from orchestrator.cli import main
from orchestrator.config.inventory import load_inventory
from orchestrator.config.sweep import Sweep
from orchestrator.execution.launch import prepare_run
from orchestrator.planning.plan import build_plan, new_run_id
from orchestrator.runs.ncureport import (
    LIMIT_MAX_KERNELS,
    ProfileFormatError,
    convert,
    parse_ncu_csv,
    short_name,
    summarize,
)
from orchestrator.runs.profiles import latest_fleet, load_profiles
from orchestrator.runs.store import RunStore
from orchestrator.views.profile import explain, limit_text, profile_entry
from worker.contract.profile import ProfiledRun, ProfileOptions
from worker.contract.schema import CaseRecord, CaseSpec, FactsRecord, RoundStats, TimingOptions
from worker.contract.stats import summarize as summarize_samples
from worker.tools.profile import NCU_PLACES, classify_ncu_output, ncu_argv

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(T1::Params)"
COPY = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 8)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)"

# The stand-in: `--version`; `--import REPORT --csv --page raw ...` prints the report (which it wrote as
# CSV); anything else is a capture: log the argv, run the profiled process as ncu would (unless told to
# fail first), then write the report, a row per kernel launch, in the raw page's shape (a units row,
# thousands separators). FAKE_NCU: ok | perm (counters refused) | hang (never returns) | nokernels;
# FAKE_NCU_OLD: an ncu that knows neither the extra metrics nor `--print-units`.
STAND_IN = r"""#!{python}
import json, os, pathlib, subprocess, sys, time
args = sys.argv[1:]
log = os.environ.get("FAKE_NCU_LOG")
if log:
    with open(log, "a") as f:
        f.write(json.dumps(args) + "\n")
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
          "Version 2025.3.1.0 (build 36398880) (public-release)")
    sys.exit(0)
if args[:1] == ["--import"]:
    if "--print-units" in args and os.environ.get("FAKE_NCU_OLD"):
        sys.stderr.write("==ERROR== unrecognised option '--print-units'\n")
        sys.exit(1)
    sys.stdout.write(pathlib.Path(args[1]).read_text())
    sys.exit(0)
opts, i = {}, 0
while i < len(args) and args[i].startswith("--"):
    if args[i] == "--force-overwrite":
        i += 1
    else:
        opts[args[i]] = args[i + 1]
        i += 2
target = args[i:]
mode = os.environ.get("FAKE_NCU", "ok")
if os.environ.get("FAKE_NCU_OLD") and "--metrics" in args:
    print("==ERROR== Failed to find metric dram__bytes_read.sum")
    sys.exit(1)
print("==PROF== Connected to process %d (%s)" % (os.getpid(), target[0]), flush=True)
if mode == "hang":
    pathlib.Path(os.environ["FAKE_NCU_STARTED"]).touch()
    time.sleep(300)
rc = subprocess.call(target)
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0. For instructions on enabling permissions and to get more information "
          "see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
    sys.exit(rc)
if rc:
    print("==ERROR== The application returned an error code (%d)." % rc)
said = json.loads(pathlib.Path(target[target.index("--out") + 1]).read_text())
if mode == "nokernels" or not said.get("calls"):
    print("==WARNING== No kernels were profiled.")
    sys.exit(rc)
env = os.environ
kernels = [(env.get("FAKE_NCU_KERNEL", "GEMM"), float(env.get("FAKE_NCU_TIME_NS", "14240")))]
if env.get("FAKE_NCU_EXTRA_KERNEL"):
    kernels.append((env["FAKE_NCU_EXTRA_KERNEL"], 6500.0))
metrics = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__cycles_elapsed.avg.per_second",
           "dram__cycles_elapsed.avg.per_second", "launch__registers_per_thread",
           "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
           "dram__bytes_read.sum", "dram__bytes_write.sum"]
units = ["nsecond", "%", "%", "%", "cycle/second", "cycle/second", "register/thread", "byte/block", "byte/block",
         "byte", "byte"]
ident = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
         "Grid Size", "Device", "CC"]
q = lambda cells: ",".join('"%s"' % c for c in cells)
rows = [q(ident + metrics), q([""] * len(ident) + units)]
sm_hz = float(env.get("FAKE_NCU_SM_HZ", "1755000000"))
n = 0
for call in range(said["calls"]):
    for name, ns in kernels:
        values = ["{:,.0f}".format(ns), "48.20", "42.10", "31.50", "{:,.0f}".format(sm_hz), "2,619,000,000", "168",
                  "0", "{:,.0f}".format(73728), "{:,.0f}".format(31457280), "{:,.0f}".format(4194304)]
        rows.append(q([str(n), "1", "python3", "127.0.0.1", {"GEMM": GEMM, "COPY": COPY}.get(name, name), "1", "7",
                       "(128, 1, 1)", "(16, 8, 1)", "0", "9.0"] + values))
        n += 1
report = pathlib.Path(opts["--export"] + ".ncu-rep")
report.write_text("\n".join(rows) + "\n")
print("==PROF== Disconnected from process")
print("==PROF== Report: %s" % report)
sys.exit(rc)
"""


def stand_in(tmp_path: Path) -> Path:
    """A folder holding the stand-in `ncu`."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    ncu = bindir / "ncu"
    source = STAND_IN.replace("{python}", sys.executable)
    source = source.replace('{"GEMM": GEMM, "COPY": COPY}', json.dumps({"GEMM": GEMM, "COPY": COPY}))
    ncu.write_text(source)
    ncu.chmod(0o755)
    return bindir


def hosts_file(tmp_path: Path, hosts: dict[str, dict], bindir: Path | None = None) -> Path:
    """Local hosts, each with its own workdir; PATH starts with `bindir` (the stand-in), FAKE_NCU_* as given."""
    path_var = f"{bindir}:{os.environ['PATH']}" if bindir else os.environ["PATH"]
    entries = [
        {
            "name": name,
            "transport": "local",
            "python": sys.executable,
            "workdir": str(tmp_path / f"work-{name}"),
            "env": {"PATH": path_var, "FAKE_NCU_LOG": str(tmp_path / f"ncu-{name}.log"), **fake},
        }
        for name, fake in hosts.items()
    ]
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": entries}))
    return path


def stored_run(
    tmp_path: Path,
    inventory_path: Path,
    factors: dict[str, float],
    *,
    ms=(16,),
    l2: str = "cold",
    median_us: float = 20.0,
    sm_clock_mhz: int = 1485,
) -> RunStore:
    """A run of torch-bf16 M x 64 x 128 stored as `fleetbench run` stores it (manifest, scripts, worker),
    with results written here: on each host the case took `median_us` x its factor, in one round at
    `sm_clock_mhz`."""
    inventory = load_inventory(inventory_path)
    sweep = Sweep(
        name="prof",
        backends=["torch-bf16"],
        shapes=[{"m": list(ms), "n": 64, "k": 128, "label": "p"}],
        timing={
            "budget_s": 0.05,
            "warmup_ms": 1,
            "min_samples": 3,
            "max_samples": 20,
            "rounds": 1,
            "l2": l2,
            "settle_ms": 0,
        },
    )
    plan = build_plan([h for h in inventory.hosts if h.name in factors], sweep, new_run_id("prof"))
    store, _, _ = prepare_run(plan, sweep, inventory, tmp_path / "runs")
    rng = np.random.default_rng(1)
    for job in plan.jobs:
        lines = [
            FactsRecord(
                hostname=job.host.name,
                python="3.12",
                platform="linux",
                worker_version="0.2.0",
                device="cuda",
                gpu_name="NVIDIA H200",
                compute_capability="9.0",
            ).model_dump_json()
        ]
        for case in job.cases:
            samples = list(median_us * factors[job.host.name] * rng.lognormal(0.0, 0.005, 30))
            stats = summarize_samples(samples, method="cuda-graph", calls_per_sample=100, l2=l2)
            stats = stats.model_copy(
                update={
                    "rounds": [
                        RoundStats(median_us=stats.median_us, n=stats.n, rel_ci=stats.rel_ci, sm_clock_mhz=sm_clock_mhz)
                    ]
                }
            )
            lines.append(
                CaseRecord(
                    case_id=case.case_id, case=case, status="ok", timing=stats, started_at="t", duration_s=0.1
                ).model_dump_json()
            )
        write_ok_attempt(store, job, lines)
    return store


def captures(tmp_path: Path, host: str) -> list[list[str]]:
    """The stand-in's capture command lines on `host` (not --version, not --import)."""
    path = tmp_path / f"ncu-{host}.log"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [a for a in lines if a != ["--version"] and a[:1] != ["--import"]]


# -- the ncu command line, what ncu says, its CSV ----------------------------------------------------------
def case_spec(l2: str = "cold") -> CaseSpec:
    return CaseSpec(backend="torch-bf16", m=1024, n=2048, k=6144, timing=TimingOptions(l2=l2))


def test_ncu_runs_with_the_sweeps_clock_state_a_range_the_case_opens_and_its_l2_state():
    target = ["python3", "-m", "worker", "profile-case", "--params", "p.json", "--case", "c", "--out", "o.json"]
    argv = ncu_argv("/x/ncu", "/w/c1", case_spec("cold"), ProfileOptions(), target)
    assert argv[0] == "/x/ncu" and argv[-len(target) :] == target
    options = argv[1 : -len(target)]
    pairs = dict(zip(options[::2], options[1::2]))
    assert pairs["--profile-from-start"] == "off"  # warm-up and settling lie outside the profiled range
    assert pairs["--clock-control"] == "none"  # the clock state the sweep measured in
    assert pairs["--cache-control"] == "all" and pairs["--set"] == "basic" and pairs["--export"] == "/w/c1"
    assert pairs["--launch-count"] == "64" and "--kernel-name" not in argv and options[-1] == "--force-overwrite"
    hot = ncu_argv("ncu", "b", case_spec("hot"), ProfileOptions(kernel_regex="gemm|xmma", max_kernels=5), target)
    assert hot[hot.index("--cache-control") + 1] == "none"
    assert hot[hot.index("--kernel-name") + 1] == "regex:gemm|xmma" and hot[hot.index("--launch-count") + 1] == "5"


@pytest.mark.parametrize(
    "output, status, words",
    [
        (
            "==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
            "Performance Counters on the target device 0.\n",
            "no-permission",
            "NVreg_RestrictProfilingToAdminUsers=0",
        ),
        ("==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n", "failed", "counters cannot be read here"),
        ("==ERROR== Failed to find metric dram__bytes_nope.sum\n", "failed", "ncu: Failed to find metric"),
        ("==PROF== Connected\n==WARNING== No kernels were profiled.\n", "failed", "profiled no kernel"),
        (
            "==PROF== Connected\n==ERROR== The application returned an error code (1).\n==PROF== Report: r.ncu-rep\n",
            "ok",
            "",
        ),
        ("==PROF== Connected to process 1\n==PROF== Report: /w/c1.ncu-rep\n", "ok", ""),
    ],
)
def test_what_ncu_printed_is_classified_with_what_to_change(output, status, words):
    got, reason = classify_ncu_output(output)
    assert got == status and words in reason


RAW = (
    "\n".join(
        [
            "==PROF== Connected to process 7 (python3)",
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device",'
            '"CC","gpu__time_duration.sum","sm__cycles_elapsed.avg.per_second",'
            '"dram__throughput.avg.pct_of_peak_sustained_elapsed","launch__shared_mem_per_block_static",'
            '"launch__registers_per_thread"',
            '"","","","","","","","","","","","usecond","cycle/nsecond","%","Kbyte/block","register/thread"',
            f'"0","7","python3","h","{GEMM}","1","7","(128, 1, 1)","(16, 8, 1)","0","9.0","14.24","1.74","42.10","73.73","168"',
            f'"1","7","python3","h","{GEMM}","1","7","(128, 1, 1)","(16, 8, 1)","0","9.0","14.30","1.74","41.90","73.73","168"',
            f'"2","7","python3","h","{GEMM}","1","7","(128, 1, 1)","(16, 8, 1)","0","9.0","1,014.10","n/a","41.00","73.73","168"',
        ]
    )
    + "\n"
)
DETAILS_HEAD = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)
DETAILS = (
    "\n".join(
        [DETAILS_HEAD]
        + [
            f'"0","7","p","h","k1","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0","{section}","{metric}","{unit}","{value}"'
            for section, metric, unit, value in (
                ("GPU Speed Of Light Throughput", "gpu__time_duration.sum", "msecond", "0.02"),
                ("GPU Speed Of Light Throughput", "sm__cycles_elapsed.avg.per_second", "Ghz", "1.98"),
                ("Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active", "%", "50.00"),
            )
        ]
    )
    + "\n"
)


def test_the_raw_page_is_read_past_noise_with_its_units_and_thousands_separators():
    launches = parse_ncu_csv(RAW)
    assert [round(x["time_us"], 2) for x in launches] == [14.24, 14.30, 1014.10]
    assert launches[0]["sm_mhz"] == pytest.approx(1740.0) and launches[2]["sm_mhz"] is None  # n/a stays unknown
    assert launches[0]["smem_static_bytes"] == pytest.approx(73730.0) and launches[0]["registers"] == 168
    assert launches[0]["dram_pct"] == pytest.approx(42.1) and launches[0]["grid"] == "(16, 8, 1)"
    assert launches[0]["occupancy_pct"] is None  # not collected: absent, not zero


def test_the_details_page_is_read_too():
    (launch_,) = parse_ncu_csv(DETAILS)
    assert launch_["name"] == "k1" and launch_["time_us"] == pytest.approx(20.0)
    assert launch_["sm_mhz"] == pytest.approx(1980.0) and launch_["occupancy_pct"] == 50.0


@pytest.mark.parametrize(
    "value, unit, dimension, expected",
    [
        (14240, "nsecond", "time", 14.24),
        (1.424e-05, "second", "time", 14.24),
        (14.24, "usecond", "time", 14.24),
        (1.74e9, "cycle/second", "frequency", 1740.0),
        (1.74, "cycle/nsecond", "frequency", 1740.0),
        (1.74, "GHz", "frequency", 1740.0),
        (1740, "Mhz", "frequency", 1740.0),
        (73.728, "Kbyte/block", "bytes", 73728.0),
        (31457280, "byte", "bytes", 31457280.0),
        (48.2, "%", "pct", 48.2),
        (5, "furlong", "time", None),
        (5, "fortnight/second", "frequency", None),
    ],
)
def test_units_are_converted_and_an_unknown_unit_is_never_guessed(value, unit, dimension, expected):
    got = convert(value, unit, dimension)
    assert got == (None if expected is None else pytest.approx(expected))


def test_a_csv_without_a_kernel_column_is_refused():
    with pytest.raises(ProfileFormatError):
        parse_ncu_csv("==PROF== nothing here\n")


def test_kernel_names_are_shortened_to_the_kernel_itself():
    assert short_name(GEMM) == "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8"
    assert short_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_kernel__5x_cublas").startswith(
        "sm90_xmma_gemm"
    )
    assert len(short_name(COPY)) <= 72 and short_name(COPY).startswith("at::native::elementwise_kernel")


def launch(name: str, us: float, **counters) -> dict:
    base = {
        "id": "0",
        "name": name,
        "block": "(128, 1, 1)",
        "grid": "(16, 8, 1)",
        "time_us": us,
        "sm_pct": 48.0,
        "memory_pct": 45.0,
        "dram_pct": 42.0,
        "occupancy_pct": 31.0,
        "theoretical_occupancy_pct": 37.5,
        "sm_mhz": 1755.0,
        "dram_mhz": 2619.0,
        "registers": 168.0,
        "smem_static_bytes": 0.0,
        "smem_dynamic_bytes": 73728.0,
        "dram_read_bytes": 3e7,
        "dram_write_bytes": 4e6,
        "waves": 0.5,
    }
    return {**base, **counters}


def profile_of(*kernels: tuple, calls: int = 3):
    return summarize([launch(*k[:2], **(k[2] if len(k) > 2 else {})) for _ in range(calls) for k in kernels], calls)


def test_a_summary_adds_up_each_call_and_says_when_it_cannot():
    s = profile_of(("gemm", 14.0), ("copy", 6.0))
    assert s.per_call_us == pytest.approx(20.0) and [k.per_call for k in s.kernels] == [1.0, 1.0]
    assert s.kernels[0].smem_bytes == 73728.0 and s.kernels[0].dram_gb_s == pytest.approx(34e6 / 14.0 / 1e3)
    capped = summarize([launch("gemm", 14.0)] * 4, calls=3, max_kernels=4)
    assert capped.per_call_us is None and [(x.code, x.facts) for x in capped.limits] == [
        (LIMIT_MAX_KERNELS, {"max_kernels": 4})
    ]
    assert limit_text(capped.limits[0]) == "ncu stopped at 4 kernels (--max-kernels): the calls are not all profiled"
    odd = summarize([launch("gemm", 14.0)] * 4, calls=3, kernel_regex="gemm")
    assert [limit_text(x) for x in odd.limits] == [
        "4 kernel launches do not divide into 3 calls: no time per call",
        "only kernels whose name matches 'gemm' (--kernel)",
    ]


def test_a_profile_at_the_sweeps_clock_is_its_sm_cycles_over_that_clock():
    s = profile_of(("gemm", 34.88, {"sm_mhz": 1677.0}), ("copy", 6.0, {"sm_mhz": 1980.0}))
    assert s.per_call_cycles == pytest.approx(34.88 * 1677 + 6.0 * 1980)
    assert at_clock_us(s.as_dict(), 1485.0) == pytest.approx((34.88 * 1677 + 6.0 * 1980) / 1485)
    assert at_clock_us(s.as_dict(), None) is None
    assert summarize([launch("gemm", 14.0, sm_mhz=None)] * 3, calls=3).per_call_cycles is None


@pytest.mark.parametrize(
    "a, b, words",
    [
        ([("gemm_tn", 14.0)], [("gemm_nn", 17.0)], "a different kernel: B runs gemm_nn"),
        ([("gemm", 14.0)], [("gemm", 14.0), ("copy", 6.0)], "B runs more kernels per call: copy"),
        (
            [("gemm", 14.0, {"sm_mhz": 1755.0})],
            [("gemm", 17.4, {"sm_mhz": 1410.0})],
            "lower SM clock: 1410 MHz on B vs 1755",
        ),
        (
            [("gemm", 14.0, {"dram_pct": 85.0})],
            [("gemm", 16.5, {"dram_pct": 85.0, "dram_mhz": 2100.0})],
            "memory-bound (DRAM 85% busy on A) at lower bandwidth on B",
        ),
        ([("gemm", 14.0)], [("gemm", 14.1)], "outside the kernels' own execution"),
        ([("gemm", 14.0)], [("gemm", 16.0, {"grid": "(32, 8, 1)"})], "another launch configuration (grid (32, 8, 1)"),
        ([("gemm", 14.0)], [("gemm", 16.0, {"occupancy_pct": 20.0})], "lower achieved occupancy on B: 20% vs 31%"),
        ([("gemm", 14.0)], [("gemm", 16.0)], "the counters name no cause"),
    ],
)
def test_the_counter_diff_names_the_likely_cause(a, b, words):
    diff = explain(profile_of(*a), profile_of(*b))
    assert words in diff.cause, diff.cause


def test_a_side_without_a_time_per_call_is_not_compared_and_says_why():
    capped = summarize([launch("gemm", 14.0)] * 4, calls=3, max_kernels=4)
    assert explain(profile_of(("gemm", 14.0)), capped).cause == (
        "cannot compare: ncu stopped at 4 kernels (--max-kernels): the calls are not all profiled"
    )
    assert explain(profile_of(("gemm", 14.0)), profile_of()).cause == "cannot compare: a side has no kernel"


@pytest.mark.parametrize(
    "a, b, code",
    [
        ([("gemm", 14.0)], [], ap.CAUSE_CANNOT_COMPARE),
        ([("gemm_tn", 14.0)], [("gemm_nn", 17.0)], ap.CAUSE_DIFFERENT_KERNEL),
        ([("gemm", 14.0)], [("gemm", 14.0), ("copy", 6.0)], ap.CAUSE_MORE_KERNELS),
        ([("gemm", 14.0), ("copy", 6.0)], [("gemm", 14.0)], ap.CAUSE_FEWER_KERNELS),
        ([("gemm", 14.0)], [("gemm", 14.0), ("gemm", 14.0)], ap.CAUSE_LAUNCH_COUNT),
        ([("gemm", 14.0)], [("gemm", None)], ap.CAUSE_NO_KERNEL_TIME),
        ([("gemm", 14.0, {"sm_mhz": 1755.0})], [("gemm", 17.4, {"sm_mhz": 1410.0})], ap.CAUSE_SM_CLOCK),
        (
            [("gemm", 14.0, {"dram_pct": 85.0})],
            [("gemm", 16.5, {"dram_pct": 85.0, "dram_mhz": 2100.0})],
            ap.CAUSE_MEMORY_BOUND,
        ),
        ([("gemm", 14.0)], [("gemm", 16.0, {"dram_read_bytes": 40e6})], ap.CAUSE_MORE_DRAM_BYTES),
        ([("gemm", 14.0)], [("gemm", 14.1)], ap.CAUSE_OUTSIDE_KERNELS),
        ([("gemm", 14.0)], [("gemm", 16.0, {"grid": "(32, 8, 1)"})], ap.CAUSE_LAUNCH_CONFIG),
        ([("gemm", 14.0)], [("gemm", 16.0, {"occupancy_pct": 20.0})], ap.CAUSE_LOWER_OCCUPANCY),
        ([("gemm", 14.0)], [("gemm", 16.0)], ap.CAUSE_NONE_NAMED),
    ],
)
def test_the_counter_diff_decides_a_cause_code_apart_from_its_words(a, b, code):
    found = ap.diagnose(profile_of(*a), profile_of(*b))
    assert found.cause.code == code, found.cause
    assert isinstance(found.cause.facts, dict) and not any(isinstance(d, str) for d in found.details)


def test_the_counter_diff_details_are_codes_with_their_numbers():
    found = ap.diagnose(
        profile_of(("gemm", 14.0, {"sm_mhz": 1755.0})),
        profile_of(("gemm", 17.4, {"sm_mhz": 1410.0})),
        ProfiledRun(gpu_processes=0, sm_clock_mhz=1980),
        ProfiledRun(gpu_processes=1, sm_clock_mhz=1500, throttle_reasons=["sw_thermal"]),
    )
    assert found.cause.facts["b_mhz"] == 1410.0 and found.cause.facts["a_mhz"] == 1755.0
    codes = [d.code for d in found.details]
    assert codes[:3] == [ap.DETAIL_GPU_PROCESSES, ap.DETAIL_NVML_CLOCK, ap.DETAIL_THROTTLED], codes
    assert found.details[0].facts == {"b": 1, "a": 0}
    counters = {d.facts["counter"]: (d.facts["b"], d.facts["a"]) for d in found.details[3:]}
    assert counters["sm-clock"] == (1410.0, 1755.0) and "dram-bandwidth" in counters  # the same bytes, slower


def test_another_process_on_the_flagged_gpu_is_named():
    diff = explain(
        profile_of(("gemm", 14.0)),
        profile_of(("gemm", 16.0)),
        ProfiledRun(gpu_processes=0),
        ProfiledRun(gpu_processes=1, sm_clock_mhz=1980),
    )
    assert "another process on B's GPU (1)" in diff.cause
    assert any("1 other processes on B's GPU" in d for d in diff.details)


# -- fleetbench profile, end to end on local hosts --------------------------------------------------------
def test_a_case_is_profiled_with_the_runs_own_worker_stored_and_shown(tmp_path, capsys):
    bindir = stand_in(tmp_path)
    inv = hosts_file(tmp_path, {"h1": {}}, bindir)
    store = stored_run(tmp_path, inv, {"h1": 1.0}, ms=(16, 32), median_us=14.9)
    code = main(["profile", f"{store.dir}:h1", "--m", "16", "--kernel", "gemm", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (entry,) = cli_json(out)
    assert entry["status"] == "ok" and entry["slot"] == "h1" and entry["m"] == 16
    assert entry["per_call_us"] == pytest.approx(14.24) and entry["sweep_median_us"] == pytest.approx(14.9, rel=0.02)
    # ncu ran the kernel at 1755 MHz, the sweep's rounds at 1485: at the sweep's clock it takes 14.24 x 1755 / 1485
    assert entry["ncu_sm_mhz"] == pytest.approx(1755.0) and entry["sweep_sm_clock_mhz"] == 1485
    assert entry["at_sweep_clock_us"] == pytest.approx(14.24 * 1755 / 1485)
    assert entry["kernels"][0]["short"].startswith("cutlass_80_tensorop") and entry["kernels"][0]["per_call"] == 1.0
    assert entry["run"]["calls"] == 3 and entry["run"]["device"] == "cpu"  # the profiled process ran the case
    assert entry["ncu_version"] == "2025.3.1.0"
    assert entry["notes"] == ["only kernels whose name matches 'gemm' (--kernel)"]
    (capture,) = captures(tmp_path, "h1")
    assert capture[capture.index("--kernel-name") + 1] == "regex:gemm" and "--clock-control" in capture
    assert capture[capture.index("profile-case") - 2 : capture.index("profile-case")] == ["-m", "worker"]
    # Stored as data in the run's folder: the record (ncu's CSV inside), its summary, the report itself.
    (stored,), problems = load_profiles(store)
    assert not problems and stored.report is not None and stored.report.read_text().startswith('"ID"')
    assert '"Kernel Name"' in stored.record.csv and stored.summary["per_call_us"] == pytest.approx(14.24)
    assert json.loads((stored.path.parent / "params.json").read_text())["options"]["kernel_regex"] == "gemm"
    assert main(["profile", f"{store.dir}:h1", "--m", "16"]) == 0  # the table; a second profile beside the first
    table = capsys.readouterr().out
    assert "cutlass_80_tensorop" in table and "14.24" in table and "1755" in table and "1485" in table
    assert len(load_profiles(store)[0]) == 2
    # The summary keeps what it leaves out as codes; a format 1 file's notes, stored as words, read as they are.
    assert stored.summary["limits"] == [{"code": "kernel-filter", "facts": {"regex": "gemm"}}]
    doc = json.loads(stored.path.read_text())
    doc["format"], doc["summary"]["notes"] = 1, ["only kernels whose name matches 'gemm' (--kernel)"]
    del doc["summary"]["limits"]
    stored.path.write_text(json.dumps(doc))
    old = next(p for p in load_profiles(store)[0] if p.path == stored.path)
    assert profile_entry(old)["notes"] == entry["notes"]


def test_an_ncu_without_the_extra_metrics_or_base_units_still_profiles(tmp_path, capsys):
    bindir = stand_in(tmp_path)
    inv = hosts_file(tmp_path, {"h1": {"FAKE_NCU_OLD": "1"}}, bindir)
    store = stored_run(tmp_path, inv, {"h1": 1.0})
    assert main(["profile", f"{store.dir}:h1", "--m", "16", "--format", "json"]) == 0
    (entry,) = cli_json(capsys.readouterr().out)
    assert entry["status"] == "ok" and entry["per_call_us"] == pytest.approx(14.24)
    first, second = captures(tmp_path, "h1")
    assert "--metrics" in first and "--metrics" not in second  # the basic set alone, the second time
    (stored,), _ = load_profiles(store)
    assert stored.record.extra_metrics == [] and "--metrics" not in stored.record.argv


def test_a_host_without_ncu_gets_one_line_saying_what_to_do(tmp_path, capsys):
    if any(glob.glob(pattern) for pattern in NCU_PLACES):
        pytest.skip("this machine has Nsight Compute where the worker looks for it")
    inv = hosts_file(tmp_path, {"h1": {}})  # PATH without the stand-in
    store = stored_run(tmp_path, inv, {"h1": 1.0})
    assert main(["profile", f"{store.dir}:h1", "--backend", "torch-*"]) == 1
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "no-ncu" in line]
    assert line.startswith("h1: torch-bf16 16x64x128: no-ncu: ncu (Nsight Compute) is not on this host")
    assert "--ncu PATH" in line and "FLEETBENCH_NCU" in line
    assert not captures(tmp_path, "h1")


def test_counters_not_permitted_are_one_line_with_the_fix_and_other_hosts_go_on(tmp_path, capsys):
    bindir = stand_in(tmp_path)
    inv = hosts_file(tmp_path, {"h1": {"FAKE_NCU": "perm"}, "h2": {}}, bindir)
    store = stored_run(tmp_path, inv, {"h1": 1.0, "h2": 1.0})
    code = main(["profile", f"{store.dir}:h1", f"{store.dir}:h2", "--m", "16", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1
    by_slot = {e["slot"]: e for e in cli_json(out)}
    assert by_slot["h2"]["status"] == "ok" and by_slot["h1"]["status"] == "no-permission"
    (line,) = [line for line in err.splitlines() if "no-permission" in line]
    assert "ERR_NVGPUCTRPERM" in line and "NVreg_RestrictProfilingToAdminUsers=0" in line


def test_profiling_needs_a_case_selection_a_host_and_a_run_whose_worker_can_profile(tmp_path, stored_runs, capsys):
    inv = hosts_file(tmp_path, {"h1": {}})
    store = stored_run(tmp_path, inv, {"h1": 1.0})
    assert main(["profile", f"{store.dir}:h1"]) == 2
    assert "say which cases to profile" in capsys.readouterr().err
    assert main(["profile", str(store.dir), "--m", "16"]) == 2
    assert "name the host" in capsys.readouterr().err
    assert main(["profile", f"{store.dir}:h1", "--m", "4096"]) == 2
    assert "no case that is ok on h1 matches" in capsys.readouterr().err
    old = stored_runs / "runs-v2" / "20261203-082541-smoke-2f18"
    host = json.loads((old / "manifest.json").read_text())["jobs"][0]["host"]
    assert main(["profile", f"{old}:{host}", "--backend", "*", "-i", str(inv)]) == 2
    assert "whose worker cannot profile" in capsys.readouterr().err


def test_ctrl_c_stops_ncu_and_the_profiled_process_on_the_host(tmp_path):
    bindir = stand_in(tmp_path)
    started = tmp_path / "ncu.started"
    inv = hosts_file(tmp_path, {"h1": {"FAKE_NCU": "hang", "FAKE_NCU_STARTED": str(started)}}, bindir)
    store = stored_run(tmp_path, inv, {"h1": 1.0})
    proc = start_cli("profile", f"{store.dir}:h1", "--m", "16")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not started.exists():
        time.sleep(0.1)
    assert started.exists(), "ncu never started"
    assert processes_under(bindir / "ncu")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 30 and "ncu was stopped on the hosts" in err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and processes_under(bindir / "ncu"):
        time.sleep(0.1)
    assert not processes_under(bindir / "ncu")


# -- diff --across-hosts --profile ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "slow_ncu, cause",
    [
        (
            {"FAKE_NCU_SM_HZ": "1410000000", "FAKE_NCU_TIME_NS": "17720"},
            "lower SM clock: 1410 MHz on B vs 1755 MHz on A",
        ),
        ({"FAKE_NCU_EXTRA_KERNEL": "COPY"}, "B runs more kernels per call: at::native::elementwise_kernel"),
    ],
)
def test_the_outlier_is_profiled_beside_the_median_host_and_the_cause_named(tmp_path, capsys, slow_ncu, cause):
    bindir = stand_in(tmp_path)
    inv = hosts_file(tmp_path, {"h1": {}, "h2": {}, "h3": slow_ncu}, bindir)
    store = stored_run(tmp_path, inv, {"h1": 1.0, "h2": 1.004, "h3": 1.25})
    assert main(["diff", str(store.dir), "--across-hosts"]) == 0  # unasked, nothing is profiled
    capsys.readouterr()
    assert not (store.dir / "profiles").exists() and not captures(tmp_path, "h3")
    code = main(["diff", str(store.dir), "--across-hosts", "--profile"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "h3: outlier in 1 of 1 cases" in err and cause in err
    assert "flagged cases profiled" in out and "h3" in out
    (comparison,) = latest_fleet(store)
    assert comparison["b_slot"] == "h3" and comparison["a_slot"] == "h2"  # h2 is the fleet's median
    assert cause in comparison["cause"] and comparison["sweep_ratio"] == pytest.approx(1.25 / 1.004, rel=0.02)
    assert {p.slot for p in load_profiles(store)[0]} == {"h2", "h3"} and not captures(tmp_path, "h1")
    code = main(["diff", str(store.dir), "--across-hosts", "--profile", "--format", "json"])
    doc = cli_json(capsys.readouterr().out)
    assert code == 0 and doc["kind"] == "fleet" and doc["hosts"]["h3"]["outlier"]
    assert cause in doc["profiles"][0]["cause"]
    html = tmp_path / "report.html"
    assert main(["report", str(store.dir), "-o", str(html)]) == 0
    page = html.read_text()
    assert "profiled under ncu" in page and cause.split(":")[0] in page


def test_profile_is_only_for_across_hosts_in_diff(tmp_path, capsys):
    inv = hosts_file(tmp_path, {"h1": {}, "h2": {}})
    store = stored_run(tmp_path, inv, {"h1": 1.0, "h2": 1.0})
    assert main(["diff", f"{store.dir}:h1", f"{store.dir}:h2", "--profile"]) == 2
    assert "fleetbench profile RUN:host1 RUN:host2" in capsys.readouterr().err


# -- over SSH: a host that fails does not stop the others ----------------------------------------------------
def test_over_ssh_a_dead_host_fails_alone_and_the_live_one_is_profiled(fleet, tmp_path, capsys):
    bindir = stand_in(tmp_path)
    inv = fleet.inventory(
        tmp_path / "hosts.yaml",
        names=["ssh0", "ssh1"],
        env={"PATH": f"{bindir}:{os.environ['PATH']}", "FLEETBENCH_LOCK_DIR": str(tmp_path / "locks")},
    )
    store = stored_run(tmp_path, inv, {"ssh0": 1.0, "ssh1": 1.0})
    fleet.host("ssh1").kill()
    code = main(["profile", f"{store.dir}:ssh0", f"{store.dir}:ssh1", "--m", "16", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1
    (entry,) = cli_json(out)
    assert entry["slot"] == "ssh0" and entry["status"] == "ok" and entry["report"]
    assert any(line.startswith("ssh1: unreachable") for line in err.splitlines()), err


@pytest.mark.parametrize(
    "names, has",
    [
        (["worker/__main__.py", "worker/tools/profile.py"], True),  # a worker in rooms
        (["worker/__main__.py", "worker/profile.py"], True),  # a run made before the worker had rooms
        (["worker/__main__.py", "worker/runner.py"], False),  # a run made before `profile` existed
    ],
)
def test_a_stored_runs_worker_has_the_command_wherever_its_version_kept_it(names, has):
    import io
    import tarfile

    from orchestrator.execution.storedcases import worker_has_command

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name in names:
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    assert worker_has_command(raw.getvalue(), "profile") is has
    assert worker_has_command(b"not an archive", "profile") is False
