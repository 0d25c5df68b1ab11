"""Kernels that cheat cannot win (issue 31): each trick of tests/kernels/cheats.py is caught with its
reason, on the CPU, and the honest backends of the same sweep are never flagged."""
from __future__ import annotations

from pathlib import Path

import pytest

from cli_output import cli_json
from conftest import REPO, kernel_sweep
from orchestrator.cli import main

CHEATS = (REPO / "tests" / "kernels" / "cheats.py").read_text()
HONEST = '''import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    bt = b.t()
    out = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype)
    return lambda: torch.mm(a, bt, out=out)   # the same output buffer every call, filled anew
'''


@pytest.mark.parametrize("cheat, reason", [
    ("ahead", "integrity: its call returned a result it did not compute"),
    ("by-pointer", "integrity: its call returned a result it did not compute"),
    ("writes-inputs", "integrity: it wrote into its inputs"),
])
def test_a_cheating_kernel_is_caught_with_its_reason_and_never_timed(tmp_path, capsys, cheat, reason):
    source = CHEATS.replace('CHEAT = "ahead"', f'CHEAT = "{cheat}"')
    sweep = kernel_sweep(tmp_path, {"cheat": source, "honest": HONEST}, builtins=("torch-bf16", "reference-nvfp4"))
    code = main(["run", str(sweep), "--runs-dir", str(tmp_path / "runs"), "--format", "json"])
    rows = {r["backend"]: r for r in cli_json(capsys.readouterr().out)}
    assert code == 1
    assert rows["cheat"]["status"] == "failed" and reason in rows["cheat"]["reason"], rows["cheat"]["reason"]
    assert rows["cheat"]["median_us"] in (None, "")  # a result it did not compute is never timed
    for honest in ("torch-bf16", "reference-nvfp4", "honest"):
        assert rows[honest]["status"] == "ok" and rows[honest]["verdict"] == "pass", rows[honest]
