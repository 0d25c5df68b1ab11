#!/usr/bin/env bash
# Every GPU measurement of benchmarks/RESULTS.md, on the device machine (the lent H200, through the device
# tool's `run`), from the repo root there:
#   bash benchmarks/device_check.sh STEP...
# Steps, each with the result file of benchmarks/results/ it reproduces:
#   seed                  the seed sweep twice, each a cold CLI process, then diff   seed-h200-interrupt.md,
#                         of the two; seed1.md is the first run's table; each        seed-h200-settled.md,
#                         process's wall appended to seed-wall-h200.txt              seed-wall-*.txt
#   interrupt             SIGINT mid-sweep, then the printed rerun command           seed-h200-interrupt.md
#   cost                  where each seed run's time went (after seed; CPROFILE=N   cost-h200.md
#                         also profiles the second run's worker again)
#   diff                  diff of the two seed runs (seed runs it too)
#   fidelity              the worker against an independent replay                   fidelity-h200-settled.*
#   fidelity-runs         the two seed runs' medians against that replay (after seed) (tradeoff-h200.md holds
#                         (the reference: the median of 3 passes), and their          the same seed runs)
#                         torch-fp8 / flashinfer-fp8-cublas pairs against the
#                         ratio of the references
#   order                 forward / reversed / shuffled, 3 processes per order       order-h200-settled-repeat3.*
#   order-bf16            the same, torch-bf16 alone                                 order-h200-bf16-settled.*
#   order-bf16-unsettled  the same with settling off (--settle-ms 0)                 order-h200-bf16-settle-off.*
#   neighbour             a large GEMM after a light and a heavy case                neighbour-h200.md
#   settle-trace          every seed case replayed 400 ms, up / down / shuffled       settle-trace-h200.*
#   decode                the decode GEMM's first reading after heavy cases, a freed   decode-h200.md
#                         allocation, an emptied cache
#   burst                 burst and settled numbers of the large GEMMs, with clocks   burst-h200.md
#   first-case            the first timing of three fresh processes                  first-case-h200-primed.md
#   calibration           the GPU's peaks, twice with a fresh cache                  calibration-h200.json
#   moe                   the GLM-5 TP8 MoE layer sweep and its independent reference moe-h200-layer.md,
#                                                                                     moe-h200-fidelity.md
#   moe-decode            the MoE layer at 16 and 128 tokens against the reference in  moe-decode-h200.md
#                         three states (right after set-up, settled 300 ms, after 1 s idle)
#   byo                   examples/byo_kernels.yaml (user kernels)                   byo-h200.md
#   verdicts              A, B identical and C 10% slower, then diff (repeatable)    verdicts-h200-N.md
#   jit-cache             FlashInfer's JIT cache across shell and SSH (needs sshd)   jit-cache-h200-after.md
#   fleet                 2 sshd hosts on the GPU, one killed, rerun --failed        fleet-h200-oneexec.md,
#                                                                                     fleet-h200-oneexec-merged.csv
#   profile               3 sshd hosts on the GPU, one slowed: fleetbench profile,   profile-h200.md
#                         diff --across-hosts --profile (needs ncu)
#   fanout                fan-out cost, tools on CPUs 0-1, hosts on 2-15 (no GPU)    (none kept: RESULTS.md, History)
#   moe-fp4               sweeps/moe_fp4.yaml: the grouped / fused NVFP4 MoE         moe-fp4-h200.md
#                         backends (unsupported below CC 10.0) beside bf16
#   cupti                 CUPTI kernel time beside graph replay, every seed cell     cupti-h200.md
#   graph-length          a case timed by fleetbench, by one ~20 ms graph (Triton's   graph-length-h200.md
#                         method) on its stream and a side stream, by Triton's steps
#                         written out, and by Triton, twice
#   cupti-after           graph replay before and after a CUPTI trace in one process, cupti-after-h200.md
#                         with CUPTI left attached and torn down
#   crosscheck            the seed sweep once, crosscheck --all on it (FlashInfer,    crosscheck-h200.md,
#                         Triton)                                                    crosscheck-h200.json
#   jit                   one FlashInfer case, so its JIT module is built before     (none)
#                         later steps time anything
#   startup               a worker's imports, as the machine has them and with bytecode (none kept: RESULTS.md)
#                         cached (PYTHONPYCACHEPREFIX), with torch's slowest imports
#   exit-cost             a CUDA process's end: the interpreter's teardown against    exit-cost-h200.md
#                         os._exit, as `python -m worker run` ends (exit_cost.py)
#   stream-clock          time, time x in-stream clock and time x NVML clock over    stream-clock-h200.md
#                         20 windows in varied clock states, per case
#   slowdowns-calibrate   columns of K that slow mm_pad by 2, 3 and 5% per shape      slowdowns-calibrate-h200.md,
#                         (then slowdowns-h2h and -across use them)                  pads-{2,3,5}.json
#   slowdowns-h2h         mm against its copy and a +2% copy, head-to-head, 3 sweeps slowdowns-h2h-h200.md
#   slowdowns-across      diff of separate sweeps: A/A, +3%, +5% (3 sweeps each)      slowdowns-across-h200.md
#   slow-host             3 sshd hosts on the GPU, one ~2% slower: diff --across-hosts slow-host-h200.md
#   two-levels            what sets the level of a two-level case: one graph replayed two-levels-h100.md
#                         long, after idle, captured afresh, on fresh inputs
#   buffers               identical GEMM graphs on their own / shared buffers,        buffers-h100.md
#                         interleaved
#   kernel-choice         the cuBLAS kernels of K-padded copies in the calibration's   kernel-choice-h100-s25a.md
#                         graph and the worker's (after slowdowns-calibrate: its +2%
#                         paddings; else 0 and 256 columns)
#   tradeoff              the seed sweep with each timing variant of                 tradeoff-h200.md
#                         benchmarks/fidelity/tradeoff.py (VARIANTS=a,b: some), a cold CLI
#                         process each, and the seed step's runs (if it ran before)
#                         against one 300 ms-settled reference
#
# Carried (the `run` call's `carry`; ignored folders, see RESULTS.md "Running the GPU steps" for how each
# is made): .whl (the controller's wheels for Python 3.12: always); .carry/fi.tar.xz (FlashInfer's files:
# without it flashinfer-* rows read unavailable); .debs (OpenSSH: jit-cache, fleet, profile, fanout);
# .carry/whl312 (ansible-core and the rest: fanout).
#
# The host is the embedded `local` one, copied from hosts.yaml with the GPU's Python as its `python`
# and PYTHONPATH=/tmp/site in its env (the worker needs pydantic). Everything lands in $WORK; each step's
# results go to $OUT (the device tool's folder, when set; else $WORK), and $OUT also gets seed1.json,
# seed1.md and runs.tar.gz (every run folder and every command's stdout/stderr).
#
# Environment: GPU_PY (the device's Python), WHEELS (the folder of wheels setup installs, default .whl; e.g.
# .carry/whl-lite, .whl without the SSH packages, for a carry that must hold .carry/fi.tar.xz under the
# device's 64 MiB and cannot hold .whl too), SWEEP (default sweeps/glm5_tp8.yaml), INTERRUPT_AFTER
# (seconds before the SIGINT of `interrupt`, default 6), REF_PASSES (fidelity-runs' reference passes, default
# 3), WORK (default /tmp/device-check), SKIP_WHEELS,
# NEED_GPU (e.g. H200: exit 3 before anything runs unless the GPU's name holds it),
# PACK (a .tar.gz path: $OUT packed into it after every step, so a call killed midway still brings back all
# that finished, as one file), SIZES and REPS (fanout, default 8,32,64 and 3), CPROFILE (cost), BYTECODE (1: bytecode cached, see
# setup), VARIANTS (tradeoff), TIMING (a timing variant: space-separated KEY=VALUE, e.g. "fresh_inputs=false":
# the steps seed, slowdowns-h2h and slowdowns-across run sweeps with those timing options, named for them
# (glm5-tp8-fresh-inputs-false, see-across-fresh-inputs-false), and their Markdown names end with the variant).
set -u
export PYTHONUNBUFFERED=1
GPU_PY=${GPU_PY:-/opt/torch/.venv/bin/python3}
WHEELS=${WHEELS:-.whl}
SWEEP=${SWEEP:-sweeps/glm5_tp8.yaml}
WORK=${WORK:-/tmp/device-check}
DEST=${OUT:-$WORK}
SITE=/tmp/site
INV=$WORK/hosts.yaml
RUNS=$WORK/runs
REPO=$PWD
OSSH=/tmp/ossh
VERDICTS_DONE=0

