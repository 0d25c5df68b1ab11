#!/usr/bin/env bash
# The fan-out benchmark on the device machine (16 cores): every tool pinned to 2 CPUs, every host to the
# rest, i.e. a 2-core controller next to hosts with CPUs of their own. Carried: .whl (pydantic, paramiko,
# fabric, ...), .carry/whl312 (rich, jinja2, pyyaml, ansible-core 2.19.14, ...), .debs (OpenSSH).
#   SIZES=8,32 REPS=3 bash benchmarks/device_fanout.sh        # results under $OUT
# .whl and .debs as for device_session.sh; .carry/whl312 is filled here with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#     -d .carry/whl312 rich pygments markdown-it-py mdurl jinja2 markupsafe pyyaml ansible-core==2.19.14 \
#     resolvelib packaging typing_extensions
set -u
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl .carry/whl312/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
# Bytecode, as a plain `pip install` leaves it: without it every cold start of every tool compiles its
# libraries again whenever PYTHONDONTWRITEBYTECODE is set.
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-<unset>}; compiling /tmp/site"
python3 -m compileall -q -j 0 /tmp/site >/dev/null
echo "cpus: $(nproc) online, affinity $(python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))')"
# Pinning must really separate: two burners on one CPU share it, a third on another CPU does not.
python3 - <<'PY'
import os, time, multiprocessing as mp
def burn(cpu, q):
    os.sched_setaffinity(0, {cpu}); t = time.time(); n = 0
    while time.time() - t < 1.0: n += 1
    q.put((cpu, n))
q = mp.Queue(); ps = [mp.Process(target=burn, args=(c, q)) for c in (2, 2, 3)]
[p.start() for p in ps]; [p.join() for p in ps]
print("pin check (cpu, loops in 1 s; the two on cpu 2 should get ~half of cpu 3's):", sorted(q.get() for _ in ps))
PY
P=/tmp/ossh; mkdir -p $P; for f in .debs/*.deb; do dpkg -x "$f" $P; done
export LD_LIBRARY_PATH=$P/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu PATH=$P/usr/bin:$PATH  # ssh, for Ansible
id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
mkdir -p /run/sshd
# The hosts' venv: the device's python3 plus the pinned pydantic (what provision --profile minimal makes).
HV=/tmp/fleetbench-fanout/host-venv
if [ ! -x $HV/bin/python ]; then
  python3 -m venv --without-pip $HV && \
  python3 -m pip install -q --no-index --no-deps --target "$($HV/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    .whl/pydantic-*.whl .whl/pydantic_core-*.whl .whl/annotated_types-*.whl .whl/typing_inspection-*.whl \
    .carry/whl312/typing_extensions-*.whl || exit 1
fi
$HV/bin/python -c 'import pydantic; print("host venv: pydantic", pydantic.VERSION)' || exit 1
chmod -R a+rX /tmp/fleetbench-fanout /tmp/site
FLEETBENCH_SSHD=$P/usr/sbin/sshd FLEETBENCH_SSH_KEYGEN=$P/usr/bin/ssh-keygen \
  python3 benchmarks/fanout.py --sizes "${SIZES:-8,32,64}" --reps "${REPS:-3}" --ansible /tmp/site/bin/ansible-playbook \
  --host-python $HV/bin/python --controller-cpus 0,1 --host-cpus 2-15 --out "$OUT/fanout-pinned.md" 2>&1 | tee "$OUT/fanout.log"
