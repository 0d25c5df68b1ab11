"""Comparisons on stored synthetic runs with known distributions: no false verdicts on identical
distributions, a 5% shift is SLOWER, noise is AMBIGUOUS or UNSTABLE, never a verdict; B/A is the printed
B over the printed A; verdicts mirror when the sides swap; a run against itself is SAME; a busy CPU's
re-run is no regression; fleet outliers; pivot; the HTML report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.browser import chromium, headless
from support.cli_output import cli_json, md_rows
from support.syntheticruns import TAINT, in_rounds, make_run

from orchestrator.analysis.diff import classify, resolve_side
from orchestrator.cli import main
from orchestrator.views.diffnotes import compare_sides
from worker.contract.schema import SCHEMA_VERSION, Calibration, CaseRecord, CaseSpec, RoundStats
from worker.contract.stats import combine_rounds, summarize

REPO = Path(__file__).resolve().parent.parent


def test_schema_version_of_synthetic_records_is_current():
    assert SCHEMA_VERSION == 11


def test_identical_distributions_flag_nothing(tmp_path):
    make_run(tmp_path, "a", {"h": 1.0}, seed=1)
    make_run(tmp_path, "b", {"h": 1.0}, seed=2)
    cmp = compare_sides(resolve_side(tmp_path, "a"), resolve_side(tmp_path, "b"), 0.03)
    verdicts = [c.verdict for c in cmp.cases]
    assert len(verdicts) == 200
    assert verdicts.count("SLOWER") == 0 and verdicts.count("FASTER") == 0
    assert verdicts.count("SAME") >= 190  # tight samples: confidently the same, not just "not different"


def test_a_five_percent_shift_is_slower_and_exits_1(tmp_path, capsys):
    make_run(tmp_path, "a", {"h": 1.0}, seed=1)
    make_run(tmp_path, "b", {"h": 1.05}, seed=2)
    cmp = compare_sides(resolve_side(tmp_path, "a"), resolve_side(tmp_path, "b"), 0.03)
    assert {c.verdict for c in cmp.cases} == {"SLOWER"}
    assert all(1.03 < c.ratio < 1.07 for c in cmp.cases)
    code = main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "md"])
    out, err = capsys.readouterr()
    assert code == 1 and "200 SLOWER" in out and "regression: torch-bf16 16x2048x6144" in err
    assert main(["diff", "b", "a", "--runs-dir", str(tmp_path)]) == 0  # the other way round it is FASTER
    assert "200 FASTER" in capsys.readouterr().out


def test_a_noisy_case_is_ambiguous_or_too_noisy_to_judge_never_a_verdict(tmp_path):
    noisy = {16: 0.35, 32: 0.35, 48: 0.1}
    make_run(tmp_path, "a", {"h": 1.0}, seed=3, noisy=noisy, samples=12, ms=[16, 32, 48, 64])
    make_run(tmp_path, "b", {"h": 1.0}, seed=4, noisy=noisy, samples=12, ms=[16, 32, 48, 64])
    cmp = compare_sides(resolve_side(tmp_path, "a"), resolve_side(tmp_path, "b"), 0.03)
    noisy_rows = [c for c in cmp.cases if c.m in noisy]
    assert {c.verdict for c in noisy_rows} == {"AMBIGUOUS", "UNSTABLE"}
    for c in noisy_rows:  # beyond ±25% on a side the row says it cannot be judged; below, it is ambiguous
        too_noisy = max(c.a_rel_ci, c.b_rel_ci) > 0.25
        assert (c.verdict == "UNSTABLE") == too_noisy and ("too noisy to judge" in c.note) == too_noisy, c
        assert c.noisy and "noisy" in c.note


def test_classify_boundaries():
    assert classify(1.04, 1.06, 0.03) == "SLOWER"
    assert classify(0.90, 0.95, 0.03) == "FASTER"
    assert classify(0.99, 1.01, 0.03) == "SAME"
    assert classify(1.01, 1.05, 0.03) == "AMBIGUOUS"
    # The threshold is one factor either way: B 3.03% slower than A is A 3.03% slower than B.
    assert classify(1.0303, 1.04, 0.03) == "SLOWER" and classify(1 / 1.04, 1 / 1.0303, 0.03) == "FASTER"
    assert classify(1 / 1.0299, 1.0299, 0.03) == "SAME"


def test_host_vs_host_diff_shows_differing_facts_first(tmp_path, capsys):
    make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.0}, seed=5, facts={"h1": "580.1", "h2": "575.9"})
    assert main(["diff", "r:h1", "r:h2", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.index("host facts that differ") < out.index("B/A")
    assert "driver" in out and "575.9" in out
    with pytest.raises(SystemExit):
        main(["diff"])


def test_across_hosts_flags_the_odd_host_and_its_cases(tmp_path, capsys):
    make_run(tmp_path, "fleet", {"h1": 1.0, "h2": 1.0, "h3": 1.0, "h4": 1.08, "h5": 1.0, "h6": 1.0}, seed=6)
    assert main(["diff", "fleet", "--across-hosts", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    captured = capsys.readouterr()
    report = cli_json(captured.out)
    assert [h for h, v in report["hosts"].items() if v["outlier"]] == ["h4"]
    assert report["hosts"]["h4"]["flagged"] >= 190
    assert sum(v["flagged"] for h, v in report["hosts"].items() if h != "h4") == 0
    assert "h4: outlier in" in captured.err


def test_across_hosts_names_a_gpu_that_is_slow_at_its_own_calibration(tmp_path, capsys):
    """Speed of light's peaks are host facts: a GPU 12% slow at a plain 8192³ GEMM is the machine."""

    def cal(bf16, tb_s=1.6):
        return Calibration(key="k", measured_at="t", cached=False, tflops={"bf16": bf16, "fp8": 2 * bf16}, tb_s=tb_s)

    make_run(
        tmp_path,
        "fleet",
        {"h1": 1.0, "h2": 1.0, "h3": 1.0},
        seed=8,
        calibration={"h1": cal(450.0), "h2": cal(396.0), "h3": cal(452.0, tb_s=1.2)},
    )
    assert main(["diff", "fleet", "--across-hosts", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    captured = capsys.readouterr()
    flagged = {(c["slot"], c["peak"]) for c in cli_json(captured.out)["calibration"] if c["flagged"]}
    assert flagged == {("h2", "bf16 TFLOPS"), ("h2", "fp8 TFLOPS"), ("h3", "copy TB/s")}
    assert "h2: slow GPU: calibration bf16 TFLOPS 396.00, 12% below the fleet median 450.00" in captured.err
    assert main(["diff", "fleet", "--across-hosts", "--runs-dir", str(tmp_path)]) == 0
    assert "SLOW GPU" in capsys.readouterr().out


def test_pivot_puts_backends_side_by_side_with_speedups_and_explains_gaps(tmp_path, capsys):
    make_run(tmp_path, "p", {"h": 1.0}, seed=7, statuses={("h", 32): "unsupported"})
    assert (
        main(
            [
                "show",
                "p",
                "--pivot",
                "backend",
                "--baseline",
                "torch-bf16",
                "--runs-dir",
                str(tmp_path),
                "--format",
                "md",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("| host | label | M | N | K | torch-bf16 | torch-fp8 |")
    row16 = next(line for line in lines if line.startswith("| h | syn | 16 |"))
    assert "×1.00" in row16 and "×1.3" in row16  # fp8 base is 6 µs vs bf16 8 µs: ~1.33x
    assert "unsupp.*" in next(line for line in lines if line.startswith("| h | syn | 32 |"))
    assert "unsupp.* = needs compute capability >= 10.0" in out


def test_bad_threshold_and_baseline_are_input_errors(tmp_path, capsys):
    make_run(tmp_path, "a", {"h": 1.0}, seed=1)
    assert main(["diff", "a", "a", "--threshold", "lots", "--runs-dir", str(tmp_path)]) == 2
    assert main(["show", "a", "--pivot", "backend", "--baseline", "cublas-magic", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--threshold 'lots'" in err and "--baseline 'cublas-magic' is not in this run" in err


# Run inside the report page after its own script: hovers a point, switches a backend off in a legend and
# a host off at the top, and writes what the page showed into <pre id="probe">.
PROBE = """<script type="text/javascript">
(function () {
  var out = {kinds: Array.from(document.querySelectorAll("figure.chart")).map(function (f) { return f.dataset.kind; })};
  function fleet() { return document.querySelector('figure.chart[data-kind="fleet"]'); }
  function heatHosts() {
    var hs = Array.from(document.querySelectorAll('figure.chart[data-kind="heatmap"] rect.cell'))
      .map(function (r) { return r.dataset.host; });
    return hs.filter(function (h, i) { return hs.indexOf(h) === i; });
  }
  out.series = Array.from(fleet().querySelectorAll("g.series")).map(function (g) { return g.dataset.series; });
  out.marks = Array.from(fleet().querySelectorAll("g.series")).map(function (g) {
    var m = g.querySelector(".mark"); return m.dataset.mark + " " + (m.getAttribute("fill") || m.getAttribute("stroke")); });
  var tip = document.getElementById("tip");
  fleet().querySelector(".mark").dispatchEvent(new MouseEvent("mouseover", {bubbles: true, clientX: 20, clientY: 20}));
  out.tip = tip.textContent; out.tip_display = tip.style.display;
  fleet().querySelector(".legend button").click();
  out.off_after_legend_click = Array.from(fleet().querySelectorAll("g.series.off")).map(function (g) { return g.dataset.series; });
  out.heat_hosts = heatHosts();
  out.h1_ratios = Array.from(document.querySelectorAll('rect.cell[data-host="h1"]')).map(function (r) { return +r.dataset.ratio; });
  document.querySelector('#hosts input[data-host="h1"]').click();
  out.heat_hosts_after = heatHosts();
  fleet().querySelectorAll("g.series")[1].querySelector(".mark").dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  out.tip_after = tip.textContent;
  out.forest_rows = document.querySelectorAll('figure.chart[data-kind="forest"] g.series').length;
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def test_html_report_is_interactive_offline_in_headless_chromium(tmp_path, capsys):
    """The report is one file that needs no network: its plots are drawn by its own script, show values
    on hover, switch backends off from a legend and hosts off at the top (the fleet medians and the
    heatmap follow), with a marker per backend; opened in headless Chromium and checked from inside."""
    import html as htmlmod
    import re

    make_run(tmp_path, "base", {"h1": 1.0, "h2": 1.0, "h3": 1.02}, seed=8)
    make_run(tmp_path, "new", {"h1": 1.05, "h2": 1.0, "h3": 1.0}, seed=9)
    page = tmp_path / "report.html"
    assert main(["report", "new", "--against", "base", "-o", str(page), "--runs-dir", str(tmp_path)]) == 0
    text = page.read_text()
    assert not re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)  # nothing fetched from anywhere
    assert "data:image/png" not in text and 'id="fleetbench-data"' in text
    assert "Hosts against the fleet" in text
    browser = chromium()
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", PROBE + "\n</body>"))
    proc = headless(browser, probe, tmp_path, "--dump-dom")
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    seen = json.loads(htmlmod.unescape(found.group(1)))
    assert {"fleet", "speedup", "heatmap", "forest"} <= set(seen["kinds"])
    assert seen["series"] == ["torch-bf16", "torch-fp8"] and len(set(seen["marks"])) == 2  # own marker and colour
    assert seen["tip_display"] == "block" and "torch-bf16" in seen["tip"] and "M=" in seen["tip"]
    assert "over 3 hosts" in seen["tip"]
    assert seen["off_after_legend_click"] == ["torch-bf16"]
    assert seen["heat_hosts"] == ["h1", "h2", "h3"] and seen["heat_hosts_after"] == ["h2", "h3"]
    assert seen["h1_ratios"] and min(seen["h1_ratios"]) > 1.0  # h1 is 5% slower: red in every case
    assert "over 2 hosts" in seen["tip_after"]  # medians follow the hosts switched on
    assert seen["forest_rows"] > 0
    assert "Uncaught" not in proc.stderr

    shot = tmp_path / "shot.png"
    proc = headless(browser, page, tmp_path, "--window-size=1400,2400", f"--screenshot={shot}")
    assert shot.exists(), proc.stderr[-2000:]
    import matplotlib.image

    img = matplotlib.image.imread(str(shot))[..., :3]
    saturation = img.max(axis=2) - img.min(axis=2)
    colored = float((saturation > 0.3).mean())  # plot lines, markers, heatmap; the page itself is grey on white
    assert colored > 0.003, f"only {colored:.4f} of the screenshot is colored: plots missing?"


def test_the_report_has_a_roofline_and_each_gpus_calibration_beside_its_datasheet(tmp_path):
    cal = Calibration(
        key="k",
        measured_at="t",
        cached=True,
        tflops={"bf16": 420.0},
        tb_s=1.5,
        method={"bf16": "torch-bf16 8192x8192x8192", "copy": "device-to-device copy of 1024 MiB"},
        problems={"fp4": "RuntimeError: no backend for this family runs here"},
        datasheet={"bf16": 503.8, "fp8": 1007.6, "fp4": 2015.2, "tb_s": 1.792},
    )
    make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.0}, seed=11, calibration={"h1": cal, "h2": cal})
    html = tmp_path / "report.html"
    assert main(["report", "r", "-o", str(html), "--runs-dir", str(tmp_path)]) == 0
    text = html.read_text()
    assert "Roofline, NVIDIA RTX PRO 6000 Blackwell Server Edition: measured roofs (1.50 TB/s copy)" in text
    assert "Calibration: each GPU" in text and "420.0" in text and "503.8" in text and "0.83" in text
    assert "no backend for this family runs here" in text and "(cached t)" in text


def test_hostile_labels_are_escaped_in_the_html(tmp_path):
    store = make_run(tmp_path, "x", {"h": 1.0}, seed=10)
    manifest = json.loads(store.manifest_path.read_text())
    for case in manifest["cases"].values():
        case["label"] = "<script>alert(1)</script>"
    store.write_manifest({k: v for k, v in manifest.items() if k != "manifest_version"})
    results = store.attempt_dir("h", 1) / "results.jsonl"
    results.write_text(results.read_text().replace('"label":"syn"', '"label":"<script>alert(1)</script>"'))
    html = tmp_path / "r.html"
    assert main(["report", "x", "-o", str(html), "--runs-dir", str(tmp_path)]) == 0
    text = html.read_text()
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_diff_names_hosts_not_hashes_folds_cases_run_nowhere_and_sums_up_per_backend(tmp_path, capsys):
    both = {("h", 32): "unsupported"}
    make_run(tmp_path, "a", {"h": 1.0}, seed=21, statuses=both)
    make_run(tmp_path, "b", {"h": 1.10}, seed=22, statuses=both)
    assert main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "json"]) == 1
    report = cli_json(capsys.readouterr().out)
    not_run = [c for c in report["cases"] if c["verdict"] == "NOT-RUN"]
    assert not_run and all(c["m"] == 32 for c in not_run) and "NOT-OK" not in report["summary"]
    assert {c["host"] for c in report["cases"]} == {"h"}
    per_backend = {b["backend"]: b for b in report["backends"]}
    assert set(per_backend) == {"torch-bf16", "torch-fp8"}
    assert 1.08 < per_backend["torch-bf16"]["geomean_ratio"] < 1.12 and per_backend["torch-bf16"]["slower"] > 0
    # --only-changed leaves out what did not move and what ran nowhere; the table shows hosts, not hashes.
    assert main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--only-changed", "--format", "json"]) == 1
    changed = cli_json(capsys.readouterr().out)["cases"]
    assert changed and not {c["verdict"] for c in changed} & {"SAME", "NOT-RUN"}
    main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "md"])
    out = capsys.readouterr().out
    assert "| h | syn | torch-bf16 |" in out and "h/" not in out and "geomean B/A" in out


def test_the_pivot_shows_the_fleet_per_shape_marks_the_best_and_folds_backends_that_ran_nowhere(
    tmp_path, capsys, stored_runs
):
    make_run(tmp_path, "f", {"h1": 1.0, "h2": 1.02, "h3": 0.98}, seed=31)
    assert main(["show", "f", "--pivot", "backend", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    fleet = cli_json(capsys.readouterr().out)
    assert {r["slot"] for r in fleet} == {"fleet (3/3 hosts)"} and len(fleet) == 100
    assert all(r["best"] == "torch-fp8" for r in fleet)  # fp8's synthetic base is 6 µs against bf16's 8
    assert main(["show", "f", "--pivot", "backend", "--per-host", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    assert {r["slot"] for r in cli_json(capsys.readouterr().out)} == {"h1", "h2", "h3"}
    # A stored CPU run: the FP4 kernel ran nowhere, so it is a note, not a column of "unsupp.*".
    run = stored_runs / "runs-v4" / "20261203-133700-smoke-byo-4073"
    main(["show", str(run), "--pivot", "backend", "--format", "md"])
    out = capsys.readouterr().out
    assert "flashinfer-fp4-cutlass: unsupported on every host and shape" in out
    assert "| flashinfer-fp4-cutlass |" not in out.splitlines()[0] and "BEST" in out


def test_columns_sets_the_width_of_piped_tables(stored_runs, monkeypatch, capsys):
    """COLUMNS=100 fleetbench show / show --pivot / diff | less: no line wider than 100 characters."""
    run = str(stored_runs / "runs-v4" / "20261203-133700-smoke-byo-4073")
    monkeypatch.setenv("COLUMNS", "100")
    for argv in (["show", run], ["show", run, "--pivot", "backend"], ["diff", run, run]):
        main(argv)
        lines = capsys.readouterr().out.splitlines()
        assert lines and max(len(line) for line in lines) <= 100, argv
    monkeypatch.delenv("COLUMNS")
    main(["show", run])
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) > 100  # piped, no COLUMNS: wide


def test_the_report_says_how_rows_were_timed_and_takes_any_baseline(tmp_path, capsys):
    make_run(tmp_path, "r", {"h1": 1.0}, seed=41)
    html = tmp_path / "r.html"
    assert main(["report", "r", "--baseline", "torch-fp8", "-o", str(html), "--runs-dir", str(tmp_path)]) == 0
    text = " ".join(html.read_text().split())  # the page's prose may wrap anywhere
    assert "timed by CUDA-graph replay (200 results)" in text and "Speedup over torch-fp8" in text
    assert ">None<" not in text
    assert main(["report", "r", "--baseline", "nope", "-o", str(html), "--runs-dir", str(tmp_path)]) == 2
    assert "--baseline 'nope' is not in run r" in capsys.readouterr().err


def test_the_report_needs_no_plotting_library(tmp_path):
    """The plots are drawn by the page itself: with matplotlib unimportable the report is written all the
    same (the controller's install has no plotting library)."""
    make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.1}, seed=51)
    code = (
        "import sys; sys.modules['matplotlib'] = None; from orchestrator.cli import main; "
        f"sys.exit(main(['report', 'r', '-o', {str(tmp_path / 'r.html')!r}, '--runs-dir', {str(tmp_path)!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert 'id="fleetbench-data"' in (tmp_path / "r.html").read_text()


# -- one statistic, symmetric verdicts, a run against itself, a busy CPU ----------------------------------
MIRROR = {"SLOWER": "FASTER", "FASTER": "SLOWER", "SAME": "SAME", "AMBIGUOUS": "AMBIGUOUS", "UNSTABLE": "UNSTABLE"}


def test_b_over_a_is_the_printed_b_divided_by_the_printed_a(tmp_path, capsys):
    """Rounds far apart (a busy machine) are where a geometric mean of round ratios and the medians
    disagree most: the ratio is that of the medians shown, in every format."""
    ms = [16 * (i + 1) for i in range(20)]
    make_run(tmp_path, "a", {"h": 1.0}, seed=61, ms=ms, rounds=3, round_sigma=0.5)
    make_run(tmp_path, "b", {"h": 1.0}, seed=62, ms=ms, rounds=3, round_sigma=0.5)
    main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "json"])
    cases = cli_json(capsys.readouterr().out)["cases"]
    assert len(cases) == 40 and all(c["ratio"] == c["b_us"] / c["a_us"] for c in cases)
    main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "md"])
    rows = md_rows(capsys.readouterr().out, "host")
    for row in rows:
        a, b, ratio = float(row["A µs"]), float(row["B µs"]), float(row["B/A"])
        assert b / a == pytest.approx(ratio, rel=2e-3), row  # four digits each side, a ratio to 0.001
    main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "csv"])
    import csv
    import io

    for row in csv.DictReader(io.StringIO(capsys.readouterr().out)):
        assert float(row["ratio"]) == pytest.approx(float(row["b_us"]) / float(row["a_us"]), rel=1e-12)


def random_record(rng, centre: float, method: str) -> CaseRecord:
    """A case timed in 1-5 rounds, their spread from tight to wild, with or without environment facts."""
    spec = CaseSpec(backend="torch-bf16", m=64, n=2048, k=6144, label="prop")
    round_spread = rng.choice([0.0005, 0.01, 0.05, 0.3, 1.0])
    rounds = []
    for med in centre * rng.lognormal(0.0, round_spread, int(rng.integers(1, 6))):
        xs = list(med * rng.lognormal(0.0, rng.choice([0.001, 0.02, 0.2]), int(rng.integers(2, 30))))
        one = summarize(xs, method=method, calls_per_sample=10, l2="cold")
        env = RoundStats(
            median_us=one.median_us,
            n=one.n,
            rel_ci=one.rel_ci,
            sm_clock_mhz=rng.choice([None, 1980, 1755]),
            load_per_core=rng.choice([None, 0.1, 0.5, 1.2]),
            steal_pct=rng.choice([None, 0.0, 3.0]),
            gpu_processes=rng.choice([None, 0, 0, 1]),
            throttle_reasons=["sw_thermal"] if rng.random() < 0.05 else [],
        )
        rounds.append(one.model_copy(update={"rounds": [env]}))
    return CaseRecord(
        case_id=spec.case_id,
        case=spec,
        status="ok",
        timing=combine_rounds(rounds),
        started_at="t",
        duration_s=1.0,
        health=TAINT if rng.random() < 0.05 else None,
    )


def test_verdicts_mirror_when_the_sides_swap():
    """Property over many generated pairs: B against A is A against B mirrored, verdict, ratio, interval
    and p-value alike (SLOWER <-> FASTER; SAME, AMBIGUOUS and UNSTABLE stay)."""
    from orchestrator.views.diffnotes import compare_records

    rng = np.random.default_rng(2027)
    seen = set()
    for _ in range(1500):
        method = rng.choice(["cuda-graph", "cpu-wallclock"])
        centre = float(rng.uniform(5, 500))
        a = random_record(rng, centre, method)
        b = random_record(rng, centre * float(np.exp(rng.normal(0, 0.06))), method) if rng.random() < 0.9 else a
        threshold = float(rng.choice([0.01, 0.03, 0.1]))
        ab, ba = compare_records("k", a, b, threshold), compare_records("k", b, a, threshold)
        assert ba.verdict == MIRROR[ab.verdict], (ab, ba)
        assert ab.ratio * ba.ratio == pytest.approx(1.0, rel=1e-12)
        assert ab.ci_low * ba.ci_high == pytest.approx(1.0, rel=1e-9) and ab.p_value == pytest.approx(ba.p_value)
        seen.add(ab.verdict)
    assert seen == set(MIRROR)  # the generator reached every verdict


@pytest.mark.parametrize(
    "run",
    [
        "runs-v1/20261203-081621-smoke-a967",
        "runs-v2/20261203-082541-smoke-2f18",
        "runs-v3/20261203-094347-smoke-636e",
        "runs-v4/20261203-133700-smoke-byo-4073",
        "runs-v5/20261203-155636-smoke-moe-v5-280c",
    ],
)
def test_a_run_against_itself_is_the_same_in_every_row_and_says_so(run, stored_runs, capsys):
    path = str(stored_runs / run)
    assert main(["diff", path, path, "--format", "json"]) == 0
    captured = capsys.readouterr()
    report = cli_json(captured.out)
    timed = [c for c in report["cases"] if c["ratio"] is not None]
    assert timed and {c["verdict"] for c in timed} == {"SAME"} and report["same_run"] is True
    assert all(c["ratio"] == 1.0 and c["ci_low"] == c["ci_high"] == 1.0 for c in timed)
    assert "A and B are the same run" in captured.err
    assert main(["diff", path, path, "--format", "md"]) == 0
    assert "A and B are the same run: each case against itself" in capsys.readouterr().out


def test_a_copy_of_a_run_is_the_same_measurement_on_both_sides(tmp_path, capsys):
    make_run(tmp_path, "a", {"h": 1.0}, seed=63, ms=[16, 32], rounds=3, round_sigma=0.4)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    report = cli_json(capsys.readouterr().out)
    assert report["same_run"] is False
    assert all(
        c["verdict"] == "SAME" and c["note"].startswith("the same measurement on both sides") for c in report["cases"]
    )


def test_intervals_are_bounded_and_readable_and_json_keeps_them_whole(tmp_path, capsys):
    """Two rounds far apart give a t interval with one degree of freedom: a factor of thousands wide."""
    import re

    ms = [16, 32, 48, 64]
    make_run(tmp_path, "a", {"h": 1.0}, seed=64, ms=ms, rounds=2, round_sigma=1.5)
    make_run(tmp_path, "b", {"h": 1.0}, seed=65, ms=ms, rounds=2, round_sigma=1.5)
    assert main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    cases = cli_json(capsys.readouterr().out)["cases"]
    assert max(c["ci_high"] / c["ci_low"] for c in cases) > 1000  # the raw interval, whole
    assert main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "md"]) == 0
    rows = md_rows(capsys.readouterr().out, "host")
    for row in rows:
        assert row["95% CI"] == "too wide to read" or re.fullmatch(r"\d+\.\d+–\d+\.\d+", row["95% CI"]), row
        low, _, high = row["95% CI"].partition("–")
        assert row["95% CI"] == "too wide to read" or float(high) / float(low) <= 10
        assert "wider than ±100%" in row["note"] or re.search(r"±\d{1,3}%", row["note"]), row
    assert any(row["95% CI"] == "too wide to read" for row in rows)


