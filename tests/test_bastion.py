"""A fleet behind a bastion: hosts reached through a jump host (ProxyJump), with real sshd on both ends.

ssh0 is the bastion; the others are reached through it on a direct-tcpip channel. Host-key errors name
the machine whose key it is, and the command each one prints as the fix is run here and works.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, write_sweep

from orchestrator.cli import main

BASTION = "ssh0"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def key_name(host) -> str:
    return f"[127.0.0.1]:{host.port}"


def known_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def printed_fix(err: str, after: str) -> str:
    """The command an error line offers after `after` (e.g. "add it: ")."""
    found = re.search(re.escape(after) + r"(.+)$", err, re.MULTILINE)
    assert found, err
    return found.group(1)


def run_fix(command: str) -> None:
    """Run a printed fix as a user pastes it into their shell (it redirects with >>)."""
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{command}: {done.stderr}"


def edit_stanza(config: Path, host: str, old: str, new: str) -> None:
    """Replace a line in one host's stanza of an ssh_config written by SshFleet.ssh_config."""
    stanzas = config.read_text().split("\n\n")
    (i,) = [i for i, stanza in enumerate(stanzas) if stanza.startswith(f"Host {host}\n") and old in stanza]
    stanzas[i] = stanzas[i].replace(old, new)
    config.write_text("\n\n".join(stanzas))


@pytest.fixture
def behind_bastion(fleet, tmp_path):
    """An inventory of ssh1 and ssh2, each reached through the bastion as an ssh_config says, and an
    empty known_hosts."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = fleet.ssh_config(tmp_path / "ssh_config", jump=BASTION)
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1", "ssh2"], known_hosts=known, ssh_config=config)
    return inv, known


def test_accept_new_through_a_bastion_records_both_keys_once_and_runs(fleet, behind_bastion, tmp_path, capsys):
    inv, known = behind_bastion
    code, out, err = run_cli(
        capsys,
        "run",
        REPO / "sweeps" / "smoke.yaml",
        "-i",
        inv,
        "--runs-dir",
        tmp_path / "runs",
        "--accept-new",
        "--format",
        "csv",
    )
    assert code == 0, err
    assert {r["host"] for r in csv.DictReader(io.StringIO(out)) if r["status"] == "ok"} == {"ssh1", "ssh2"}
    # Two hosts behind one bastion: its key is recorded once, not once per connection through it.
    assert sorted(known_lines(known)) == sorted(fleet.host(n).host_key_line for n in (BASTION, "ssh1", "ssh2"))
    # The keys it recorded are the ones it checks next time, without --accept-new.
    code, _, err = run_cli(
        capsys,
        "run",
        write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
        "-i",
        inv,
        "--runs-dir",
        tmp_path / "runs",
    )
    assert code == 0, err


@pytest.mark.parametrize("jump_from", ["ssh_config", "inventory"])
def test_unknown_bastion_key_names_the_bastion_and_its_keyscan_fix_works(fleet, tmp_path, capsys, jump_from):
    bastion, target = fleet.host(BASTION), fleet.host("ssh1")
    known = tmp_path / "known_hosts"
    known.write_text(target.host_key_line + "\n")  # the target is known, its bastion is not
    if jump_from == "ssh_config":
        config = fleet.ssh_config(tmp_path / "ssh_config", jump=BASTION)
        inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], known_hosts=known, ssh_config=config)
    else:
        inv = fleet.inventory(
            tmp_path / "hosts.yaml",
            names=["ssh1"],
            known_hosts=known,
            proxy_jump=f"{fleet.user}@127.0.0.1:{bastion.port}",
        )
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")

    assert code == 1
    assert f"ssh1: auth-failed: unknown host key for jump host {key_name(bastion)}" in err
    assert key_name(target) not in err
    assert known_lines(known) == [target.host_key_line]  # nothing recorded without --accept-new
    fix = printed_fix(err, "add it: ")
    assert fix == f"ssh-keyscan -p {bastion.port} 127.0.0.1 >> {known}"
    run_fix(fix)
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 0, err


def test_unknown_target_behind_a_bastion_is_scanned_from_the_bastion(fleet, tmp_path, capsys):
    """The target's address means what it means from the bastion: its key is scanned there, not here."""
    bastion, target = fleet.host(BASTION), fleet.host("ssh1")
    known = tmp_path / "known_hosts"
    known.write_text(bastion.host_key_line + "\n")
    config = fleet.ssh_config(tmp_path / "ssh_config", jump=BASTION)
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], known_hosts=known, ssh_config=config)
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")

    assert code == 1
    assert f"ssh1: auth-failed: unknown host key for {key_name(target)} (behind jump host {key_name(bastion)})" in err
    fix = printed_fix(err, "add it: ")
    assert fix.startswith("ssh ") and f"ssh-keyscan -p {target.port} 127.0.0.1 >> {known}" in fix
    run_fix(fix)
    assert sorted(known_lines(known)) == sorted([bastion.host_key_line, target.host_key_line])
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 0, err


