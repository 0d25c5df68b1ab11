"""A new user's first hour (issue 27): every command they try either does what it says or says, in one
`error:` line with exit 2, why it cannot; the listings count what happened, not what the hosts said."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from orchestrator.cli import main
from test_compare import make_run


def one_error(capsys) -> str:
    """The single `error:` line a refused command printed (and nothing that looks like a traceback)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def local_inventory(tmp_path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts: [{name: local, transport: local}]\n")
    return path


# -- report ---------------------------------------------------------------------------------------------
def test_report_to_a_folder_or_an_unwritable_place_is_one_error_line(tmp_path, capsys):
    make_run(tmp_path, "r", {"h1": 1.0}, seed=1)
    assert main(["report", "r", "-o", str(tmp_path), "--runs-dir", str(tmp_path)]) == 2
    assert f"-o {tmp_path}: is a folder" in one_error(capsys)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere: a path under a file cannot be written by anyone
        locked = tmp_path / "r" / "manifest.json"
    assert main(["report", "r", "-o", str(locked / "report.html"), "--runs-dir", str(tmp_path)]) == 2
    assert "cannot write the report there" in one_error(capsys)


def test_report_of_a_dry_run_says_nothing_ran(tmp_path, capsys, local_inventory):
    runs = tmp_path / "runs"
    assert main(["render", str(Path(__file__).parent.parent / "sweeps" / "noop.yaml"), "-i", str(local_inventory),
                 "--runs-dir", str(runs), "--quiet"]) == 0
    dry = next(runs.iterdir())
    capsys.readouterr()
    assert main(["report", str(dry), "-o", str(tmp_path / "r.html")]) == 2
    assert "is a dry run of `fleetbench render`: nothing ran" in one_error(capsys)
    make_run(runs, "real", {"h1": 1.0}, seed=2)
    assert main(["report", "real", "--against", dry.name, "-o", str(tmp_path / "r.html"), "--runs-dir", str(runs)]) == 2
    assert "is a dry run" in one_error(capsys)


def test_a_host_that_never_said_what_it_is_gets_blank_facts_in_the_report(tmp_path, capsys):
    store = make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.0}, seed=3)
    for results in store.dir.glob("hosts/h2/attempt-*/results.jsonl"):
        results.write_text("")  # h2 reported nothing at all: no facts record
    assert main(["report", "r", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)]) == 0
    assert "<td>h2</td>" in (tmp_path / "r.html").read_text()


def test_report_history_with_a_broken_index_is_one_error_line_or_a_report(tmp_path, capsys, monkeypatch):
    make_run(tmp_path, "r", {"h1": 1.0}, seed=4)
    (tmp_path / ".index.sqlite").write_bytes(b"this is not a database" * 100)
    code = main(["report", "r", "--history", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)])
    if code == 2:  # an index that is not rebuilt by itself must at least say so in one line
        assert "--history: the history index" in one_error(capsys)
    else:
        assert code == 0 and (tmp_path / "r.html").is_file() and "Traceback" not in capsys.readouterr().err
    from orchestrator.index import RunIndex

    def broken(*args, **kwargs):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(RunIndex, "open", broken)
    assert main(["report", "r", "--history", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)]) == 2
    assert "the history index of" in one_error(capsys)
    assert main(["report", "r", "-o", str(tmp_path / "r.html"), "--runs-dir", str(tmp_path)]) == 0  # as it says
