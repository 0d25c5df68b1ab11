"""The worker bundle (orchestrator/planning/bundle.py)."""

from __future__ import annotations

from orchestrator.planning.bundle import build_worker_bundle


def test_worker_bundle_is_deterministic():
    a, b = build_worker_bundle(), build_worker_bundle()
    assert a.sha256 == b.sha256 and a.data == b.data and a.files >= 10
