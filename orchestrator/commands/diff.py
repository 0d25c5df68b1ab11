"""`fleetbench diff`: compare two runs or hosts with statistics, or hosts against the fleet."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, InputError
from .common import (
    Streams,
    opt_accept_new,
    opt_format,
    opt_inventory,
    opt_parallel,
    opt_runs_dir,
    opt_threshold,
    parse_threshold,
    positive_int,
)
from .storedcases import declare_profiling, plan_on_hosts, profile_options, report_problems, run_on_hosts

HELP = "compare two runs or hosts with statistics, or hosts against the fleet"
EPILOG = (
    "A and B: RUN, RUN:host or RUN:host:gpu. Cases match by what they measure, whatever the timing "
    "settings (those that differ are listed). Exit 1 when B is confirmed SLOWER than A in any case, or "
    "over all of a backend's cases (its effect and 95% interval close the table; for CI gates); UNSTABLE rows (too noisy, tainted, a busy CPU) exit 0, and a run against itself is SAME; "
    "exit 2 when the two sides share no case. --across-hosts estimates each host's effect over all its "
    "cases and names a host whose interval lies beyond the threshold (on stderr too); it exits 0 "
    "whatever it names, as it does for outliers."
)
DEFAULT_PROFILE_LIMIT = 3


def declare(p):
    p.add_argument("a", help="baseline: RUN[:host[:gpu]]")
    p.add_argument("b", nargs="?", help="candidate: RUN[:host[:gpu]] (omit with --across-hosts)")
    p.add_argument("--across-hosts", action="store_true", help="every host of run A against the fleet median")
    p.add_argument(
        "--only-changed",
        action="store_true",
        help="list only cases that are not SAME (and were run on at least one side)",
    )
    p.add_argument(
        "--anchor",
        metavar="BACKEND",
        help="judge each case also against BACKEND, where both runs timed it beside the case (its "
        "head-to-head pairs): the ratio of the two ratios cancels the GPU state the two kernels shared, "
        "and settles a change the time leaves AMBIGUOUS when it lies within the case's own interval. "
        "Not used where the anchor's GPU, driver, CUDA, torch, library, file, worker or timing settings "
        "differ, nor for cases of another operand family (fp8 or fp4 against a bf16 anchor: "
        "--anchor torch-fp8 for the fp8 ones). With --across-hosts, each host's cases against BACKEND "
        "beside them on its GPU, which may name a host its time did not (not where the anchor's facts "
        "differ from most hosts'). "
        "Default: torch-bf16 where the runs have it; 'none' turns it off",
    )
    opt_threshold(p)
    opt_format(p)
    opt_runs_dir(p)
    declare_for_profile(p)


def anchor_of(args, *sides) -> str | None:
    """The --anchor asked for: None for 'none'; the default where not given; a named backend that none of
    the sides (two, or one with --across-hosts) timed is an input error (a typo must not pass as 'nothing
    changed')."""
    from ..analysis.diff import DEFAULT_ANCHOR

    if args.anchor is None:
        return DEFAULT_ANCHOR
    if args.anchor.lower() == "none":
        return None
    present = {
        rec.case.backend for side in sides for s in side.slots for _, rec in s.records.values() if rec.status == "ok"
    }
    if args.anchor not in present:
        nobody = "neither side" if len(sides) == 2 else "no host"
        raise InputError(
            f"--anchor {args.anchor}: {nobody} timed it (backends: {', '.join(sorted(present))}); or --anchor none"
        )
    return args.anchor


def declare_for_profile(p) -> None:
    """--profile and how it profiles (the options of `fleetbench profile`: storedcases.declare_profiling)."""
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
        default=DEFAULT_PROFILE_LIMIT,
        metavar="N",
        help=f"the N flagged cases furthest from the fleet (default: {DEFAULT_PROFILE_LIMIT})",
    )
    declare_profiling(group)
    opt_inventory(group, "hosts file (default: the one the run was started with)")
    opt_parallel(group)
    opt_accept_new(group)


def with_host_effects(document, effects):
    """The fleet document with each host's effect first (its table, or the line saying there is nothing
    to estimate) and under `host_effects` in its JSON."""
    from ..views.hosts import host_effect_section, nothing_text

    if effects.nothing:
        document.notes.insert(0, nothing_text(effects))
    else:
        document.sections.insert(0, host_effect_section(effects))
    document.data["host_effects"] = effects.as_dict()
    return document


