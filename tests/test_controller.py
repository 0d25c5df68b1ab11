"""Controller logic without hosts: inventory, sweeps, planning, quoting, rendering, parsing, bad input."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from conftest import FAULTY
from support.cli_output import cli_json

from orchestrator.cli import main
from orchestrator.config.inventory import load_inventory, select_hosts
from orchestrator.config.sweep import Sweep, load_sweep
from orchestrator.errors import InputError
from orchestrator.planning.bundle import build_worker_bundle
from orchestrator.planning.layout import layout_for
from orchestrator.planning.plan import build_plan
from orchestrator.planning.render import render_script, template_environment
from orchestrator.runs.records import parse_results
from orchestrator.transport import login_relative, shell_command
from worker.contract import protocol
from worker.contract.catalog import CATALOG
from worker.contract.schema import SCHEMA_VERSION

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_inventory_and_sweeps_are_valid():
    inv = load_inventory(REPO / "hosts.yaml")
    assert [h.name for h in inv.hosts] == ["local"] and inv.hosts[0].transport == "local"
    assert inv.hosts[0].python == sys.executable
    for sweep in sorted((REPO / "sweeps").glob("*.yaml")):
        assert load_sweep(sweep).cases()


def test_glm5_preset_has_the_seed_shapes():
    sweep = Sweep(name="x", backends=["torch-bf16"], shapes=[{"preset": "glm5-tp8"}])
    shapes = [(c.m, c.n, c.k) for c in sweep.cases()]
    assert shapes == [(m, 2048, 6144) for m in (16, 32, 64, 128, 256, 512, 1024)] + [
        (m, 768, 6144) for m in (16, 32, 64, 128, 256)
    ]


def test_moe_batches_give_per_expert_m():
    sweep = Sweep(
        name="x",
        backends=["torch-bf16"],
        shapes=[
            {"moe": {"batch": [512, 32768, 100], "top_k": 8, "experts": 256}, "n": 2048, "k": 6144, "label": "moe"}
        ],
    )
    cases = sweep.cases()
    assert [c.m for c in cases] == [16, 1024, 4]
    assert cases[0].label == "moe (batch 512, top-8/256)"


def test_backend_globs_expand_and_duplicates_collapse():
    sweep = Sweep(
        name="x", backends=["flashinfer-fp4-*", "flashinfer-fp4-cutlass"], shapes=[{"m": 16, "n": 64, "k": 64}]
    )
    names = sweep.backend_names()
    fp4 = [n for n in CATALOG if n.startswith("flashinfer-fp4-")]
    assert names[0] == "flashinfer-fp4-cutlass" and len(names) == len(set(names)) == len(fp4) == 8


def test_inventory_defaults_and_selection(tmp_path):
    key = write(tmp_path / "id_key", "k")
    inv = load_inventory(
        write(
            tmp_path / "hosts.yaml",
            f"""
defaults: {{user: bench, identity_file: {key.name}, labels: [rtx], env: {{A: "1"}}}}
hosts:
  - {{name: gpu1, hostname: 10.0.0.1, gpus: [0, 1], env: {{B: "2"}}}}
  - {{name: gpu2, hostname: 10.0.0.2, labels: [spare], port: 2222}}
  - {{name: local, transport: local}}
""",
        )
    )
    g1, g2, local = inv.hosts
    assert g1.user == "bench" and g1.identity_file == str(key) and g1.env == {"A": "1", "B": "2"}
    assert g2.port == 2222 and g2.labels == ("rtx", "spare") and g1.gpus == (0, 1)
    assert local.transport == "local"
    assert [h.name for h in select_hosts(inv, "gpu*")] == ["gpu1", "gpu2"]
    assert [h.name for h in select_hosts(inv, "label:spare,local")] == ["gpu2", "local"]
    assert [h.name for h in select_hosts(inv, "rtx")] == ["gpu1", "gpu2", "local"]
    with pytest.raises(InputError, match="'gpu9' matches no host"):
        select_hosts(inv, "gpu9")
    # Ansible's habits: !TERM leaves hosts out; exclusions alone start from every host.
    assert [h.name for h in select_hosts(inv, "rtx,!gpu1")] == ["gpu2", "local"]
    assert [h.name for h in select_hosts(inv, "!label:spare")] == ["gpu1", "local"]
    with pytest.raises(InputError, match="'!gpu9'|'gpu9' matches no host"):
        select_hosts(inv, "rtx,!gpu9")  # a typo in an exclusion is a typo too
    with pytest.raises(InputError, match="leaves no host"):
        select_hosts(inv, "gpu*,!rtx")
    assert g1.public_view()["env"] == ["A", "B"]  # values may be secrets


def test_plan_shards_or_repeats_cases_across_gpus(tmp_path):
    inv = load_inventory(
        write(
            tmp_path / "hosts.yaml",
            """
