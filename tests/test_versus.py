"""`fleetbench versus RUN A B` on stored synthetic runs whose contenders were timed interleaved: B exactly 3%
slower than A (within a pair's small noise) under a GPU state that moves every round by 5-6%, a shape where
the two tie, a backend timed apart (never paired), a case that failed; and the pivot's BEST, which the
intervals decide, never the bare medians (9.265 µs against 9.272 µs is no BEST)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from support.cli_output import cli_json, md_rows

from orchestrator.analysis.headtohead import Contest, clocks_apart, judge, pair_index, pivot_best
from orchestrator.analysis.merge import merged_rows
from orchestrator.cli import main
from orchestrator.config.sweep import Sweep
from orchestrator.runs.slots import load_slots
from orchestrator.runs.store import RunStore
from orchestrator.views.tables import pivot_document
from worker.contract.schema import CaseRecord, FactsRecord, RoundStats
from worker.contract.stats import combine_rounds, summarize

A, B, ALONE = "torch-bf16", "torch-fp8", "reference-nvfp4"
MS = [16, 32, 64, 128, 256, 512]
TIED = {16, 32}  # B/A = 1 at these Ms; 1.03 elsewhere
STATES = [1.0, 1.06, 0.95]  # the GPU state of each round: every case's time moves with it


def timed(rounds: list[list[float]], pair_ids: list) -> object:
    """Stats of a case timed in rounds (each round's samples in cycle order), each round with its pair_id; the
    same samples serve as the round's own and as its head-to-head ones (paired_us)."""
    parts = []
    for xs, pid in zip(rounds, pair_ids):
        one = summarize(xs, method="cuda-graph", calls_per_sample=100, l2="cold")
        parts.append(
            one.model_copy(
                update={
                    "rounds": [
                        RoundStats(
                            median_us=one.median_us,
                            n=one.n,
                            rel_ci=one.rel_ci,
                            pair_id=pid,
                            paired_us=xs if pid else None,
                            sm_clock_stream_mhz=1500.0,
                        )
                    ],
                    "rounds_stop": "cap",
                }
            )
        )
    stats = combine_rounds(parts)
    return stats.model_copy(update={"rounds_stop": "cap"})


def contenders(
    rng, base: float, ratios: list[float], *, noise: float = 0.002, pairs: int = 20, key: str = "", states=STATES
) -> tuple:
    """A's and B's Stats timed interleaved: per cycle one sample of each in the same GPU state (the round's,
    times a drift both share), B's = A's x the round's ratio x a small noise of its own."""
    ra, rb = [], []
    for r, (state, ratio) in enumerate(zip(states, ratios)):
        drift = base * state * rng.lognormal(0.0, 0.02, pairs)
        ra.append(list(drift * rng.lognormal(0.0, noise, pairs)))
        rb.append(list(drift * ratio * rng.lognormal(0.0, noise, pairs)))
    ids = [f"{key}-r{r}" for r in range(len(states))]
    return timed(ra, ids), timed(rb, ids)


def write_run(
    runs_dir: Path,
    run_id: str,
    stats_of,
    *,
    hosts=("h1", "h2"),
    backends=(A, B, ALONE),
    ms=MS,
    failed: set = frozenset(),
) -> RunStore:
    """A stored run: `stats_of(host, m, backend)` gives each case's Stats; (host, m, backend) in `failed`
    failed instead."""
    sw = Sweep(name="h2h", backends=list(backends), shapes=[{"m": ms, "n": 2048, "k": 6144, "label": "syn"}])
    cases = sw.cases()
    store = RunStore.create(runs_dir, run_id)
    store.write_manifest(
        {
            "run_id": run_id,
            "sweep_name": sw.name,
            "sweep": sw.model_dump(mode="json"),
            "hosts": [],
            "dry_run": False,
            "cases": {c.case_id: c.model_dump(mode="json") for c in cases},
            "jobs": [{"slot": h, "host": h, "gpu": None, "case_ids": [c.case_id for c in cases]} for h in hosts],
        }
    )
    for host in hosts:
        lines = [
            FactsRecord(
                hostname=host,
                python="3.12",
                platform="linux",
                worker_version="0.3.0",
                device="cuda",
                gpu_name="NVIDIA H200",
                compute_capability="9.0",
            ).model_dump_json()
        ]
        for c in cases:
            if (host, c.m, c.backend) in failed:
                lines.append(
                    CaseRecord(
                        case_id=c.case_id,
                        case=c,
                        status="failed",
                        reason="CUDA error: illegal address",
                        started_at="t",
                        duration_s=0,
                    ).model_dump_json()
                )
                continue
            lines.append(
                CaseRecord(
                    case_id=c.case_id,
                    case=c,
                    status="ok",
                    timing=stats_of(host, c.m, c.backend),
                    started_at="t",
                    duration_s=0.1,
                ).model_dump_json()
            )
        d = store.attempt_dir(host, 1)
        d.mkdir(parents=True)
        (d / "results.jsonl").write_text("\n".join(lines) + "\n")
        (d / "outcome.json").write_text(
            json.dumps(
                {
                    "slot": host,
                    "host": host,
                    "attempt": 1,
                    "outcome": "ok",
                    "cases_total": len(cases),
                    "cases_done": len(cases),
                }
            )
        )
    return store


def h2h_stats(seed: int = 40):
    """Per (host, M): A and B interleaved (B 3% slower, or the same at TIED), the reference timed alone."""
    rng = np.random.default_rng(seed)
    made = {}
    for host, gpu in (("h1", 1.0), ("h2", 1.01)):
        for m in MS:
            ratio = 1.0 if m in TIED else 1.03
            a, b = contenders(rng, (5.0 + m / 16) * gpu, [ratio] * 3, key=f"{host}-{m}")
            alone = timed([list(50 * (5.0 + m / 16) * s * rng.lognormal(0.0, 0.002, 20)) for s in STATES], [None] * 3)
            made[(host, m)] = {A: a, B: b, ALONE: alone}
    return lambda host, m, backend: made[(host, m)][backend]


@pytest.fixture()
def runs(tmp_path) -> Path:
    write_run(tmp_path, "h2h", h2h_stats())
    return tmp_path


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- the winner rule --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "low, high, code",
    [
        (0.95, 0.98, "B"),
        (1.02, 1.05, "A"),
        (0.995, 1.005, "tie"),
        (0.9901, 1.0099, "tie"),
        (0.985, 0.995, "unsure"),
        (1.005, 1.02, "unsure"),
        (0.97, 1.03, "unsure"),
        (None, None, "unsure"),
    ],
)
def test_the_winner_is_what_the_whole_interval_says_against_the_tie_margin(low, high, code):
    assert judge(low, high, 0.01) == code


