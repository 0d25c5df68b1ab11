"""Tables at any terminal width from 60 columns: no line wider than the terminal, no name or number
broken (every word of every cell shown appears whole), every column either shown or said (left out,
or its one value said once under the table); show keeps the shape columns, diff the shape and the
verdict. And CPU rows print TFLOPS with meaningful digits."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from support.syntheticruns import make_run

from orchestrator.runs.store import RunStore
from orchestrator.views.output import Document, write

WIDTHS = range(60, 201)
V3 = "runs-v3/20261203-094347-smoke-636e"
V4 = "runs-v4/20261203-133700-smoke-byo-4073"
V5 = "runs-v5/20261203-155636-smoke-moe-v5-280c"


def said_columns(text: str) -> tuple[set[str], str]:
    """Headers a table says it left out, and the flattened text of its `every row:` / `no row has:` lines."""
    flat = " ".join(text.split())
    left_out = {
        h for found in re.findall(r"left out at \d+ columns: (.*?) \(a wider terminal", flat) for h in found.split(", ")
    }
    return left_out, flat


def check_whole(doc: Document, text: str, width: int, keep: tuple[str, ...] = ()) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, f"a line wider than {width}"
    left_out, flat = said_columns(text)
    expected: Counter = Counter()
    for section in doc.sections:
        for i, header in enumerate(section.headers):
            values = {row[i] for row in section.rows}
            if header in left_out:
                assert header not in keep, f"{header} left out at {width}"
                continue
            if len(section.rows) > 1 and len(values) == 1:  # said once, or shown on every row
                (value,) = values
                if (f"{header}={value}" if value else header) in flat:
                    continue
            expected.update(header.split())
            for row in section.rows:
                expected.update(row[i].split())
    found = Counter(re.split(r"[\s│┃]+", text))
    broken = {word: n for word, n in expected.items() if found[word] < n}
    assert not broken, f"at {width} columns, not whole (word: times expected): {broken}"


@pytest.fixture(scope="module")
def fleet_runs(tmp_path_factory, stored_runs) -> Path:
    """Runs of two hosts with shapes up to five digits, a step in their history, and the stored CPU runs."""
    runs = tmp_path_factory.mktemp("fleet-runs")
    for i, factor in enumerate([1.0, 1.0, 1.01, 1.0, 1.3, 1.3]):
        make_run(
            runs,
            f"20261201-00000{i}-synthetic-{i:04x}",
            {"gpu-node-01": factor, "gpu-node-02": 1.0},
            seed=80 + i,
            ms=[16, 4096, 16384],
            rounds=3,
            round_sigma=0.05 * i,
            tainted={("gpu-node-02", 4096)},
        )
    for run in (V3, V4, V5):
        shutil.copytree(stored_runs / run, runs / Path(run).name)
    return runs


def show_documents(runs: Path) -> list[Document]:
    from orchestrator.analysis.merge import merged_rows
    from orchestrator.views.tables import pivot_document, rows_document

    docs = []
    for run in ("20261201-000005-synthetic-0005", Path(V4).name, Path(V5).name):
        rows = merged_rows(RunStore(runs / run))
        docs += [rows_document(rows, title=f"run {run}"), pivot_document(rows, rows[0].backend)]
    return docs


def diff_documents(runs: Path) -> list[Document]:
    from orchestrator.analysis.diff import compare_sides, resolve_side
    from orchestrator.views.tables import comparison_document

    pairs = [
        ("20261201-000000-synthetic-0000", "20261201-000005-synthetic-0005"),
        (Path(V3).name, Path(V4).name),
        (Path(V4).name, Path(V4).name),
        ("20261201-000005-synthetic-0005:gpu-node-01", "20261201-000005-synthetic-0005:gpu-node-02"),
    ]
    return [comparison_document(compare_sides(resolve_side(runs, a), resolve_side(runs, b), 0.03)) for a, b in pairs]


def history_documents(runs: Path) -> list[Document]:
    from orchestrator.analysis.history import Selection, history
    from orchestrator.runs.index import RunIndex
    from orchestrator.views.tables import history_document

    index = RunIndex.open(runs)
    try:
        hist = history(index, Selection(m=16), 0.03, with_steps=True)
    finally:
        index.close()
    assert hist.steps  # the steps table is drawn too
    return [history_document(hist)]


def hosts_documents(tmp_path: Path) -> list[Document]:
    from orchestrator.config.inventory import load_inventory
    from orchestrator.ops.hostcheck import HostStatus
    from orchestrator.views.tables import host_check_document, inventory_document

    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("""