hosts:
  - {name: big, hostname: h, gpus: [0, 1]}
  - {name: one, hostname: h2}
""",
        )
    )
    sweep = Sweep(name="x", backends=["torch-bf16", "reference-nvfp4"], shapes=[{"m": [16, 32, 64], "n": 64, "k": 64}])
    shard = build_plan(list(inv.hosts), sweep, "r", "shard")
    assert [j.slot for j in shard.jobs] == ["big.gpu0", "big.gpu1", "one"]
    assert len(shard.jobs[0].cases) + len(shard.jobs[1].cases) == 6 and len(shard.jobs[2].cases) == 6
    assert shard.jobs[1].env == {"CUDA_VISIBLE_DEVICES": "1"}
    every = build_plan(list(inv.hosts), sweep, "r", "all")
    assert [len(j.cases) for j in every.jobs] == [6, 6, 6]


HOSTILE = ["{'Desc':40s}", "it's", '"q"', "$(touch /tmp/pwned)", "`id`", "a b", "ünïcode", "x\ny", ""]


def test_shell_command_quotes_every_word_and_env():
    line = shell_command(["python3", *HOSTILE], {"K": "v w$x"})
    assert shlex.split(line) == ["env", "K=v w$x", "python3", *HOSTILE]


def test_login_relative_paths():
    assert login_relative("~/.fleetbench/x") == ".fleetbench/x"
    assert login_relative("~") == "." and login_relative("/abs") == "/abs"


def test_rendered_script_matches_golden_file_and_compiles():
    layout = layout_for(
        load_inventory(REPO / "hosts.yaml").hosts[0].model_copy(update={"workdir": "~/fb"}),
        "20261202-000000-golden-0000",
        "ab" * 32,
    )
    source = render_script(template_environment(), layout, "ab" * 32)
    golden = GOLDEN / "bench_script.py"
    assert source == golden.read_text(encoding="utf-8"), "template changed: update tests/golden/bench_script.py"
    compile(source, "bench", "exec")


def test_hostile_workdir_is_data_in_the_script():
    host = load_inventory(REPO / "hosts.yaml").hosts[0].model_copy(update={"workdir": '/w/it\'s "x"\n$(id)'})
    source = render_script(template_environment(), layout_for(host, "r", "cd" * 32), "cd" * 32)
    namespace: dict = {}
    exec(compile(source.replace('if __name__ == "__main__":', "if False:"), "s", "exec"), namespace)
    assert namespace["WORKER_DIR"] == '/w/it\'s "x"\n$(id)/worker/' + "cd" * 8


def test_worker_bundle_is_deterministic():
    a, b = build_worker_bundle(), build_worker_bundle()
    assert a.sha256 == b.sha256 and a.data == b.data and a.files >= 10


def test_bad_result_lines_are_problems_not_crashes(tmp_path):
    good = '{"kind":"case","schema_version":3}'
    path = write(
        tmp_path / "results.jsonl",
        "\n".join(
            [
                "not json",
                '{"x": 1}',
                '{"kind":"facts","schema_version":99}',
                good,
                '{"kind":"facts","schema_version":1,',
            ]
        ),
    )
    parsed = parse_results(path)
    assert parsed.cases == [] and len(parsed.problems) == 5
    assert "not JSON" in parsed.problems[0]
    assert "no schema_version" in parsed.problems[1]
    assert f"newer than this fleetbench reads ({SCHEMA_VERSION}): upgrade fleetbench" in parsed.problems[2]
    assert "invalid record" in parsed.problems[3]
    assert "truncated" in parsed.problems[4]


# -- bad input: every example exits 2 with one clear line and no traceback -------------------------
GOOD_SWEEP = "name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 64}]\n"
GOOD_HOSTS = "hosts: [{name: local, transport: local}]\n"
BAD_INPUTS = [
    ("malformed sweep YAML", GOOD_HOSTS, "name: [unclosed\n", "malformed YAML at line"),
    ("malformed hosts YAML", "hosts: [{name: a\n", GOOD_SWEEP, "malformed YAML"),
    (
        "unknown host field",
        "hosts: [{name: a, hostname: h, colour: red}]\n",
        GOOD_SWEEP,
        "host 'a': field 'colour': unknown field",
    ),
    (
        "wrong type",
        "hosts: [{name: a, hostname: h, port: twenty}]\n",
        GOOD_SWEEP,
        "host 'a': field 'port': Input should be a valid integer",
    ),
    (
        "missing key file",
        "hosts: [{name: a, hostname: h, identity_file: /nope/key}]\n",
        GOOD_SWEEP,
        "host 'a': field 'identity_file': key file not found: /nope/key",
    ),
    ("no hosts", "hosts: []\n", GOOD_SWEEP, "field 'hosts': a non-empty list"),
    ("duplicate host", "hosts: [{name: a, hostname: h}, {name: a, hostname: h}]\n", GOOD_SWEEP, "duplicate host name"),
    ("ssh host without hostname", "hosts: [{name: a}]\n", GOOD_SWEEP, "field 'hostname': required"),
    ("bad host name", "hosts: [{name: '../x', hostname: h}]\n", GOOD_SWEEP, "field 'name'"),
    (
        "unknown defaults field",
        "defaults: {usr: x}\nhosts: [{name: local, transport: local}]\n",
        GOOD_SWEEP,
        "defaults: field 'usr': unknown field",
    ),
    (
        "unknown backend",
        GOOD_HOSTS,
        "name: s\nbackends: [cublas-magic]\nshapes: [{m: 16, n: 64, k: 64}]\n",
        "unknown backend 'cublas-magic'",
    ),
    (
        "bad shape",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{m: -4, n: 64, k: 64}]\n",
        "'m' values must be positive",
    ),
    (
        "shape missing k",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64}]\n",
        "'n' and 'k' are required",
    ),
    ("unknown preset", GOOD_HOSTS, "name: s\nbackends: [torch-bf16]\nshapes: [{preset: llama}]\n", "unknown preset"),
    ("unknown sweep field", GOOD_HOSTS, GOOD_SWEEP + "iterations: 5\n", "field 'iterations': unknown field"),
    ("wrong timing type", GOOD_HOSTS, GOOD_SWEEP + "timing: {budget_s: lots}\n", "field 'timing.budget_s'"),
    ("sweep not a mapping", GOOD_HOSTS, "- a\n- b\n", "expected a mapping"),
    (
        "bad env name",
        "hosts: [{name: local, transport: local, env: {'A-B': x}}]\n",
        GOOD_SWEEP,
        "invalid environment variable name",
    ),
    (
        "stall timeout too short for heartbeats",
        GOOD_HOSTS,
        GOOD_SWEEP + "stall_timeout: 5\n",
        "field 'stall_timeout': Input should be greater than or equal to 15",
    ),
    (
        "host stall timeout too short",
        "hosts: [{name: local, transport: local, stall_timeout: 2}]\n",
        GOOD_SWEEP,
        "field 'stall_timeout'",
    ),
    # issue 27: values are taken as written; no key twice; no control characters in what tables show
    (
        "boolean for a size",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{m: true, n: 64, k: 64}]\n",
        "field 'shapes.0.m': expected a whole number or a list of them, got true",
    ),
    (
        "boolean among sizes",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{m: [16, yes], n: 64, k: 64}]\n",
        "field 'shapes.0.m': expected a whole number or a list of them, got true",
    ),
    (
        "boolean for a timing count",
        GOOD_HOSTS,
        GOOD_SWEEP + "timing: {rounds: true}\n",
        "field 'timing.rounds': Input should be a valid integer, got true",
    ),
    (
        "string for a seed",
        GOOD_HOSTS,
        GOOD_SWEEP + "seed: '3'\n",
        "field 'seed': Input should be a valid integer, got \"3\"",
    ),
    (
        "boolean for a port",
        "hosts: [{name: a, hostname: h, port: true}]\n",
        GOOD_SWEEP,
        "host 'a': field 'port': Input should be a valid integer, got true",
    ),
    (
        "string for a GPU index",
        "hosts: [{name: a, hostname: h, gpus: ['0']}]\n",
        GOOD_SWEEP,
        "host 'a': field 'gpus.0': Input should be a valid integer, got \"0\"",
    ),
    (
        "size beyond 32 bits",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 100000000000000000000000}]\n",
        "field 'shapes.0.k': 100000000000000000000000 is larger than 2147483647, the largest size GEMM libraries take",
    ),
    (
        "size as a float (k: 1.0e+23)",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 1.0e+23}]\n",
        "field 'shapes.0.k': expected a whole number or a list of them, got 1e+23",
    ),
    (
        "size YAML reads as a string (k: 1e23)",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 1e23}]\n",
        "field 'shapes.0.k': expected a whole number or a list of them, got \"1e23\"",
    ),
    (
        "MoE batch beyond 32 bits",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{moe: {batch: 4294967296, top_k: 8, experts: 256}, n: 64, k: 64}]\n",
        "field 'shapes.0.moe.batch': 4294967296 is larger than 2147483647",
    ),
    (
        "MoE top_k above experts",
        GOOD_HOSTS,
        "name: s\nbackends: [torch-bf16]\nshapes: [{moe: {batch: 64, top_k: 300, experts: 8}, n: 64, k: 64}]\n",
        "field 'shapes.0.moe': 'top_k' must not exceed 'experts'",
    ),
    (
        "MoE layer with absurd experts",
        GOOD_HOSTS,
        "name: s\nbackends: [moe-reference]\nshapes: [{moe_layer: {experts: 100000000, "
        "top_k: 2, tokens: 16}, n: 64, k: 64}]\n",
        "field 'shapes.0.moe_layer.experts': Input should be less than or equal to 65536",
    ),
    (
        "sweep key given twice",
        GOOD_HOSTS,
        GOOD_SWEEP + "name: other\n",
        "malformed YAML at line 4, column 1: key 'name' given twice (first at line 1)",
    ),
    (
        "host key given twice",
        "hosts: [{name: a, hostname: h, hostname: g}]\n",
        GOOD_SWEEP,
        "key 'hostname' given twice (first at line 1)",
    ),
    (
        "ANSI escape in a label",
        GOOD_HOSTS,
        'name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 64, label: "a\\x1b[31mred"}]\n',
        "field 'shapes.0.label': 'a\\x1b[31mred' holds the control character '\\x1b': only printable text is allowed here",
    ),
    (
        "newline in a sweep name",
        GOOD_HOSTS,
        'name: "s\\nfake line"\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 64}]\n',
        "field 'name': 's\\nfake line' holds the control character '\\n'",
    ),
    (
        "ANSI escape in a hostname",
        'hosts: [{name: a, hostname: "h\\x1b[2J"}]\n',
        GOOD_SWEEP,
        "host 'a': field 'hostname': 'h\\x1b[2J' holds the control character '\\x1b'",
    ),
    (
        "bidi override in a host label",
        'hosts: [{name: a, hostname: h, labels: ["rtx\\u202e"]}]\n',
        GOOD_SWEEP,
        "host 'a': field 'labels.0': 'rtx\\u202e' holds the control character '\\u202e'",
    ),
]


def test_yaml_merge_keys_may_override_what_they_merge_in(tmp_path):
    """A key given twice is refused; a key that `<<` merged in may be given again (what merges are for)."""
    inv = load_inventory(
        write(
            tmp_path / "hosts.yaml",
            """
