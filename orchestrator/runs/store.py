"""The run store: runs/<id>/ holds everything a run produced, written atomically.

runs/<id>/manifest.json                         what was planned, as data: every case, the jobs,
                                                hosts (no secrets), script hashes (formats.py)
runs/<id>/scripts/<host>.py                     the exact bytes uploaded
runs/<id>/hosts/<slot>/attempt-<n>/params.json  the cases this attempt ran (data, not code)
                                  /log.txt      the host's output, line by line as it came
                                  /results.jsonl  fetched from the host
                                  /outcome.json   written last: an attempt without it was cut short

A run's files are read and written through the store's methods, which never follow a symbolic link inside
the run folder (runs/runfiles.py).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Optional

from worker.contract.schema import CaseSpec

from ..atomicfile import is_disk_full, write_json
from ..errors import InputError
from . import runfiles
from .formats import MANIFEST_VERSION, upgrade_manifest
from .manifest import Manifest, load_manifest
from .outcome import HostOutcome

DISK_FULL_MARK = "outcome.disk-full"  # empty: the attempt's outcome found no room on the disk


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class RunStore:
    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self._manifest: Optional[Manifest] = None

    @property
    def run_id(self) -> str:
        return self.dir.name

    @property
    def scripts_dir(self) -> Path:
        return self.dir / "scripts"

    @property
    def manifest_path(self) -> Path:
        return self.dir / "manifest.json"

    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> "RunStore":
        """A new, empty run folder; InputError when runs_dir cannot hold one."""
        run_dir = Path(runs_dir) / run_id
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise InputError(f"{run_dir}: a run with this id exists already") from None
        except (NotADirectoryError, PermissionError, OSError) as exc:
            raise InputError(
                f"--runs-dir {runs_dir}: cannot create a run folder there ({exc.strerror or type(exc).__name__})"
            ) from None
        return cls(run_dir)

    def manifest(self) -> Manifest:
        """The run's typed manifest (any stored format, upgraded on read: formats.py, manifest.py), read once."""
        if self._manifest is None:
            try:
                data = json.loads(self.read_text(self.manifest_path))
            except FileNotFoundError:
                raise InputError(f"{self.dir}: not a fleetbench run (no manifest.json)") from None
            except (ValueError, OSError) as exc:
                raise InputError(f"{self.manifest_path}: unreadable manifest: {exc}") from None
            manifest = load_manifest(upgrade_manifest(data, str(self.manifest_path)), str(self.manifest_path))
            if manifest.dry_run and self.ran():
                # A dry run of `render` that a rerun executed since is an ordinary run for every reader.
                manifest = manifest.model_copy(update={"dry_run": False})
            self._manifest = manifest
        return self._manifest

    def ran(self) -> bool:
        """Whether any host of the run has an attempt (a dry run that `rerun` executed has). LinkInRun
        when a host's folder is a link."""
        try:
            return any(self.attempts(slot.name) for slot in self.subfolders(self.dir / "hosts"))
        except OSError:
            return False

    # A run's files, never through a link inside the run folder (runs/runfiles.py: LinkInRun names it).
    def read_text(self, path: Path) -> str:
        return runfiles.read_text(self.dir, path)

    def read_bytes(self, path: Path) -> bytes:
        return runfiles.read_bytes(self.dir, path)

    def open(self, path: Path, mode: str = "r", **kwargs):
        return runfiles.open_file(self.dir, path, mode, **kwargs)

    def exists(self, path: Path) -> bool:
        return runfiles.exists(self.dir, path)

    def entries(self, folder: Path) -> list[os.DirEntry]:
        return runfiles.entries(self.dir, folder)

    def subfolders(self, folder: Path) -> list[Path]:
        return runfiles.subfolders(self.dir, folder)

    def make_dir(self, folder: Path) -> Path:
        return runfiles.make_dir(self.dir, folder)

    def write_json(self, path: Path, obj) -> None:
        """atomicfile.write_json into the run folder, into no folder that is a link."""
        runfiles.no_links(self.dir, Path(path).parent)
        write_json(runfiles.no_links(self.dir, path), obj)

    def write_manifest(self, manifest: dict) -> None:
        self._manifest = None
        self.write_json(self.manifest_path, {"manifest_version": MANIFEST_VERSION, **manifest})

    def planned_cases(self) -> dict[str, CaseSpec]:
        """Every case the run planned, by case id, as stored (never re-expanded from the sweep)."""
        return self.manifest().cases

    @contextlib.contextmanager
    def hold(self, wait: bool = True):
        """Hold the run while a command executes it (an flock on <run>/.lock, released when the holder
        ends, however it ends). Yields True; with wait=False, False when another process holds it."""
        fd = runfiles.open_fd(self.dir, self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def attempt_dir(self, slot: str, attempt: int) -> Path:
        return self.dir / "hosts" / slot / f"attempt-{attempt}"

    def attempts(self, slot: str) -> list[int]:
        """The slot's attempt numbers; LinkInRun when its folder (or an attempt's) is a link."""
        return sorted(
            int(p.name[8:])
            for p in self.subfolders(self.dir / "hosts" / slot)
            if p.name.startswith("attempt-") and p.name[8:].isdigit()
        )

    def next_attempt(self, slot: str) -> int:
        return max(self.attempts(slot), default=0) + 1

    def write_outcome(self, outcome: HostOutcome) -> None:
        self.write_json(
            self.attempt_dir(outcome.slot, outcome.attempt) / "outcome.json", outcome.model_dump(mode="json")
        )

    def keep_outcome(self, outcome: HostOutcome) -> None:
        """write_outcome, unless the disk has no room for it: then an empty file beside it (which takes no
        room) says why it is missing, and `outcome` reads that."""
        try:
            self.write_outcome(outcome)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            with contextlib.suppress(OSError):
                self.open(self.attempt_dir(outcome.slot, outcome.attempt) / DISK_FULL_MARK, "a").close()

    def outcome(self, slot: str, attempt: int) -> HostOutcome:
        """The attempt's outcome; one without outcome.json was cut short (controller killed, or a full disk:
        keep_outcome)."""
        path = self.attempt_dir(slot, attempt) / "outcome.json"
        try:
            return HostOutcome.model_validate_json(self.read_text(path))
        except (FileNotFoundError, ValueError):
            if self.exists(path.parent / DISK_FULL_MARK):
                return HostOutcome(
                    slot=slot,
                    host=slot.split(".gpu")[0],
                    attempt=attempt,
                    outcome="failed",
                    error=f"disk full (ENOSPC) under {path.parent}: this attempt stopped because the "
                    "disk was full, before its outcome could be written; what was written "
                    "before is kept",
                    cases_total=0,
                )
            return HostOutcome(
                slot=slot,
                host=slot.split(".gpu")[0],
                attempt=attempt,
                outcome="interrupted",
                error="the controller stopped before this attempt finished",
                cases_total=0,
            )

    def latest_outcomes(self) -> dict[str, HostOutcome]:
        """Per slot, the outcome of its latest attempt (slots from the manifest's job list)."""
        result = {}
        for job in self.manifest().jobs:
            attempts = self.attempts(job.slot)
            if attempts:
                result[job.slot] = self.outcome(job.slot, attempts[-1])
        return result


def resolve_run(runs_dir: Path, ref: str) -> RunStore:
    """RUN = a run id under runs_dir, a path to a run folder, or `latest` (the newest run that ran:
    a dry run of `render` is never `latest`). Raises InputError."""
    runs_dir = Path(runs_dir)
    if ref == "latest":
        for run_dir in reversed(list_run_dirs(runs_dir)):
            store = RunStore(run_dir)
            try:
                if store.manifest().dry_run:
                    continue
            except InputError:
                pass  # an unreadable run is still the latest: showing it says what is wrong with it
            return store
        raise InputError(f"no runs in {runs_dir}" + (" (only dry runs of `render`)" if list_run_dirs(runs_dir) else ""))
    for candidate in (Path(ref), runs_dir / ref):
        if candidate.is_symlink() and _inside(candidate.parent, runs_dir):
            raise InputError(
                f"{candidate} is a symbolic link (to {_link_target(candidate)}): fleetbench never "
                "follows a link in the runs folder; name the run folder itself"
            )
        if candidate.is_dir() and _has_manifest(candidate):
            return RunStore(candidate)
    matches = [p for p in list_run_dirs(runs_dir) if p.name.startswith(ref)] if ref else []
    if len(matches) == 1:
        return RunStore(matches[0])
    if len(matches) > 1:
        raise InputError(f"run '{ref}' is ambiguous: {', '.join(p.name for p in matches[:5])}")
    raise InputError(f"no run '{ref}' (not a run id in {runs_dir}, nor a run folder)")


def list_run_dirs(runs_dir: Path) -> list[Path]:
    """Run folders, oldest first (ids start with a timestamp). A symbolic link is never one: it is
    listed by `runs_folder_links` and left alone. A run whose manifest.json is a link is one (reading it
    says what is wrong with it)."""
    return sorted(p for p in _entries(runs_dir) if not p.is_symlink() and _has_manifest(p))


def run_dirs_without_manifest(runs_dir: Path) -> list[Path]:
    """Folders that hold a run's parts (scripts/, hosts/) but no manifest.json: damaged runs, which a listing
    names rather than leaving out."""
    return sorted(
        p
        for p in _entries(runs_dir)
        if not p.is_symlink()
        and p.is_dir()
        and not _has_manifest(p)
        and ((p / "scripts").is_dir() or (p / "hosts").is_dir())
    )


def runs_folder_links(runs_dir: Path) -> list[tuple[Path, str]]:
    """The symbolic links in the runs folder, with where each points: fleetbench reads, lists and
    deletes nothing through them (a link to a run would be that run twice, or a run outside the folder;
    a looping one leads nowhere)."""
    return sorted((p, _link_target(p)) for p in _entries(runs_dir) if p.is_symlink())


def link_note(link: Path, target: str) -> str:
    """A symbolic link in the runs folder (runs_folder_links), said to be left alone."""
    return f"{link} is a symbolic link (to {target}), not a run folder: left alone"


def links_notes(runs_dir: Path) -> list[str]:
    """One note per symbolic link in the runs folder, saying it was left alone."""
    return [link_note(link, target) for link, target in runs_folder_links(runs_dir)]


def _has_manifest(run_dir: Path) -> bool:
    """Whether the folder holds a manifest.json: a file, or something else there (a link) that reading
    the manifest refuses with its reason."""
    return os.path.lexists(run_dir / "manifest.json") and not (run_dir / "manifest.json").is_dir()


def _entries(runs_dir: Path) -> list[Path]:
    """What the runs folder holds, its index and other hidden files left out."""
    try:
        return [Path(e.path) for e in os.scandir(runs_dir) if not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _link_target(link: Path) -> str:
    try:
        target = os.readlink(link)
    except OSError as exc:
        return f"? ({exc.strerror})"
    # What the link leads to, said in a word: a loop, nothing, or a place.
    try:
        Path(link).resolve(strict=True)
    except RuntimeError:
        return f"{target}, a loop"
    except OSError as exc:
        return f"{target}, " + ("a loop" if exc.errno == errno.ELOOP else "which does not exist")
    return target


def _inside(folder: Path, runs_dir: Path) -> bool:
    try:
        return Path(folder).resolve() == Path(runs_dir).resolve()
    except (OSError, RuntimeError):
        return False


def existing_runs_dir(runs_dir: Path) -> Path:
    """`runs_dir` when it is a folder; InputError saying what it is otherwise (a command that only reads
    runs would otherwise succeed silently on a typo)."""
    path = Path(runs_dir)
    if path.is_dir():
        return path
    what = "is a file, not a folder of runs" if path.exists() else "does not exist (`fleetbench run` creates it)"
    raise InputError(f"--runs-dir {path}: {what}")
