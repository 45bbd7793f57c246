#!/usr/bin/env bash
# The profiler plugin's cost on 4 GPUs, as one device command (e2e/gpu/README.md, "The plugin's
# overhead on 4 GPUs"): overhead4.py's randomized runs (NVLink and socket, with and without the
# plugin, all-reduce / all-gather / a ring of sends from 1 KiB to 256 MiB) under one torchrun
# launch, in at most about 5 minutes; then three files under $OUT:
#
#   overhead4.json     every run and cell; per (transport, op, size) the medians, the difference,
#                      its bootstrap 95 % interval, the enqueue CPU time, the goal
#   overhead4.md       the table for docs/validation.md
#   overhead4-raw.tgz  the plan, the job's output, each run's NCCL logs and plugin regions
#                      (profdump JSON, on /dev/shm while the run lasts), nvidia-smi, versions
#
#   bash e2e/gpu/overhead4.sh                 # on nvidia-h100-x4, from the repo root
#   DRYRUN=1 bash e2e/gpu/overhead4.sh        # here: stub torch, no GPU (make bench-plugin-overhead-dry)
#
# Knobs: REPS (6), SEED (from the clock, recorded), BUDGET_S (255: the launch, killed at
# BUDGET_S+20; the script adds a few seconds to pack: at most 5 minutes in all), TRANSPORTS
# (nvlink,socket), SIZES (bytes, comma-separated), FORK=0 (a fresh python per run instead of a
# fork), PLUGIN_SO, PROFDUMP, OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
OUT=${OUT:-$PWD/bin/overhead4-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/overhead4.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PLUGIN_SO=${PLUGIN_SO:-$PWD/bin/libnccl-profiler-ncclwatch.so}
PROFDUMP=${PROFDUMP:-$PWD/bin/profdump-linux-amd64}
DRYRUN=${DRYRUN:-0}
if [ "$DRYRUN" = 1 ]; then
  BUDGET_S=${BUDGET_S:-150}
  REPS=${REPS:-5}
fi
BUDGET_S=${BUDGET_S:-255}
REPS=${REPS:-6}
log() { printf '%s overhead4: %s\n' "$(date +%T)" "$*" | tee -a "$WORK/run.log"; }

[ -f "$PLUGIN_SO" ] || { log "no plugin at $PLUGIN_SO (make plugin; carry it)"; exit 2; }
[ -x "$PROFDUMP" ] || log "no profdump at $PROFDUMP: the plugin's regions are kept, not summarized"
args=(--out "$WORK" --reps "$REPS" --budget-s "$BUDGET_S" --plugin "$PLUGIN_SO" --profdump "$PROFDUMP")
[ -n "${SEED:-}" ] && args+=(--seed "$SEED")
[ -n "${TRANSPORTS:-}" ] && args+=(--transports "$TRANSPORTS")
[ -n "${SIZES:-}" ] && args+=(--sizes "$SIZES")
[ "${FORK:-1}" = 0 ] && args+=(--no-fork)
if [ "$DRYRUN" = 1 ]; then
  args+=(--dry --cell-s 0.02 --cell-s-socket 0.02)
else
  { nvidia-smi -L; nvidia-smi topo -m; } > "$WORK/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed"
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  [ "${ngpu:-0}" -ge 4 ] || log "WARNING: $ngpu GPUs; this benchmark wants 4 (one rank per GPU)"
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' > "$WORK/versions.txt" 2>&1
fi
log "start: reps $REPS, budget ${BUDGET_S}s, dry $DRYRUN"
# The launch cannot outlive the budget: overhead4.py kills it at BUDGET_S+20 s, and this
# timeout is the last guard.
timeout -k 10 $((BUDGET_S + 40)) python3 e2e/gpu/overhead4.py "${args[@]}" > "$WORK/overhead4.out" 2>&1
rc=$?
log "overhead4.py rc $rc after $(($(date +%s) - t0)) s"
cp "$WORK/overhead4.json" "$WORK/overhead4.md" "$OUT/" 2>/dev/null || log "no results written"
# Raw material: each run's NCCL logs, each plugin rank's region as profdump JSON (dumped by
# the rank before its communicators' finalize), the job's output.
for d in "$WORK"/work/runs/*; do rm -rf "$d/store"; done
tar -C "$WORK" -czf "$OUT/overhead4-raw.tgz" work run.log overhead4.out $(cd "$WORK" && ls nvidia-smi.txt versions.txt 2>/dev/null) 2>/dev/null
log "done in $(($(date +%s) - t0)) s: $(ls "$OUT" | tr '\n' ' ')"
cat "$WORK/overhead4.md" 2>/dev/null || tail -40 "$WORK/overhead4.out"
exit $rc