defaults: {user: bench, python: /opt/fleetbench/venvs/flashinfer-0.7.4/bin/python3.12,
           workdir: /scratch/benchmarks/fleetbench-workdir, labels: [rtx-pro-6000, sm120]}
hosts:
  - {name: local, transport: local, workdir: ~/.fleetbench/local, labels: [local]}
  - {name: rtx01-blackwell, hostname: rtx01.gpu-cluster.example.internal, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}
  - {name: rtx02-blackwell, hostname: 10.20.0.12, gpus: [0]}
""")
    hosts = load_inventory(inventory).hosts
    facts = {
        "python": "3.12.3",
        "in_venv": True,
        "worker_version": "0.3.0",
        "worker_sha256": "0123456789abcdef0123",
        "torch": "2.11.0+cu130",
        "flashinfer": "0.7.4",
        "sgl_kernel": "0.3.21",
        "gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "compute_capability": "12.0",
        "driver": "580.95.05",
        "cuda": "13.0",
        "free_disk_gb": 1234.5,
        "gpu_processes": 0,
    }
    statuses = [
        HostStatus("rtx01-blackwell", True, "ok", facts=facts),
        HostStatus(
            "rtx02-blackwell",
            False,
            "unreachable",
            problem="connection to 10.20.0.12:22 timed out after 10 s: is the host up?",
        ),
    ]
    return [inventory_document(hosts), host_check_document(statuses, skew=[])]


@pytest.mark.parametrize(
    "documents, keep",
    [
        (show_documents, ("M", "N", "K")),  # show keeps the shape
        (diff_documents, ("M", "N", "K", "verdict", "B/A")),  # diff keeps the shape and its verdict
        (history_documents, ("backend", "M", "median µs")),  # history never squeezes a column unsaid
    ],
    ids=["show", "diff", "history"],
)
def test_tables_keep_names_numbers_and_their_key_columns_whole_at_every_width(fleet_runs, documents, keep):
    for width in WIDTHS:
        for doc in documents(fleet_runs):
            check_whole(doc, write(doc, "table", width), width, keep=keep)


def test_hosts_tables_never_split_a_path(tmp_path):
    docs = hosts_documents(tmp_path)
    for width in WIDTHS:
        for doc in docs:
            check_whole(doc, write(doc, "table", width), width, keep=("host",))


def test_a_narrow_table_says_what_it_left_out_and_what_every_row_shares(stored_runs):
    from orchestrator.analysis.merge import merged_rows
    from orchestrator.views.tables import rows_document

    rows = merged_rows(RunStore(stored_runs / V4))
    text = " ".join(write(rows_document(rows), "table", 80).split())
    assert "every row: host=local, label=smoke, N=256, K=512; no row has: % SoL" in text
    assert "left out at 80 columns: rounds, TFLOPS, rel_err, check (a wider terminal, or --format md|csv|json" in text
    wide = write(rows_document(rows), "table", 200)
    assert "every row" not in wide and "left out" not in wide  # it all fits: nothing folded
    assert re.search(r"┃\s+K ┃\s+status\s+┃\s+median µs ┃", wide)  # headers on one line when there is room


def test_cpu_rows_give_tflops_and_microseconds_with_meaningful_digits(stored_runs, capsys):
    """A CPU's 0.0733 TFLOPS is not `0.0`: three significant digits, whatever the magnitude."""
    from support.cli_output import md_rows

    from orchestrator.analysis.merge import merged_rows
    from orchestrator.cli import main
    from orchestrator.views.tables import significant

    run = stored_runs / V4
    main(["show", str(run), "--format", "md"])
    by_case = {(r.backend, r.m): r for r in merged_rows(RunStore(run))}
    shown = [row for row in md_rows(capsys.readouterr().out, "host") if row["status"] == "ok"]
    assert shown
    for row in shown:
        record = by_case[(row["backend"], int(row["M"]))]
        assert float(row["TFLOPS"]) == pytest.approx(record.tflops, rel=5e-3), row
        assert float(row["median µs"]) == pytest.approx(record.median_us, rel=5e-4), row
    assert [significant(v, 3) for v in (0.000526, 0.0733, 1.5, 272.58, 12345.6, 0.0)] == [
        "0.000526",
        "0.0733",
        "1.50",
        "273",
        "12346",
        "0",
    ]


