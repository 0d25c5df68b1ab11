"""How long a case takes: timing (graph replay, settling, samples), interleave (contenders in the same
breath), streamclock (the SM clock read in the stream), cupti (kernel time from CUPTI's trace), calibrate
(this GPU's peaks), tuning (the per-GPU values these hold, as data)."""