# -- versus through the command line ------------------------------------------------------------------------
def test_versus_names_a_three_percent_loser_and_the_ties_per_host_and_over_the_fleet(runs, capsys):
    code, out, err = run_cli(capsys, "versus", "h2h", A, B, "--runs-dir", str(runs), "--format", "md")
    assert code == 0, err
    rows = md_rows(out, "host")
    assert len(rows) == 2 * len(MS)
    for row in rows:
        m = int(row["M"])
        assert row["winner"] == ("tie" if m in TIED else "A faster"), row
        ratio = float(row["B/A"])
        assert abs(ratio - (1.0 if m in TIED else 1.03)) < 0.003, row
        low, high = (float(x) for x in row["95% CI"].split("–"))
        assert low <= ratio <= high and high - low < 0.01
        assert row["pairs×rounds"] == "60×3"
        assert float(row["B µs"]) > 0 and float(row["A µs"]) > 0
    fleet = md_rows(out, "label")
    assert [int(f["M"]) for f in fleet] == MS and all(f["hosts"] == "2/2" for f in fleet)
    assert [f["winner"] for f in fleet] == ["tie", "tie", "A faster", "A faster", "A faster", "A faster"]
    line = next(line for line in out.splitlines() if "fleet:" in line)
    assert f"{A} faster on 4 of 6 shapes by 3.0%" in line and "tie at M ≤ 32" in line, line


