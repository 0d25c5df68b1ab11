set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
tar -xJf .carry/fi.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site:$PWD
P=/tmp/ossh; mkdir -p $P; for f in .debs/*.deb; do dpkg -x "$f" $P; done
export LD_LIBRARY_PATH=$P/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu
id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
mkdir -p /run/sshd "$OUT/first" "$OUT/jit" "$OUT/order" "$OUT/fid"
echo "CUDA_HOME=${CUDA_HOME:-unset} CUDA_PATH=${CUDA_PATH:-unset}"; ls -la /usr/local/ | grep cuda
echo "== first case"; timeout 100 python3 benchmarks/first_case.py --procs 3 --conditions plain,ref-first | tee "$OUT/first/first.md"
echo "== order"; timeout 150 python3 benchmarks/order.py --out "$OUT/order" | tail -42
echo "== fidelity"; timeout 150 python3 benchmarks/fidelity.py --repeat 2 --no-sweep --backends torch-bf16,torch-fp8 --out "$OUT/fid" 2>&1 | grep -v '^{' | tail -3
echo "== jit cache"; FLEETBENCH_SSHD=$P/usr/sbin/sshd FLEETBENCH_SSH_KEYGEN=$P/usr/bin/ssh-keygen \
  timeout 200 python3 benchmarks/jit_cache.py --out "$OUT/jit" --env PYTHONPATH=/tmp/site 2>&1 | tail -9