def test_changed_bastion_key_is_refused_even_with_accept_new_and_names_the_bastion(
    fleet, behind_bastion, tmp_path, capsys
):
    inv, known = behind_bastion
    bastion = fleet.host(BASTION)
    someone_else = fleet.host("ssh3").host_key_line.split(" ", 1)[1]
    known.write_text(f"{key_name(bastion)} {someone_else}\n")
    before = known.read_text()
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--accept-new")

    assert code == 1
    for name in ("ssh1", "ssh2"):
        assert f"{name}: auth-failed: host key for jump host {key_name(bastion)} CHANGED" in err
    assert "Traceback" not in err
    assert known.read_text() == before  # a changed key is never replaced, nor the targets' keys added
    fix = printed_fix(err, "if the host was reinstalled: ")
    assert fix == f"ssh-keygen -f {known} -R '{key_name(bastion)}'"
    run_fix(fix)
    assert known_lines(known) == []
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--accept-new")
    assert code == 0, err
    assert bastion.host_key_line in known_lines(known)


def test_unknown_key_of_a_direct_host_has_a_keyscan_fix_that_works(fleet, tmp_path, capsys):
    target = fleet.host("ssh1")
    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], known_hosts=known)
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 1 and f"unknown host key for {key_name(target)}:" in err and "jump host" not in err
    run_fix(printed_fix(err, "add it: "))
    assert known_lines(known) == [target.host_key_line]
    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 0, err


def test_a_bastion_that_is_down_is_named(fleet, behind_bastion, tmp_path, capsys):
    inv, known = behind_bastion
    bastion = fleet.host(BASTION)
    bastion.kill()
    code, _, err = run_cli(
        capsys,
        "run",
        write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
        "-i",
        inv,
        "--runs-dir",
        tmp_path / "runs",
        "--accept-new",
    )
    assert code == 1
    assert f"ssh1: unreachable: connection refused by jump host 127.0.0.1:{bastion.port}" in err
    assert known_lines(known) == []


def test_a_host_down_behind_a_live_bastion_is_named_with_the_bastion(fleet, behind_bastion, tmp_path, capsys):
    inv, known = behind_bastion
    bastion, target = fleet.host(BASTION), fleet.host("ssh1")
    target.kill()
    code, _, err = run_cli(
        capsys,
        "run",
        write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
        "-i",
        inv,
        "--runs-dir",
        tmp_path / "runs",
        "--accept-new",
    )
    assert code == 1
    assert f"ssh1: unreachable: jump host 127.0.0.1:{bastion.port} could not connect to 127.0.0.1:{target.port}" in err


def test_a_frozen_bastion_ends_at_the_hosts_connect_timeout_and_is_named(fleet, behind_bastion, tmp_path, capsys):
    """A jump host from ssh_config is held to the inventory's connect_timeout (5 s here), not paramiko's own."""
    inv, _ = behind_bastion
    bastion = fleet.host(BASTION)
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    bastion.freeze()
    try:
        started = time.monotonic()
        code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--accept-new")
        took = time.monotonic() - started
    finally:
        bastion.thaw()
    assert code == 1
    assert (
        f"ssh1: timeout: jump host 127.0.0.1:{bastion.port} accepted the connection but sent no SSH banner within 5 s"
    ) in err
    assert took < 14  # paramiko's own banner timeout is 15 s


