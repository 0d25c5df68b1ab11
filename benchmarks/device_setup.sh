# Sourced by the device scripts (H200 via the device tool): the carried wheels, FlashInfer and OpenSSH
# unpacked, PYTHONPATH and the sshd privilege-separation user set up.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
tar -xJf .carry/fi.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site:$PWD
P=/tmp/ossh; mkdir -p $P; for f in .debs/*.deb; do dpkg -x "$f" $P; done
export LD_LIBRARY_PATH=$P/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu
id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
mkdir -p /run/sshd "$OUT/first" "$OUT/jit" "$OUT/order" "$OUT/fid"
