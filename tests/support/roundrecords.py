"""Records of a case timed in rounds, as the worker writes them: for the tests of when rounds stop and of
the pairing of contenders."""

from __future__ import annotations

from worker.contract.schema import CaseRecord, CaseSpec, RoundStats, Stats, TimingOptions


def rounds_record(
    rounds: list[tuple[float, float | None, str | None]],
    opts: TimingOptions,
    backend="torch-bf16",
    samples: list[list[float]] | None = None,
) -> CaseRecord:
    """A case's record of these rounds, each (median µs, SM clock read in the stream, pair id), with
    `samples` per round (else ten of its median)."""
    spec = CaseSpec(backend=backend, m=64, n=256, k=512, timing=opts)
    per_round = samples or [[us] * 10 for us, _, _ in rounds]
    stats = Stats(
        method="cuda-graph",
        median_us=rounds[0][0],
        p10_us=1,
        p90_us=1,
        mean_us=1,
        stdev_us=0,
        n=sum(map(len, per_round)),
        rel_ci=0.0,
        calls_per_sample=8,
        l2="cold",
        samples_us=[s for r in per_round for s in r],
        rounds=[
            RoundStats(
                median_us=us, n=len(s), rel_ci=0.0, sm_clock_stream_mhz=mhz, pair_id=pid, paired_us=s if pid else None
            )
            for (us, mhz, pid), s in zip(rounds, per_round)
        ],
    )
    return CaseRecord(
        case_id=spec.case_id, case=spec, status="ok", started_at="t", duration_s=0.0, timing=stats, complete=False
    )
