#!/usr/bin/env bash
# Issue 21's verification call (device tool, carry .whl .debs .carry): the priming pass (the first
# case of a process), the order run repeated so process spread and order separate, and the JIT cache
# across shell and SSH with the worker's one-spelling CUDA_HOME.
set -u
. benchmarks/device_setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== first case"; timeout 100 python3 benchmarks/first_case.py --procs 3 --conditions plain | tee "$OUT/first/first.md"
echo "== order"; timeout 330 python3 benchmarks/order.py --repeat 3 --out "$OUT/order" | tail -42
echo "== jit cache"; FLEETBENCH_SSHD=$P/usr/sbin/sshd FLEETBENCH_SSH_KEYGEN=$P/usr/bin/ssh-keygen \
  timeout 120 python3 benchmarks/jit_cache.py --out "$OUT/jit" --env PYTHONPATH=/tmp/site 2>&1 | tail -9
