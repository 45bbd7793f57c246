#!/usr/bin/env bash
# The fault matrix of issue 30 as one device command (<= 9.5 minutes): short 4-rank jobs on one
# GPU (each rank its own NCCL_HOSTID, so every link is NET/Socket over lo), one fault class
# per job, the faulty rank and the fault's timing and severity drawn from SEED, the watchdog
# (detector with embedded etcd for the whole command, a sidecar per job) watching live; the
# truth of every run and the scorer's table come back.
#
#   SEED=1 MODE=plugin bash e2e/gpu/matrix.sh            # every class once, WARN logs + plugin
#   SEED=2 MODE=info bash e2e/gpu/matrix.sh              # every class once, INFO logs
#   SEED=3 MODE=both bash e2e/gpu/matrix.sh              # one job, both feeds (two sidecars)
#   SEED=4 MODE=mixed bash e2e/gpu/matrix.sh oom frozen host_lag*2 slow_nic:info
#   DRYRUN=1 SEED=1 MODE=plugin bash e2e/gpu/matrix.sh healthy frozen   # here: the stub torch
#
# Cases (arguments or CASES): a class, CLASS:MODE, CLASS*N, or "all" (default). Classes:
# healthy host_lag host_jitter periodic_pause long_stall cpu_starve gpu_hog slow_nic flap_nic
# oom exit_early pg_destroyed frozen skip_coll wrong_call (python3 e2e/gpu/matrix.py classes).
#
# Carried from here: bin/watchdog-linux-amd64, bin/libnccl-profiler-ncclwatch.so,
# bin/profdump-linux-amd64, bin/ratelimit.so. Results in $OUT (8 files): matrix.json (plan,
# truth and record of every run), incidents.jsonl (the detector's incidents as polled),
# score.md and score.json (matrix_score.py), run.log, logs.tgz, samples.tgz, prof.tgz.
# Score several commands together: python3 e2e/gpu/matrix_score.py OUT1 OUT2 OUT3.
#
# Time: LIMIT_S (545) for the runs and the watchdog's shutdown (a run starts only if its
# estimate fits; the current one is cut at LIMIT_S - FINISH_S); then scoring and packing
# (~10 s); a guard kills the driver at LIMIT_S + 25.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/devcmd.sh"
export T0
LIMIT_S=${LIMIT_S:-545}
export RATELIMIT_SO=${RATELIMIT_SO:-bin/ratelimit.so}
[ "${DRYRUN:-0}" = 1 ] && export OUT=${OUT:-/tmp/e2e-matrix-dry-out}
devcmd_start matrix "$RATELIMIT_SO"
export LIMIT_S SEED=${SEED:-1} MODE=${MODE:-plugin}

if [ "${DRYRUN:-0}" = 1 ]; then
  # Here, without GPU: job.py on the stub torch (zygote.py imports it), free ports (other
  # sessions may run dry runs too), the stub's short steps, fewer CPU hogs.
  read -r p1 p2 p3 p4 < <(free_ports 4)
  export DRYRUN DET_PORT=${DET_PORT:-$p1} ETCD_PORT=${ETCD_PORT:-$p2} SC_PORT=${SC_PORT:-$p3} STORE_PORT=${STORE_PORT:-$p4}
  export WORK=${WORK:-$(mktemp -d /tmp/e2e-matrix-work.XXXXXX)}
  export TORCH_PY=python3 NVML=${NVML:-false} STALL_MIN_S=${STALL_MIN_S:-12} STALL_MAX_S=${STALL_MAX_S:-15}
  export WARMUP_MIN_S=${WARMUP_MIN_S:-5} WARMUP_MAX_S=${WARMUP_MAX_S:-7}
else
  export WORK=${WORK:-/tmp/e2e-matrix-work}
  # The python with torch: python3, else torchrun's own (as run.sh finds it).
  if [ -z "${TORCH_PY:-}" ]; then
    TORCH_PY=python3
    if ! python3 -c 'import torch' 2>/dev/null; then
      tp=$(head -1 "$(command -v torchrun 2>/dev/null || echo /dev/null)" 2>/dev/null | sed -n 's/^#! *//p')
      [ -n "$tp" ] && [ -x "${tp%% *}" ] && TORCH_PY=$tp
    fi
  fi
  export TORCH_PY
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  # go-nvml dlopens libnvidia-ml.so.1: the driver's usual folders, in case they are not on the path.
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
    [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
  done
  export LD_LIBRARY_PATH
fi
ulimit -c 0 2>/dev/null
rm -f "$OUT/run.log"

timeout -k 5 $((LIMIT_S + 25 - ($(date +%s) - T0))) python3 "$HERE/matrix.py" run "$@"
rc=$?
echo "matrix: driver rc=$rc after $(( $(date +%s) - T0 ))s" | tee -a "$OUT/run.log"

timeout 30 python3 "$HERE/matrix_score.py" "$OUT" --json "$OUT/score.json" > "$OUT/score.md" 2>> "$OUT/run.log"
src=$?  # 0: every goal holds, 1: one does not, else the scorer failed
[ "$src" -le 1 ] || echo "matrix: matrix_score.py failed rc=$src (see run.log)" | tee -a "$OUT/run.log"
cat "$OUT/score.md"

# Pack (each archive at most ~15 MiB): logs (NCCL logs, stdout, sidecar/detector/zygote logs,
# offline analyses), samples (*.jsonl, metrics), prof (the plugin's region files).
if [ -d "$WORK" ]; then
  ( cd "$WORK" && find . -type f ! -path './etcd/*' ! -path '*/state*/*' ! -path '*/stubnccl/*' ! -name '*.jsonl' \
      ! -name '*metrics*' ! -name 'incidents.final.json' ! -path '*/prof/*' ! -name 'prof-final.*' | sort ) > "$WORK/.list-logs"
  ( cd "$WORK" && find . -type f \( -name '*.jsonl' -o -name '*metrics*' -o -name 'incidents.final.json' \) | sort ) > "$WORK/.list-samples"
  ( cd "$WORK" && find . -type f \( -path '*/prof/*' -o -name 'prof-final.*' \) | sort ) > "$WORK/.list-prof"
  for k in logs samples prof; do
    [ -s "$WORK/.list-$k" ] || continue
    ( cd "$WORK" && timeout 60 tar -czf "$OUT/$k.tgz" -T ".list-$k" 2>/dev/null )
    sz=$(stat -c %s "$OUT/$k.tgz" 2>/dev/null || echo 0)
    if [ "$sz" -gt $((15 << 20)) ]; then  # the device returns files of at most 16 MiB
      echo "matrix: $k.tgz is $sz bytes: cutting its files over 2 MiB to their first and last MiB" | tee -a "$OUT/run.log"
      while read -r f; do
        [ "$(stat -c %s "$WORK/$f")" -gt $((2 << 20)) ] || continue
        { head -c 1048576 "$WORK/$f"; printf '\n...[cut by matrix.sh]...\n'; tail -c 1048576 "$WORK/$f"; } > "$WORK/$f.cut" && mv "$WORK/$f.cut" "$WORK/$f"
      done < "$WORK/.list-$k"
      ( cd "$WORK" && timeout 60 tar -czf "$OUT/$k.tgz" -T ".list-$k" 2>/dev/null )
    fi
  done
fi
echo "matrix: done in $(( $(date +%s) - T0 ))s; $OUT: $(cd "$OUT" && ls | tr '\n' ' ')" | tee -a "$OUT/run.log"
exit $rc