def test_a_backend_timed_apart_is_not_paired_and_given_no_ratio(runs, capsys):
    code, out, err = run_cli(capsys, "versus", "h2h", A, ALONE, "--runs-dir", str(runs), "--format", "json")
    assert code == 0, err
    doc = cli_json(out)
    assert doc["kind"] == "versus" and doc["a"] == A and doc["b"] == ALONE
    assert {s["winner"] for s in doc["shapes"]} == {"unpaired"}
    assert all(s["ratio"] is None and s["low"] is None and s["pairs"] == 0 for s in doc["shapes"])
    assert all(s["a_us"] and s["b_us"] for s in doc["shapes"])  # each side's own median is still shown
    assert doc["summary"]["counts"] == {"unpaired": 6}
    assert "not timed together on 6 of 6 shapes" in err  # the fleet line, on stderr beside the JSON
    code, out, _ = run_cli(capsys, "versus", "h2h", A, ALONE, "--runs-dir", str(runs))
    assert "not paired" in out and "timed apart" in out


def test_json_holds_every_fact_and_b_against_a_mirrors(runs, capsys):
    code, out, _ = run_cli(capsys, "versus", "h2h", A, B, "--runs-dir", str(runs), "--format", "json")
    doc = cli_json(out)
    assert code == 0 and doc["tie"] == 0.01 and doc["slots"] == ["h1", "h2"]
    shape = next(s for s in doc["shapes"] if s["slot"] == "h1" and s["m"] == 512)
    assert shape["winner"] == "A" and shape["low"] > 1.01 and shape["half_width"] < 0.005
    assert shape["pairs"] == 60 and shape["rounds"] == 3
    assert doc["summary"]["counts"] == {"A": 4, "tie": 2}
    assert doc["summary"]["tie_ranges"] == [
        {"label": "syn", "n": 2048, "k": 6144, "m_low": 16, "m_high": 32, "lowest": True, "highest": False}
    ]
    lo, hi = doc["summary"]["effects"]["A"]["min"], doc["summary"]["effects"]["A"]["max"]
    assert 0.027 < lo <= hi < 0.033
    code, out, _ = run_cli(capsys, "versus", "h2h", B, A, "--runs-dir", str(runs), "--format", "json")
    back = next(s for s in cli_json(out)["shapes"] if s["slot"] == "h1" and s["m"] == 512)
    assert back["winner"] == "B" and math.isclose(back["ratio"], 1 / shape["ratio"], rel_tol=1e-9)


def test_one_host_and_csv(runs, capsys):
    code, out, _ = run_cli(capsys, "versus", "h2h", A, B, "--host", "h2", "--runs-dir", str(runs), "--format", "csv")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 1 + len(MS)  # one host: no fleet rows
    assert "winner" in lines[0].split(",") and all(",h2," in line for line in lines[1:])
    code, out, _ = run_cli(capsys, "versus", "h2h:h1", A, B, "--runs-dir", str(runs))
    assert code == 0 and "h2" not in out.replace("h2h", "") and "A faster" in out


def test_a_tighter_tie_margin_turns_nothing_into_a_win_that_is_not_one(runs, capsys):
    """At ±0.1% a tie of two identical kernels is not called a win either way: tie or unsure."""
    code, out, _ = run_cli(capsys, "versus", "h2h", A, B, "--tie", "0.1%", "--runs-dir", str(runs), "--format", "json")
    tied = [s for s in cli_json(out)["fleet"] if s["m"] in TIED]
    assert code == 0 and {s["winner"] for s in tied} <= {"tie", "unsure"}


def test_a_failed_case_is_not_compared_and_exits_1(tmp_path, capsys):
    write_run(tmp_path, "f", h2h_stats(), failed={("h2", 64, B)})
    code, out, err = run_cli(capsys, "versus", "f", A, B, "--runs-dir", str(tmp_path), "--format", "json")
    assert code == 1
    bad = [s for s in cli_json(out)["shapes"] if s["winner"] == "not-ok"]
    assert [(s["slot"], s["m"], s["b_status"]) for s in bad] == [("h2", 64, "failed")]
    assert "h2: syn 64x2048x6144: A ok, B failed" in err
    fleet_64 = next(s for s in cli_json(out)["fleet"] if s["m"] == 64)
    assert fleet_64["winner"] == "A" and fleet_64["slots"] == 1  # h1 still compared it


