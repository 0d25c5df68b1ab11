#!/usr/bin/env bash
# One device call (H200) for issue 21: the first-case conditions with the fixed worker, FlashInfer's
# JIT cache across shell and SSH (first, while the cache is empty), forward / reversed / shuffled
# sweeps, and the fidelity table against the independent reference, twice.
# Carry: .whl (pydantic, paramiko, fabric and their needs, for Python 3.12), .debs (OpenSSH), .carry
# (fi.tar.xz: the flashinfer-python 0.7.2.post1 wheel's files, xz-compressed to fit a call).
set -u
. benchmarks/device_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "PATH=$PATH"; command -v nvcc
echo "== jit cache"; FLEETBENCH_SSHD=$P/usr/sbin/sshd FLEETBENCH_SSH_KEYGEN=$P/usr/bin/ssh-keygen \
  timeout 240 python3 benchmarks/jit_cache.py --out "$OUT/jit" --env PYTHONPATH=/tmp/site 2>&1 | tail -12
# What supervise gives the worker, for the benchmarks below that start the worker without it.
CH=$(python3 -c "import os; from worker.buildenv import stable_build_env; print(stable_build_env(dict(os.environ)).get('CUDA_HOME', ''))")
[ -n "$CH" ] && export CUDA_HOME=$CH; echo "CUDA_HOME=${CUDA_HOME:-}"
echo "== first case"; timeout 120 python3 benchmarks/first_case.py --procs 3 --conditions plain,ref-first | tee "$OUT/first/first.md"
echo "== order"; timeout 240 python3 benchmarks/order.py --repeat "${ORDER_REPEAT:-1}" --out "$OUT/order" | tail -45
echo "== fidelity"; timeout 240 python3 benchmarks/fidelity.py --repeat 2 --out "$OUT/fid" 2>&1 | grep -v '^{' | tail -90
echo "== user kernels (issue 16)"; mkdir -p "$OUT/byo"
printf 'hosts:\n  - {name: h200, transport: local, python: %s, workdir: /tmp/fbw}\n' "$(command -v python3)" > /tmp/h200.yaml
timeout 200 python3 -m orchestrator.cli run examples/byo_kernels.yaml -i /tmp/h200.yaml --runs-dir /tmp/byoruns --format md > "$OUT/byo/byo.md" 2>&1; echo "exit $?"
cat "$OUT/byo/byo.md" | tail -30
