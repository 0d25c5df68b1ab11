"""The values the worker's timing is tuned by that belong to the GPU it runs on, as data.

Each follows from how a GPU's power controller and clocks behave under load, measured on the H200
(the only GPU measured so far; the figures, each with its command, are in benchmarks/RESULTS.md under
the section named beside each field). Another GPU may want its own: a Tuning is handed to the Timer
(worker/measure/timing.py) that a process times with, and the sweep, the CUPTI trace and crosscheck read
its values from there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    """The per-GPU values of the worker's timing (and of crosscheck's peers), with the H200's as defaults."""

    # A case whose call uses at least this share of the calibrated tensor peak meets the GPU's power
    # limit, so it settles at least `settle_ms` (and so does the case after it); a lighter case settles
    # `light_settle_ms`. RESULTS.md: "Where a seed sweep's time goes, and settling as long as the GPU
    # state needs (issue 29)", how long each case must settle.
    heavy_load: float = 0.35
    light_settle_ms: float = 10.0
    # `timing.state: burst` samples for at most this much GPU time, before the power controller acts on
    # a heavy load. RESULTS.md: the same section (the burst clock's window), and "Burst and settled".
    burst_gpu_ms: float = 40.0
    # What a light GEMM costs beyond its math (launch, prologue, epilogue), added to its math at the
    # calibrated peak to rank round 1 by load before any case is measured (worker/sweep/runner.py
    # round_order): a rank, not a measurement. RESULTS.md: "Health check after settling, and speed of
    # light: the seed sweep" (the decode shape against its speed of light).
    expected_fixed_us: float = 8.0
    # Cycles a head-to-head timing samples per round after it settles (worker/sweep/headtohead.py).
    # RESULTS.md: "Seeing 2%: head-to-head, rounds until sure, the clock in the stream (issue 40)".
    paired_cycles: int = 12
    # Replays inside a CUPTI trace before its samples, discarded (worker/measure/cupti.py): starting the
    # profiler idles the GPU (a process's first start initialises CUPTI), and these bring its clock back
    # to the state the samples are read in. RESULTS.md: "Where a seed sweep's time goes, and settling as
    # long as the GPU state needs (issue 29)" (how soon a case reads its settled value), and "fleetbench
    # against FlashInfer's and Triton's timers (issue 30)" (CUPTI kernel time beside graph replay).
    cupti_lead_in_ms: float = 50.0
    # `fleetbench crosscheck` (worker/tools/crosscheck.py): how long the GPU idles before a peer runs in
    # its default clock state, as a user's script reaches its timer after setting up, longer than the GPU's
    # clock takes to follow its load (RESULTS.md: the issue-29 section above); and the peers' own settings
    # in the clock step, so that what each times starts after the power controller acted: FlashInfer's
    # untimed replays after its capture (dry_run_time_ms), the GPU time of each of Triton's replays (its
    # rep, scaled). RESULTS.md: "fleetbench against FlashInfer's and Triton's timers (issue 30)".
    peer_idle_s: float = 0.2
    peer_dry_run_ms: int = 200
    triton_replay_ms: int = 100


TUNING = Tuning()  # the defaults: what every sweep runs with today
