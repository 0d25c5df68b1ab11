"""The host/controller contract (worker/contract/protocol.py)."""

from __future__ import annotations

from worker.contract.schema import CaseSpec


def test_the_supervisor_names_a_case_of_its_params_file_as_the_schema_does():
    from worker.contract.protocol import case_id_of_raw
    from worker.contract.schema import MoeSpec

    cases = [
        CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144),
        CaseSpec(backend="mm", m=64, n=768, k=6144, label="x", seed=3, out_dtype="float16", kernel_sha256="a" * 64),
        CaseSpec(
            workload="moe",
            backend="moe-loop-bf16",
            m=24,
            n=64,
            k=128,
            moe=MoeSpec(experts=4, top_k=2, routing="zipf", skew=1.2, counts=[10, 0, 20, 18]),
        ),
    ]
    for case in cases:
        assert case_id_of_raw(case.model_dump(mode="json")) == case.case_id