@pytest.mark.parametrize(
    "argv, says",
    [
        (["h2h", A, "cublas-magic"], f"backend B 'cublas-magic' is not in run h2h (backends: {A}, {B}, {ALONE})"),
        (["h2h", "nope", B], "backend A 'nope' is not in run h2h"),
        (["h2h", A, A], "A and B are both"),
        (["h2h", A, B, "--host", "h9"], "--host 'h9' is not a host of this run (slots: h1, h2)"),
        (["h2h", A, B, "--tie", "lots"], "--tie 'lots': give a fraction like 0.01 or a percentage like 1%"),
        (["h2h", A, B, "--tie", "0.7"], "--tie '0.7': must be more than 0"),
        (["no-such-run", A, B], "no-such-run"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(runs, capsys, argv, says):
    code, out, err = run_cli(capsys, "versus", *argv, "--runs-dir", str(runs))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err


def test_help_names_every_option_and_its_default(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["versus", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0
    for text in ("--host SLOT", "--tie FRACTION", "(default: 0.01)", "--format", "--runs-dir", "not paired"):
        assert text in out


# -- the pivot's BEST -----------------------------------------------------------------------------------------
def close_stats(seed: int = 7):
    """9.265 µs against 9.272 µs, timed together: their rounds' ratios 0.9995, 1.0025, 0.999 straddle 1."""
    rng = np.random.default_rng(seed)
    a, b = contenders(rng, 9.265, [0.9995 * 9.272 / 9.265, 1.0025, 0.999], noise=0.0005, key="close")
    return lambda host, m, backend: {A: a, B: b}[backend]


def test_show_pivot_gives_no_best_to_a_lead_of_0_07_us_in_9_3(tmp_path, capsys):
    write_run(tmp_path, "close", close_stats(), hosts=("h1",), backends=(A, B), ms=[32])
    code, out, _ = run_cli(
        capsys, "show", "close", "--pivot", "backend", "--runs-dir", str(tmp_path), "--format", "json"
    )
    [row] = cli_json(out)
    assert code == 0 and row[f"{A}.median_us"] < row[f"{B}.median_us"]  # A leads on the bare medians
    assert row["best"] is None
    code, out, _ = run_cli(capsys, "show", "close", "--pivot", "backend", "--runs-dir", str(tmp_path))
    assert "BEST" not in out.split("cells:")[0]


def test_pivot_best_follows_the_paired_interval_where_the_two_were_timed_together(tmp_path):
    """Under a GPU state that moves 5% a round, each case's own interval overlaps the other's, but the pairs
    see B 3% slower: A is BEST (paired) at M >= 64; at the ties nobody is; 9.265 against 9.272 neither."""
    store = write_run(tmp_path, "h2h", h2h_stats())
    slots = load_slots(store)
    rows = merged_rows(store, slots)
    for per_host in (False, True):
        doc = pivot_document(rows, per_host=per_host, pairs=pair_index(slots))
        for rec in doc.records:
            if rec["m"] in TIED:
                assert rec["best"] is None, rec
            else:
                # against B by the pairs, against the reference (timed alone, 50x slower) by the intervals
                assert (rec["best"], rec["best_by"]) == (A, "paired+intervals"), rec
    two = write_run(tmp_path, "two", h2h_stats(), backends=(A, B))
    slots = load_slots(two)
    best = {
        (r["m"], r["best"], r["best_by"])
        for r in pivot_document(merged_rows(two, slots), pairs=pair_index(slots)).records
    }
    assert best == {(m, None, None) if m in TIED else (m, A, "paired") for m in MS}
    # Without the pairs (each case alone), the overlapping intervals give no BEST: never the bare medians.
    assert {rec["best"] for rec in pivot_document(rows, per_host=True).records} == {None}
    close = write_run(tmp_path, "close", close_stats(), hosts=("h1",), backends=(A, B), ms=[32])
    slots = load_slots(close)
    [rec] = pivot_document(merged_rows(close, slots), per_host=True, pairs=pair_index(slots)).records
    assert rec["best"] is None


def test_pivot_best_falls_back_to_intervals_that_do_not_overlap_only_where_never_timed_together():
    from types import SimpleNamespace as Row

    def row(us, rel_ci):
        return Row(status="ok", median_us=us, verdict="pass", rel_ci=rel_ci)

    apart = {"x": row(9.0, 0.01), "y": row(10.0, 0.01)}
    overlapping = {"x": row(9.265, 0.001), "y": row(9.272, 0.001)}
    assert pivot_best(apart, [apart], lambda a, b: None) == ("x", "intervals")
    assert pivot_best(overlapping, [overlapping], lambda a, b: None) == (None, None)
    from worker.contract.pairing import Interval

    straddling = Interval(1.0008, 0.998, 1.003, 3, 60)
    assert pivot_best(apart, [apart], lambda a, b: straddling) == (None, None)  # the pairs overrule
    assert pivot_best({"x": row(9.0, 0.01)}, [], lambda a, b: None) == (None, None)  # one backend: no contest


# -- the report's head-to-head panel ----------------------------------------------------------------------------
def trio_stats(seed: int = 11):
    """All three backends timed together on every shape: B 3% slower than A, the reference 10% slower."""
    rng = np.random.default_rng(seed)
    made = {}
    for host in ("h1", "h2"):
        for m in MS:
            ids = [f"{host}-{m}-r{r}" for r in range(len(STATES))]
            drift = [(5.0 + m / 16) * s * rng.lognormal(0.0, 0.02, 20) for s in STATES]
            made[(host, m)] = {
                name: timed([list(d * factor * rng.lognormal(0.0, 0.002, 20)) for d in drift], ids)
                for name, factor in ((A, 1.0), (B, 1.03), (ALONE, 1.10))
            }
    return lambda host, m, backend: made[(host, m)][backend]


PROBE = """<script>(function () {
  var out = {}, fig = document.querySelector('figure.chart[data-kind="headtohead"]');
  function rows() { return Array.from(fig.querySelectorAll("g.series")).map(function (g) {
    return g.dataset.winner + " " + g.querySelector("text").textContent; }); }
  out.options = Array.from(fig.querySelectorAll("select.pair option")).map(function (o) { return o.textContent; });
  out.pair = fig.querySelector("svg").dataset.pair;
  out.rows = rows();
  out.bars = fig.querySelectorAll("line.ci").length;
  out.band = !!fig.querySelector("rect.tie-band") && !!fig.querySelector("line.one");
  out.line = fig.querySelector("p.h2h-line").textContent;
  var pick = fig.querySelector("select.pair"); pick.value = "1"; pick.dispatchEvent(new Event("change"));
  out.pair_after = fig.querySelector("svg").dataset.pair;
  out.rows_after = rows();
  document.querySelector('#hosts input[data-host="h1"]').click();
  out.rows_h1_off = rows();
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre); })();</script>"""


def test_the_report_draws_each_pair_timed_together_as_a_forest_plot_with_a_tie_band(tmp_path, capsys):
    import html as htmlmod
    import re
    import sys

    write_run(tmp_path, "trio", trio_stats())
    page = tmp_path / "r.html"
    assert main(["report", "trio", "-o", str(page), "--runs-dir", str(tmp_path)]) == 0
    text = page.read_text()
    assert not re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)  # offline: nothing fetched
    data = json.loads(re.search(r'id="fleetbench-data">(.*?)</script>', text, re.S).group(1))
    [chart] = [c for c in data["charts"] if c["kind"] == "headtohead"]
    assert [(p["a"], p["b"]) for p in chart["pairs"]] == [(A, B), (A, ALONE), (B, ALONE)]  # the sweep's order
    assert chart["selected"] == 0 and chart["tie"] == 0.01
    first = chart["pairs"][0]
    assert len(first["rows"]) == len(MS) * 3  # per shape the fleet and each host
    assert {r["winner"] for r in first["rows"]} == {"A"} and "torch-bf16 faster on 6 of 6 shapes by 3.0%" in first[
        "line"
    ]

    sys.path.insert(0, str(Path(__file__).parent))
    from support.browser import chromium, headless

    browser = chromium()
    (tmp_path / "probe.html").write_text(text.replace("</body>", PROBE + "</body>"))
    proc = headless(browser, tmp_path / "probe.html", tmp_path, "--dump-dom")
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    seen = json.loads(htmlmod.unescape(found.group(1)))
    assert seen["options"][0] == f"B = {B} against A = {A}" and len(seen["options"]) == 3
    assert seen["pair"] == f"{B}/{A}" and seen["band"] and seen["bars"] == len(MS) * 3
    assert seen["rows"][:3] == ["A 16x2048x6144 syn fleet", "A 16x2048x6144 syn h1", "A 16x2048x6144 syn h2"]
    assert seen["line"].startswith("fleet: torch-bf16 faster on 6 of 6 shapes")
    assert seen["pair_after"] == f"{ALONE}/{A}" and len(seen["rows_after"]) == len(MS) * 3
    assert not any(r.endswith(" h1") for r in seen["rows_h1_off"]) and len(seen["rows_h1_off"]) == len(MS) * 2
    assert "Uncaught" not in proc.stderr


# -- each side's own clock ----------------------------------------------------------------------------------
H200_SEED_RUNS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "slowdowns-seed-h200-s30b.runs.tar.xz"


def test_where_the_own_clocks_part_the_note_says_why_the_medians_differ(tmp_path, capsys):
    # a seed sweep on the H200: at 256 and 512x2048 flashinfer-fp8-cublas holds a 6-7% lower clock than
    # torch-fp8 when each is timed apart, so its medians' ratio is 5% above the paired one
    import tarfile

    run = "20261207-171029-glm5-tp8-e974"
    with tarfile.open(H200_SEED_RUNS) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if run in m.name], filter="data")
    folder = str(next(tmp_path.rglob(run)))
    code, out, _ = run_cli(capsys, "versus", folder, "torch-fp8", "flashinfer-fp8-cublas", "--format", "json")
    assert code == 0
    shapes = json.loads(out)["shapes"]
    apart = {(s["m"], s["n"]) for s in shapes if s["clocks_apart"]}
    assert apart == {(256, 2048), (512, 2048)}
    for s in shapes:
        assert s["a_mhz"] > 1000 and s["b_mhz"] > 1000  # read in the stream, every round
    # 128x2048 parts too (medians 0.970, paired 0.900), but not by the clocks: no such note
    two_levels = next(s for s in shapes if (s["m"], s["n"]) == (128, 2048))
    assert abs(two_levels["b_us"] / two_levels["a_us"] / two_levels["ratio"] - 1) > 0.05
    assert not two_levels["clocks_apart"]
    code, out, _ = run_cli(capsys, "versus", folder, "torch-fp8", "flashinfer-fp8-cublas", "--format", "md")
    line = next(r for r in out.splitlines() if "| 256 | 2048 |" in r)
    note = "apart B ran at a 6.2% lower clock (1631 vs 1739 MHz); paired, one shared clock"
    assert note in line
    # the report's head-to-head chart says it on hover, for the same rows only
    import re

    page = tmp_path / "r.html"
    assert main(["report", folder, "-o", str(page)]) == 0
    capsys.readouterr()
    data = json.loads(re.search(r'id="fleetbench-data">(.*?)</script>', page.read_text(), re.S).group(1))
    [chart] = [c for c in data["charts"] if c["kind"] == "headtohead"]
    [pair] = [p for p in chart["pairs"] if (p["a"], p["b"]) == ("torch-fp8", "flashinfer-fp8-cublas")]
    noted = {r["name"].split()[0]: r["note"] for r in pair["rows"] if r["note"]}
    assert noted.keys() == {"256x2048x6144", "512x2048x6144"} and noted["256x2048x6144"] == note


@pytest.mark.parametrize(
    "a_mhz, b_mhz, medians, apart",
    [
        (1739, 1631, 0.919, True),  # B's own clock 6% lower, its medians' ratio 6% above the paired 0.869
        (1631, 1739, 0.919, False),  # the clocks part the other way: they do not explain it
        (1739, 1720, 0.919, False),  # clocks within 2%
        (1739, 1631, 0.874, False),  # the ratios within the tie margin
        (None, 1631, 0.919, False),  # a side without its clock
    ],
)
def test_clocks_apart_needs_both_clocks_parting_the_way_the_ratios_do(a_mhz, b_mhz, medians, apart):
    c = Contest("h", "l", 256, 2048, 6144, "ok", "ok", "B", a_us=10.0, b_us=10.0 * medians, ratio=0.869)
    c.a_mhz, c.b_mhz = a_mhz, b_mhz
    assert clocks_apart(c, 0.01) is apart
