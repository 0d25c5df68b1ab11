#!/usr/bin/env python3
"""Land a GPU lease's results in benchmarks/results: the packs that device_check.sh's PACK wrote, one per
device call, in the order the calls ran.

    python -m benchmarks.harness.land_lease TAG PACK [PACK...] [--results benchmarks/results] [--force]

TAG names the lease (`h100-s26a`: the card, the session, the lease). Every result file a step named for the
H200 (`STEP-h200[-VARIANT].EXT`) lands as `STEP-TAG[-VARIANT].EXT`; one that an earlier pack of the same
landing already gave gets `-repeat` (then `-repeat2`, ...) after TAG. The `cost` step's per-run files land
together as `cost-TAG.md`, a bare `kernel-choice.md` as `kernel-choice-TAG.md`. Every run folder of the
packs' `runs.tar.gz` (the device's whole work folder: a warm machine's later call holds the earlier calls'
runs too) lands in `slowdowns-seed-TAG.runs.tar.xz`, folders at the top beside the hosts file, without the
run index, the installed wheels or the logs. Run folders are packed with xz: a lease's runs repeat one
worker archive, which xz's window finds again (about a tenth of gzip's size), and everything under the
repo travels with every device call, under its size limit.

A file an earlier pack already landed, byte for byte, is not landed again (a warm machine's reused $OUT
holds the earlier calls' files), and a longer copy of an appended log (seed-wall) replaces the shorter.
Files the packs hold that it does not land (not named for the machine, or in a folder) are listed on
stderr. Nothing in --results is overwritten without --force. Prints each file it wrote.
"""

from __future__ import annotations

import argparse
import gzip
import io
import lzma
import re
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
MACHINE = "-h200"  # the name device_check.sh gives every step's file
COST = re.compile(r"^cost-\d{8}-\d{6}-.+\.md$")  # the cost step: one file per run it read
BARE = {"kernel-choice.md"}
SKIPPED = {"seed1.md", "seed1.json"}  # working copies of the seed step (its run folders land whole)
RUN_FOLDER = re.compile(r"^\d{8}-\d{6}-.+$")


class LandError(Exception):
    pass


def landed_name(name: str, tag: str, taken: set[str]) -> str:
    """STEP-h200[-VARIANT].EXT -> STEP-TAG[-VARIANT].EXT, with -repeat[N] after TAG where taken."""
    if name in BARE:
        stem, ext = name.split(".", 1)
        name = f"{stem}{MACHINE}.{ext}"
    head, _, tail = name.partition(MACHINE)
    for n in range(1, 100):
        suffix = "" if n == 1 else "-repeat" if n == 2 else f"-repeat{n - 1}"
        candidate = f"{head}-{tag}{suffix}{tail}"
        if candidate not in taken:
            return candidate
    raise LandError(f"{name}: too many repeats")


