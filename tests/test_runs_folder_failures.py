"""Every failure of the runs folder answered in one line (issue 41): a disk that fills up mid-run, symbolic
links among the runs, a run written by a newer fleetbench, a dry run executed since, dates that mean
nothing. Each test runs the user's command as a user would and checks: no traceback, nothing deleted that
should not be, one clear line, and the documented exit code."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli_output import cli_json
from support.syntheticruns import make_run

from orchestrator import atomicfile
from orchestrator.cli import main
from orchestrator.execution import demux as demux_module
from worker.contract.schema import SCHEMA_VERSION

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "sweeps" / "smoke.yaml"
NOOP = REPO / "sweeps" / "noop.yaml"
# One measured case on a CPU, in a fraction of a second.
TINY = (
    "name: tiny\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 64}]\n"
    "timing: {budget_s: 0.05, warmup_ms: 1, min_samples: 3}\ndevice: cpu\n"
)


@pytest.fixture
def inventory(tmp_path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts: [{name: local, transport: local}]\n")
    return path


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "Exception in thread" not in text, text


def error_line(err: str) -> str:
    """The one `error:` line of a refused command."""
    no_traceback(err)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def fleetbench(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
    )


# -- a disk that fills up ------------------------------------------------------------------------------
@contextlib.contextmanager
def small_disk(where: Path, size_kib: int):
    """A tmpfs of `size_kib` at `where` (root, and a kernel that lets it mount one), else a skip."""
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path, leave: int) -> None:
    """Fill `disk` until `leave` bytes are free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    (disk / "filler").write_bytes(b"\0" * max(0, free - leave))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_runs_folder_that_fills_up_mid_run_stops_the_run_with_one_line_and_show_says_disk_full(tmp_path, inventory):
    with small_disk(tmp_path / "disk", 512) as disk:
        # What a run writes before its host starts (manifest, worker, scripts), measured by a dry run.
        rendered = fleetbench("render", SMOKE, "-i", inventory, "--runs-dir", disk / "probe", "--quiet", cwd=tmp_path)
        assert rendered.returncode == 0, rendered.stderr
        before = sum(f.stat().st_blocks * 512 for f in (disk / "probe").rglob("*") if f.is_file())
        subprocess.run(["rm", "-rf", str(disk / "probe")], check=True)
        # Room for that, the job's params and log, and a few result lines: the rest finds a full disk.
        fill(disk, before + 40960)
        done = fleetbench("run", SMOKE, "-i", inventory, "--runs-dir", disk / "runs", cwd=tmp_path)
        no_traceback(done.stderr)
        assert done.returncode == 1, done.stderr
        said = [line for line in done.stderr.splitlines() if line.startswith("local: failed: ")]
        assert len(said) == 1 and "disk full (ENOSPC) writing " in said[0], done.stderr
        assert str(disk / "runs") in said[0]  # where
        (run_dir,) = [p for p in (disk / "runs").iterdir() if not p.name.startswith(".")]
        attempt = run_dir / "hosts" / "local" / "attempt-1"
        results = (attempt / "results.jsonl").read_bytes()
        assert results and results.endswith(b"\n")  # what was written stays, in whole lines
        kept = [json.loads(line) for line in results.splitlines()]
        shown = fleetbench("show", run_dir, "--format", "json", cwd=tmp_path)
        no_traceback(shown.stderr)
        assert shown.returncode == 1
        assert "local: failed: disk full (ENOSPC)" in shown.stderr, shown.stderr
        assert "the controller stopped before this attempt finished" not in shown.stderr
        rows = cli_json(shown.stdout)
        assert sum(r["status"] in ("ok", "unsupported", "unavailable", "incomplete") for r in rows) >= 1
        assert len([k for k in kept if k.get("kind") == "case"]) >= 1


