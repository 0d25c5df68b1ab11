"""`fleetbench profile`: cases of a stored run profiled under Nsight Compute on their own hosts. How a case
is profiled (its options) is shared with `diff --across-hosts --profile` (storedcases.py)."""

from __future__ import annotations

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, InputError
from .common import Streams, opt_accept_new, opt_format, opt_inventory, opt_parallel, opt_runs_dir
from .storedcases import (
    declare_profiling,
    declare_selection,
    one_run,
    plan_on_hosts,
    profile_options,
    report_problems,
    run_on_hosts,
    select_cases,
)

HELP = "profile cases of a stored run under Nsight Compute (ncu) on their own hosts"
EPILOG = (
    "TARGET: RUN:host or RUN:host:gpu (several: profiled in parallel, one host at a time per GPU). Each case "
    "runs with the run's own worker and timing settings, warmed up and settled as the sweep did, then "
    "`--calls` calls are profiled (ncu --clock-control none: the clock state the sweep measured). Profiles are "
    "stored in the run's folder (profiles/). Exit 1 when a case could not be profiled (no ncu, counters not "
    "permitted, ...: one line each says what to change), 2 on bad input, 130 interrupted."
)


def declare(p):
    declare_selection(p, "RUN:host or RUN:host:gpu")
    declare_profiling(p)
    opt_inventory(p, "hosts file (default: the one the run was started with; its hosts must be the run's)")
    opt_runs_dir(p)
    opt_parallel(p)
    opt_accept_new(p)
    opt_format(p)


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
        results = run_on_hosts(plan, PROFILE, profile_options(args), args, io)
    except KeyboardInterrupt:
        io.problem(f"interrupted: ncu was stopped on the hosts; what came back is stored in {store.dir / 'profiles'}")
        return EXIT_INTERRUPTED
    profiles = [p for r in results for p in r.stored]
    io.write(write(profile_document(profiles), args.format, io.width()))
    bad = report_problems(results, io)
    if profiles:
        io.problem(f"profiles stored in {store.dir / 'profiles'}")
    return EXIT_FAILED if bad else EXIT_OK
