#!/usr/bin/env bash
# Issue 16's GPU call (device tool, carry .whl .debs .carry): speed of light on the seed sweep (the
# H200's calibration against its datasheet, pct_sol in JSON/CSV rows), the GLM-5 TP8 MoE layer sweep
# (uniform and Zipf routing, every backend that runs on SM90) and its timing fidelity.
set -u
. benchmarks/device_setup.sh >/dev/null 2>&1
R=$OUT/runs; mkdir -p $OUT/res
fb() { timeout "$1" python3 -m orchestrator.cli "${@:2}"; }
echo "== seed sweep (bf16 / fp8 / reference; FP4 refused on SM90)"
fb 200 run sweeps/glm5_tp8.yaml --runs-dir $R --format csv > $OUT/res/seed.csv; echo "exit $?"
fb 30 show latest --runs-dir $R --format json > $OUT/res/seed.json
python3 - "$R" > $OUT/res/calibration.json <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/hosts/*/attempt-*/results.jsonl")):
    facts = json.loads(open(f).readline())
    print(json.dumps({"file": f.split("/runs/")[1], "gpu": facts.get("gpu_name"), "driver": facts.get("driver"),
                      "calibration": facts.get("calibration")}))
PY
cat $OUT/res/calibration.json
fb 30 show latest --runs-dir $R --pivot backend --baseline torch-bf16 --format md | head -30
echo "== MoE layer"
fb 330 run sweeps/glm5_tp8_moe_layer.yaml --runs-dir $R --format md > $OUT/res/moe.md; echo "exit $?"
cat $OUT/res/moe.md | cut -c1-400
fb 30 show latest --runs-dir $R --format json > $OUT/res/moe.json
echo "== MoE fidelity"
timeout 120 python3 benchmarks/moe_fidelity.py "$(ls -d $R/*moe-layer* | tail -1)" --out $OUT/res