def test_a_disk_full_of_results_and_outcome_stops_the_attempt_and_show_says_why(
    tmp_path, inventory, capsys, monkeypatch
):
    """The same without a tmpfs (any CI): the run folder refuses the third result line and every outcome
    file, as a full disk does."""
    real_append = atomicfile.append_line
    lines = {"n": 0}

    def full_after_two(f, data):
        if f.name.endswith("results.jsonl"):
            lines["n"] += 1
            if lines["n"] > 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f.name)
        real_append(f, data)

    real_open = open

    def no_room_for_outcomes(path, *args, **kwargs):
        if "outcome.json" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(demux_module, "append_line", full_after_two)
    monkeypatch.setattr(atomicfile, "open", no_room_for_outcomes, raising=False)
    runs = tmp_path / "runs"
    assert main(["run", str(SMOKE), "-i", str(inventory), "--runs-dir", str(runs)]) == 1
    err = capsys.readouterr().err
    no_traceback(err)
    said = [line for line in err.splitlines() if line.startswith("local: failed: ")]
    assert len(said) == 1 and "disk full (ENOSPC) writing" in said[0] and "results.jsonl" in said[0], err
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    results = (run_dir / "hosts" / "local" / "attempt-1" / "results.jsonl").read_text()
    assert len(results.splitlines()) == 2 and results.endswith("\n")  # the two lines that fitted are kept
    monkeypatch.undo()
    assert main(["show", run_dir.name, "--runs-dir", str(runs)]) == 1
    err = capsys.readouterr().err
    no_traceback(err)
    assert "local: failed: disk full (ENOSPC)" in err and "the disk was full" in err, err
    assert "the controller stopped before this attempt finished" not in err


def test_a_disk_full_before_the_run_starts_is_one_line_and_leaves_no_half_run(tmp_path, inventory, capsys, monkeypatch):
    real_open = open

    def no_room_for_the_manifest(path, *args, **kwargs):
        if "manifest.json" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(atomicfile, "open", no_room_for_the_manifest, raising=False)
    runs = tmp_path / "runs"
    assert main(["run", str(NOOP), "-i", str(inventory), "--runs-dir", str(runs)]) == 2
    line = error_line(capsys.readouterr().err)
    assert "disk full (ENOSPC) writing" in line and "manifest.json" in line and "nothing ran" in line
    assert [p for p in runs.iterdir() if not p.name.startswith(".")] == []


# -- symbolic links in the runs folder -------------------------------------------------------------------
def runs_with_links(tmp_path) -> tuple[Path, list[str], Path]:
    """Three runs; beside them a link to the second, a link to a run outside the folder (named to sort
    first), and a looping link."""
    runs, outside = tmp_path / "runs", tmp_path / "elsewhere"
    ids = ["20261201-000000-x-0001", "20261202-000000-x-0002", "20261203-000000-x-0003"]
    for i, run_id in enumerate(ids):
        make_run(runs, run_id, {"h": 1.0}, seed=i)
    make_run(outside, "20261130-000000-x-0000", {"h": 1.0}, seed=9)
    (runs / "zz-second").symlink_to(ids[1])
    (runs / "00-outside").symlink_to(outside / "20261130-000000-x-0000")
    (runs / "loop").symlink_to("loop")
    return runs, ids, outside / "20261130-000000-x-0000"


def link_notes(err: str) -> list[str]:
    return sorted(line for line in err.splitlines() if line.startswith("note: ") and "symbolic link" in line)


def test_prune_never_deletes_through_a_symbolic_link_and_names_each(tmp_path, capsys):
    runs, ids, outside = runs_with_links(tmp_path)
    assert main(["prune", "--keep", "1", "--local-only", "--runs-dir", str(runs)]) == 0
    captured = capsys.readouterr()
    no_traceback(captured.err)
    assert captured.out.splitlines() == [f"pruned {ids[0]}", f"pruned {ids[1]}"]
    assert (runs / ids[2] / "manifest.json").is_file() and (outside / "manifest.json").is_file()
    assert all((runs / name).is_symlink() for name in ("zz-second", "00-outside", "loop"))  # left alone
    notes = link_notes(captured.err)
    assert len(notes) == 3 and all("left alone" in n for n in notes)
    assert any("loop" in n and "a loop" in n for n in notes) and any(str(outside) in n for n in notes)


