"""How long a case takes: timing (graph replay, settling, samples; the process's Timer), interleave
(contenders in the same breath), streamclock (the SM clock read in the stream), cupti (kernel time from
CUPTI's trace), calibrate (this GPU's peaks), tuning (the per-GPU values the timing, the sweep and
crosscheck use, as data)."""