setup() {
    mkdir -p "$WORK" "$RUNS" "$WORK/bin" "$DEST"  # $OUT may name a folder not made yet
    # SKIP_WHEELS=1: already installed (a second call on a warm machine) or not needed (a laptop's venv).
    [ -n "${SKIP_WHEELS:-}" ] || "$GPU_PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" "$WHEELS"/*.whl || { echo "setup: installing $WHEELS failed"; exit 1; }
    # FlashInfer's files, unpacked once per machine.
    if [ -f .carry/fi.tar.xz ] && [ ! -d "$SITE/flashinfer" ]; then
        tar -xJf .carry/fi.tar.xz -C "$SITE" || { echo "setup: unpacking .carry/fi.tar.xz failed"; exit 1; }
    fi
    export PYTHONPATH=$SITE:$REPO PATH=$SITE/bin:$PATH
    # BYTECODE=1: processes write and read bytecode in $WORK/pycache, as on a host whose packages pip
    # installed (the lent machine sets PYTHONDONTWRITEBYTECODE=1, and .whl installs with --no-compile).
    ORIG_DWB=${PYTHONDONTWRITEBYTECODE-}
    if [ -n "${BYTECODE:-}" ]; then
        export PYTHONPYCACHEPREFIX=$WORK/pycache
        unset PYTHONDONTWRITEBYTECODE
    fi
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
    # TIMING: SWEEP as a variant with those timing options, named for them (see_slowdowns variant_name).
    VARIANT="" TIMING_ARGS=()
    if [ -n "${TIMING:-}" ]; then
        local kv
        for kv in $TIMING; do TIMING_ARGS+=(--timing "$kv"); done
        # shellcheck disable=SC2086
        VARIANT=$("$GPU_PY" - "$SWEEP" "$WORK/variant.yaml" $TIMING <<'EOF'
import sys, yaml
from benchmarks.detection.see_slowdowns import timing_setting, variant_name
src, dst, *pairs = sys.argv[1:]
timing = dict(timing_setting(p) for p in pairs)
doc = yaml.safe_load(open(src))
name = variant_name(doc["name"], timing)
yaml.safe_dump({**doc, "name": name, "timing": {**(doc.get("timing") or {}), **timing}}, open(dst, "w"), sort_keys=False)
print(name[len(doc["name"]):])
EOF
) || { echo "setup: TIMING=$TIMING: writing the variant sweep failed"; exit 1; }
        SWEEP=$WORK/variant.yaml
        echo "timing variant $VARIANT: $SWEEP"; cat "$SWEEP"
    fi
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
        echo "seed $i: exit $rc, wall $(elapsed "$t0" "$t1") s, run $(run_dir_of "$WORK/seed$i.err")" |
            tee -a "$DEST/seed-wall-h200.txt"  # the cold CLI wall, kept beside the results
        grep -v '^\S*: \(running\|waiting\|syncing\|starting\)' "$WORK/seed$i.err" | tail -n 8 | sed 's/^/  err| /'
        summarize "$WORK/seed$i.json" "$(run_dir_of "$WORK/seed$i.err")"
    done
    "$GPU_PY" -m orchestrator.cli show "$(run_dir_of "$WORK/seed1.err")" --format md > "$WORK/seed1.md"
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

step_cost() {  # where each seed run's time went (run `seed` first, in the same call)
    local run
    for run in "$(run_dir_of "$WORK/seed1.err")" "$(run_dir_of "$WORK/seed2.err")"; do
        [ -d "$run" ] || { echo "cost: no seed run (give the seed step first)"; return 1; }
        "$GPU_PY" -m benchmarks.cost.sweep_cost "$run" --top 12 > "$DEST/cost-$(basename "$run").md" && echo "cost: $run"
    done
    # CPROFILE=N: the second run's worker once more under cProfile, its N costliest functions
    if [ -n "${CPROFILE:-}" ]; then
        "$GPU_PY" -m benchmarks.cost.sweep_cost "$run" --cprofile "$CPROFILE" \
            > "$DEST/cprofile-$(basename "$run").md" 2> "$WORK/cprofile.err" && echo "cprofile: $run"
    fi
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

# OpenSSH from the carried Debian packages (the image has none), for the steps that start sshd hosts.
need_sshd() {
    if [ -d .debs ]; then
        mkdir -p "$OSSH"
        for f in .debs/*.deb; do dpkg -x "$f" "$OSSH" || return 1; done
        export LD_LIBRARY_PATH=$OSSH/lib/x86_64-linux-gnu:$OSSH/usr/lib/x86_64-linux-gnu PATH=$OSSH/usr/bin:$PATH
        export FLEETBENCH_SSHD=$OSSH/usr/sbin/sshd FLEETBENCH_SSH_KEYGEN=$OSSH/usr/bin/ssh-keygen
    fi
    [ -x "${FLEETBENCH_SSHD:-/usr/sbin/sshd}" ] || { echo "no sshd: carry .debs (RESULTS.md says how)"; return 1; }
    id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd  # privilege separation
    mkdir -p /run/sshd
}

# The order runs leave each process's params and results beside the table; order.json keeps their values.
drop_order_scratch() { rm -f "$1"/params-* "$1"/results-*; }

step_fidelity() { "$GPU_PY" -m benchmarks.fidelity.fidelity --repeat 2 --no-sweep --out "$DEST/fidelity"; }
step_fidelity_runs() {  # run `seed` first, in the same call
    "$GPU_PY" -m benchmarks.fidelity.fidelity --runs "$(run_dir_of "$WORK/seed1.err")" "$(run_dir_of "$WORK/seed2.err")" \
        --reference-passes "${REF_PASSES:-3}" --out "$DEST/fidelity-runs-h200.md"
}
step_order() { "$GPU_PY" -m benchmarks.gpu_state.order --repeat 3 --out "$DEST/order"; drop_order_scratch "$DEST/order"; }
step_order_bf16() {
    "$GPU_PY" -m benchmarks.gpu_state.order --backends torch-bf16 --repeat 3 --out "$DEST/order-bf16"
    drop_order_scratch "$DEST/order-bf16"
}
step_order_bf16_unsettled() {
    "$GPU_PY" -m benchmarks.gpu_state.order --backends torch-bf16 --repeat 3 --settle-ms 0 --out "$DEST/order-bf16-unsettled"
    drop_order_scratch "$DEST/order-bf16-unsettled"
}
step_neighbour() { "$GPU_PY" -m benchmarks.gpu_state.neighbour --out "$DEST/neighbour"; }
step_first_case() {
    "$GPU_PY" -m benchmarks.gpu_state.first_case --procs 3 --conditions plain > "$DEST/first-case.md"
    local rc=$?
    cat "$DEST/first-case.md"
    return $rc
}
step_calibration() { "$GPU_PY" -m benchmarks.fidelity.calibration --out "$DEST/calibration.json"; }
step_moe() {
    "$GPU_PY" -m orchestrator.cli run sweeps/glm5_tp8_moe_layer.yaml -i "$INV" --runs-dir "$RUNS" --format md \
        > "$DEST/moe-layer.md" 2> "$WORK/moe.err"
    "$GPU_PY" -m benchmarks.fidelity.moe_fidelity "$(run_dir_of "$WORK/moe.err")" --out "$DEST/moe"
}
step_moe_decode() {
    "$GPU_PY" -m orchestrator.cli run sweeps/glm5_tp8_moe_decode.yaml -i "$INV" --runs-dir "$RUNS" --format md \
        > "$DEST/moe-decode-layer.md" 2> "$WORK/moe-decode.err"
    "$GPU_PY" -m benchmarks.fidelity.moe_fidelity "$(run_dir_of "$WORK/moe-decode.err")" --states plain,settled,idle \
        --out "$DEST/moe-decode"
}
step_byo() {
    "$GPU_PY" -m orchestrator.cli run examples/byo_kernels.yaml -i "$INV" --runs-dir "$RUNS" --format md \
        > "$DEST/byo-kernels.md" 2>&1
}
step_verdicts() {
    VERDICTS_DONE=$((VERDICTS_DONE + 1))
    "$GPU_PY" -m benchmarks.detection.verdicts "$SWEEP" -i "$INV" --runs-dir "$RUNS" --out "$DEST/verdicts-$VERDICTS_DONE.md"
}
step_jit_cache() {
    need_sshd || return 1
    "$GPU_PY" -m benchmarks.cost.jit_cache --out "$DEST/jit-cache" --env "PYTHONPATH=$SITE"
}
step_fleet() {
    need_sshd || return 1
    "$GPU_PY" -m benchmarks.fleet.gpu_fleet --hosts 2 --gpus 1 --sweep "$SWEEP" --out "$DEST/fleet" --env "PYTHONPATH=$SITE"
}

step_profile() {
    need_sshd || return 1
    "$GPU_PY" -m benchmarks.fleet.profile_check --hosts 3 --out "$DEST/profile" --env "PYTHONPATH=$SITE"
}

# The fan-out benchmark with the controller on CPUs 0-1 and the hosts on the other 14: the hosts' venv is
# the device's Python with the pinned pydantic (what `provision --profile minimal` makes), every library
# byte-compiled as a plain `pip install` leaves it (without bytecode, and with PYTHONDONTWRITEBYTECODE set
# there, every cold start of every tool would compile its libraries again).
step_fanout() {
    local hv=/tmp/fleetbench-fanout/host-venv
    need_sshd || return 1
    export LC_ALL=C.UTF-8 LANG=C.UTF-8  # ansible refuses other locales
    "$GPU_PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .carry/whl312/*.whl || return 1
    "$GPU_PY" -m compileall -q -j 0 "$SITE" >/dev/null
    if [ ! -x "$hv/bin/python" ]; then
        "$GPU_PY" -m venv --without-pip "$hv" && "$GPU_PY" -m pip install -q --no-index --no-deps \
            --target "$("$hv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
            .whl/pydantic-*.whl .whl/pydantic_core-*.whl .whl/annotated_types-*.whl .whl/typing_inspection-*.whl \
            .whl/typing_extensions-*.whl || return 1
    fi
    chmod -R a+rX /tmp/fleetbench-fanout "$SITE"
    # Pinning must separate: two burners on one CPU get about half the loops of a third on another.
    "$GPU_PY" - <<'EOF'
import multiprocessing as mp, os, time
def burn(cpu, q):
    os.sched_setaffinity(0, {cpu}); t = time.time(); n = 0
    while time.time() - t < 1.0: n += 1
    q.put((cpu, n))
q = mp.Queue(); ps = [mp.Process(target=burn, args=(c, q)) for c in (2, 2, 3)]
[p.start() for p in ps]; [p.join() for p in ps]
print("pin check (cpu, loops in 1 s; the two on cpu 2 should get ~half of cpu 3's):", sorted(q.get() for _ in ps))
EOF
    "$GPU_PY" -m benchmarks.cost.fanout --sizes "${SIZES:-8,32,64}" --reps "${REPS:-3}" --ansible "$SITE/bin/ansible-playbook" \
        --host-python "$hv/bin/python" --controller-cpus 0,1 --host-cpus 2-15 --out "$DEST/fanout-pinned.md"
}

step_settle_trace() {
    echo "== settle-trace: python -m benchmarks.gpu_state.settle_trace trace --out \$DEST"
    "$GPU_PY" -m benchmarks.gpu_state.settle_trace trace --out "$DEST" > "$WORK/settle-trace.log" 2>&1
    local rc=$?; tail -n 3 "$WORK/settle-trace.log"; return $rc
}

step_burst() {
    echo "== burst: python -m benchmarks.gpu_state.burst --out \$DEST/burst.md"
    "$GPU_PY" -m benchmarks.gpu_state.burst --out "$DEST/burst.md"
}

step_decode() {
    echo "== decode: python -m benchmarks.gpu_state.settle_trace decode --out \$DEST"
    "$GPU_PY" -m benchmarks.gpu_state.settle_trace decode --out "$DEST"
}

step_moe_fp4() {
    echo "== moe-fp4: fleetbench run sweeps/moe_fp4.yaml (the grouped / fused NVFP4 MoE backends, issue 33)"
    local rc
    "$GPU_PY" -m orchestrator.cli run sweeps/moe_fp4.yaml -i "$INV" --runs-dir "$RUNS" --format json \
        > "$WORK/moe-fp4.json" 2> "$WORK/moe-fp4.err"
    rc=$?
    echo "moe-fp4: exit $rc, run $(run_dir_of "$WORK/moe-fp4.err")"
    summarize "$WORK/moe-fp4.json" "$(run_dir_of "$WORK/moe-fp4.err")"
    # No commit in the header: the device's copy of the tree may carry an older .git than its files.
    { echo "# The FP4 MoE backends on the H200 (issue 33)"
      echo; echo "Reproduce: \`bash benchmarks/device_check.sh moe-fp4\` (carry .whl and .carry/fi.tar.xz): \`fleetbench run sweeps/moe_fp4.yaml\` (exit $rc)."
      echo; "$GPU_PY" -m orchestrator.cli show "$(run_dir_of "$WORK/moe-fp4.err")" --format md
      echo; echo "Each row's status and reason:"; echo
      "$GPU_PY" - "$WORK/moe-fp4.json" <<'EOF2'
import collections, json, sys
rows = json.load(open(sys.argv[1])).get("items") or []
seen = collections.OrderedDict()
for r in rows:
    key = (r.get("backend"), r.get("kernel"), r.get("status"), r.get("reason") or "")
    seen[key] = seen.get(key, 0) + 1
print("| backend | kernel | status | rows | reason |"); print("|---|---|---|---:|---|")
for (b, kern, st, note), n in seen.items():
    print(f"| {b} | {kern} | {st} | {n} | {note.replace('|', '/')} |")
EOF2
    } > "$DEST/moe-fp4-h200.md"
    return $rc
}

step_cupti() {
    echo "== cupti: CUPTI kernel time against event-timed graph replay, every seed cell (cupti_check.py)"
    "$GPU_PY" -m benchmarks.fidelity.cupti_check --out "$DEST/cupti-h200.md" > "$WORK/cupti.log" 2>&1
    echo "cupti_check: exit $?"; grep -c CuptiError "$DEST/cupti-h200.md"; tail -n 3 "$WORK/cupti.log"
}

step_graph_length() {
    echo "== graph-length: one case timed by fleetbench, a long graph, on a side stream, and Triton"
    "$GPU_PY" -m benchmarks.fidelity.graph_length --out "$DEST/graph-length-h200.md"
}

step_cupti_after() {
    echo "== cupti-after: graph replay before and after a CUPTI trace, CUPTI attached vs torn down"
    "$GPU_PY" -m benchmarks.fidelity.cupti_after --out "$DEST/cupti-after-h200.md"
}

step_crosscheck() {
    echo "== crosscheck: fleetbench run $SWEEP, crosscheck RUN --all --steps"
    local run rc t0
    t0=$(now)
    "$GPU_PY" -m orchestrator.cli run "$SWEEP" -i "$INV" --runs-dir "$RUNS" --format json \
        > "$WORK/crosscheck-seed.json" 2> "$WORK/crosscheck-seed.err"
    run=$(run_dir_of "$WORK/crosscheck-seed.err")
    echo "seed: run $run, wall $(elapsed "$t0" "$(now)") s"
    t0=$(now)
    summarize "$WORK/crosscheck-seed.json" "$run"
    # XC_SELECT: which cases (default --all; e.g. "--backend torch-bf16 --backend torch-fp8" for a shorter call)
    "$GPU_PY" -m orchestrator.cli crosscheck "$run" ${XC_SELECT:---all} --steps --format md > "$WORK/crosscheck.md" \
        2> "$WORK/crosscheck.err"
    rc=$?
    echo "crosscheck: exit $rc, wall $(elapsed "$t0" "$(now)") s"
    grep -v ': crosschecking ' "$WORK/crosscheck.err" | tail -n 20 | sed 's/^/  err| /'
    "$GPU_PY" -m orchestrator.cli crosscheck "$run" ${XC_SELECT:---all} --steps --stored --format json \
        > "$DEST/crosscheck-h200.json"
    { echo "# fleetbench against FlashInfer's and Triton's timers (H200)"
      echo; echo "Reproduce: \`bash benchmarks/device_check.sh crosscheck\` (carry .whl and .carry/fi.tar.xz): \`fleetbench run $SWEEP\`, then \`fleetbench crosscheck RUN --all --steps\` (exit $rc)."
      echo; cat "$WORK/crosscheck.md"; } > "$DEST/crosscheck-h200.md"
    return $rc
}

step_jit() {  # FlashInfer's JIT module built before anything is timed (a fresh machine has none)
    echo "== jit: one flashinfer-fp8-cublas case through the CLI"
    printf 'name: jit\nbackends: [flashinfer-fp8-cublas]\nshapes:\n  - {m: 16, n: 768, k: 6144}\ntiming: {rounds: 1}\n' \
        > "$WORK/jit.yaml"
    local t0; t0=$(now)
    "$GPU_PY" -m orchestrator.cli run "$WORK/jit.yaml" -i "$INV" --runs-dir "$RUNS" --format json > "$WORK/jit.json" 2> "$WORK/jit.err"
    local rc=$?
    echo "jit: exit $rc, wall $(elapsed "$t0" "$(now)") s"
    [ $rc -eq 0 ] || return $rc
    # An `unavailable` row exits 0, and every later step would time the sweep without FlashInfer's rows.
    "$GPU_PY" - "$WORK/jit.json" <<'EOF2'
import json, sys
rows = json.load(open(sys.argv[1])).get("items") or []
bad = [r for r in rows if r.get("status") != "ok"]
for r in bad:
    print(f"jit: {r.get('backend')} is {r.get('status')}: {r.get('note') or r.get('reason')}")
sys.exit(1 if bad or not rows else 0)
EOF2
}

step_exit_cost() { "$GPU_PY" -m benchmarks.cost.exit_cost --repeat 3 --out "$DEST/exit-cost-h200.md"; }

step_startup() {  # what a worker's start-up costs, with and without bytecode on disk
    echo "== startup: the machine's PYTHONDONTWRITEBYTECODE=${ORIG_DWB:-(unset)}"
    local venv pyc py i
    venv=$("$GPU_PY" -c 'import sys; print(sys.prefix)')
    pyc=$(find "$venv" "$SITE" -name '*.pyc' 2>/dev/null | wc -l)
    py=$(find "$venv" "$SITE" -name '*.py' 2>/dev/null | wc -l)
    echo "startup: $pyc .pyc beside $py .py files under $venv and $SITE"
    local t0 imports='import torch, flashinfer, worker.sweep.runner, pydantic'
    for i in 1 2; do
        t0=$(now); env -u PYTHONPYCACHEPREFIX PYTHONDONTWRITEBYTECODE="$ORIG_DWB" "$GPU_PY" -c "$imports"
        echo "startup: $imports, as the machine has them, $i: $(elapsed "$t0" "$(now)") s"
    done
    mkdir -p "$WORK/pycache"
    for i in 1 2 3; do
        t0=$(now); PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$WORK/pycache "$GPU_PY" -c "$imports"
        echo "startup: the same, bytecode written to and read from $WORK/pycache, $i: $(elapsed "$t0" "$(now)") s"
    done
    env -u PYTHONPYCACHEPREFIX PYTHONDONTWRITEBYTECODE="$ORIG_DWB" "$GPU_PY" -X importtime -c 'import torch' \
        2> "$WORK/importtime.txt"
    echo "startup: slowest imports of torch (as found; cumulative µs):"
    sort -t'|' -k2 -n -r "$WORK/importtime.txt" | head -n 5 | sed 's/^/  /'
}

step_tradeoff() {  # VARIANTS: which (default: every one benchmarks/fidelity/tradeoff.py knows)
    echo "== tradeoff: python -m benchmarks.fidelity.tradeoff (each variant a cold fleetbench run)"
    local also=()  # the seed step's two runs, when it ran in this call, against the same reference
    [ -f "$WORK/seed2.err" ] && also=(--also "$(run_dir_of "$WORK/seed1.err")" "$(run_dir_of "$WORK/seed2.err")")
    "$GPU_PY" -m benchmarks.fidelity.tradeoff -i "$INV" --runs-dir "$RUNS" --sweep "$SWEEP" "${also[@]}" \
        ${VARIANTS:+--variants "$VARIANTS"} --out "$DEST/tradeoff-h200.md" > "$WORK/tradeoff.log" 2>&1
    local rc=$?
    grep -v '^|' "$WORK/tradeoff.log" | tail -n 12 | sed 's/^/  /'
    sed -n '1,16p' "$DEST/tradeoff-h200.md" 2>/dev/null
    return $rc
}

step_stream_clock() { "$GPU_PY" -m benchmarks.gpu_state.stream_clock --out "$DEST/stream-clock-h200.md"; }
step_slowdowns_calibrate() {
    "$GPU_PY" -m benchmarks.detection.see_slowdowns calibrate --targets 0.02,0.03,0.05 --pad-dir "$WORK/pads" \
        --out "$DEST/slowdowns-calibrate-h200.md" &&
        for t in 2 3 5; do cp "$WORK/pads/pads-$t.json" "$DEST/slowdowns-calibrate-h200-pads-$t.json"; done
}
# The slowdowns steps take the calibrated paddings when slowdowns-calibrate ran before them.
step_slowdowns_h2h() {
    local pad=()
    [ -f "$WORK/pads/pads-2.json" ] && pad=(--pad "$WORK/pads/pads-2.json")
    "$GPU_PY" -m benchmarks.detection.see_slowdowns h2h -i "$INV" --runs-dir "$RUNS" "${pad[@]}" "${TIMING_ARGS[@]}" \
        --out "$DEST/slowdowns-h2h-h200$VARIANT.md"
}
step_slow_host() {
    need_sshd || return 1
    local pad=()
    [ -f "$WORK/pads/pads-2.json" ] && pad=(--pad "$WORK/pads/pads-2.json")
    "$GPU_PY" -m benchmarks.detection.slow_host --out "$DEST/slow-host-h200.md" --env "PYTHONPATH=$SITE" "${pad[@]}"
}
step_buffers() { "$GPU_PY" -m benchmarks.gpu_state.buffers --out "$DEST/buffers.md"; }
step_kernel_choice() {
    local pads=0,256
    [ -f "$WORK/pads/pads-2.json" ] && pads=0,$("$GPU_PY" -c 'import json,sys; print(",".join(sorted({str(v) for v in json.load(open(sys.argv[1])).values()}, key=int)))' "$WORK/pads/pads-2.json")
    "$GPU_PY" -m benchmarks.gpu_state.kernel_choice --pads "$pads" --out "$DEST/kernel-choice.md"
}
step_two_levels() { "$GPU_PY" -m benchmarks.gpu_state.two_levels --out "$DEST/two-levels.md"; }
step_slowdowns_across() {
    local pads=()
    [ -f "$WORK/pads/pads-3.json" ] && pads=(--pads "$WORK/pads/pads-3.json,$WORK/pads/pads-5.json")
    "$GPU_PY" -m benchmarks.detection.see_slowdowns across -i "$INV" --runs-dir "$RUNS" "${pads[@]}" \
        "${TIMING_ARGS[@]}" --out "$DEST/slowdowns-across-h200$VARIANT.md"
}

collect() {
    [ -n "${OUT:-}" ] || return 0
    cp "$WORK/seed1.json" "$WORK/seed1.md" "$OUT/" 2>/dev/null
    tar -czf "$OUT/runs.tar.gz" -C "$WORK" --exclude=bin --exclude=pycache --exclude=site . 2>/dev/null
}

STEPS="seed cost interrupt diff fidelity fidelity-runs order order-bf16 order-bf16-unsettled neighbour settle-trace decode burst first-case calibration moe moe-decode byo
verdicts jit-cache fleet profile fanout moe-fp4 cupti cupti-after graph-length crosscheck startup exit-cost tradeoff jit
stream-clock slowdowns-calibrate slowdowns-h2h slowdowns-across slow-host buffers two-levels kernel-choice"
[ $# -gt 0 ] || { echo "usage: bash benchmarks/device_check.sh STEP... (steps:" $STEPS")"; exit 2; }
for step in "$@"; do
    case " $(echo $STEPS) " in
        *" $step "*) ;;
        *) echo "unknown step: $step (steps:" $STEPS")"; exit 2 ;;
    esac
done
pack() {  # PACK=FILE.tar.gz: $OUT as one file after every step (the device tool brings back few files)
    [ -n "${PACK:-}" ] && [ -n "${OUT:-}" ] || return 0
    # Written beside PACK, then renamed: a call killed midway leaves the last whole pack. tar exits 1 where a
    # file changed while read (the part itself when PACK is inside $OUT): the pack is whole all the same.
    local part="$PACK.part" name; name=$(basename "$PACK")
    tar -czf "$part" -C "$OUT" --exclude="./$name" --exclude="./$name.part" . 2>/dev/null
    if [ $? -le 1 ]; then mv "$part" "$PACK"; else rm -f "$part"; fi
}

# NEED_GPU=H200: run nothing unless the GPU's name holds it (exit 3): a call that asks for one kind of GPU
# and may be given another costs only the machine's start, not a lease of steps measured on the wrong card.
if [ -n "${NEED_GPU:-}" ]; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    case "$gpu" in
        *"$NEED_GPU"*) ;;
        *) echo "NEED_GPU=$NEED_GPU: this GPU is ${gpu:-unknown (no nvidia-smi)}; nothing run"; exit 3 ;;
    esac
fi
setup
for step in "$@"; do
    "step_${step//-/_}"
    rc=$?
    echo "== $step: exit $rc"
    pack
    if [ "$step" = jit ] && [ $rc -ne 0 ]; then  # every later step would time the sweep without FlashInfer
        echo "jit failed: stopping before the steps that would time without FlashInfer"
        collect; pack; exit 1
    fi
done
collect
pack
