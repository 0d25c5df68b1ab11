#!/usr/bin/env bash
# End-to-end check of the real CLI on the device machine (H200, through the device tool's `run`):
#   bash benchmarks/device_check.sh STEP...     steps: seed, interrupt, diff (seed runs diff itself)
# run from the repo root there, with the controller's wheels carried in .whl (see the results file
# benchmarks/results/device-check-h200.md for how they are downloaded and the exact `run` call).
#
# The host is the embedded `local` one, copied from hosts.yaml with the GPU's Python as its `python`
# and PYTHONPATH=/tmp/site in its env (the worker needs pydantic). No sshd, no FlashInfer: its
# backends read unavailable. Everything lands in $WORK; $OUT (when set) gets check.log, the JSON of
# the first seed and runs.tar.gz (every run folder and every command's stdout/stderr).
#
# Environment: GPU_PY (the device's Python), SWEEP (default sweeps/glm5_tp8.yaml), INTERRUPT_AFTER
# (seconds before the SIGINT of `interrupt`, default 6), WORK (default /tmp/device-check), SKIP_WHEELS.
set -u
export PYTHONUNBUFFERED=1
GPU_PY=${GPU_PY:-/opt/torch/.venv/bin/python3}
SWEEP=${SWEEP:-sweeps/glm5_tp8.yaml}
WORK=${WORK:-/tmp/device-check}
SITE=/tmp/site
INV=$WORK/hosts.yaml
RUNS=$WORK/runs
REPO=$PWD

