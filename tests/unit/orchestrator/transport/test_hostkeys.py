"""known_hosts is parsed once per process and looked up per host: the answers must be paramiko's own."""

from __future__ import annotations

import os

import paramiko
import pytest

from orchestrator.transport import TransportError
from orchestrator.transport.hostkeys import AcceptNewPolicy, KnownHosts, load_known_hosts


@pytest.fixture(scope="module")
def keys():
    return [paramiko.ECDSAKey.generate() for _ in range(3)]


def line(names: str, key) -> str:
    return f"{names} {key.get_name()} {key.get_base64()}\n"


def test_lookups_match_paramiko(tmp_path, keys):
    a, b, c = keys
    path = tmp_path / "known_hosts"
    path.write_text(
        "# a comment\n\n"
        + line("[127.0.0.1]:2201", a)
        + line("gpu1,gpu1.example", b)
        + line(paramiko.HostKeys.hash_host("[10.0.0.7]:2222"), c)
        + "gpu9 ssh-unknown-type AAAA\n"  # a key type paramiko cannot use: skipped, as paramiko does
        + line("[127.0.0.1]:2201", b)  # a second key of the same type: the first one counts
    )
    theirs = paramiko.HostKeys(str(path))
    ours = KnownHosts(str(path))
    for name in ("[127.0.0.1]:2201", "gpu1", "gpu1.example", "[10.0.0.7]:2222", "gpu2", "127.0.0.1"):
        expected = {t: k.asbytes() for t, k in (theirs.lookup(name) or {}).items()}
        assert {t: k.asbytes() for t, k in ours.keys_for(name).items()} == expected, name
    assert ours.keys_for("[10.0.0.7]:2222")["ecdsa-sha2-nistp256"].asbytes() == c.asbytes()


def test_client_gets_only_its_own_host(tmp_path, keys):
    a, b, _ = keys
    path = tmp_path / "known_hosts"
    path.write_text(line("[127.0.0.1]:2201", a) + line("[127.0.0.1]:2202", b))
    client = paramiko.SSHClient()
    load_known_hosts(client, str(path), "[127.0.0.1]:2202")
    got = client.get_host_keys()
    assert got.lookup("[127.0.0.1]:2201") is None
    assert got.lookup("[127.0.0.1]:2202")["ecdsa-sha2-nistp256"].asbytes() == b.asbytes()


def test_parsed_once_and_again_after_a_change(tmp_path, keys):
    a, b, _ = keys
    path = tmp_path / "known_hosts"
    path.write_text(line("[127.0.0.1]:2201", a))
    first = KnownHosts.of(str(path))
    assert KnownHosts.of(str(path)) is first  # unchanged: the same parse
    with open(path, "a") as f:  # what accept-new does when it records a key
        f.write(line("[127.0.0.1]:2202", b))
    again = KnownHosts.of(str(path))
    assert again is not first and again.keys_for("[127.0.0.1]:2202")


def test_missing_and_unreadable_files(tmp_path):
    client = paramiko.SSHClient()
    load_known_hosts(client, str(tmp_path / "nope"), "[127.0.0.1]:2201")  # no file: nothing is known
    assert len(client.get_host_keys()) == 0
    bad = tmp_path / "bad_known_hosts"
    bad.write_text("gpu1 ssh-ed25519 not*base64\n")
    with pytest.raises(TransportError, match="cannot read known_hosts file"):
        load_known_hosts(client, str(bad), "gpu1")
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked"
        locked.write_text("")
        locked.chmod(0)
        with pytest.raises(TransportError, match="cannot read known_hosts file"):
            load_known_hosts(client, str(locked), "gpu1")


def test_accept_new_records_an_unknown_key_once_when_two_connections_meet_it(tmp_path, keys):
    """Two hosts behind one jump host meet its unknown key at the same time: one line, not two."""
    a = keys[0]
    path = tmp_path / "known_hosts"
    path.write_text("")
    for _ in range(2):  # each client loaded the file before the other one recorded the key
        client = paramiko.SSHClient()
        AcceptNewPolicy(str(path)).missing_host_key(client, "[127.0.0.1]:2201", a)
        assert client.get_host_keys().lookup("[127.0.0.1]:2201")["ecdsa-sha2-nistp256"] == a
    assert path.read_text() == line("[127.0.0.1]:2201", a)


@pytest.mark.parametrize("presented", ["same type", "other type"])
def test_accept_new_never_records_a_key_for_a_name_known_with_another(tmp_path, keys, presented):
    """A known name showing a key it is not known by is a changed key, whatever the key's type (paramiko
    asks the policy when only the type differs)."""
    a, b, _ = keys
    path = tmp_path / "known_hosts"
    path.write_text(line("[127.0.0.1]:2201", a))
    before = path.read_text()
    shown = b if presented == "same type" else paramiko.Ed25519Key.from_private_key(ed25519_private_key())
    with pytest.raises(paramiko.BadHostKeyException) as refused:
        AcceptNewPolicy(str(path)).missing_host_key(paramiko.SSHClient(), "[127.0.0.1]:2201", shown)
    assert refused.value.hostname == "[127.0.0.1]:2201" and refused.value.expected_key == a
    assert path.read_text() == before


def ed25519_private_key():
    """An Ed25519 key (paramiko cannot generate one) as an OpenSSH private key file."""
    import io

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    return io.StringIO(pem.decode())
