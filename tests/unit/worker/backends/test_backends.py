"""Whether a backend's library imports here (worker/backends/__init__.py)."""

from __future__ import annotations


def test_a_missing_library_is_unavailable_with_its_import_error():
    from worker.backends import availability_problem
    from worker.contract.catalog import BackendSpec

    spec = BackendSpec(name="x", module="torch_gemm", family="bf16", import_name="no_such_module_fleetbench")
    assert availability_problem(spec) == "no_such_module_fleetbench is not installed"
