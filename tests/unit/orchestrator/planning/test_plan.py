"""The plan (orchestrator/planning/plan.py): jobs per GPU, cases sharded or repeated."""

from __future__ import annotations

from support.files import write

from orchestrator.config.inventory import load_inventory
from orchestrator.config.sweep import Sweep
from orchestrator.planning.plan import build_plan


def test_plan_shards_or_repeats_cases_across_gpus(tmp_path):
    inv = load_inventory(
        write(
            tmp_path / "hosts.yaml",
            """
hosts:
  - {name: big, hostname: h, gpus: [0, 1]}
  - {name: one, hostname: h2}
""",
        )
    )
    sweep = Sweep(name="x", backends=["torch-bf16", "reference-nvfp4"], shapes=[{"m": [16, 32, 64], "n": 64, "k": 64}])
    shard = build_plan(list(inv.hosts), sweep, "r", "shard")
    assert [j.slot for j in shard.jobs] == ["big.gpu0", "big.gpu1", "one"]
    assert len(shard.jobs[0].cases) + len(shard.jobs[1].cases) == 6 and len(shard.jobs[2].cases) == 6
    assert shard.jobs[1].env == {"CUDA_VISIBLE_DEVICES": "1"}
    every = build_plan(list(inv.hosts), sweep, "r", "all")
    assert [len(j.cases) for j in every.jobs] == [6, 6, 6]
