#!/usr/bin/env bash
# What one device call runs (device tool, H200): the fidelity benchmark, then a fleet of sshd hosts on
# the GPU. Expects .whl (pydantic, paramiko, fabric, ...) and .debs (OpenSSH) carried, and FlashInfer
# already installed into /tmp/site by the previous call on the same warm machine.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
mkdir -p "$OUT/fid" "$OUT/fleet"
[ -n "${SKIP_FIDELITY:-}" ] || python3 benchmarks/fidelity.py --out "$OUT/fid" 2>&1 | grep -v '^{' | tail -n 60
P=/tmp/ossh; mkdir -p $P; for f in .debs/*.deb; do dpkg -x "$f" $P; done
export LD_LIBRARY_PATH=$P/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu
id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
mkdir -p /run/sshd
FLEETBENCH_SSHD=$P/usr/sbin/sshd FLEETBENCH_SSH_KEYGEN=$P/usr/bin/ssh-keygen \
  python3 benchmarks/gpu_fleet.py --hosts "${FLEET_HOSTS:-2}" --gpus 1 --sweep sweeps/glm5_tp8.yaml \
  --out "$OUT/fleet" --env PYTHONPATH=/tmp/site 2>&1 | tail -n 80
