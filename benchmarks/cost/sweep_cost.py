"""Where a sweep's wall time goes: per host, the controller and the worker's start-up apart from the cases,
and per case round its phases (prepare, oracle check, timing with its settling, health probes), from the
records a run of format >= 7 stores. Prints Markdown tables. With `--cprofile`, the first host's first
attempt runs again in this process (its params, a fresh results file: every case) under cProfile, and
the functions where the worker's time went are listed: start-up (imports, CUDA, facts) and the Python
around the rounds, which the records do not break down.

    python -m benchmarks.cost.sweep_cost RUN_DIR [--top 10] [--cprofile 40]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

from orchestrator.runs.slots import load_slots
from orchestrator.runs.store import RunStore

PHASES = ("prepare_s", "check_s", "timing_s", "probe_s")


def worker_elapsed(log: Path) -> float | None:
    """The host-side time of an attempt: the supervisor's last progress event says it."""
    for line in reversed(log.read_text(encoding="utf-8", errors="replace").splitlines()):
        at = line.find('{"event":"exit"')
        if at >= 0:
            return json.loads(line[at:])["elapsed_s"]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder")
    parser.add_argument("--top", type=int, default=10, help="the costliest case rounds to list")
    parser.add_argument(
        "--cprofile",
        type=int,
        default=0,
        metavar="N",
        help="run the first host's first attempt again under cProfile and list its N costliest functions",
    )
    args = parser.parse_args()
    store = RunStore(args.run)
    print(f"# Where the time of run {store.run_id} went\n")
    print(
        "| slot | attempt wall s | worker s | outside the worker s | in cases s | start-up, calibration, pairs and between cases s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    phases: dict[str, float] = collections.Counter()
    settle_ms = 0.0
    inside: dict[str, float] = collections.Counter()  # timing_s's own phases (format 7 records from 0.4 on)
    rounds = []
    integrity = collections.Counter()  # the integrity checks' seconds by round number
    walls = []
    for slot in load_slots(store):
        for attempt in store.attempts(slot.slot):
            outcome = store.outcome(slot.slot, attempt)
            elapsed = worker_elapsed(store.attempt_dir(slot.slot, attempt) / "log.txt")
            in_cases = sum(rec.duration_s for a, rec in slot.records.values() if a == attempt)
            walls.append(outcome.duration_s)
            print(
                f"| {slot.slot} | {outcome.duration_s:.2f} | {elapsed:.2f} | "
                f"{outcome.duration_s - elapsed:.2f} | {in_cases:.2f} | {elapsed - in_cases:.2f} |"
                if elapsed is not None
                else f"| {slot.slot} | {outcome.duration_s:.2f} | ? | ? | {in_cases:.2f} | ? |"
            )
        for _, rec in slot.records.values():
            if rec.timing is None:
                continue
            for i, r in enumerate(rec.timing.rounds, 1):
                for phase in PHASES:
                    phases[phase] += getattr(r, phase) or 0.0
                settle_ms += r.settle_ms or 0.0
                integrity[i] += r.integrity_s or 0.0
                for k, v in (r.timing_phases or {}).items():
                    inside[k] += v
                rounds.append(
                    (
                        sum(getattr(r, p) or 0.0 for p in PHASES),
                        rec.case.backend,
                        f"{rec.case.m}x{rec.case.n}x{rec.case.k}",
                        i,
                        r,
                    )
                )
    total = sum(phases.values())
    print(f"\n{len(rounds)} timed rounds; their phases add up to {total:.2f} s\n")
    print("| phase | s | share |")
    print("|---|---:|---:|")
    for phase in PHASES:
        print(f"| {phase[:-2]} | {phases[phase]:.2f} | {100 * phases[phase] / total if total else 0:.0f}% |")
    print(
        f"| (of timing: settling, GPU time) | {settle_ms / 1e3:.2f} | {100 * settle_ms / 1e3 / total if total else 0:.0f}% |"
    )
    for k, v in sorted(inside.items(), key=lambda kv: -kv[1]):
        print(f"| (of timing: {k[:-2]}, wall) | {v:.2f} | {100 * v / total if total else 0:.0f}% |")
    checks, wall = sum(integrity.values()), sum(walls)
    print(
        f"\nThe integrity checks (RoundStats.integrity_s): {checks:.2f} s, "
        f"{100 * checks / wall if wall else 0:.1f}% of the attempts' {wall:.2f} s wall; by round: "
        + ", ".join(f"{i}: {v:.2f} s" for i, v in sorted(integrity.items()))
    )
    print(f"\nThe {args.top} costliest rounds:\n")
    print("| backend | shape | round | s | prepare | check | timing | settle ms | probes |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for cost, backend, shape, i, r in sorted(rounds, key=lambda x: -x[0])[: args.top]:
        print(
            f"| {backend} | {shape} | {i} | {cost:.3f} | {r.prepare_s or 0:.3f} | {r.check_s or 0:.3f} | "
            f"{r.timing_s or 0:.3f} | {r.settle_ms or 0:.0f} | {r.probe_s or 0:.3f} |"
        )
    if args.cprofile:
        slot = sorted(store.dir.glob("hosts/*/attempt-1/params.json"))
        if not slot:
            print("\nno attempt-1/params.json in this run: nothing to profile")
            return 1
        profile_worker(slot[0], args.cprofile)
    return 0


def profile_worker(params: Path, top: int) -> None:
    """The worker of `params` run in this process under cProfile (imports included), into a scratch
    results file; prints its `top` functions by cumulative and by own time."""
    from worker.host.buildenv import adopt_build_env

    adopt_build_env()  # FlashInfer's JIT modules as the sweeps build them (worker/host/buildenv.py)
    import cProfile
    import io
    import pstats
    import tempfile
    import time

    from worker.contract.protocol import PROTOCOL_FD_ENV

    # Its records and progress lines go nowhere (a supervisor would read them); its log stays on stderr.
    os.environ[PROTOCOL_FD_ENV] = str(os.open(os.devnull, os.O_WRONLY))
    with tempfile.TemporaryDirectory() as scratch:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        from worker.sweep.runner import load_params, run_params

        run_params(load_params(params), Path(scratch) / "results.jsonl")
        prof.disable()
        wall = time.perf_counter() - t0
    for key in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(top)
        text = out.getvalue()
        body = text[text.find("   ncalls") :] if "   ncalls" in text else text
        print(f"\n{params.parent.parent.name}'s worker again under cProfile ({wall:.1f} s), by {key}:\n")
        print("```\n" + body.rstrip() + "\n```")


if __name__ == "__main__":
    sys.exit(main())
