"""Sweep files (orchestrator/config/sweep.py): the shipped ones load; presets, MoE batches and backend globs
expand into cases."""

from __future__ import annotations

import sys

from support.files import REPO

from orchestrator.config.inventory import load_inventory
from orchestrator.config.sweep import Sweep, load_sweep
from worker.contract.catalog import CATALOG


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
