#!/usr/bin/env python3
"""Is the host that is 2% slower named, and only it? (issue 40) N sshd "hosts" on one GPU machine, each
running the user kernel benchmarks/kernels/mm_pad.py on the 12 GLM-5 TP8 shapes with the seed sweep's
timing; on the last host it pads K (FLEETBENCH_MM_PAD=auto: ~+2% real GPU work on the H200, the same
product; `--pad pads-2.json` for a padding calibrated on this GPU by `see_slowdowns calibrate`), on the
others by nothing (the same work as mm.py). Every host also times a second user kernel named `anchor`
beside mm (a user kernel runs in a process of its own, so only another user kernel is timed beside it):
`--slowed every` (the default, issue 40's "a +2% slower kernel in every case") pads it on the slow host as
mm is; `--slowed mm` leaves it mm.py's unpadded GEMM there too, so only mm is slower. Then
`fleetbench diff RUN --across-hosts --anchor anchor`: each host's effect over all its cases, with its
interval, and against the anchor beside each case (orchestrator/analysis/hosteffect.py).

    FLEETBENCH_SSHD=/path/sshd FLEETBENCH_SSH_KEYGEN=/path/ssh-keygen \\
      python -m benchmarks.detection.slow_host --out FILE.md --env PYTHONPATH=/tmp/site [--hosts 3] [--threshold 1.5%]
        [--pad pads-2.json] [--slowed every|mm]

Writes the Markdown (each host's effect, named or not, and the check: the slow host named with an
interval that holds its true effect, no other host named); exit 0 when the check passes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from benchmarks.harness import ROOT
from benchmarks.harness.coldrun import cli, cold_run
from benchmarks.harness.sshfleet import start_fleet

TIMING = {"mode": "graph", "l2": "cold", "target_rel_ci": 0.01, "budget_s": 0.3}  # the seed sweep's
ANCHOR = "anchor"  # a user kernel of mm.py's file timed beside mm on every host (diff --anchor anchor)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="the Markdown written")
    ap.add_argument("--hosts", type=int, default=3, help="sshd hosts on the GPU (default 3)")
    ap.add_argument("--env", action="append", default=[], help="K=V for every host (e.g. PYTHONPATH=/tmp/site)")
    ap.add_argument("--threshold", default="1.5%", help="diff's threshold (default 1.5%%, its default)")
    ap.add_argument(
        "--pad",
        default="auto",
        help="the slow host's padding: columns of K, `auto`, or a pads JSON of `see_slowdowns calibrate` "
        "(per shape, calibrated on this GPU; default auto: ~+2%% on the H200)",
    )
    ap.add_argument(
        "--slowed",
        choices=["every", "mm"],
        default="every",
        help="on the slow host, pad every case (default: a GPU slower in everything moves the anchor too) "
        "or only mm's (the anchor stays mm.py's GEMM everywhere)",
    )
    args = ap.parse_args()
    pad = str(Path(args.pad).resolve()) if args.pad.endswith(".json") else args.pad
    base = Path("/tmp/fleetbench-slow-host") / f"f{int(time.time())}"
    fleet = start_fleet(base, args.hosts)
    env = dict(kv.split("=", 1) for kv in args.env)
    inv = fleet.inventory(base / "hosts.yaml", env=env)
    doc = yaml.safe_load(inv.read_text())
    slow = doc["hosts"][-1]["name"]
    for h in doc["hosts"]:
        h["env"] = {**env, "FLEETBENCH_MM_PAD": pad if h["name"] == slow else "0"}
        h["timeout"] = 900
    inv.write_text(yaml.safe_dump(doc))
    anchor_file = "mm_pad.py" if args.slowed == "every" else "mm.py"
    sweep = base / "slow-host.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "slow-host",
                "shapes": [{"preset": "glm5-tp8"}],
                "timing": TIMING,
                "backends": [
                    {"name": "mm", "file": str(ROOT / "benchmarks/kernels/mm_pad.py")},
                    {"name": ANCHOR, "file": str(ROOT / f"benchmarks/kernels/{anchor_file}")},
                ],
            },
            sort_keys=False,
        )
    )
    slowed = "mm and the anchor" if args.slowed == "every" else "mm (the anchor unpadded)"
    md = [f"# The slow host: {args.hosts} sshd hosts on one GPU, {slow} padding {slowed} (~+2%), the others not", ""]
    try:
        run = cold_run(sweep, inv, base / "runs")
        md.append(f"`fleetbench run` (every host): exit {run.returncode}, {run.wall_s:.1f} s")
        if run.run_dir is None:
            md += ["", "no run was stored:", "```", run.stderr[-3000:], "```"]
            return 1
        stored = str(run.run_dir)
        across = ("diff", stored, "--across-hosts", "--threshold", args.threshold, "--anchor", ANCHOR)
        diff, as_json = cli(*across), cli(*across, "--format", "json")
        md += [
            "",
            f"`fleetbench diff RUN --across-hosts --threshold {args.threshold} --anchor {ANCHOR}`: "
            f"exit {diff.returncode}",
            "",
            "```",
            diff.stdout.strip()[:6000],
            diff.stderr.strip()[-1500:],
            "```",
            "",
        ]
        import tarfile

        kept = args.out.with_suffix(".runs.tar.xz")  # the run folder, to read again
        with tarfile.open(kept, "w:xz", preset=9) as tar:
            tar.add(stored, arcname=run.run_dir.name)
        hosts = json.loads(as_json.stdout)["host_effects"]["hosts"]
        truth = {"time": true_effect(stored, slow), "anchor": true_effect(stored, slow, against=ANCHOR)}
        truth["work"] = truth["time"]
        ok = True
        for h in hosts:
            e = h["effect"]
            named = h["named"]
            on = h.get("judged_on", "time")
            judged = {"work": h.get("work"), "anchor": h.get("anchored")}.get(on, e)
            holds = judged is not None and judged["low"] <= truth[on] <= judged["high"]
            want = h["slot"] == slow
            passed = named == want and (holds or not want)
            ok &= passed
            md.append(
                f"- {h['slot']}: effect {_estimate(e)} over {e['cases']} cases; work {_estimate(h.get('work'))}; "
                f"against {ANCHOR} {_estimate(h.get('anchored'))}; named: {named} (judged on the {on}); "
                f"{'PASS' if passed else 'FAIL'}"
                if e
                else f"- {h['slot']}: no effect"
            )
        md.append(
            f"- the slow host's true effect (geometric mean over its cases of its median against the "
            f"others' mean): {truth['time']:.4f}; of mm's ratio to {ANCHOR} (the same over mm's cases): "
            f"{truth['anchor']:.4f}"
        )
        md.append(f"- check: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        args.out.write_text("\n".join(md) + "\n")
        print("\n".join(md))
        fleet.stop()


def _estimate(e) -> str:
    return f"{e['ratio']:.4f} [{e['low']:.4f}, {e['high']:.4f}]" if e else "none"


def true_effect(run_dir: str, slow: str, against: str | None = None) -> float:
    """The slow host's median over the others' mean, geometric mean over the cases: what it should hold.
    `against`: of each case's median over that backend's of its shape on the same host (its own cases
    left out), what the anchored estimate should hold."""
    import math

    from orchestrator.analysis.headtohead import shape_of
    from orchestrator.runs.slots import load_slots
    from orchestrator.runs.store import resolve_run

    per_case: dict[str, dict[str, float]] = {}
    for slot in load_slots(resolve_run(Path(run_dir).parent, run_dir)):
        ok = {cid: rec for cid, (_, rec) in slot.records.items() if rec.status == "ok" and rec.timing}
        base = {shape_of(r.case): r.timing.median_us for r in ok.values() if r.case.backend == against}
        for cid, rec in ok.items():
            if against is None:
                per_case.setdefault(cid, {})[slot.slot] = rec.timing.median_us
            elif rec.case.backend != against and shape_of(rec.case) in base:
                per_case.setdefault(cid, {})[slot.slot] = rec.timing.median_us / base[shape_of(rec.case)]
    logs = [
        math.log(v[slow] / (sum(x for k, x in v.items() if k != slow) / (len(v) - 1)))
        for v in per_case.values()
        if slow in v and len(v) > 1
    ]
    return math.exp(sum(logs) / len(logs))


if __name__ == "__main__":
    sys.exit(main())
