"""Host keys: known_hosts parsed once per process, looked up by name, and OpenSSH's accept-new policy.

A known host key is always verified; an unknown one is refused unless the caller chose accept-new, which
records it; a changed one is always refused (never silently auto-added).
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from .base import TransportError


def load_known_hosts(client, path: str, name: str) -> None:
    """Give the client what known_hosts says about `name` (its known_hosts spelling), and nothing else."""
    try:
        known = KnownHosts.of(path)
    except Exception as exc:
        raise TransportError("auth-failed", f"cannot read known_hosts file {path}: {exc}") from None
    if known is not None:
        for keytype, key in known.keys_for(name).items():
            client.get_host_keys().add(name, keytype, key)


class KnownHosts:
    """A known_hosts file, parsed once per process (and again when it changes), looked up by name.

    paramiko's SSHClient parses the whole file in every client, and its parser checks each line against
    all those before it: quadratic in the file's length, once per connection. Lookups match paramiko's: exact
    names and hashed (|1|) names, and where a name has several keys of one type, the first one counts.
    """

    _cache: dict[str, tuple[tuple[int, int], "KnownHosts"]] = {}

    def __init__(self, path: str):
        from paramiko import SSHException
        from paramiko.hostkeys import HostKeyEntry

        self.plain: dict[str, list] = {}  # name -> [(line number, key)]
        self.hashed: list = []  # [(line number, |1|salt|hash, key)]
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    entry = HostKeyEntry.from_line(line, lineno)
                except SSHException:
                    continue  # a key type paramiko cannot use, as paramiko's own loader does
                for h in entry.hostnames if entry is not None else ():
                    if h.startswith("|1|"):
                        self.hashed.append((lineno, h, entry.key))
                    else:
                        self.plain.setdefault(h, []).append((lineno, entry.key))

    @classmethod
    def of(cls, path: str) -> Optional["KnownHosts"]:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        with KNOWN_HOSTS_LOCK:  # one thread parses; the others wait for it and share the result
            cached = cls._cache.get(path)
            if cached is None or cached[0] != stamp:
                cached = cls._cache[path] = (stamp, cls(path))
            return cached[1]

    def keys_for(self, name: str) -> dict:
        from paramiko import HostKeys
        from paramiko.util import constant_time_bytes_eq

        found = list(self.plain.get(name, ()))
        found += [
            (lineno, key) for lineno, h, key in self.hashed if constant_time_bytes_eq(HostKeys.hash_host(name, h), h)
        ]
        keys: dict = {}
        for _, key in sorted(found, key=lambda t: t[0]):
            keys.setdefault(key.get_name(), key)
        return keys


class AcceptNewPolicy:
    """OpenSSH's StrictHostKeyChecking=accept-new: record an unknown key, never replace a known one.

    paramiko asks this policy also when the name is known with a key of another type only; that is a
    changed key, refused as such. Connections through one jump host ask at the same time: the file is
    read again under the lock, so a key recorded meanwhile is written once, and a different one is refused.
    """

    def __init__(self, known_hosts: str):
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key) -> None:
        from paramiko import BadHostKeyException

        with KNOWN_HOSTS_LOCK:
            known = KnownHosts.of(self.known_hosts)
            recorded = known.keys_for(hostname) if known is not None else {}
            if recorded.get(key.get_name()) != key:
                if recorded:
                    raise BadHostKeyException(hostname, key, next(iter(recorded.values())))
                os.makedirs(os.path.dirname(os.path.abspath(self.known_hosts)), exist_ok=True)
                with open(self.known_hosts, "a", encoding="utf-8") as f:
                    f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


KNOWN_HOSTS_LOCK = threading.RLock()  # reentrant: the policy reads the file (KnownHosts.of) while holding it


def host_key_name(target: str) -> str:
    """known_hosts spelling of a resolved `host:port`."""
    hostname, port = target.rsplit(":", 1)
    return hostname if port == "22" else f"[{hostname}]:{port}"
