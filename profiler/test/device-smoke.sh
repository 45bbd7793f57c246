#!/usr/bin/env bash
# Real-GPU smoke test of the NCCL watchdog profiler plugin (profiler/README.md).
#
# Two ranks share GPU 0 under torchrun (PyTorch with NCCL 2.28), each with its own
# NCCL_HOSTID so that NCCL sees two hosts and talks NET/Socket over loopback: the network
# proxy ops the plugin reports then exist. The job (smoke_job.py) runs collectives, send/recv,
# a new_group, then rank 1 stops issuing for HANG_S seconds while rank 0 waits in an
# all-reduce. The regions are dumped during the hang, at the end and after exit, and checked
# (smoke_check.py). A second run without the plugin gives all-reduce timings to compare.
#
#   here (gcc, Go):  make plugin     -> bin/libnccl-profiler-ncclwatch.so, bin/profdump-linux-amd64
#   on the GPU box:  bash profiler/test/device-smoke.sh      (nothing is built or downloaded there)
#
# Results under $OUT: summary.txt (PASS/FAIL/INFO lines, also printed), run.log, versions.txt,
# main/ (job.log, nccl.<host>.<pid>.log, dump-{hang,end,final}.json, regions/*.bin) and
# baseline/job.log. About 1-2 minutes; every step has a time limit (HARD_S in all).
set -u
T0=$(date +%s)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1

OUT=${OUT:-$ROOT/tmp/device-smoke}
SO=${SO:-$ROOT/bin/libnccl-profiler-ncclwatch.so}
DUMP=${DUMP:-$ROOT/bin/profdump-linux-amd64}
WORK=${WORK:-/dev/shm/ncclwatch-smoke.$$}
HANG_S=${HANG_S:-16}
JOB_S=${JOB_S:-100}          # limit on the run with the plugin
BASELINE_S=${BASELINE_S:-50} # limit on the run without it; skipped if it cannot end by HARD_S
HARD_S=${HARD_S:-170}
PY=${PYTHON:-python3}
if [ -z "${TORCHRUN:-}" ]; then
  if command -v torchrun > /dev/null 2>&1; then TORCHRUN=torchrun; else TORCHRUN="$PY -m torch.distributed.run"; fi
fi

mkdir -p "$OUT"
RUNLOG=$OUT/run.log
: > "$RUNLOG"
log() { printf '[%4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" | tee -a "$RUNLOG"; }

if [ ! -f "$SO" ]; then
  log "missing $SO: run 'make plugin' where gcc is, and carry bin/ along"
  exit 2
fi
if [ ! -x "$DUMP" ]; then
  chmod +x "$DUMP" 2> /dev/null || { log "missing $DUMP: run 'make plugin'"; exit 2; }
fi
rm -rf "$WORK"
mkdir -p "$WORK/regions" "$OUT/main/regions" "$OUT/baseline"
trap 'rm -rf "$WORK"' EXIT

{ nvidia-smi -L; uname -a; ldd --version 2>&1 | head -1
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
} > "$OUT/versions.txt" 2>&1
log "$(tr '\n' ' ' < "$OUT/versions.txt")"

# run_job TAG LIMIT_S PHASES [VAR=VALUE...]: one torchrun of smoke_job.py.
run_job() {
  local tag=$1 limit=$2 phases=$3
  shift 3
  log "$tag: torchrun, 2 ranks on GPU 0, phases $phases (limit ${limit}s)"
  env NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV \
    NCCL_DEBUG_FILE="$OUT/$tag/nccl.%h.%p.log" OUT="$OUT/$tag" MARKS="$WORK/marks-$tag" DUMP="$DUMP" \
    PHASES="$phases" HANG_S="$HANG_S" TAG="$tag" "$@" \
    timeout -k 10 "$limit" $TORCHRUN --standalone --nnodes 1 --nproc-per-node 2 --monitor-interval 0.5 \
    "$HERE/smoke_job.py" > "$OUT/$tag/job.log" 2>&1
  local rc=$?
  log "$tag: exit $rc ($(grep -c '"msg"' "$OUT/$tag/job.log") job lines)"
  return $rc
}

run_job main "$JOB_S" ops,bench,hang,end \
  NCCL_PROFILER_PLUGIN="$SO" NCCLWATCH_PROFILER_DIR="$WORK/regions"
"$DUMP" -dir "$WORK/regions" > "$OUT/main/dump-final.json" 2>> "$RUNLOG"
cp "$WORK"/regions/*.bin "$OUT/main/regions/" 2>> "$RUNLOG"
grep -h -e 'PROFILER/Plugin' -e 'NCCL watchdog profiler' -e 'NCCL version' "$OUT"/main/nccl.*.log 2> /dev/null |
  sed 's/^/  /' | tee -a "$RUNLOG"

if [ $(( $(date +%s) - T0 + BASELINE_S )) -le "$HARD_S" ]; then
  run_job baseline "$BASELINE_S" bench NCCL_PROFILER_PLUGIN=none
else
  log "baseline: skipped, it could not end within HARD_S=${HARD_S}s"
fi

$PY "$HERE/smoke_check.py" "$OUT" > "$OUT/summary.txt" 2>&1
rc=$?
cat "$OUT/summary.txt"
log "done: $(tail -1 "$OUT/summary.txt")"
exit $rc
