"""`python -m worker ...`: results go to a JSONL file and the protocol channel (worker/contract/protocol.py);
what `facts` and `check` answer goes on that channel; everything else is log.

  run       --params P --results R   run the cases of P without a record in R (one process)
  supervise --params P --results R   the same, restarting the worker after a crash
  facts     [--device auto|cpu|cuda] print this host's facts as one JSON line
  check                              print facts plus readiness details (disk, GPU processes) as JSON
  profile   --params P --out D       profile the cases of P under ncu, one record each (worker/tools/profile.py)
  profile-case --params P --case ID --out F   the process ncu profiles: one case, warmed and settled
  crosscheck --params P              time the cases of P beside FlashInfer's and Triton's timers
                                     (worker/tools/crosscheck.py)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def end_process(code: int) -> None:
    """End this process at once with `code`, without the interpreter's teardown. For `run` only: each of its
    records is on disk (fsynced) and on the channel (flushed per line) when it returns, and the teardown
    of a CUDA context with a sweep's graphs and buffers costs most of a second of the sweep's wall
    (benchmarks/RESULTS.md, issue 40). Never for a process that ncu or CUPTI traces: their exit writes it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None, end_at_once: bool = False) -> int:
    """The command line. `end_at_once` (as `python -m worker`): `run` ends its process through end_process."""
    parser = argparse.ArgumentParser(
        prog="python -m worker", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "supervise"):
        p = sub.add_parser(name)
        p.add_argument("--params", type=Path, required=True)
        p.add_argument("--results", type=Path, required=True)
    facts = sub.add_parser("facts")
    facts.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    sub.add_parser("check")
    prof = sub.add_parser("profile")
    prof.add_argument("--params", type=Path, required=True)
    prof.add_argument("--out", type=Path, required=True)
    prof_case = sub.add_parser("profile-case")
    prof_case.add_argument("--params", type=Path, required=True)
    prof_case.add_argument("--case", required=True)
    prof_case.add_argument("--out", type=Path, required=True)
    sub.add_parser("crosscheck").add_argument("--params", type=Path, required=True)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's 2 would read as "python cannot open the script" (protocol.py)
        from .contract.protocol import EXIT_USAGE

        return EXIT_USAGE if exc.code == 2 else int(exc.code or 0)

    if args.command == "run":
        from .contract.protocol import open_channel

        open_channel()  # before any code under test is imported: its name leaves the environment
        try:
            from .sweep.runner import load_params, run_params

            params = load_params(args.params)
        except ImportError as exc:  # pydantic missing: nothing can run, and retrying cannot help
            from .contract.protocol import EXIT_CANNOT_START

            print(
                f"fleetbench: the worker cannot start with {sys.executable}: {type(exc).__name__}: {exc} "
                "(install the worker's dependencies there, e.g. `fleetbench provision`)",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_CANNOT_START
        code = run_params(params, args.results)
        if end_at_once:
            end_process(code)
        return code
    if args.command == "supervise":
        from .sweep.supervise import supervise

        return supervise(args.params, args.results)
    if args.command == "profile":
        from .tools.profile import profile

        return profile(args.params, args.out)
    if args.command == "profile-case":
        from .tools.profile import run_profiled_case

        return run_profiled_case(args.params, args.case, args.out)
    if args.command == "crosscheck":
        from .tools.crosscheck import crosscheck

        return crosscheck(args.params)
    from .host.env import collect_facts, detect_device

    if args.command == "check":
        import json

        from .contract.protocol import write_line
        from .host.env import readiness

        write_line(json.dumps(readiness()))
        return 0
    from .contract.protocol import write_line

    write_line(collect_facts(detect_device(args.device)).model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(end_at_once=True))
