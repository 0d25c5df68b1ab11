"""benchmarks/harness/land_lease.py: device_check packs land named for the lease, run folders in one xz."""

import io
import tarfile
from pathlib import Path

import pytest

from benchmarks.harness.land_lease import landed_name, main


def _tar(path: Path, files: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if path is not None:
        path.write_bytes(buf.getvalue())
    return buf.getvalue()


def _work(runs: list[str]) -> bytes:
    files = {"./hosts.yaml": b"hosts: {}\n", "./seed1.err": b"log\n", "./runs/.index.sqlite": b"db"}
    for run in runs:
        files[f"./runs/{run}/manifest.json"] = run.encode()
        files[f"./runs/{run}/.lock"] = b""
    return _tar(None, files)


def test_names_take_the_tag_and_a_repeat_after_it():
    assert landed_name("slowdowns-h2h-h200.md", "h100-s26a", set()) == "slowdowns-h2h-h100-s26a.md"
    assert landed_name("slowdowns-calibrate-h200-pads-2.json", "t", set()) == "slowdowns-calibrate-t-pads-2.json"
    taken = {"slowdowns-h2h-t.md", "slowdowns-h2h-t-repeat.md"}
    assert landed_name("slowdowns-h2h-h200.md", "t", taken) == "slowdowns-h2h-t-repeat2.md"
    assert landed_name("kernel-choice.md", "t", set()) == "kernel-choice-t.md"


def test_two_calls_land_as_one_lease(tmp_path, capsys):
    first = tmp_path / "o1.tar.gz"
    second = tmp_path / "o2.tar.gz"
    _tar(
        first,
        {
            "./slowdowns-h2h-h200.md": b"h2h 1\n",
            "./slow-host-h200.runs.tar.gz": _tar(None, {"./r/manifest.json": b"m"}),
            "./runs.tar.gz": _work(["20261207-033725-see-h2h-d093"]),
            "./seed1.md": b"working copy\n",
        },
    )
    _tar(
        second,
        {
            "./slowdowns-h2h-h200.md": b"h2h 2\n",
            "./cost-20261207-034055-glm5-tp8-fc49.md": b"cost a\n",
            "./cost-20261207-034112-glm5-tp8-5d41.md": b"cost b\n",
            # a warm machine's second call: its work folder holds the first call's run again
            "./runs.tar.gz": _work(["20261207-033725-see-h2h-d093", "20261207-034055-glm5-tp8-fc49"]),
        },
    )
    results = tmp_path / "results"
    results.mkdir()
    assert main(["h100-s26a", str(first), str(second), "--results", str(results)]) == 0
    landed = sorted(p.name for p in results.iterdir())
    assert landed == [
        "cost-h100-s26a.md",
        "slow-host-h100-s26a.runs.tar.xz",
        "slowdowns-h2h-h100-s26a-repeat.md",
        "slowdowns-h2h-h100-s26a.md",
        "slowdowns-seed-h100-s26a.runs.tar.xz",
    ]
    assert (results / "slowdowns-h2h-h100-s26a.md").read_bytes() == b"h2h 1\n"
    assert (results / "slowdowns-h2h-h100-s26a-repeat.md").read_bytes() == b"h2h 2\n"
    assert (results / "cost-h100-s26a.md").read_bytes() == b"cost a\n\ncost b\n"
    with tarfile.open(results / "slowdowns-seed-h100-s26a.runs.tar.xz", "r:xz") as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == [
        "./20261207-033725-see-h2h-d093/.lock",
        "./20261207-033725-see-h2h-d093/manifest.json",
        "./20261207-034055-glm5-tp8-fc49/.lock",
        "./20261207-034055-glm5-tp8-fc49/manifest.json",
        "./hosts.yaml",
    ]
    with tarfile.open(results / "slow-host-h100-s26a.runs.tar.xz", "r:xz") as tar:
        assert tar.extractfile("./r/manifest.json").read() == b"m"

    # landing again refuses to overwrite, names every clash, and writes nothing
    (results / "slowdowns-h2h-h100-s26a.md").write_bytes(b"kept\n")
    assert main(["h100-s26a", str(first), "--results", str(results)]) == 1
    assert "slowdowns-h2h-h100-s26a.md" in capsys.readouterr().err
    assert (results / "slowdowns-h2h-h100-s26a.md").read_bytes() == b"kept\n"


@pytest.mark.parametrize("tag", ["H100", "../x", "a b"])
def test_a_tag_that_is_not_a_file_name_part_is_refused(tmp_path, tag):
    pack = tmp_path / "o.tar.gz"
    _tar(pack, {"./slowdowns-h2h-h200.md": b"x"})
    assert main([tag, str(pack), "--results", str(tmp_path)]) == 2


def test_a_missing_pack_is_one_clear_error(tmp_path, capsys):
    assert main(["t", str(tmp_path / "nope.tar.gz"), "--results", str(tmp_path)]) == 1
    assert "nope.tar.gz: no such pack" in capsys.readouterr().err


def test_a_pack_cut_short_is_one_clear_error(tmp_path, capsys):
    pack = tmp_path / "o.tar.gz"
    whole = _tar(None, {"./slowdowns-h2h-h200.md": b"x" * 100000})
    pack.write_bytes(whole[: len(whole) // 2])
    assert main(["t", str(pack), "--results", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("land_lease: ")
    assert not (tmp_path / "slowdowns-h2h-t.md").exists()


def test_a_reused_out_folder_lands_each_file_once_and_the_longer_log(tmp_path, capsys):
    # a warm machine's second call with the same $OUT: its pack holds the first call's files again
    first, second = tmp_path / "o1.tar.gz", tmp_path / "o2.tar.gz"
    wall_1 = b"seed 1: exit 0, wall 17.3 s\n"
    _tar(
        first,
        {"./slowdowns-h2h-h200.md": b"h2h\n", "./seed-wall-h200.txt": wall_1, "./cost-20261207-041242-x.md": b"a\n"},
    )
    _tar(
        second,
        {
            "./slowdowns-h2h-h200.md": b"h2h\n",
            "./seed-wall-h200.txt": wall_1 + b"seed 1: exit 0, wall 16.3 s\n",
            "./cost-20261207-041327-y.md": b"b\n",
            "./cost-20261207-041242-x.md": b"a\n",
            "./buffers.md": b"not named for the machine\n",
            "./fidelity/x-h200.md": b"in a folder\n",
        },
    )
    results = tmp_path / "results"
    results.mkdir()
    assert main(["t", str(first), str(second), "--results", str(results)]) == 0
    assert sorted(p.name for p in results.iterdir()) == ["cost-t.md", "seed-wall-t.txt", "slowdowns-h2h-t.md"]
    assert (results / "seed-wall-t.txt").read_bytes().count(b"seed 1") == 2
    assert (results / "cost-t.md").read_bytes() == b"a\n\nb\n"  # each run's once, in run order
    err = capsys.readouterr().err
    assert "buffers.md: not named for the machine" in err and "fidelity/x-h200.md: in a folder" in err
    assert "no run folders" in err


def test_a_hard_link_in_a_run_folder_still_points_at_its_target(tmp_path):
    run = "20261207-033725-see-h2h-d093"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"./runs/{run}/manifest.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
        link = tarfile.TarInfo(f"./runs/{run}/copy.json")
        link.type, link.linkname = tarfile.LNKTYPE, f"./runs/{run}/manifest.json"
        tar.addfile(link)
    pack = tmp_path / "o.tar.gz"
    _tar(pack, {"./runs.tar.gz": buf.getvalue()})
    assert main(["t", str(pack), "--results", str(tmp_path)]) == 0
    out = tmp_path / "unpacked"
    with tarfile.open(tmp_path / "slowdowns-seed-t.runs.tar.xz") as tar:
        tar.extractall(out, filter="data")
    assert (out / run / "copy.json").read_bytes() == b"{}"


def test_a_corrupt_pack_is_one_line(tmp_path, capsys):
    pack = tmp_path / "o.tar.gz"
    whole = bytearray(_tar(None, {"./slowdowns-h2h-h200.md": bytes(range(256)) * 400}))
    whole[40:60] = b"\xff" * 20  # inside the deflate stream
    pack.write_bytes(bytes(whole))
    assert main(["t", str(pack), "--results", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("land_lease: ") and err.count("\n") == 1
