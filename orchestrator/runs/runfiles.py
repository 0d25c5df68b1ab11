"""A run folder is a record: its files are read and written where they are, never through a symbolic link.

A link inside a run folder (results.jsonl, a host's folder, scripts/, the manifest) leads out of the
record: followed, `show` would print another run's numbers (or any file's) as this run's, a rerun would
write its attempt out there, and a looping one leads nowhere. So every reader of a run's files opens them
here (through RunStore): the folders below the run folder one beneath the other and then the file, each
with O_NOFOLLOW, so a link is refused wherever it sits on the way, even one put there after the folder was
listed. A folder about to be listed or written into is checked the same way, component by component.
A refused path raises LinkInRun (an InputError: one line, exit code 2), naming the link.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import InputError

NOT_THROUGH_LINKS = "fleetbench does not read through links inside a run folder"


class LinkInRun(InputError):
    """A path inside a run folder is (or passes through) a symbolic link."""

    def __init__(self, path: Path):
        super().__init__(f"{path} is a symbolic link; {NOT_THROUGH_LINKS}")
        self.path = Path(path)


def _parts(run_dir: Path, path: Path) -> tuple[str, ...]:
    """The names from `run_dir` down to `path`; ValueError for a path outside it."""
    parts = Path(path).relative_to(run_dir).parts
    if ".." in parts:
        raise ValueError(f"{path} is not inside the run folder {run_dir}")
    return parts


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open_at(dir_fd: int, name: str, flags: int, mode: int, shown: Path) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        # O_NOFOLLOW on a link: ELOOP; with O_DIRECTORY some kernels say ENOTDIR.
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST) and _is_link(name, dir_fd):
            raise LinkInRun(shown) from None
        raise


def open_fd(run_dir: Path, path: Path, flags: int, mode: int = 0o666) -> int:
    """os.open(`path`, flags) for a path inside `run_dir`, following no link below `run_dir`. Raises
    LinkInRun naming the first link on the way, OSError as os.open does (FileNotFoundError included)."""
    run_dir = Path(run_dir)
    parts = _parts(run_dir, Path(path))
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "the run folder itself", str(path))
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(parts[:-1]):
            inner = _open_at(fd, name, os.O_RDONLY | os.O_DIRECTORY, 0, run_dir.joinpath(*parts[: i + 1]))
            os.close(fd)
            fd = inner
        return _open_at(fd, parts[-1], flags, mode, Path(path))
    finally:
        os.close(fd)


def open_file(run_dir: Path, path: Path, mode: str = "r", **kwargs):
    """open(path, mode, **kwargs), following no link below `run_dir` (open_fd)."""
    return open(path, mode, opener=lambda _, flags: open_fd(run_dir, Path(path), flags), **kwargs)


def read_text(run_dir: Path, path: Path) -> str:
    with open_file(run_dir, path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_bytes(run_dir: Path, path: Path) -> bytes:
    with open_file(run_dir, path, "rb") as f:
        return f.read()


def no_links(run_dir: Path, path: Path) -> Path:
    """`path`, after checking that neither it nor a folder between `run_dir` and it is a symbolic link
    (the components that exist: a missing one ends the check). Raises LinkInRun."""
    run_dir = Path(run_dir)
    here = run_dir
    for name in _parts(run_dir, Path(path)):
        here = here / name
        try:
            st = os.lstat(here)
        except OSError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise LinkInRun(here)
        if not stat.S_ISDIR(st.st_mode):
            break
    return Path(path)


def entries(run_dir: Path, folder: Path) -> list[os.DirEntry]:
    """What `folder` (inside `run_dir`) holds, sorted by name; [] when it is missing or not a folder.
    Raises LinkInRun when it, or a folder on the way, is a link."""
    no_links(run_dir, folder)
    try:
        with os.scandir(folder) as listed:
            return sorted(listed, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def exists(run_dir: Path, path: Path) -> bool:
    """Whether `path` is there; LinkInRun when it, or a folder on the way, is a link."""
    return os.path.lexists(no_links(run_dir, path))


def subfolders(run_dir: Path, folder: Path) -> list[Path]:
    """The folders in `folder`, by name; LinkInRun for one that is a link (it is not followed)."""
    found: list[Path] = []
    for entry in entries(run_dir, folder):
        if entry.is_symlink():
            raise LinkInRun(Path(entry.path))
        if entry.is_dir(follow_symlinks=False):
            found.append(Path(entry.path))
    return found


def make_dir(run_dir: Path, folder: Path) -> Path:
    """`folder` inside `run_dir`, created with its parents where missing, none of them through a link
    (checked before, and the folder itself after, where a link would have been taken for a folder)."""
    no_links(run_dir, folder)
    Path(folder).mkdir(parents=True, exist_ok=True)
    return no_links(run_dir, folder)
