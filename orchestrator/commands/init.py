"""`fleetbench init`: write a starter hosts.yaml (the local host, a commented fleet) and the shipped sweeps."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_OK
from .common import Streams

HELP = "write a starter hosts.yaml (the local host, a commented fleet) and the shipped sweeps"


def declare(p):
    p.add_argument("folder", nargs="?", default=".", help="where to write them (default: here)")


def run(args, io: Streams) -> int:
    from ..config.starter import write_starter

    for w in write_starter(Path(args.folder)):
        io.write(f"{'wrote' if w.created else 'kept (exists)'} {w.path}\n")
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        # The `local` host runs the worker with this interpreter, and the controller never carries torch.
        # A laptop wants the small CPU torch (the Makefile's TORCH_SPEC): installed first, the extra keeps it.
        from ..ops.provision import CPU_TORCH_INDEX

        # Without the CPU index, Linux's pip brings torch's CUDA build (GBs of nvidia-* wheels).
        io.write(
            "the `local` host runs the worker with this Python, which has no torch. Give it torch's CPU "
            f"build (never the CUDA stack): cd {args.folder} && fleetbench provision -l local\nor by hand, first "
            f"the CPU torch: pip install torch==2.13.0 --index-url {CPU_TORCH_INDEX}\nthen the worker's other "
            "needs: pip install 'fleetbench[worker]' (alone, on Linux, it brings a multi-GB CUDA torch)\n"
        )
    io.write(
        f"next: cd {args.folder} && fleetbench run sweeps/smoke.yaml   (the `local` host; edit hosts.yaml "
        "for a fleet)\n"
    )
    return EXIT_OK
