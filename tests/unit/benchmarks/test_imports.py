"""Every `from benchmarks... import name` in benchmarks/ names something that exists, including the imports
inside functions, which a benchmark only reaches on the GPU after minutes of runs (tradeoff.py's reference
import was broken that way since the scripts moved into folders, and a lease's step died at its end)."""

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _benchmark_imports():
    found = []
    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:  # relative: resolved against the file's own package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "benchmarks":
                continue
            for alias in node.names:
                found.append(
                    pytest.param(module, alias.name, id=f"{path.relative_to(REPO)}:{node.lineno}:{alias.name}")
                )
    return found


@pytest.mark.parametrize("module, name", _benchmark_imports())
def test_a_benchmark_imports_only_what_exists(module, name):
    imported = importlib.import_module(module)
    if not hasattr(imported, name):  # a submodule: `from benchmarks.cost import sweep_cost`
        importlib.import_module(f"{module}.{name}")