def test_a_frozen_host_behind_a_live_bastion_times_out_and_is_named_with_it(fleet, behind_bastion, tmp_path, capsys):
    inv, _ = behind_bastion
    bastion, target = fleet.host(BASTION), fleet.host("ssh1")
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))
    target.freeze()
    try:
        code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--accept-new")
    finally:
        target.thaw()
    assert code == 1
    # Whichever of paramiko's two timers ends the handshake first, the sentence is about the frozen host.
    assert f"ssh1: timeout: 127.0.0.1:{target.port} (behind jump host 127.0.0.1:{bastion.port})" in err
    assert "(host frozen or overloaded?)" in err


def test_a_key_the_bastion_refuses_names_the_bastion(fleet, tmp_path, capsys):
    bastion = fleet.host(BASTION)
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    config = fleet.ssh_config(tmp_path / "ssh_config", jump=BASTION)
    edit_stanza(config, BASTION, f"IdentityFile {fleet.client_key}", f"IdentityFile {stranger}")
    inv = fleet.inventory(tmp_path / "hosts.yaml", names=["ssh1"], ssh_config=config)
    code, _, err = run_cli(
        capsys,
        "run",
        write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
        "-i",
        inv,
        "--runs-dir",
        tmp_path / "runs",
    )
    assert code == 1
    assert f"ssh1: auth-failed: authentication failed for jump host {fleet.user}@127.0.0.1:{bastion.port}" in err


def two_jump_hosts(fleet, tmp_path) -> Path:
    """An ssh_config that reaches ssh1 through ssh2, and ssh2 through the bastion."""
    config = fleet.ssh_config(tmp_path / "ssh_config", jump=BASTION)
    edit_stanza(config, "ssh1", f"ProxyJump {BASTION}", "ProxyJump ssh2")
    return config


def test_two_jump_hosts_in_a_row(fleet, tmp_path, capsys):
    """ssh1 behind ssh2 behind the bastion. The middle one's key is scanned from the bastion; for ssh1 no
    keyscan is offered (ssh would carry neither the key nor known_hosts two hops on), and accept-new
    records it."""
    bastion, middle, target = fleet.host(BASTION), fleet.host("ssh2"), fleet.host("ssh1")
    known = tmp_path / "known_hosts"
    known.write_text(bastion.host_key_line + "\n")
    inv = fleet.inventory(
        tmp_path / "hosts.yaml", names=["ssh1"], known_hosts=known, ssh_config=two_jump_hosts(fleet, tmp_path)
    )
    sweep = write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",))

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 1
    assert (
        f"ssh1: auth-failed: unknown host key for jump host {key_name(middle)} (behind jump host {key_name(bastion)})"
    ) in err
    run_fix(printed_fix(err, "add it: "))
    assert known_lines(known) == [bastion.host_key_line, middle.host_key_line]

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs")
    assert code == 1
    assert (
        f"ssh1: auth-failed: unknown host key for {key_name(target)} (behind jump host {key_name(middle)} "
        f"(behind jump host {key_name(bastion)})): verify it, then run with --accept-new\n"
    ) in err

    code, _, err = run_cli(capsys, "run", sweep, "-i", inv, "--runs-dir", tmp_path / "runs", "--accept-new")
    assert code == 0, err
    assert known_lines(known) == [bastion.host_key_line, middle.host_key_line, target.host_key_line]


def test_the_first_of_two_jump_hosts_is_checked_too(fleet, tmp_path, capsys):
    """Every machine on the way has its key checked, not only the jump host next to the target."""
    bastion, middle, target = fleet.host(BASTION), fleet.host("ssh2"), fleet.host("ssh1")
    someone_else = fleet.host("ssh3").host_key_line.split(" ", 1)[1]
    known = tmp_path / "known_hosts"
    known.write_text(f"{key_name(bastion)} {someone_else}\n{middle.host_key_line}\n{target.host_key_line}\n")
    inv = fleet.inventory(
        tmp_path / "hosts.yaml", names=["ssh1"], known_hosts=known, ssh_config=two_jump_hosts(fleet, tmp_path)
    )
    code, _, err = run_cli(
        capsys,
        "run",
        write_sweep(tmp_path / "s.yaml", backends=("torch-bf16",)),
        "-i",
        inv,
        "--runs-dir",
        tmp_path / "runs",
        "--accept-new",
    )
    assert code == 1
    assert f"ssh1: auth-failed: host key for jump host {key_name(bastion)} CHANGED" in err
