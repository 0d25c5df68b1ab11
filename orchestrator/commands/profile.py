"""`fleetbench profile`: cases of a stored run profiled under Nsight Compute on their own hosts; and the
profiling step of `diff --across-hosts --profile` (each flagged case on its outlier host and on the host
closest to the fleet median, with the counter diff that names the likely cause)."""

from __future__ import annotations

import math

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, InputError
from .common import (
    Streams,
    opt_accept_new,
    opt_format,
    opt_inventory,
    opt_parallel,
    opt_runs_dir,
    positive_int,
    seconds,
)
from .storedcases import declare_selection, one_run, plan_on_hosts, report_problems, run_on_hosts, select_cases

HELP = "profile cases of a stored run under Nsight Compute (ncu) on their own hosts"
EPILOG = (
    "TARGET: RUN:host or RUN:host:gpu (several: profiled in parallel, one host at a time per GPU). Each case "
    "runs with the run's own worker and timing settings, warmed up and settled as the sweep did, then "
    "`--calls` calls are profiled (ncu --clock-control none: the clock state the sweep measured). Profiles are "
    "stored in the run's folder (profiles/). Exit 1 when a case could not be profiled (no ncu, counters not "
    "permitted, ...: one line each says what to change), 2 on bad input, 130 interrupted."
)
DEFAULT_FLEET_LIMIT = 3


def declare_profiling(p) -> None:
    """The options of how a case is profiled (shared by `profile` and `diff --profile`)."""
    p.add_argument("--calls", type=positive_int, default=3, help="calls of the case profiled (default: 3)")
    p.add_argument(
        "--kernel",
        metavar="REGEX",
        default="",
        help="only kernels whose function name matches (ncu --kernel-name regex:REGEX; default: every kernel)",
    )
    p.add_argument(
        "--max-kernels",
        type=positive_int,
        default=64,
        help="stop after this many kernel launches (ncu --launch-count; default: 64)",
    )
    p.add_argument(
        "--ncu",
        metavar="PATH",
        default="",
        help="ncu on the hosts (default: $FLEETBENCH_NCU of the host's env, PATH, then where Nsight "
        "Compute installs itself)",
    )
    p.add_argument("--timeout", type=seconds, default=900.0, help="seconds one case may take under ncu (default: 900)")
    p.add_argument("--lock-timeout", type=seconds, help="seconds to wait for a busy GPU (default: the run's)")


def declare(p):
    declare_selection(p, "RUN:host or RUN:host:gpu")
    declare_profiling(p)
    opt_inventory(p, "hosts file (default: the one the run was started with; its hosts must be the run's)")
    opt_runs_dir(p)
    opt_parallel(p)
    opt_accept_new(p)
    opt_format(p)


def declare_for_diff(p) -> None:
    """`diff`'s profiling options: --profile and how it profiles."""
    group = p.add_argument_group("profiling the outliers (--across-hosts --profile)")
    group.add_argument(
        "--profile",
        action="store_true",
        help="profile each flagged case of an outlier host, and the same case on the host closest to "
        "the fleet median, under ncu; print the counter diff and the likely cause",
    )
    group.add_argument(
        "--profile-limit",
        type=positive_int,
        default=DEFAULT_FLEET_LIMIT,
        metavar="N",
        help=f"the N flagged cases furthest from the fleet (default: {DEFAULT_FLEET_LIMIT})",
    )
    declare_profiling(group)
    opt_inventory(group, "hosts file (default: the one the run was started with)")
    opt_parallel(group)
    opt_accept_new(group)


def options_of(args):
    from worker.contract.profile import ProfileOptions

    return ProfileOptions(
        calls=args.calls,
        kernel_regex=args.kernel,
        max_kernels=args.max_kernels,
        ncu=args.ncu,
        case_timeout_s=args.timeout,
    )


def run(args, io: Streams) -> int:
    from ..views.output import write
    from ..views.profile import profile_document

    store, slots = one_run(args, "profile", "RUN:host, RUN:host:gpu")
    if any(":" not in t for t in args.targets):
        raise InputError(
            "profile: name the host of each TARGET (RUN:host or RUN:host:gpu): profiling costs ncu time "
            "per host and case"
        )
    wanted = select_cases(slots, args, verb="profile", done="profiled", cost="each case costs a run under ncu")
    from ..execution.profile import PROFILE

    plan = plan_on_hosts(store, args, wanted, PROFILE)
    try:
        results = run_on_hosts(plan, PROFILE, options_of(args), args, io)
    except KeyboardInterrupt:
        io.problem(f"interrupted: ncu was stopped on the hosts; what came back is stored in {store.dir / 'profiles'}")
        return EXIT_INTERRUPTED
    profiles = [p for r in results for p in r.stored]
    io.write(write(profile_document(profiles), args.format, io.width()))
    bad = report_problems(results, io)
    if profiles:
        io.problem(f"profiles stored in {store.dir / 'profiles'}")
    return EXIT_FAILED if bad else EXIT_OK


