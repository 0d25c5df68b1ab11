"""The records and specs of a sweep (worker/contract/schema.py): a case's id is what is measured."""

from __future__ import annotations

from worker.contract.schema import IDENTITY_FIELDS, CaseSpec, TimingOptions


def test_case_id_is_what_is_measured_never_how_it_is_timed():
    a = CaseSpec(backend="torch-bf16", m=16, n=64, k=128, label="x")
    timed_otherwise = CaseSpec(
        backend="torch-bf16",
        m=16,
        n=64,
        k=128,
        label="x",
        timing=TimingOptions(l2="hot", budget_s=0.35, min_samples=50, mode="events"),
    )
    assert a.case_id == timed_otherwise.case_id
    for change in (
        {"label": "y"},
        {"backend": "torch-fp8"},
        {"m": 32},
        {"n": 32},
        {"k": 64},
        {"out_dtype": "float16"},
        {"seed": 1},
    ):
        assert a.model_copy(update=change).case_id != a.case_id, change
    assert a.case_id == CaseSpec.model_validate_json(a.model_dump_json()).case_id
    # A new timing option (a field the schema gains later) cannot change any id: ids hash identity only.
    assert set(IDENTITY_FIELDS).isdisjoint(TimingOptions.model_fields)
