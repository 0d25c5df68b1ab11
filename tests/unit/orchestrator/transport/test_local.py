"""The local transport (orchestrator/transport/local.py)."""

from __future__ import annotations

import sys

import pytest


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
