"""The commands over a stored run's cases: profile (a case under ncu), crosscheck (a case beside
FlashInfer's and Triton's timers), caseloop (the loop both run, holding the GPU as a sweep does)."""
