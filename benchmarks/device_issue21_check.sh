#!/usr/bin/env bash
# The follow-up device call for issue 21 (after the side-stream fix): first case, order, fidelity
# (bf16 / fp8), then the JIT cache with the same environment twice in a row. Carry as device_issue21.sh.
set -u
. benchmarks/device_setup.sh
echo "CUDA_HOME=${CUDA_HOME:-unset} CUDA_PATH=${CUDA_PATH:-unset}"; ls -la /usr/local/ | grep cuda
echo "== first case"; timeout 100 python3 benchmarks/first_case.py --procs 3 --conditions plain,ref-first | tee "$OUT/first/first.md"
echo "== order"; timeout 150 python3 benchmarks/order.py --out "$OUT/order" | tail -42
echo "== fidelity"; timeout 150 python3 benchmarks/fidelity.py --repeat 2 --no-sweep --backends torch-bf16,torch-fp8 --out "$OUT/fid" 2>&1 | grep -v '^{' | tail -3
echo "== jit cache"; FLEETBENCH_SSHD=$P/usr/sbin/sshd FLEETBENCH_SSH_KEYGEN=$P/usr/bin/ssh-keygen \
  timeout 200 python3 benchmarks/jit_cache.py --out "$OUT/jit" --env PYTHONPATH=/tmp/site 2>&1 | tail -9
