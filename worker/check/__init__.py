"""Whether a result is one: verify (the oracle's verdict), nvfp4 (the reference NVFP4 the FP4 oracle is),
integrity (the checks that catch kernels that cheat), physics (faster than the GPU can go)."""