hosts:
  - &a {name: a, hostname: h, port: 2222}
  - {<<: *a, name: b, port: 2223}
""",
        )
    )
    assert [(h.name, h.hostname, h.port) for h in inv.hosts] == [("a", "h", 2222), ("b", "h", 2223)]


@pytest.mark.parametrize("what,hosts,sweep,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_exits_2_with_one_clear_line(tmp_path, capsys, what, hosts, sweep, message):
    inv, sw = write(tmp_path / "hosts.yaml", hosts), write(tmp_path / "sweep.yaml", sweep)
    code = main(["run", str(sw), "-i", str(inv), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing was started


@pytest.mark.parametrize(
    "argv,message",
    [
        (["run", "missing.yaml"], "sweep file not found"),
        (["show", "nope"], "no run 'nope'"),
        (["show", "latest"], "no runs in"),
        (["rerun", "latest"], "say what to run again"),
        (
            ["run", "s.yaml", "--runs-dir", "/proc/forbidden"],
            "--runs-dir /proc/forbidden: cannot create a run folder there",
        ),
        (
            ["run", "s.yaml", "--runs-dir", "a-file"],
            "--runs-dir a-file: cannot create a run folder there (Not a directory)",
        ),
        (["run", "s.yaml", "--parallel", "0"], "--parallel: 0 is not at least 1"),
        (["run", "s.yaml", "--parallel", "-3"], "--parallel: -3 is not at least 1"),
        (["rerun", "latest", "--failed", "--parallel", "x"], "--parallel: 'x' is not a whole number"),
        (["run", "s.yaml", "--lock-timeout", "-5"], "--lock-timeout: -5 is not 0 or more seconds"),
    ],
)
def test_bad_arguments_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "hosts.yaml", GOOD_HOSTS)
    write(tmp_path / "s.yaml", GOOD_SWEEP)
    write(tmp_path / "a-file", "not a folder")
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    problems = [line for line in err.splitlines() if line.startswith(("error: ", "fleetbench "))]
    assert len(problems) == 1, err


def test_the_host_lacks_files_only_by_the_protocol_exit_statuses():
    from orchestrator.execution.remote import lacks_files
    from orchestrator.transport import CommandResult

    # Python could not open the content-addressed script: status 2 before the launcher's hello.
    assert lacks_files(CommandResult(2), hello_seen=False)
    # After the hello the launcher runs: a 2 is not ours (the worker's usage errors are EXIT_USAGE).
    assert not lacks_files(CommandResult(2), hello_seen=True)
    assert lacks_files(CommandResult(protocol.EXIT_NEEDS_SYNC), hello_seen=True)  # the launcher lacks its worker
    assert lacks_files(CommandResult(protocol.EXIT_NEEDS_SYNC), hello_seen=False)  # a format-1 launcher: no hello
    assert not lacks_files(CommandResult(1), hello_seen=False)
    assert not lacks_files(CommandResult(-1, timed_out=True), hello_seen=False)
    assert not lacks_files(None, hello_seen=False)


def test_run_first_syncs_and_runs_again_only_when_the_host_lacks_something():
    from orchestrator.execution.remote import run_first
    from orchestrator.transport import CommandResult

    def scenario(results, lacks):
        calls, queue = [], list(results)

        def launch():
            calls.append("run")
            return queue.pop(0)

        return run_first(launch, lacks, lambda: calls.append("sync")), calls

    ok, missing = CommandResult(0), CommandResult(5)
    assert scenario([ok], lambda r: r.exit_code == 5) == (ok, ["run"])  # the steady state: one exec
    assert scenario([missing, ok], lambda r: r.exit_code == 5) == (ok, ["run", "sync", "run"])
    # Still lacking after the upload: reported as it is, never a loop.
    assert scenario([missing, missing], lambda r: r.exit_code == 5) == (missing, ["run", "sync", "run"])
    assert scenario([None], lambda r: True) == (None, ["run"])  # not launched (cancelled): nothing to sync


def test_hosts_sharing_a_workdir_share_one_rendering(tmp_path, monkeypatch):
    import orchestrator.planning.render as render_mod

    inv = load_inventory(
        write(
            tmp_path / "hosts.yaml",
            """