def test_tainted_and_noisy_rows_are_named_in_each_row_and_the_summary(tmp_path, capsys):
    ms = [16, 32, 48]
    make_run(tmp_path, "a", {"h": 1.0}, seed=66, ms=ms, noisy={48: 0.2})
    make_run(tmp_path, "b", {"h": 1.10}, seed=67, ms=ms, noisy={48: 0.2}, tainted={("h", 32)})
    assert main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "json"]) == 1  # M=16 is slower
    captured = capsys.readouterr()
    report = cli_json(captured.out)
    by_m = {(c["m"], c["backend"]): c for c in report["cases"]}
    for backend in ("torch-bf16", "torch-fp8"):
        assert by_m[(16, backend)]["verdict"] == "SLOWER" and not by_m[(16, backend)]["tainted"]
        tainted = by_m[(32, backend)]
        assert tainted["tainted"] == "B" and tainted["verdict"] == "UNSTABLE"  # a throttled GPU confirms nothing
        assert "TAINTED on B: GPU throttled (sw_thermal) during timing" in tainted["note"]
        assert by_m[(48, backend)]["noisy"] == "A, B" and "noisy" in by_m[(48, backend)]["note"]
    assert report["tainted"] == 2 and report["noisy"] == 2
    assert "2 noisy (a side's CI beyond ±5%); 2 tainted (the GPU throttled while timing)" in captured.err


