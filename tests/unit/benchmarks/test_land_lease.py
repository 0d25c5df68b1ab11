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