setup() {
    mkdir -p "$WORK" "$RUNS" "$WORK/bin"
    # SKIP_WHEELS=1: already installed (a second call on a warm machine) or not needed (a laptop's venv).
    [ -n "${SKIP_WHEELS:-}" ] || "$GPU_PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" .whl/*.whl || { echo "setup: installing .whl failed"; exit 1; }
    export PYTHONPATH=$SITE:$REPO
    # `fleetbench` as the console script of an installed package would be: the printed hints name it.
    printf '#!/bin/sh\nexec %s -m orchestrator.cli "$@"\n' "$GPU_PY" > "$WORK/bin/fleetbench"
    chmod +x "$WORK/bin/fleetbench"
    export PATH=$WORK/bin:$PATH
    # hosts.yaml's `local` entry, as it is, with the GPU's Python and the carried site-packages.
    "$GPU_PY" - "$GPU_PY" "$SITE" "$INV" <<'EOF' || { echo "setup: writing the inventory failed"; exit 1; }
import sys, yaml
gpu_py, site, inv = sys.argv[1:]
raw = yaml.safe_load(open("hosts.yaml"))
local = next(h for h in raw["hosts"] if h["name"] == "local")
local = {**local, "python": gpu_py, "env": {**(local.get("env") or {}), "PYTHONPATH": site}}
doc = {"hosts": [local]}
if raw.get("defaults"):
    doc["defaults"] = raw["defaults"]
yaml.safe_dump(doc, open(inv, "w"), sort_keys=False)
EOF
    echo "== setup"; nvidia-smi -L; "$GPU_PY" -V; cat "$INV"
    "$GPU_PY" -c 'import scipy; print("scipy", scipy.__version__, "(the image'"'"'s; diff needs it)")' \
        || echo "setup: scipy missing: diff will fail"
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
run_dir_of() { sed -n 's/^.* stored in //p' "$1" | tail -n 1; }

# Status counts of a rows JSON document, and what the run folder holds: round records (complete
# false/true) and any protocol marker that reached log.txt as stderr.
summarize() {  # JSON_FILE RUN_DIR
    "$GPU_PY" - "$1" "$2" <<'EOF'
import collections, glob, json, os, re, sys
doc_path, run_dir = sys.argv[1:]
try:
    rows = json.load(open(doc_path)).get("items") or []
    print("  statuses:", dict(collections.Counter(r.get("status") for r in rows)), "of", len(rows))
    bad = [r for r in rows if r.get("status") not in ("ok", "unsupported", "unavailable")]
    for r in bad[:10]:
        print("  not done:", r.get("backend"), r.get("m"), r.get("n"), r.get("k"), r.get("status"), r.get("note"))
except (OSError, ValueError) as exc:
    print("  statuses: no JSON document:", exc)
for attempt in sorted(glob.glob(os.path.join(run_dir, "hosts", "*", "attempt-*"))):
    records = open(os.path.join(attempt, "results.jsonl")).read().splitlines() \
        if os.path.exists(os.path.join(attempt, "results.jsonl")) else []
    partial = sum(bool(re.search(r'"complete": ?false', l)) for l in records)
    whole = sum(bool(re.search(r'"complete": ?true', l)) for l in records)
    kinds = collections.Counter(m.group(1) for l in records for m in [re.match(r'\{"kind": ?"(\w+)"', l)] if m)
    log = open(os.path.join(attempt, "log.txt")).read().splitlines() \
        if os.path.exists(os.path.join(attempt, "log.txt")) else []
    leaked = [l for l in log if " stderr: " in l and "@@fleetbench" in l]
    streams = collections.Counter(l.split(" ", 2)[1] for l in log if l.count(" ") >= 2)
    print(f"  {os.path.relpath(attempt, run_dir)}: {len(records)} records ({partial} complete:false, "
          f"{whole} complete:true; by kind {dict(kinds)}); log.txt lines by stream {dict(streams)}; @@fleetbench as stderr: {len(leaked)}")
    for l in leaked[:5]:
        print("    leaked:", l)
EOF
}

step_seed() {
    echo "== seed: fleetbench run $SWEEP -i $INV --format json, twice, each a cold CLI process"
    local i t0 t1 rc
    for i in 1 2; do
        t0=$(now)
        "$GPU_PY" -m orchestrator.cli run "$SWEEP" -i "$INV" --runs-dir "$RUNS" --format json \
            > "$WORK/seed$i.json" 2> "$WORK/seed$i.err"
        rc=$?
        t1=$(now)
        echo "seed $i: exit $rc, wall $(elapsed "$t0" "$t1") s, run $(run_dir_of "$WORK/seed$i.err")"
        grep -v '^\S*: \(running\|waiting\|syncing\|starting\)' "$WORK/seed$i.err" | tail -n 8 | sed 's/^/  err| /'
        summarize "$WORK/seed$i.json" "$(run_dir_of "$WORK/seed$i.err")"
    done
    step_diff "$(run_dir_of "$WORK/seed1.err")" "$(run_dir_of "$WORK/seed2.err")"
}

step_diff() {  # RUN_A RUN_B (default: the two seeds)
    local a=${1:-$(run_dir_of "$WORK/seed1.err")} b=${2:-$(run_dir_of "$WORK/seed2.err")} rc
    echo "== diff $a $b"
    "$GPU_PY" -m orchestrator.cli diff "$a" "$b" > "$WORK/diff.txt" 2> "$WORK/diff.err"
    rc=$?
    echo "diff: exit $rc"
    tail -n 25 "$WORK/diff.txt" | sed 's/^/  out| /'
    sed 's/^/  err| /' "$WORK/diff.err" | tail -n 10
}

step_interrupt() {
    echo "== interrupt: the sweep in the background, SIGINT to its process group after ${INTERRUPT_AFTER:-6} s"
    local pid rc hint t0 t1 dir
    set -m  # its own process group, with SIGINT not ignored (a background job of a script ignores it)
    "$GPU_PY" -m orchestrator.cli run "$SWEEP" -i "$INV" --runs-dir "$RUNS" --format json \
        > "$WORK/interrupt.json" 2> "$WORK/interrupt.err" &
    pid=$!
    set +m
    sleep "${INTERRUPT_AFTER:-6}"  # a deliberate point mid-run, not a wait for readiness
    kill -INT -- -"$pid"
    wait "$pid"
    rc=$?
    echo "interrupt: exit $rc (130 expected)"
    grep -v '^\S*: \(running\|waiting\|syncing\|starting\)' "$WORK/interrupt.err" | tail -n 8 | sed 's/^/  err| /'
    dir=$(run_dir_of "$WORK/interrupt.err")
    summarize "$WORK/interrupt.json" "$dir"
    hint=$(sed -n 's/^.*finish it with: //p' "$WORK/interrupt.err" | tail -n 1)
    echo "printed hint: ${hint:-(none)}"
    [ -n "$hint" ] || return 1
    t0=$(now)
    bash -c "$hint" > "$WORK/rerun.txt" 2> "$WORK/rerun.err"  # exactly as printed
    rc=$?
    t1=$(now)
    echo "rerun: exit $rc, wall $(elapsed "$t0" "$t1") s"
    tail -n 8 "$WORK/rerun.err" | sed 's/^/  err| /'
    "$GPU_PY" -m orchestrator.cli show "$dir" --format json > "$WORK/final.json" 2> "$WORK/final.err"
    echo "show after rerun: exit $?"
    summarize "$WORK/final.json" "$dir"
}

collect() {
    [ -n "${OUT:-}" ] || return 0
    cp "$WORK/seed1.json" "$OUT/" 2>/dev/null
    tar -czf "$OUT/runs.tar.gz" -C "$WORK" --exclude=bin . 2>/dev/null
}

[ $# -gt 0 ] || { echo "usage: bash benchmarks/device_check.sh STEP... (seed, interrupt, diff)"; exit 2; }
setup
for step in "$@"; do
    case "$step" in
        seed) step_seed ;;
        interrupt) step_interrupt ;;
        diff) step_diff ;;
        *) echo "unknown step: $step"; exit 2 ;;
    esac
done
collect