def test_an_identical_rerun_on_a_busy_cpu_is_never_a_regression(tmp_path, capsys):
    """Two runs of the same code on a busy 2-core CPU: rounds far apart, the load high. Nothing may exit 1."""
    ms = [16 * (i + 1) for i in range(40)]
    busy = dict(method="cpu-wallclock", rounds=3, round_sigma=0.4, load=1.3, ms=ms, sigma=0.1)
    make_run(tmp_path, "a", {"local": 1.0}, seed=71, **busy)
    make_run(tmp_path, "b", {"local": 1.0}, seed=72, **busy)
    for a, b in (("a", "b"), ("b", "a")):
        assert main(["diff", a, b, "--runs-dir", str(tmp_path), "--format", "json"]) == 0
        captured = capsys.readouterr()
        verdicts = [c["verdict"] for c in cli_json(captured.out)["cases"]]
        assert "SLOWER" not in verdicts and "FASTER" not in verdicts and "regression" not in captured.err
        assert verdicts.count("UNSTABLE") >= len(verdicts) // 2


def test_a_whole_run_slowed_by_a_busy_cpu_is_unstable_and_the_same_on_a_quiet_one_is_slower(tmp_path, capsys):
    """Tight rounds, every one of B's 5x slower: on a busy CPU that is the machine (exit 0, the load
    named); on a quiet one it is a regression (exit 1)."""
    ms = [16, 32]
    for name, load in (("busy", 1.3), ("quiet", 0.1)):
        make_run(tmp_path, f"{name}-a", {"local": 1.0}, seed=73, method="cpu-wallclock", rounds=3, load=load, ms=ms)
        make_run(tmp_path, f"{name}-b", {"local": 5.0}, seed=74, method="cpu-wallclock", rounds=3, load=load, ms=ms)
    assert main(["diff", "busy-a", "busy-b", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    cases = cli_json(capsys.readouterr().out)["cases"]
    assert {c["verdict"] for c in cases} == {"UNSTABLE"}
    assert all("a busy CPU (load per core up to 1.30)" in c["note"] for c in cases)
    assert main(["diff", "quiet-a", "quiet-b", "--runs-dir", str(tmp_path), "--format", "json"]) == 1
    assert {c["verdict"] for c in cli_json(capsys.readouterr().out)["cases"]} == {"SLOWER"}


def test_a_time_of_zero_is_not_a_measurement_and_an_incomplete_side_is_said(tmp_path):
    from orchestrator.views.diffnotes import compare_records

    spec = CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144, label="zero")
    good = in_rounds([[10.0, 10.1, 9.9]] * 3)

    def rec(timing, complete=True):
        return CaseRecord(
            case_id=spec.case_id, case=spec, status="ok", timing=timing, started_at="t", duration_s=1, complete=complete
        )

    zero = good.model_copy(update={"median_us": 0.0, "samples_us": [0.0] * 9})
    for a, b in ((rec(good), rec(zero)), (rec(zero), rec(good))):
        row = compare_records("k", a, b, 0.03)
        assert row.verdict == "NOT-OK" and "0 µs or less" in row.note and row.ratio is None
    two_rounds = in_rounds([[10.0, 10.1, 9.9]] * 2)
    row = compare_records("k", rec(good), rec(two_rounds, complete=False), 0.03)
    assert "incomplete on B: 2 rounds timed before it stopped" in row.note


def test_rounds_worlds_apart_give_a_finite_interval_not_an_overflow():
    """A results file edited by hand: rounds 1e-200 and 1e200 µs. Still one row, finite numbers."""
    from orchestrator.views.diffnotes import compare_records

    spec = CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144, label="edited")
    calm = in_rounds([[10.0] * 3, [10.1] * 3])
    wild = calm.model_copy(
        update={
            "rel_ci": 1e300,
            "rounds": [calm.rounds[0].model_copy(update={"median_us": us}) for us in (1e-200, 1e200)],
        }
    )
    a, b = (
        CaseRecord(case_id=spec.case_id, case=spec, status="ok", timing=t, started_at="t", duration_s=1)
        for t in (calm, wild)
    )
    row = compare_records("k", a, b, 0.03)
    assert row.verdict == "UNSTABLE" and 0 < row.ci_low < row.ci_high < float("inf")
    json.dumps(row.as_dict(), allow_nan=False)


