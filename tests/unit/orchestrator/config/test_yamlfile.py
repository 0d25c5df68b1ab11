"""Strict YAML (orchestrator/config/yamlfile.py): merge keys."""

from __future__ import annotations

from support.files import write

from orchestrator.config.inventory import load_inventory


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