defaults: {workdir: ~/fb}
hosts:
  - {name: a, hostname: h1}
  - {name: b, hostname: h2}
  - {name: c, hostname: h3, workdir: /data/fb}
""",
        )
    )
    sweep = Sweep(name="x", backends=["noop"], shapes=[{"m": 1, "n": 16, "k": 16}])
    calls = []
    real = render_mod.render_script
    monkeypatch.setattr(render_mod, "render_script", lambda *a: calls.append(a[1].workdir) or real(*a))
    scripts = render_mod.render_plan(
        build_plan(list(inv.hosts), sweep, "r", "all"), tmp_path / "s", build_worker_bundle()
    )
    assert sorted(calls) == ["/data/fb", "~/fb"]
    assert scripts["a"].sha256 == scripts["b"].sha256 != scripts["c"].sha256
    assert scripts["a"].remote == scripts["b"].remote and scripts["a"].path != scripts["b"].path


def test_a_host_python_without_torch_fails_once_with_the_cause_and_is_not_restarted(tmp_path, capsys, monkeypatch):
    """The worker cannot start there: one outcome line that names the missing module, no restarts."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    inv = write(
        tmp_path / "hosts.yaml",
        "hosts: [{name: bare, transport: local, python: %s, env: {PYTHONPATH: %s}}]\n" % (sys.executable, fake.parent),
    )
    sweep = write(tmp_path / "s.yaml", GOOD_SWEEP)
    code = main(["run", str(sweep), "-i", str(inv), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 1
    line = next(line for line in err.splitlines() if line.startswith("bare: failed: "))
    assert (
        line.startswith("bare: failed: fleetbench: the worker cannot start with") and "No module named 'torch'" in line
    )
    log = next((tmp_path / "runs").glob("*/hosts/bare/attempt-1/log.txt")).read_text()
    assert "restart" not in log and "giving up" not in log and log.count("cannot start") == 1


def test_a_host_that_beats_is_never_stalled_however_long_a_case_takes(tmp_path, capsys, monkeypatch):
    """A case that takes longer than the stall timeout (a long JIT build, say: here a case that hangs)
    keeps its host alive through heartbeats; only the host's wall-clock limit ends it."""
    monkeypatch.setenv("FLEETBENCH_TEST_FAULT", "hang:16")
    inv = write(tmp_path / "hosts.yaml", "hosts: [{name: busy, transport: local, timeout: 24}]\n")
    sweep = write(
        tmp_path / "s.yaml",
        f"name: s\nbackends: [{json.dumps(FAULTY)}]\nshapes: [{{m: 16, n: 64, k: 64}}]\nstall_timeout: 15\n",
    )
    code = main(["run", str(sweep), "-i", str(inv), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 1
    assert "busy: timeout: did not finish within the host's 24 s limit" in err and "stalled" not in err
    log = next((tmp_path / "runs").glob("*/hosts/busy/attempt-1/log.txt")).read_text()
    assert log.count('"event":"heartbeat"') >= 3  # every 5 s while the case hung


def test_ansible_style_limit_and_forks_are_the_same_options(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "hosts.yaml", "hosts: [{name: a, transport: local}, {name: b, transport: local}]\n")
    for argv in (
        ["hosts", "-l", "!a", "--format", "json"],
        ["hosts", "--limit", "b", "--format", "json"],
        ["hosts", "--hosts", "b", "--format", "json"],
    ):
        assert main(argv) == 0
        assert [h["name"] for h in cli_json(capsys.readouterr().out)] == ["b"]
    sweep = write(tmp_path / "s.yaml", "name: s\nbackends: [noop]\nshapes: [{m: 1, n: 16, k: 16}]\ndevice: cpu\n")
    assert main(["run", str(sweep), "-f", "1", "-l", "a", "--format", "json"]) == 0
    assert {r["host"] for r in cli_json(capsys.readouterr().out)} == {"a"}


def test_a_local_host_without_a_home_folder_says_so_not_interpreter_not_found(tmp_path, monkeypatch):
    from orchestrator.config.inventory import load_inventory
    from orchestrator.transport import TransportError
    from orchestrator.transport.local import LocalTransport

    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts: [{name: local, transport: local}]\n")
    monkeypatch.setenv("HOME", str(tmp_path / "gone"))
    with pytest.raises(TransportError, match="home folder not found: .*gone"):
        LocalTransport(load_inventory(inv).hosts[0]).run(
            [sys.executable, "-c", "pass"], env={}, timeout=10, on_line=lambda s, l: None
        )


def test_a_noisy_rows_note_gives_its_interval_up_to_100_percent_then_says_wider():
    from orchestrator.analysis.merge import Row
    from orchestrator.views.tables import _note

    row = Row(
        run_id="r",
        host="h",
        gpu=None,
        slot="h",
        gpu_name=None,
        label="",
        backend="b",
        m=1,
        n=1,
        k=1,
        status="ok",
        reason="",
        rel_ci=0.3,
    )
    assert _note(row) == "noisy (CI ±30%)"
    assert _note(Row(**{**row.as_dict(), "rel_ci": 2736.9})) == "noisy (CI wider than ±100%)"
    assert _note(Row(**{**row.as_dict(), "rel_ci": 0.01})) == ""
