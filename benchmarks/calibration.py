"""Issue 27 on a GPU: the calibration of a sweep that names bf16, fp8 and fp4 families, twice, with the
host's cache in a fresh folder. Prints what each call announced, whether it says cached, and its peaks;
on a Hopper, fp4 must be a problem that is never announced and the second call must measure nothing.

    python benchmarks/device_issue27_calibration.py   (with torch + pydantic; on the device: /opt/torch/.venv)
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.calibrate import calibrate  # noqa: E402
from worker.env import detect_device  # noqa: E402


def main() -> int:
    device = detect_device("cuda")
    cache = Path(tempfile.mkdtemp()) / "calibration.json"
    calls = []
    for i in (1, 2):
        told: list = []
        cal = calibrate(device, {"bf16", "fp8", "fp4"}, "cached", cache=cache, on_measure=told.append)
        calls.append({"call": i, "gpu": device.name, "cc": device.cc_text, "announced": told, "cached": cal.cached,
                      "measured_at": cal.measured_at, "tflops": cal.tflops, "tb_s": cal.tb_s, "problems": cal.problems})
        print(json.dumps(calls[-1]), flush=True)
    first, second = calls
    same = first["tflops"] == second["tflops"] and first["tb_s"] == second["tb_s"]
    print(f"second call: announced {second['announced'] or 'nothing'}, cached={second['cached']}, "
          f"peaks identical to the first: {same}")
    return 0 if second["cached"] and not second["announced"] and same else 1


if __name__ == "__main__":
    sys.exit(main())
