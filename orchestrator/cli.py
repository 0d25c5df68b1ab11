"""fleetbench command line: assembles the commands (orchestrator/commands, one module each) and is the
one error boundary: a FleetbenchError becomes `error: ...` lines and its exit code, Ctrl-C 130.

A command imports only what it uses: reading stored runs never imports the SSH stack, and rich is
imported only where a table is drawn.

Exit codes: 0 everything ran and every case is ok (or cleanly unsupported/unavailable); 1 some host
or case failed, or a diff found a regression; 2 bad input (nothing was run); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Callable, Optional

from . import __version__
from .commands import NAMES
from .commands.common import Streams
from .errors import EXIT_INTERRUPTED, EXIT_OK, FleetbenchError

EPILOG = """exit codes: 0 all ok, 1 some host or case failed, 2 bad input, 130 interrupted.
RUN is a run id (or a unique prefix), a run folder, or `latest`."""


def _command(name: str):
    return importlib.import_module(f".commands.{name}", __package__)


# name -> (help, declare arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    name: (module.HELP, module.declare, module.run) for name, module in ((n, _command(n)) for n in NAMES)
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetbench",
        description="Benchmark GEMM kernels across a fleet of GPU hosts over SSH.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"fleetbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, declare, _) in COMMANDS.items():
        declare(
            sub.add_parser(
                name,
                help=help_text,
                description=help_text,
                epilog=getattr(_command(name), "EPILOG", EPILOG),
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    # paramiko logs connection failures with tracebacks; they become one classified line here instead.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    logging.getLogger("paramiko").propagate = False
    io = Streams(sys.stdout, sys.stderr)
    try:
        return COMMANDS[args.command][2](args, io)
    except FleetbenchError as exc:
        for line in str(exc).splitlines() or ["error"]:
            io.problem(f"error: {line}")
        return exc.exit_code
    except KeyboardInterrupt:  # run and rerun say what was kept and how to finish (RunInterrupted)
        io.problem("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `fleetbench show ... | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
