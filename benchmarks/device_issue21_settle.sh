#!/usr/bin/env bash
# Issue 21's settling call (device tool, carry .whl .debs .carry): why a large GEMM moves with the case
# before it (benchmarks/neighbour.py: per-call time, SM clock and power after a light and a heavy
# predecessor), then the bf16 order run without settling and with the default settling, 3 fresh
# processes per order each. Usage: bash benchmarks/device_issue21_settle.sh [bf16|full]
set -u
. benchmarks/device_setup.sh >/dev/null 2>&1
mkdir -p "$OUT/nb" "$OUT/o0" "$OUT/o1" "$OUT/of" "$OUT/fid"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
if [ "${1:-bf16}" = bf16 ]; then
  echo "== neighbour"; timeout 120 python3 benchmarks/neighbour.py --out "$OUT/nb" 2>&1 | tail -30
  echo "== order bf16, settle off"; timeout 200 python3 benchmarks/order.py --backends torch-bf16 --repeat 3 \
    --settle-ms 0 --out "$OUT/o0" | tail -16
  echo "== order bf16, settle default"; timeout 230 python3 benchmarks/order.py --backends torch-bf16 --repeat 3 \
    --out "$OUT/o1" | tail -16
else
  echo "== order, three backends"; timeout 400 python3 benchmarks/order.py --repeat 3 --out "$OUT/of" | tail -40
  echo "== fidelity"; timeout 180 python3 benchmarks/fidelity.py --repeat 2 --out "$OUT/fid" | tail -60
fi
rm -f "$OUT"/*/params* "$OUT"/*/results*
