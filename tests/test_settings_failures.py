"""Issue 41, settings: a setting no number can mean is one error line naming its field (exit 2), never a
run whose manifest JSON cannot hold; run as a user runs them, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main

GOOD_SWEEP = "name: s\nbackends: [torch-bf16]\nshapes: [{m: 16, n: 64, k: 64}]\n"
GOOD_HOSTS = "hosts: [{name: local, transport: local}]\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def strict_json(text: str):
    """json.loads that refuses Infinity / NaN (what JSON itself refuses)."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


# Every numeric setting of a sweep and an inventory, at infinity or NaN (YAML's .inf, -.inf, .nan).
NON_FINITE = [
    (
        "case_timeout",
        GOOD_HOSTS,
        GOOD_SWEEP + "case_timeout: .inf\n",
        "field 'case_timeout': .inf is not a finite number",
    ),
    ("build_timeout", GOOD_HOSTS, GOOD_SWEEP + "build_timeout: .inf\n", "field 'build_timeout': .inf"),
    ("sweep stall_timeout", GOOD_HOSTS, GOOD_SWEEP + "stall_timeout: .inf\n", "field 'stall_timeout': .inf"),
    ("timing.budget_s", GOOD_HOSTS, GOOD_SWEEP + "timing: {budget_s: .inf}\n", "field 'timing.budget_s': .inf"),
    (
        "timing.target_rel_ci",
        GOOD_HOSTS,
        GOOD_SWEEP + "timing: {target_rel_ci: .nan}\n",
        "field 'timing.target_rel_ci': .nan is not a finite number",
    ),
    ("timing.settle_ms", GOOD_HOSTS, GOOD_SWEEP + "timing: {settle_ms: .inf}\n", "field 'timing.settle_ms': .inf"),
    ("timing.warmup_ms", GOOD_HOSTS, GOOD_SWEEP + "timing: {warmup_ms: .inf}\n", "field 'timing.warmup_ms': .inf"),
    ("timing.cooldown_ms", GOOD_HOSTS, GOOD_SWEEP + "timing: {cooldown_ms: .inf}\n", "field 'timing.cooldown_ms'"),
    (
        "moe_layer skew",
        GOOD_HOSTS,
        "name: s\nbackends: [moe-reference]\nshapes: [{moe_layer: {experts: 8, top_k: 2, "
        "tokens: 16, routing: zipf, skew: .inf}, n: 64, k: 64}]\n",
        "field 'shapes.0.moe_layer.skew': .inf",
    ),
    ("a negative infinity", GOOD_HOSTS, GOOD_SWEEP + "case_timeout: -.inf\n", "field 'case_timeout': -.inf"),
    (
        "host timeout",
        "hosts: [{name: local, transport: local, timeout: .inf}]\n",
        GOOD_SWEEP,
        "host 'local': field 'timeout': .inf is not a finite number",
    ),
    (
        "host connect_timeout",
        "hosts: [{name: local, transport: local, connect_timeout: .nan}]\n",
        GOOD_SWEEP,
        "host 'local': field 'connect_timeout': .nan",
    ),
    (
        "host stall_timeout",
        "hosts: [{name: local, transport: local, stall_timeout: .inf}]\n",
        GOOD_SWEEP,
        "host 'local': field 'stall_timeout': .inf",
    ),
    (
        "defaults timeout",
        "defaults: {timeout: .inf}\nhosts: [{name: local, transport: local}]\n",
        GOOD_SWEEP,
        "defaults: field 'timeout': .inf",
    ),
]


@pytest.mark.parametrize("what,hosts,sweep,message", NON_FINITE, ids=[n[0] for n in NON_FINITE])
def test_a_setting_at_infinity_or_nan_is_one_error_line_naming_its_field(tmp_path, capsys, what, hosts, sweep, message):
    inv, sw = write(tmp_path / "hosts.yaml", hosts), write(tmp_path / "sweep.yaml", sweep)
    code = main(["run", str(sw), "-i", str(inv), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing was started, no manifest written


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "s.yaml", "--lock-timeout", "inf"],
        ["run", "s.yaml", "--lock-timeout", "nan"],
        ["profile", "latest", "--timeout", "inf"],
    ],
)
def test_seconds_given_as_infinity_on_the_command_line_are_refused(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "hosts.yaml", GOOD_HOSTS)
    write(tmp_path / "s.yaml", GOOD_SWEEP)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "Traceback" not in err and "is not" in err.splitlines()[-1]
    assert not (tmp_path / "runs").exists()


def test_a_dry_run_manifest_is_strict_json(tmp_path, capsys):
    """What `render` stores (the manifest with every limit) parses as JSON that refuses Infinity."""
    inv, sw = (
        write(tmp_path / "hosts.yaml", GOOD_HOSTS),
        write(tmp_path / "sweep.yaml", GOOD_SWEEP + "case_timeout: 1.0e+9\n"),
    )
    code = main(["render", str(sw), "-i", str(inv), "--runs-dir", str(tmp_path / "runs")])
    assert code == 0, capsys.readouterr().err
    manifests = list((tmp_path / "runs").glob("*/manifest.json"))
    assert manifests
    for m in manifests:
        assert strict_json(m.read_text())["sweep"]["case_timeout"] == 1e9
