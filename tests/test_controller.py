"""The controller as a user runs it, without remote hosts: bad input and bad arguments (exit 2, one clear
line, no traceback), a host python without torch, a host that beats through a long case, Ansible's options."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import FAULTY
from support.cli_output import cli_json
from support.files import write

from orchestrator.cli import main

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
