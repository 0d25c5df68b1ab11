#!/usr/bin/env python3
"""`fleetbench profile` on a GPU, through real SSH logins: N sshd "hosts" on one GPU machine.

1. A sweep of the seed sweep's torch-bf16 on two of its shapes, with the seed's timing settings, beside a user
   kernel that is slower on purpose on the last host (benchmarks/kernels/mm_slow_on_host.py, switched on by
   FLEETBENCH_SLOW_KERNEL=1 in that host's env), on every host (they share the GPU: its lock takes turns).
2. `fleetbench profile RUN:<first host> --backend torch-bf16`: each case under ncu; check that its kernels'
   time per call agrees with the sweep's median within 10%.
3. `fleetbench diff RUN --across-hosts --profile`: the slowed host is the outlier; check that the counter diff
   against the host closest to the fleet median names a kernel difference.

    FLEETBENCH_SSHD=/path/sshd FLEETBENCH_SSH_KEYGEN=/path/ssh-keygen \\
      python -m benchmarks.fleet.profile_check --out DIR --env PYTHONPATH=/tmp/site [--ncu PATH]

Writes DIR/profile-check.md (the commands, their exit codes and wall times, what they printed, the checks),
DIR/profile-runs.tar.gz (the run folder: results, profiles, ncu's reports) and DIR/report.html (`fleetbench
report` of the run). Exit 0 when both checks pass.
"""

from __future__ import annotations

import argparse
import glob
import shutil
import sys
import tarfile
import time
from pathlib import Path

import yaml

from benchmarks.harness import ROOT
from benchmarks.harness.coldrun import cli
from benchmarks.harness.sshfleet import start_fleet

AGREE = 0.10  # the profile's kernel time per call against the sweep's median


