"""Defaults of the limits, in one place: the sweep, the plan, the CLI and a stored manifest that lacks
them take them from here (seconds). Stdlib only: the CLI imports it before anything else."""

STALL_TIMEOUT_S = 60.0  # a job silent this long (not even a heartbeat) is stalled
LOCK_TIMEOUT_S = 600.0  # a job waits this long for its GPU (or CPU) while another sweep holds it
CASE_TIMEOUT_S = 300.0  # one round of one case, then it is stopped as hung
BUILD_TIMEOUT_S = 1800.0  # the same while a compiler runs under the worker (a first JIT build)