def run(args, io: Streams) -> int:
    from ..analysis.diff import across_hosts, compare_sides, resolve_side
    from ..analysis.hosteffect import host_effects
    from ..views.diffnotes import worded_comparison
    from ..views.hosts import named_line
    from ..views.output import write
    from ..views.tables import comparison_document, comparison_summary, fleet_document, interval_text, ratio_text

    threshold = parse_threshold(args.threshold)
    side_a = resolve_side(Path(args.runs_dir), args.a)
    if args.across_hosts:
        if args.b:
            raise InputError("--across-hosts compares the hosts of one run: give one RUN")
        report = across_hosts(side_a, threshold)
        effects = host_effects(side_a, threshold, anchor_of(args, side_a))
        document = with_host_effects(fleet_document(report), effects)
        # --profile's JSON holds this and the counter diffs, its CSV the counter diffs alone
        if not (args.profile and args.format in ("json", "csv")):
            io.write(write(document, args.format, io.width()))
        for h in effects.named:
            io.problem(named_line(h, effects.anchor))
        for s, h in report.hosts.items():
            if h["outlier"]:
                io.problem(f"{s}: outlier in {h['flagged']} of {h['cases']} cases")
        for c in report.calibration:
            if c["flagged"]:
                io.problem(
                    f"{c['slot']}: slow GPU: calibration {c['peak']} {c['value']:.2f}, "
                    f"{1 - c['ratio']:.0%} below the fleet median {c['fleet_median']:.2f} ({c['gpu_name']})"
                )
        if args.profile:
            return profile_flagged(args, side_a, report, document, io)
        return EXIT_OK
    if not args.b:
        raise InputError("diff needs two sides (A B), or one run with --across-hosts")
    if args.profile:
        raise InputError(
            "--profile profiles the outliers of --across-hosts: give one RUN and --across-hosts "
            "(for two hosts: fleetbench profile RUN:host1 RUN:host2 --case ID)"
        )
    side_b = resolve_side(Path(args.runs_dir), args.b)
    cmp = worded_comparison(compare_sides(side_a, side_b, threshold, anchor_of(args, side_a, side_b)))
    io.write(write(comparison_document(cmp, only_changed=args.only_changed), args.format, io.width()))
    for c in cmp.regressions:
        io.problem(
            f"regression: {c.backend} {c.m}x{c.n}x{c.k} ({c.label}) B/A {ratio_text(c.ratio)} "
            f"(95% CI {interval_text(c.ci_low, c.ci_high)})"
        )
    slower_backends = cmp.backend_regressions
    for b in slower_backends:
        io.problem(
            f"regression: {b['backend']} over its {b['compared']} cases B/A {ratio_text(b['effect_ratio'])} "
            f"(95% CI {interval_text(b['effect_low'], b['effect_high'])})"
        )
    if args.format != "table":  # the table carries it as its title; other formats get it on stderr
        io.problem(comparison_summary(cmp))
    return EXIT_FAILED if cmp.regressions or slower_backends else EXIT_OK


def profile_flagged(args, side, report, fleet_doc, io: Streams) -> int:
    """Profile the flagged cases of the outlier hosts (at most --profile-limit, furthest first) and the
    same cases on the host closest to the fleet median; print and store the counter diffs."""
    from ..analysis.diff import slowdowns_to_profile
    from ..execution.profile import PROFILE
    from ..runs.profiles import write_fleet
    from ..views.output import write
    from ..views.profile import counter_diff_document, flagged_comparison

    pairs = slowdowns_to_profile(side, report, args.profile_limit)
    if not pairs:
        if args.format in ("json", "csv"):
            fleet_doc.data["profiles"] = []
            io.write(write(fleet_doc, args.format, io.width()))
        io.problem("--profile: no outlier host is slower than the fleet in any case, so nothing to profile")
        return EXIT_OK
    wanted: dict[str, list[str]] = {}
    for d, ref in pairs:
        for slot in filter(None, (d.slot, ref)):
            if d.case_key not in wanted.setdefault(slot, []):
                wanted[slot].append(d.case_key)
    plan = plan_on_hosts(side.store, args, wanted, PROFILE)
    try:
        results = run_on_hosts(plan, PROFILE, profile_options(args), args, io)
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
        comparisons.append(flagged_comparison(d, ref, a, b, case))
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