def test_a_backend_slower_everywhere_by_less_than_any_case_can_resolve_is_slower_over_all_its_cases(tmp_path, capsys):
    # 12 shapes, 3 rounds whose medians spread 1%: no one case's interval can hold a 3% change apart
    # from ±1.5%, but over 12 cases it is plain; identical runs stay SAME over all cases.
    twelve = [16 * (i + 1) for i in range(12)]
    make_run(tmp_path, "a", {"h": 1.0}, seed=41, ms=twelve, rounds=3, round_sigma=0.01, samples=30)
    make_run(tmp_path, "a2", {"h": 1.0}, seed=42, ms=twelve, rounds=3, round_sigma=0.01, samples=30)
    make_run(tmp_path, "b", {"h": 1.03}, seed=43, ms=twelve, rounds=3, round_sigma=0.01, samples=30)
    assert main(["diff", "a", "a2", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    same = {b["backend"]: b for b in cli_json(capsys.readouterr().out)["backends"]}
    assert {b["effect_verdict"] for b in same.values()} == {"SAME"}
    assert main(["diff", "a", "b", "--runs-dir", str(tmp_path), "--format", "json"]) == 1
    captured = capsys.readouterr()
    slower = {b["backend"]: b for b in cli_json(captured.out)["backends"]}
    assert sum(b["slower"] for b in slower.values()) < 12  # most cases alone cannot say
    for b in slower.values():
        assert b["effect_verdict"] == "SLOWER" and b["effect_low"] < 1.03 < b["effect_high"]
        assert b["effect_low"] <= b["effect_ratio"] <= b["effect_high"] and b["effect_on_work"] == 0
        assert f"regression: {b['backend']} over its 12 cases B/A" in captured.err
    assert "over all cases: torch-bf16 SLOWER" in captured.err


def test_a_power_limit_that_differs_is_a_fact_that_differs_only_where_both_sides_know_it(tmp_path, capsys):
    """Format 11 records the enforced power limit; a side written before it does not know its limit, and
    that is no difference."""
    import json

    store = make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.0, "h3": 1.0}, seed=5)
    for host, limit in (("h1", 700.0), ("h2", 600.0), ("h3", None)):
        path = store.attempt_dir(host, 1) / "results.jsonl"
        lines = path.read_text().splitlines()
        facts = json.loads(lines[0])
        facts["power_limit_w"] = limit
        path.write_text("\n".join([json.dumps(facts), *lines[1:]]) + "\n")
    assert main(["diff", "r:h1", "r:h2", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "host facts that differ" in out and "power_limit_w" in out and "600.0" in out
    assert main(["diff", "r:h1", "r:h3", "--runs-dir", str(tmp_path)]) == 0
    assert "power_limit_w" not in capsys.readouterr().out