def land(tag: str, packs: list[Path], results: Path, force: bool = False) -> tuple[list[Path], list[str]]:
    """Write the lease's files to `results`; returns them and a line for each file of the packs not landed."""
    outputs: dict[str, bytes] = {}
    landed_from: dict[str, list[str]] = {}  # a step's file name -> the names it landed as, in pack order
    costs: dict[str, bytes] = {}
    # run folder -> its members in the newest pack that holds it (a warm machine's later call holds the
    # earlier calls' runs again)
    runs: dict[str, tuple[tarfile.TarFile, list[tarfile.TarInfo]]] = {}
    hosts: bytes | None = None
    notes: list[str] = []
    for pack in packs:
        if not pack.is_file():
            raise LandError(f"{pack}: no such pack")
        names_in_pack: set[str] = set()
        with tarfile.open(pack) as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                path = Path(member.name)
                name = path.name
                if len(path.parts) > 1:
                    notes.append(f"{pack.name}: {member.name}: in a folder (land it by hand)")
                    continue
                data = tar.extractfile(member).read()
                if name == "runs.tar.gz":
                    inner = tarfile.open(fileobj=io.BytesIO(data))
                    here: dict[str, list[tarfile.TarInfo]] = {}
                    for m in inner.getmembers():
                        parts = Path(m.name).parts  # Path drops the leading "./"
                        if len(parts) >= 2 and parts[0] == "runs" and RUN_FOLDER.match(parts[1]):
                            here.setdefault(parts[1], []).append(m)
                        elif parts == ("hosts.yaml",):
                            hosts = inner.extractfile(m).read()
                    runs.update({run: (inner, members) for run, members in here.items()})
                elif COST.match(name):
                    costs[name] = data  # a later call's $OUT may hold an earlier call's again
                elif name in SKIPPED:
                    continue
                elif MACHINE not in name and name not in BARE:
                    notes.append(f"{pack.name}: {name}: not named for the machine (-h200; land it by hand)")
                elif name in names_in_pack:
                    raise LandError(f"{pack}: {name} twice")
                else:
                    names_in_pack.add(name)
                    if name.endswith(".runs.tar.gz"):  # an older slow_host's run folder: packed again with xz
                        name = name[: -len(".tar.gz")] + ".tar.xz"
                        data = repack_xz(data)
                    earlier = landed_from.setdefault(name, [])
                    if any(outputs[e] == data for e in earlier):
                        continue  # an earlier call's file, still in a reused $OUT
                    if earlier and data.startswith(outputs[earlier[-1]]):
                        outputs[earlier[-1]] = data  # a log the step appends to (seed-wall): its longer copy
                        continue
                    landed = landed_name(name, tag, set(outputs))
                    outputs[landed] = data
                    earlier.append(landed)
    if costs:
        outputs[f"cost-{tag}.md"] = b"\n".join(costs[n].rstrip(b"\n") + b"\n" for n in sorted(costs))
    if runs:
        outputs[f"slowdowns-seed-{tag}.runs.tar.xz"] = pack_runs(runs, hosts)
    else:
        notes.append("no run folders: no pack holds runs.tar.gz (device_check.sh writes it at the end of a call)")
    if not outputs:
        raise LandError("the packs hold no result file")
    clashes = [name for name in outputs if (results / name).exists()]
    if clashes and not force:
        raise LandError(f"already in {results} (--force replaces): {', '.join(sorted(clashes))}")
    written = []
    for name, data in sorted(outputs.items()):
        (results / name).write_bytes(data)
        written.append(results / name)
    return written, notes


def xz(raw: bytes) -> bytes:
    """At xz's largest window: a lease's runs repeat one worker archive."""
    return lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME)


def repack_xz(gz: bytes) -> bytes:
    return xz(gzip.decompress(gz))


def pack_runs(runs: dict[str, tuple[tarfile.TarFile, list[tarfile.TarInfo]]], hosts: bytes | None) -> bytes:
    """The run folders at the top of one xz tar, in name order, beside the hosts file."""
    with tempfile.TemporaryFile() as raw:
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if hosts is not None:
                info = tarfile.TarInfo("./hosts.yaml")
                info.size = len(hosts)
                tar.addfile(info, io.BytesIO(hosts))
            for run in sorted(runs):
                inner, members = runs[run]
                for m in members:
                    copy = tarfile.TarInfo("./" + "/".join(Path(m.name).parts[1:]))  # runs/X/f -> ./X/f
                    copy.size, copy.mode, copy.mtime, copy.type = m.size, m.mode, m.mtime, m.type
                    copy.linkname = m.linkname
                    if m.islnk():  # a hard link names its target by its path in the archive: moved up too
                        target = Path(m.linkname).parts
                        copy.linkname = "./" + "/".join(target[1:] if target[:1] == ("runs",) else target)
                    tar.addfile(copy, inner.extractfile(m) if m.isfile() else None)
        raw.seek(0)
        return xz(raw.read())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Land a GPU lease's device_check.sh packs in benchmarks/results, named for the lease."
    )
    parser.add_argument("tag", help="the lease's name in the files, e.g. h100-s26a (card, session, lease)")
    parser.add_argument("packs", nargs="+", type=Path, help="the PACK .tar.gz of each device call, in call order")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where they land (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="replace files already there")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", args.tag):
        print(f"land_lease: tag {args.tag!r}: lower-case letters, digits, '.' and '-' only", file=sys.stderr)
        return 2
    try:
        written, notes = land(args.tag, args.packs, args.results, args.force)
    except (LandError, tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:  # EOF: cut short
        print(f"land_lease: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"land_lease: not landed: {note}", file=sys.stderr)
    for path in written:
        print(f"{path}  {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