# -- diff --across-hosts --profile ----------------------------------------------------------------------
def reference_slot(side, case_id: str, fleet_median_us: float, outlier: str):
    """The slot whose median of `case_id` is closest to the fleet median (not the outlier), or None."""
    best = None
    for s in side.slots:
        found = s.records.get(case_id)
        rec = found[1] if found else None
        if s.slot == outlier or rec is None or rec.status != "ok" or not rec.timing or rec.timing.median_us <= 0:
            continue
        distance = abs(math.log(rec.timing.median_us / fleet_median_us))
        if best is None or distance < best[0]:
            best = (distance, s.slot)
    return best[1] if best else None


def profile_flagged(args, side, report, fleet_doc, io: Streams) -> int:
    """Profile the flagged cases of the outlier hosts (at most --profile-limit, furthest first) and the
    same cases on the host closest to the fleet median; print and store the counter diffs."""
    from ..analysis.profile import ProfileFormatError, explain, summary_of
    from ..execution.profile import PROFILE
    from ..runs.profiles import write_fleet
    from ..views.output import write
    from ..views.profile import case_text, counter_diff_document

    outliers = {slot for slot, h in report.hosts.items() if h["outlier"]}
    # What is to be explained is a slowdown: an outlier's cases slower than the fleet, furthest first.
    flagged = [d for d in report.deviations if d.slot in outliers and d.robust_z > 0][: args.profile_limit]
    if not flagged:
        if args.format in ("json", "csv"):
            fleet_doc.data["profiles"] = []
            io.write(write(fleet_doc, args.format, io.width()))
        io.problem("--profile: no outlier host is slower than the fleet in any case, so nothing to profile")
        return EXIT_OK
    pairs = [(d, reference_slot(side, d.case_key, d.fleet_median_us, d.slot)) for d in flagged]
    wanted: dict[str, list[str]] = {}
    for d, ref in pairs:
        for slot in filter(None, (d.slot, ref)):
            if d.case_key not in wanted.setdefault(slot, []):
                wanted[slot].append(d.case_key)
    plan = plan_on_hosts(side.store, args, wanted, PROFILE)
    try:
        results = run_on_hosts(plan, PROFILE, options_of(args), args, io)
    except KeyboardInterrupt:
        io.problem(
            f"interrupted: ncu was stopped on the hosts; what came back is stored in {side.store.dir / 'profiles'}"
        )
        return EXIT_INTERRUPTED
    by_key = {(p.slot, p.case_id): p for r in results for p in r.stored}
    comparisons = []
    for d, ref in pairs:
        a, b = by_key.get((ref, d.case_key)), by_key.get((d.slot, d.case_key))
        case = (b or a).record.case if (a or b) else side.store.planned_cases()[d.case_key]
        entry = {
            "case_id": d.case_key,
            "case": case_text(case),
            "label": case.label,
            "b_slot": d.slot,
            "a_slot": ref,
            "sweep_b_us": d.median_us,
            "fleet_median_us": d.fleet_median_us,
            "sweep_a_us": a.sweep_median_us if a else None,
            "robust_z": d.robust_z,
            "sweep_ratio": d.median_us / a.sweep_median_us if a and a.sweep_median_us else None,
            "a_profile": str(a.path) if a else None,
            "b_profile": str(b.path) if b else None,
            "a_us": None,
            "b_us": None,
            "ratio": None,
            "details": [],
            "kernels": [],
        }
        why = _not_comparable(a, b, ref)
        if not why:
            try:
                entry.update(explain(summary_of(a.record), summary_of(b.record), a.record.run, b.record.run).as_dict())
            except ProfileFormatError as exc:
                why = f"ncu's CSV cannot be read: {exc}"
        if why:
            entry["cause"] = f"not profiled: {why}"
        comparisons.append(entry)
    path = write_fleet(side.store, comparisons, report.threshold)
    if args.format == "json":
        fleet_doc.data["profiles"] = comparisons
        io.write(write(fleet_doc, "json", io.width()))
    else:
        io.write(write(counter_diff_document(comparisons), args.format, io.width()))
    bad = report_problems(results, io)
    for c in comparisons:
        io.problem(f"{c['b_slot']}: {c['case']}: {c['cause']}")
    io.problem(f"counter diffs stored in {path}")
    return EXIT_FAILED if bad else EXIT_OK


def _not_comparable(a, b, ref) -> str:
    if ref is None:
        return "no other host ran the case"
    for side, p in (("the median host", a), ("the flagged host", b)):
        if p is None:
            return f"{side} gave no profile"
        if p.record.status != "ok":
            return f"{side} ({p.slot}): {p.record.reason}"
    return ""