def test_runs_history_and_report_keep_working_beside_links_and_name_them(tmp_path, capsys):
    runs, ids, _ = runs_with_links(tmp_path)
    assert main(["runs", "--runs-dir", str(runs), "--format", "json"]) == 0
    captured = capsys.readouterr()
    no_traceback(captured.err)
    assert [e["run_id"] for e in cli_json(captured.out)] == ids  # each run once, nothing from outside
    assert len(link_notes(captured.err)) == 3
    assert main(["history", "--runs-dir", str(runs), "--backend", "torch-bf16", "--m", "16", "--format", "json"]) == 0
    captured = capsys.readouterr()
    no_traceback(captured.err)
    assert sorted(p["run_id"] for p in cli_json(captured.out)["points"]) == ids
    assert len(link_notes(captured.err)) == 3 and "cannot be used" not in captured.err
    assert main(["report", ids[2], "--history", "-o", str(tmp_path / "r.html"), "--runs-dir", str(runs)]) == 0
    captured = capsys.readouterr()
    no_traceback(captured.err)
    assert len(link_notes(captured.err)) == 3 and (tmp_path / "r.html").is_file()
    # A link named as a run is refused, not followed.
    assert main(["show", "zz-second", "--runs-dir", str(runs)]) == 2
    line = error_line(capsys.readouterr().err)
    assert "is a symbolic link" in line and "name the run folder itself" in line


# -- symbolic links inside a run folder ------------------------------------------------------------------
REFUSED = "is a symbolic link; fleetbench does not read through links inside a run folder"


def two_runs(tmp_path: Path, inventory: Path, capsys) -> tuple[Path, Path]:
    """Two real runs of the no-op sweep on the local host, oldest first."""
    runs = tmp_path / "runs"
    for _ in range(2):
        assert main(["run", str(NOOP), "-i", str(inventory), "--runs-dir", str(runs)]) == 0
    capsys.readouterr()
    first, second = sorted(p for p in runs.iterdir() if not p.name.startswith("."))
    return first, second


