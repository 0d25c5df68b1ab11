"""The inventory (orchestrator/config/inventory.py): defaults, and hosts selected by name, glob, label and exclusion."""

from __future__ import annotations

import pytest
from support.files import write

from orchestrator.config.inventory import load_inventory, select_hosts
from orchestrator.errors import InputError


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