def test_control_characters_in_stored_text_never_reach_the_terminal():
    from orchestrator.views.output import Document, Section, write

    doc = Document([Section(["label", "note"], [["a\x1b[31mred", "line\nbreak \u202eevil"]])], notes=["n\x07"])
    for fmt in ("table", "md"):
        text = write(doc, fmt, 120)
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
        assert "\\x1b[31mred" in text


def test_a_json_document_never_holds_a_token_json_cannot_read():
    import json
    import math

    from orchestrator.views.output import Document, write

    doc = Document(sections=[], data={"records": [{"ratio": math.inf, "low": math.nan, "ok": 1.5}]}, kind="diff")
    parsed = json.loads(write(doc, "json"))
    assert parsed["records"] == [{"ratio": None, "low": None, "ok": 1.5}]


def test_a_record_for_years_refuses_a_number_json_cannot_hold(tmp_path):
    import math

    import pytest

    from orchestrator.atomicfile import write_json

    with pytest.raises(ValueError):
        write_json(tmp_path / "m.json", {"timeout": math.inf})
    assert not (tmp_path / "m.json").exists()


def test_every_row_note_the_merge_returns_has_its_words():
    from orchestrator.analysis import merge
    from orchestrator.views.tables import ROW_NOTE_WORDS, row_note_text

    assert {v for k, v in vars(merge).items() if k.startswith("ROW_")} == set(ROW_NOTE_WORDS)
    ended = merge.RowNote(merge.ROW_HOST_ENDED, {"outcome": "failed", "error": ""})
    assert row_note_text(ended) == "host failed"
    cut = merge.RowNote(merge.ROW_CUT_SHORT, {"rounds": 2, "planned": 5, "attempt": 1, "outcome": "stalled"})
    assert row_note_text(cut) == "2 of 5 rounds timed before attempt 1 ended (host stalled)"
    over = merge.RowNote(merge.ROW_OVER_POWER, {"watts": 817.2, "limit_w": 700.0, "rounds": 3})
    assert (
        row_note_text(over)
        == "sampled at 817 W, over the GPU's 700 W limit (3 of its rounds): sustained load reads slower"
    )


def test_a_row_sampled_over_the_power_limit_says_so_and_one_under_it_does_not(tmp_path, capsys):
    """Format 11: each round records NVML's instantaneous power after its samples, the facts the enforced
    limit; a heavy GEMM may draw more than the limit for its first second of load (docs/TIMING.md)."""
    import json

    from support.cli_output import cli_json

    from orchestrator.analysis.merge import ROW_OVER_POWER, merged_rows
    from orchestrator.cli import main
    from orchestrator.views.tables import row_reason

    store = make_run(tmp_path, "20261206-000000-power-0001", {"h0": 1.0}, seed=3, ms=[16, 32], rounds=2)
    path = store.attempt_dir("h0", 1) / "results.jsonl"
    lines = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "facts":
            rec["power_limit_w"] = 700.0
        elif rec.get("timing"):
            watts = [746.4, 690.0] if rec["case"]["m"] == 32 else [650.0, 705.0]  # 705 W: at the limit
            for r, w in zip(rec["timing"]["rounds"], watts):
                r["power_w"] = w
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    rows = {(r.backend, r.m): r for r in merged_rows(RunStore(store.dir))}
    over = rows[("torch-bf16", 32)]
    assert over.power_w == 746.4 and [n.code for n in over.notes] == [ROW_OVER_POWER]
    assert (
        row_reason(over)
        == "sampled at 746 W, over the GPU's 700 W limit (1 of its rounds): sustained load reads slower"
    )
    under = rows[("torch-bf16", 16)]
    assert under.power_w == 705.0 and under.notes == [] and row_reason(under) == ""
    assert main(["show", store.run_id, "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    shown = {(r["backend"], r["m"]): r for r in cli_json(capsys.readouterr().out)}
    assert "over the GPU's 700 W limit" in shown[("torch-fp8", 32)]["reason"]
    assert shown[("torch-fp8", 16)]["reason"] == "" and shown[("torch-fp8", 16)]["power_w"] == 705.0