def tree(folder: Path) -> dict[str, bytes]:
    """What a folder holds, file by file (to see that nothing was written or deleted there)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def link_into(run: Path, other: Path, elsewhere: Path, kind: str) -> Path:
    """Replace a file or folder of `run` by a symbolic link: to a copy of `other`'s outside the runs
    folder, or to itself (a loop). Returns the link."""
    import shutil

    where = {
        "results": "hosts/local/attempt-1/results.jsonl",
        "host folder": "hosts/local",
        "outcome loop": "hosts/local/attempt-1/outcome.json",
        "manifest": "manifest.json",
        "scripts": "scripts",
    }[kind]
    link = run / where
    if link.is_dir():
        shutil.rmtree(link)
    else:
        link.unlink()
    if kind == "outcome loop":
        link.symlink_to(link.name)
        return link
    target = elsewhere / Path(where).name
    elsewhere.mkdir(exist_ok=True)
    (shutil.copytree if (other / where).is_dir() else shutil.copyfile)(other / where, target)
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("kind", ["results", "host folder", "outcome loop", "manifest"])
def test_a_link_inside_a_run_folder_is_refused_by_every_reader_naming_it(tmp_path, inventory, capsys, kind):
    """A run folder is a record: a link in it (to another run's file outside the runs folder, or a loop)
    is refused with one line naming it, never read through, and nothing is written out there."""
    first, second = two_runs(tmp_path, inventory, capsys)
    elsewhere = tmp_path / "elsewhere"
    link = link_into(second, first, elsewhere, kind)
    before = tree(elsewhere) if elsewhere.exists() else {}
    said = f"error: {link} {REFUSED}"
    runs = str(first.parent)
    for argv in (
        ["show", second.name],
        ["show", str(second), "--format", "json"],
        ["diff", first.name, second.name],
        ["report", second.name, "-o", str(tmp_path / "r.html")],
        ["rerun", second.name, "--failed", "-i", str(inventory)],
        ["crosscheck", second.name, "--all", "-i", str(inventory)],
        ["profile", f"{second.name}:local", "--backend", "noop", "-i", str(inventory)],
    ):
        assert main([*argv, "--runs-dir", runs]) == 2, argv
        assert error_line(capsys.readouterr().err) == said, argv
    assert not (tmp_path / "r.html").exists()
    # Listings go on, the run named unreadable with the same reason.
    assert main(["runs", "--runs-dir", runs, "--format", "json"]) == 0
    captured = capsys.readouterr()
    no_traceback(captured.err)
    entries = {e["run_id"]: e for e in cli_json(captured.out)}
    assert entries[second.name]["summary"] == f"unreadable: {link} {REFUSED}"
    assert entries[first.name]["summary"] == "cases: 1 ok; hosts: 1 ok"
    assert main(["history", "--runs-dir", runs, "--format", "json"]) == 0
    captured = capsys.readouterr()
    no_traceback(captured.err)
    assert any(second.name in line and f"{link} {REFUSED}" in line for line in captured.err.splitlines()), captured.err
    # Nothing was written through the link, and it is still there, as it was.
    assert link.is_symlink() and (tree(elsewhere) if elsewhere.exists() else {}) == before
    assert sorted(p.name for p in (first / "hosts" / "local").iterdir()) == ["attempt-1"]


def test_a_rerun_never_writes_into_a_host_folder_that_leads_out_of_the_run(tmp_path, inventory, capsys):
    """A host folder that is a link to an empty folder outside: the rerun would put its attempt there."""
    first, second = two_runs(tmp_path, inventory, capsys)
    import shutil

    shutil.rmtree(second / "hosts" / "local")
    (tmp_path / "elsewhere").mkdir()
    (second / "hosts" / "local").symlink_to(tmp_path / "elsewhere")
    assert main(["rerun", str(second), "--failed", "-i", str(inventory)]) == 2
    assert error_line(capsys.readouterr().err) == f"error: {second / 'hosts' / 'local'} {REFUSED}"
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_rerun_refuses_scripts_that_lead_out_of_the_run(tmp_path, inventory, capsys):
    first, second = two_runs(tmp_path, inventory, capsys)
    results = second / "hosts" / "local" / "attempt-1" / "results.jsonl"
    results.write_text(results.read_text().splitlines()[0] + "\n")  # the facts alone: the case is missing
    link = link_into(second, first, tmp_path / "elsewhere", "scripts")
    assert main(["rerun", str(second), "--failed", "-i", str(inventory)]) == 2
    assert error_line(capsys.readouterr().err) == f"error: {link} {REFUSED}"
    assert sorted(p.name for p in (second / "hosts" / "local").iterdir()) == ["attempt-1"]


def test_stored_crosschecks_behind_a_link_are_refused(tmp_path, capsys):
    run = make_run(tmp_path / "runs", "20261201-000000-x-0001", {"h": 1.0}, seed=1, ms=[16]).dir
    (tmp_path / "elsewhere" / "h").mkdir(parents=True)
    (run / "crosschecks").mkdir()
    (run / "crosschecks" / "h").symlink_to(tmp_path / "elsewhere" / "h")
    assert main(["crosscheck", str(run), "--all", "--stored"]) == 2
    assert error_line(capsys.readouterr().err) == f"error: {run / 'crosschecks' / 'h'} {REFUSED}"


def test_prune_removes_a_run_holding_links_and_nothing_they_lead_to(tmp_path, inventory, capsys):
    first, second = two_runs(tmp_path, inventory, capsys)
    elsewhere = tmp_path / "elsewhere"
    link_into(first, second, elsewhere, "results")
    (elsewhere / "folder").mkdir()
    (elsewhere / "folder" / "keep.txt").write_text("mine")
    (first / "hosts" / "other").symlink_to(elsewhere / "folder")
    before = tree(elsewhere)
    assert main(["prune", "--keep", "1", "--local-only", "--runs-dir", str(first.parent)]) == 0
    captured = capsys.readouterr()
    no_traceback(captured.err)
    assert captured.out.splitlines() == [f"pruned {first.name}"]
    assert not os.path.lexists(first) and tree(elsewhere) == before  # the links went, not what they led to
    assert (second / "manifest.json").is_file()


def test_prune_keeps_a_run_whose_lock_is_a_link_and_says_why(tmp_path, capsys):
    runs, outside = tmp_path / "runs", tmp_path / "elsewhere"
    old = make_run(runs, "20261201-000000-x-0001", {"h": 1.0}, seed=1, ms=[16]).dir
    make_run(runs, "20261202-000000-x-0002", {"h": 1.0}, seed=2, ms=[16])
    outside.write_text("not a lock")
    (old / ".lock").symlink_to(outside)
    assert main(["prune", "--keep", "1", "--local-only", "--runs-dir", str(runs)]) == 1
    captured = capsys.readouterr()
    no_traceback(captured.err)
    assert f"{old.name}: {old / '.lock'} {REFUSED}: kept" in captured.err.splitlines()
    assert (old / "manifest.json").is_file() and outside.read_text() == "not a lock"


# -- a run written by a newer fleetbench ------------------------------------------------------------------
def test_a_run_with_records_of_a_newer_format_is_named_and_never_appended_to(tmp_path, inventory, capsys):
    runs = tmp_path / "runs"
    assert main(["run", str(NOOP), "-i", str(inventory), "--runs-dir", str(runs)]) == 0
    capsys.readouterr()
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    results = run_dir / "hosts" / "local" / "attempt-1" / "results.jsonl"
    newer = [dict(json.loads(line), schema_version=SCHEMA_VERSION + 1) for line in results.read_text().splitlines()]
    results.write_text("".join(json.dumps(r) + "\n" for r in newer))
    said = (
        f"written by a newer fleetbench (format {SCHEMA_VERSION + 1}; this one reads up to {SCHEMA_VERSION}): "
        "upgrade fleetbench to read it"
    )
    assert main(["show", run_dir.name, "--runs-dir", str(runs)]) == 2
    captured = capsys.readouterr()
    assert said in error_line(captured.err) and "rerun" not in captured.out + captured.err
    assert main(["rerun", run_dir.name, "--failed", "--runs-dir", str(runs)]) == 2
    assert said in error_line(capsys.readouterr().err)
    assert sorted(p.name for p in (run_dir / "hosts" / "local").iterdir()) == ["attempt-1"]  # nothing appended
    assert main(["history", "--runs-dir", str(runs)]) == 0
    assert any(run_dir.name in line and said in line for line in capsys.readouterr().err.splitlines())


# -- a dry run executed since ---------------------------------------------------------------------------------
def test_a_dry_run_executed_by_rerun_is_an_ordinary_run_everywhere(tmp_path, inventory, capsys):
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(TINY)
    runs = tmp_path / "runs"
    assert main(["render", str(sweep), "-i", str(inventory), "--runs-dir", str(runs), "--quiet"]) == 0
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    assert main(["rerun", run_dir.name, "--failed", "--runs-dir", str(runs)]) == 0
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(runs), "--format", "json"]) == 0
    (entry,) = cli_json(capsys.readouterr().out)
    assert entry["summary"] == "cases: 1 ok; hosts: 1 ok"
    assert main(["report", "latest", "-o", str(tmp_path / "r.html"), "--runs-dir", str(runs)]) == 0
    capsys.readouterr()
    assert main(["history", "--runs-dir", str(runs), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert [p["run_id"] for p in cli_json(captured.out)["points"]] == [run_dir.name]
    assert main(["prune", "--keep", "1", "--local-only", "--runs-dir", str(runs), "--dry-run"]) == 0
    assert "would prune" not in capsys.readouterr().out  # the one run that ran is kept, not counted as a dry run


# -- dates that mean nothing ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, option",
    [
        (["history", "--since", "last-week"], "--since"),
        (["history", "--until", "yesterday"], "--until"),
        (["history", "--since", "2026-13-45"], "--since"),
        (["prune", "--keep", "1", "--older-than", "last-week"], "--older-than"),
    ],
)
def test_a_date_that_means_nothing_is_an_input_error_naming_the_option_and_the_forms(tmp_path, capsys, argv, option):
    make_run(tmp_path, "20261201-000000-x-0001", {"h": 1.0}, seed=1)
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"error: {option} ") and "2026-11-30" in line and "2026-11-30T12:00" in line


def test_history_dates_select_by_the_day_and_by_the_instant(tmp_path, capsys):
    make_run(tmp_path, "20261201-000000-x-0001", {"h": 1.0}, seed=1)  # created 2026-12-01T00:00:00 UTC
    picks = {}
    for since, until in (
        ("2026-12-01", None),
        (None, "2026-12-01"),
        ("2026-12-02", None),
        (None, "2026-11-30"),
        ("2026-12-01T01:00+02:00", None),
        (None, "2026-11-30T23:59:59"),
    ):
        extra = (["--since", since] if since else []) + (["--until", until] if until else [])
        assert main(["history", "--runs-dir", str(tmp_path), "--format", "json", "--m", "16", *extra]) == 0
        picks[(since, until)] = len(cli_json(capsys.readouterr().out)["points"])
    assert [bool(n) for n in picks.values()] == [True, True, False, False, True, False], picks


def test_every_option_of_history_says_what_it_does():
    from orchestrator.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command")
    history = sub.choices["history"]
    unexplained = [a.option_strings for a in history._actions if a.option_strings and not a.help]
    assert unexplained == []
