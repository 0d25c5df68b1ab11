"""This GPU's measured peaks (worker/measure/calibrate.py, what speed of light is computed from), twice, with the
host's cache in a fresh folder: the first call measures bf16, fp8 and the copy bandwidth, the second must
read them back from the cache (says `cached`, announces nothing, same peaks). An FP4 family that cannot
run here (compute capability below 10.0) is a problem that is never announced.

    python -m benchmarks.fidelity.calibration [--out FILE.json]     # needs torch and a CUDA GPU

Prints one JSON line per call; --out writes both calls as one document (each call's `calibration` is the
object a sweep's facts record holds). Exit 1 when the second call measured again or its peaks differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from worker.host.env import detect_device
    from worker.measure.calibrate import calibrate

    try:
        device = detect_device("cuda")
    except RuntimeError as exc:  # no GPU here: nothing to calibrate
        print(f"calibration.py: {exc}", file=sys.stderr)
        return 2
    cache = Path(tempfile.mkdtemp()) / "calibration.json"
    calls = []
    for i in (1, 2):
        told: list = []
        cal = calibrate(device, {"bf16", "fp8", "fp4"}, "cached", cache=cache, on_measure=told.append)
        calls.append(
            {
                "call": i,
                "gpu": device.name,
                "cc": device.cc_text,
                "announced": told,
                "calibration": cal.model_dump(mode="json"),
            }
        )
        print(json.dumps(calls[-1]), flush=True)
    first, second = (c["calibration"] for c in calls)
    same = first["tflops"] == second["tflops"] and first["tb_s"] == second["tb_s"]
    print(
        f"second call: announced {calls[1]['announced'] or 'nothing'}, cached={second['cached']}, "
        f"peaks identical to the first: {same}"
    )
    if args.out:
        args.out.write_text(json.dumps({"calls": calls}, indent=1) + "\n")
    return 0 if second["cached"] and not calls[1]["announced"] and same else 1


if __name__ == "__main__":
    sys.exit(main())
