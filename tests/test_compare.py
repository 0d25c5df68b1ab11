"""Comparisons on stored synthetic runs with known distributions: no false verdicts on identical
distributions, a 5% shift is SLOWER, noise is AMBIGUOUS; fleet outliers; pivot; the HTML report."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli import main
from orchestrator.diff import classify, compare_sides, resolve_side
from orchestrator.store import RunStore
from orchestrator.sweep import Sweep
from worker.schema import SCHEMA_VERSION, Calibration, CaseRecord, FactsRecord, Metrics
from worker.timing import summarize
from cli_output import cli_json

REPO = Path(__file__).resolve().parent.parent

MS = [16 * (i + 1) for i in range(100)]  # x 2 backends = 200 cases


def sweep(backends=("torch-bf16", "torch-fp8")) -> Sweep:
    return Sweep(name="synthetic", backends=list(backends), shapes=[{"m": MS, "n": 2048, "k": 6144, "label": "syn"}])


def base_us(case) -> float:
    return 5.0 + case.m / 16 + (2.0 if case.backend == "torch-bf16" else 0.0)


def make_run(runs_dir: Path, run_id: str, hosts: dict[str, float], *, seed: int, sigma: float = 0.01,
             samples: int = 40, noisy: dict | None = None, facts: dict | None = None, statuses: dict | None = None,
             calibration: dict | None = None) -> RunStore:
    """A stored run: per host a slowdown factor; samples are lognormal around base_us(case) * factor."""
    rng = np.random.default_rng(seed)
    sw = sweep()
    cases = sw.cases()
    store = RunStore.create(runs_dir, run_id)
    store.write_manifest({"run_id": run_id, "sweep_name": sw.name, "sweep": sw.model_dump(mode="json"), "hosts": [],
                          "dry_run": False, "cases": {c.case_id: c.model_dump(mode="json") for c in cases},
                          "jobs": [{"slot": h, "host": h, "gpu": None, "case_ids": [c.case_id for c in cases]} for h in hosts]})
    for host, factor in hosts.items():
        lines = [FactsRecord(hostname=host, python="3.12", platform="linux", worker_version="0.1.0", device="cuda",
                             gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition", compute_capability="12.0",
                             driver=(facts or {}).get(host, "580.1"), torch="2.11.0",
                             calibration=(calibration or {}).get(host)).model_dump_json()]
        for c in cases:
            status = (statuses or {}).get((host, c.m), "ok")
            if status != "ok":
                lines.append(CaseRecord(case_id=c.case_id, case=c, status=status, reason="needs compute capability >= 10.0",
                                        started_at="t", duration_s=0).model_dump_json())
                continue
            s = (noisy or {}).get(c.m, sigma)
            xs = list(base_us(c) * factor * rng.lognormal(0.0, s, samples))
            stats = summarize(xs, method="cuda-graph", calls_per_sample=100, l2="cold")
            flops = 2.0 * c.m * c.n * c.k
            lines.append(CaseRecord(case_id=c.case_id, case=c, status="ok", timing=stats, started_at="t", duration_s=0.1,
                                    metrics=Metrics(flops=flops, bytes=1.0, tflops=flops / stats.median_us / 1e6,
                                                    tb_per_s=0.1, pct_peak_flops=10.0)).model_dump_json())
        d = store.attempt_dir(host, 1)
        d.mkdir(parents=True)
        (d / "results.jsonl").write_text("\n".join(lines) + "\n")
        (d / "outcome.json").write_text(json.dumps({"slot": host, "host": host, "attempt": 1, "outcome": "ok",
                                                    "cases_total": len(cases), "cases_done": len(cases)}))
    return store


def test_schema_version_of_synthetic_records_is_current():
    assert SCHEMA_VERSION == 6


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


def test_a_noisy_case_is_ambiguous_not_a_false_verdict(tmp_path):
    noisy = {16: 0.35, 32: 0.35}
    make_run(tmp_path, "a", {"h": 1.0}, seed=3, noisy=noisy, samples=12)
    make_run(tmp_path, "b", {"h": 1.0}, seed=4, noisy=noisy, samples=12)
    cmp = compare_sides(resolve_side(tmp_path, "a"), resolve_side(tmp_path, "b"), 0.03)
    by_m = {}
    for c in cmp.cases:
        by_m.setdefault(c.m, set()).add(c.verdict)
    assert by_m[16] == {"AMBIGUOUS"} and by_m[32] == {"AMBIGUOUS"}


def test_classify_boundaries():
    assert classify(1.04, 1.06, 0.03) == "SLOWER"
    assert classify(0.90, 0.95, 0.03) == "FASTER"
    assert classify(0.99, 1.01, 0.03) == "SAME"
    assert classify(1.01, 1.05, 0.03) == "AMBIGUOUS"


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

    make_run(tmp_path, "fleet", {"h1": 1.0, "h2": 1.0, "h3": 1.0}, seed=8,
             calibration={"h1": cal(450.0), "h2": cal(396.0), "h3": cal(452.0, tb_s=1.2)})
    assert main(["diff", "fleet", "--across-hosts", "--runs-dir", str(tmp_path), "--format", "json"]) == 0
    captured = capsys.readouterr()
    flagged = {(c["slot"], c["peak"]) for c in cli_json(captured.out)["calibration"] if c["flagged"]}
    assert flagged == {("h2", "bf16 TFLOPS"), ("h2", "fp8 TFLOPS"), ("h3", "copy TB/s")}
    assert "h2: slow GPU: calibration bf16 TFLOPS 396.00, 12% below the fleet median 450.00" in captured.err
    assert main(["diff", "fleet", "--across-hosts", "--runs-dir", str(tmp_path)]) == 0
    assert "SLOW GPU" in capsys.readouterr().out


def test_pivot_puts_backends_side_by_side_with_speedups_and_explains_gaps(tmp_path, capsys):
    make_run(tmp_path, "p", {"h": 1.0}, seed=7, statuses={("h", 32): "unsupported"})
    assert main(["show", "p", "--pivot", "backend", "--baseline", "torch-bf16", "--runs-dir", str(tmp_path),
                 "--format", "md"]) == 0
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


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


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


def headless(browser: str, page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", *args,
                           page.as_uri()], capture_output=True, text=True, timeout=120)


def test_html_report_is_interactive_offline_in_headless_chromium(tmp_path, capsys):
    """The report is one file that needs no network: its plots are drawn by its own script, show values
    on hover, switch backends off from a legend and hosts off at the top (the fleet medians and the
    heatmap follow), with a marker per backend; opened in headless Chromium and checked from inside."""
    import html as htmlmod
    import os
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
    if browser is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("chromium is not installed; `make test` installs it")
        pytest.skip("chromium not installed")
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
    cal = Calibration(key="k", measured_at="t", cached=True, tflops={"bf16": 420.0}, tb_s=1.5,
                      method={"bf16": "torch-bf16 8192x8192x8192", "copy": "device-to-device copy of 1024 MiB"},
                      problems={"fp4": "RuntimeError: no backend for this family runs here"},
                      datasheet={"bf16": 503.8, "fp8": 1007.6, "fp4": 2015.2, "tb_s": 1.792})
    make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.0}, seed=11, calibration={"h1": cal, "h2": cal})
    html = tmp_path / "report.html"
    assert main(["report", "r", "-o", str(html), "--runs-dir", str(tmp_path)]) == 0
    text = html.read_text()
    assert "Roofline, NVIDIA RTX PRO 6000 Blackwell Server Edition: measured roofs (1.50 TB/s copy)" in text
    assert "Calibration: each GPU" in text and "420.0" in text and "503.8" in text and "0.83" in text
    assert "no backend for this family runs here" in text and "(cached t)" in text


def test_hostile_labels_are_escaped_in_the_html(tmp_path):
    store = make_run(tmp_path, "x", {"h": 1.0}, seed=10)
    manifest = store.manifest()
    for case in manifest["cases"].values():
        case["label"] = "<script>alert(1)</script>"
    for key in ("manifest_version", "written_as", "format_notes"):
        manifest.pop(key, None)
    store.write_manifest(manifest)
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


def test_the_pivot_shows_the_fleet_per_shape_marks_the_best_and_folds_backends_that_ran_nowhere(tmp_path, capsys,
                                                                                                  stored_runs):
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


@pytest.mark.parametrize("width", [90, 100, 140])
def test_tables_fit_the_terminal_and_never_break_a_name(width, stored_runs):
    from orchestrator.merge import merged_rows
    from orchestrator.output import write
    from orchestrator.store import RunStore
    from orchestrator.views import pivot_document, rows_document

    rows = merged_rows(RunStore(stored_runs / "runs-v4" / "20261203-133700-smoke-byo-4073"))
    for doc in (rows_document(rows), pivot_document(rows, "torch-bf16")):
        lines = write(doc, "table", width).splitlines()
        assert max(len(line) for line in lines) <= width
        text = "\n".join(lines)
        for name in ("reference-nvfp4", "my-torch-mm", "my-zeros"):
            assert name in text  # whole, on one line
    narrow = write(rows_document(rows), "table", 90)
    assert "left out at 90 columns: label" in narrow and "--format md|csv|json" in narrow


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
    text = html.read_text()
    assert "timed by CUDA-graph replay (200 results)" in text and "Speedup over torch-fp8" in text
    assert ">None<" not in text
    assert main(["report", "r", "--baseline", "nope", "-o", str(html), "--runs-dir", str(tmp_path)]) == 2
    assert "--baseline 'nope' is not in run r" in capsys.readouterr().err


def test_the_report_needs_no_plotting_library(tmp_path):
    """The plots are drawn by the page itself: with matplotlib unimportable the report is written all the
    same (the controller's install has no plotting library)."""
    make_run(tmp_path, "r", {"h1": 1.0, "h2": 1.1}, seed=51)
    code = ("import sys; sys.modules['matplotlib'] = None; from orchestrator.cli import main; "
            f"sys.exit(main(['report', 'r', '-o', {str(tmp_path / 'r.html')!r}, '--runs-dir', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert 'id="fleetbench-data"' in (tmp_path / "r.html").read_text()
