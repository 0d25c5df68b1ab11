"""The host a job runs on: env (its facts), health (NVML around a measurement), clocks (`clocks: lock`),
gpulock (one sweep per GPU), buildenv (FlashInfer's JIT environment), hostcache (its small state files)."""