def find_ncu(given: str) -> str:
    if given:
        return given
    found = shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)), "")
    return found or next(iter(glob.glob("/usr/local/cuda*/bin/ncu")), "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hosts", type=int, default=3, help="sshd hosts on the GPU (at least 3: a fleet median)")
    ap.add_argument("--gpu", default="0", help="CUDA_VISIBLE_DEVICES of every host")
    ap.add_argument("--env", action="append", default=[], help="K=V for every host (e.g. PYTHONPATH=/tmp/site)")
    ap.add_argument("--ncu", default="", help="ncu on the hosts (default: PATH, then where Nsight Compute installs)")
    ap.add_argument("--ms", default="256,1024", help="M of the cases")
    ap.add_argument("--nk", default="2048,6144", help="N,K of the cases (default: the seed's MoE shapes)")
    ap.add_argument("--profile-limit", type=int, default=1, help="flagged cases profiled by diff --profile")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = Path("/tmp/fleetbench-profile-check") / f"f{int(time.time())}"
    fleet = start_fleet(base, args.hosts)
    env = dict(kv.split("=", 1) for kv in args.env)
    inv = fleet.inventory(base / "hosts.yaml", env=env)
    doc = yaml.safe_load(inv.read_text())
    slow = doc["hosts"][-1]["name"]
    for h in doc["hosts"]:
        slowed = {"FLEETBENCH_SLOW_KERNEL": "1"} if h["name"] == slow else {}
        h["env"] = {**env, "CUDA_VISIBLE_DEVICES": args.gpu, **slowed}
        h["timeout"] = 900
    inv.write_text(yaml.safe_dump(doc))
    first = doc["hosts"][0]["name"]
    sweep = base / "profile-check.yaml"
    n, k = (int(x) for x in args.nk.split(","))
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "profile-check",
                "calibration": "off",
                "backends": [
                    "torch-bf16",
                    {"name": "mm-slow-on-host", "file": str(ROOT / "benchmarks/kernels/mm_slow_on_host.py")},
                ],
                "shapes": [{"m": [int(m) for m in args.ms.split(",")], "n": n, "k": k, "label": "glm5-tp8"}],
                "timing": {"mode": "graph", "l2": "cold", "target_rel_ci": 0.01, "budget_s": 0.3},
            },
            sort_keys=False,
        )
    )
    runs = base / "runs"
    ncu = find_ncu(args.ncu)
    md = [
        f"# fleetbench profile on the GPU: {args.hosts} sshd hosts on GPU {args.gpu}, {slow} slowed on purpose",
        "",
        f"ncu: `{ncu or '(not found)'}`; sweep: torch-bf16 and mm-slow-on-host, M {args.ms} x {n} x {k}, the seed's "
        "timing (graph, cold L2, target_rel_ci 0.01, budget_s 0.3, 3 rounds)",
        "",
    ]
    checks = []

    def logged_cli(title: str, argv: list) -> tuple[int, str, str]:
        t0 = time.perf_counter()
        proc = cli(*argv)
        wall = time.perf_counter() - t0
        shown = " ".join(str(a) for a in argv).replace(str(base), "$BASE")
        md.extend(
            [
                f"## {title}",
                "",
                f"`fleetbench {shown}`: exit {proc.returncode}, {wall:.1f} s wall",
                "",
                proc.stdout.strip(),
                "",
                "```",
                proc.stderr.strip()[-4000:],
                "```",
                "",
            ]
        )
        print(f"{title}: exit {proc.returncode}, {wall:.1f} s", flush=True)
        (args.out / "profile-check.md").write_text("\n".join(md) + "\n")  # so far, should the call be cut short
        return proc.returncode, proc.stdout, proc.stderr

    try:
        code, _, err = logged_cli("the sweep", ["run", sweep, "-i", inv, "--runs-dir", runs, "--format", "md"])
        stored = [line.rsplit(" stored in ", 1)[1] for line in err.splitlines() if " stored in " in line]
        if not stored:
            md.append("no run was stored: stop")
            return 1
        run_dir = Path(stored[-1])
        ncu_args = ["--ncu", ncu] if ncu else []
        logged_cli(
            "profile of the seed's cases",
            ["profile", f"{run_dir}:{first}", "--backend", "torch-bf16", *ncu_args, "--format", "md"],
        )
        from orchestrator.runs.profiles import latest_fleet, load_profiles
        from orchestrator.runs.store import RunStore

        store = RunStore(run_dir)
        profiles, problems = load_profiles(store)
        md += [
            "## check: the profile's kernel time per call against the sweep's median",
            "",
            "ncu times each kernel alone (after its replay passes), at the SM clock it finds then; the sweep's "
            "back-to-back calls run at the clock the power limit holds. Both are checked: ncu's time as "
            "measured, and its SM cycles over the sweep's SM clock (NVML, median of the case's rounds).",
            "",
        ]
        from orchestrator.analysis.profile import at_clock_us

        seed = [p for p in profiles if p.record.case.backend == "torch-bf16"]
        for p in seed:
            per_call = (p.summary or {}).get("per_call_us")
            cycles = (p.summary or {}).get("per_call_cycles")
            scaled = at_clock_us(p.summary, p.sweep_sm_clock_mhz)
            line = (
                f"- {p.slot} {p.record.case.backend} {p.record.case.m}x{p.record.case.n}x{p.record.case.k}: "
                f"{p.record.status}; sweep median {p.sweep_median_us:.2f} µs at {p.sweep_sm_clock_mhz} MHz; "
                if p.sweep_median_us
                else f"- {p.slot}: {p.record.status} {p.record.reason}; "
            )
            for what, value in (
                (
                    f"ncu {per_call} µs at {cycles / per_call:.0f} MHz"
                    if cycles and per_call
                    else f"ncu {per_call} µs",
                    per_call,
                ),
                ("at the sweep's SM clock", scaled),
            ):
                ratio = value / p.sweep_median_us if value and p.sweep_median_us else None
                ok = ratio is not None and abs(ratio - 1) <= AGREE
                checks.append(ok)
                line += (
                    f"{what}: ratio {'-' if ratio is None else f'{ratio:.3f}'} "
                    f"{'PASS' if ok else 'FAIL'} (within {AGREE:.0%}); "
                )
            md.append(line.rstrip("; "))
        if not seed:
            checks.append(False)
            md.append("- no profile came back: FAIL")
        md += [f"- unreadable: {x}" for x in problems] + [""]
        logged_cli(
            "the outlier, profiled beside the fleet's median host",
            ["diff", run_dir, "--across-hosts", "--profile", "--profile-limit", args.profile_limit, *ncu_args],
        )
        md += ["## check: the counter diff names the difference of the slowed host", ""]
        comparisons = latest_fleet(store)
        kernel_causes = ("a different kernel", "B runs more kernels", "B runs fewer kernels", "B launches")
        named = [c for c in comparisons if c["b_slot"] == slow and c["cause"].startswith(kernel_causes)]
        checks.append(bool(named))
        for c in comparisons:
            md.append(
                f"- {c['b_slot']} against {c['a_slot']}, {c['case']}: sweep B/A {c.get('sweep_ratio')}, "
                f"ncu B/A {c.get('ratio')}: {c['cause']}"
            )
        md.append(f"- {'PASS' if named else 'FAIL'}: the slowed host {slow} is explained by a kernel difference")
        md.append("")
        logged_cli(
            "the report, the counter diff beside the outlier", ["report", run_dir, "-o", args.out / "report.html"]
        )
        with tarfile.open(args.out / "profile-runs.tar.gz", "w:gz") as tar:
            tar.add(run_dir, arcname=run_dir.name)
    finally:
        fleet.stop()
        md.append(f"checks: {sum(checks)} of {len(checks)} pass")
        (args.out / "profile-check.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if checks and all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
