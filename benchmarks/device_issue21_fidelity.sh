#!/usr/bin/env bash
# Issue 21's fidelity call after settling (device tool, carry .whl .debs .carry): the worker against the
# independent plain replay, now also run back to back before its timed replays, twice in one process.
set -u
. benchmarks/device_setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,power.limit,temperature.gpu --format=csv,noheader
timeout 400 python3 benchmarks/fidelity.py --repeat 2 --no-sweep --out "$OUT/fid" | tail -8
rm -f "$OUT"/fid/params* "$OUT"/fid/results*
