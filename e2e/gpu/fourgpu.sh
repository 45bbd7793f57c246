#!/usr/bin/env bash
# The 4-GPU validation of issues 22, 23 and 25 as three device commands of at most 9 minutes
# each (nvidia-h100-x4: 4 GPUs, one rank per GPU; the device allows 10 minutes per command and
# 8 files back). Every job runs once and feeds two sidecars: <case>-info reads its NCCL INFO
# logs (µs timestamps), <case>-plugin the profiler plugin's regions and the WARN lines of the
# same logs; one detector judges both. Flight Recorder is on in every job.
#
#   bash e2e/gpu/fourgpu.sh A   # slowdowns (issue 22): phase jobs on NVLink (slow hosts and
#                               # slow GPUs, persistent and intermittent, 1.3x-10x, each on
#                               # its own rank between healthy phases) and on the socket
#                               # transport (slow links: one rank's send rate limited by the
#                               # LD_PRELOAD shim); ~7.5 min
#   bash e2e/gpu/fourgpu.sh B   # hangs, mismatch, crash and the Flight Recorder cases (issues
#                               # 22/23/25): silent, frozen (SIGSTOP), left_pg, skip_sub,
#                               # order_inversion, gpu_hang, crash, sub_mismatch, wrong_dtype;
#                               # fr_trace on each case's dumps; ~7.5 min
#   bash e2e/gpu/fourgpu.sh C   # leftovers (issue 25's list): pause, straggler_onset, healthy,
#                               # p2p_skip, wrong_op, order_inversion_full, wrong_size, as
#                               # many as fit; C_PRE runs first (see below); ~6 min
#
# Here, without GPU: DRYRUN=1 bash e2e/gpu/fourgpu.sh A|B|C (job.py on the stub torch, shorter
# phases and timeouts). Carried from here (no Go there, and build C here): bin/watchdog-linux-amd64
# (cgo build), bin/libnccl-profiler-ncclwatch.so and bin/profdump-linux-amd64 (make plugin),
# bin/ratelimit.so (gcc -O2 -shared -fPIC -o bin/ratelimit.so e2e/gpu/ratelimit/shim.c -ldl -lpthread).
#
# Results under $OUT (at most 8 files): results.json, results.md, run.log, logs.tar.zst,
# samples.tar.zst, fr.tar.zst, prof.tar.zst (.tar.xz or .tgz where zstd is missing), and for C
# whatever C_PRE left in $OUT (keep it to one file; its stdout and stderr go into logs.*).
#
# Time: LIMIT_S (540) for the whole command. run.sh starts a case only if its cap fits, its
# guard SIGTERMs it at HARD_S (what is left of LIMIT_S less 40 s for collect and pack), after
# which it stops the case, still collects, packs and returns; a guard here kills what is left
# at LIMIT_S + 20.
#
# Knobs: CASES (the part's list), PG_TIMEOUT (20), COMPUTE_S (0.1), PHASE_SCALE (1; dry run
# 0.4), FR_TIMING (B: 1, TORCH_NCCL_ENABLE_TIMING so dumps say "started"), DETECTOR_FLAGS,
# SIDECAR_FLAGS, SIDECAR_CASE_FLAGS ('--stdout-logs {case}/stdout.log' and the like; {case} is
# the case folder), C_PRE (part C: a command run first, e.g. the plugin overhead of issue 25,
# given C_PRE_S (200) seconds; it may write into $OUT), plus every knob of run.sh and phases.py.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/devcmd.sh"
part=${1:-}
LIMIT_S=${LIMIT_S:-540}
export RATELIMIT_SO=${RATELIMIT_SO:-bin/ratelimit.so}
devcmd_start fourgpu "$RATELIMIT_SO"

# Every process of the run, on the device: one rank per GPU, no NVLS multicast anywhere.
export FOUR_GPU=1 FEEDS=both FR=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PG_TIMEOUT=${PG_TIMEOUT:-20} CRASH_MONITOR_S=${CRASH_MONITOR_S:-15} COMPUTE_S=${COMPUTE_S:-0.1}
export PAUSE_S=${PAUSE_S:-30} GPU_HANG_S=${GPU_HANG_S:-60}
export STEPS_sub_mismatch=${STEPS_sub_mismatch:-90}
if [ "${DRYRUN:-0}" = 1 ]; then  # here, without GPU: stubrun.py and the stub torch
  read -r p1 p2 p3 p4 < <(free_ports 4)
  export DRYRUN DET_PORT=${DET_PORT:-$p1} ETCD_PORT=${ETCD_PORT:-$p2} SC_PORT=${SC_PORT:-$p3} SC_PORT2=${SC_PORT2:-$p4}
  export RAS_ADDR=${RAS_ADDR:-127.0.0.1:1} COMPUTE_S=0.05 EXTRA_S=${EXTRA_S:-0}
  export PHASE_SCALE=${PHASE_SCALE:-0.4} PHASE_EST_STEP_S=${PHASE_EST_STEP_S:-0.5} RATE_MILD=${RATE_MILD:-2M} RATE_STRONG=${RATE_STRONG:-300K} RATE_BURST=${RATE_BURST:-300K}
  export WORK=${WORK:-$(mktemp -d /tmp/e2e-fourgpu-work.XXXXXX)}
fi
export WORK=${WORK:-/tmp/e2e-fourgpu-work}
case $part in
  A)
    export CASES=${CASES:-"phases_nvl phases_sock"} FR_TIMING=${FR_TIMING:-0}
    ;;
  B)
    export CASES=${CASES:-"silent frozen left_pg skip_sub order_inversion gpu_hang crash sub_mismatch wrong_dtype"}
    export FR_TIMING=${FR_TIMING:-1}
    ;;
  C)
    export FR_TIMING=${FR_TIMING:-1}
    if [ -n "${C_PRE:-}" ]; then
      echo "fourgpu C: C_PRE for at most ${C_PRE_S:-200}s: $C_PRE"
      # Its output goes into logs.* (run.sh packs PACK_EXTRA), so $OUT keeps room for one file of its own.
      OUT="$OUT" timeout -k 5 "${C_PRE_S:-200}" bash -c "$C_PRE" > "$WORK.c_pre.log" 2>&1
      echo "fourgpu C: C_PRE rc=$? after $(( $(date +%s) - T0 ))s" | tee -a "$WORK.c_pre.log"
      export PACK_EXTRA="$WORK.c_pre.log"
    fi
    export CASES=${CASES:-"pause straggler_onset healthy p2p_skip wrong_op order_inversion_full wrong_size"}
    ;;
  *)
    echo "usage: bash e2e/gpu/fourgpu.sh A|B|C" >&2
    exit 2
    ;;
esac
# run.sh's own clock starts now: give it what is left of LIMIT_S, less 40 s for what it does
# after its guard fires (stop the case, collect, pack).
spent=$(( $(date +%s) - T0 ))
export HARD_S=$((LIMIT_S - spent - 40)) TOTAL_S=$((LIMIT_S - spent - 50))
export OUT
bash "$HERE/run.sh" &
RUN_PID=$!
# The last resort: whatever run.sh does, nothing of this command outlives LIMIT_S + 20 s.
( sleep $((LIMIT_S - spent + 20)) & sp=$!; trap 'kill $sp 2>/dev/null; exit 0' TERM; wait $sp
  kill -TERM "$RUN_PID" 2>/dev/null; sleep 5; kill -KILL "$RUN_PID" 2>/dev/null ) &
LAST_PID=$!
wait "$RUN_PID"
rc=$?
kill -TERM "$LAST_PID" 2>/dev/null
echo "fourgpu $part: run.sh rc=$rc, $(( $(date +%s) - T0 ))s in all; $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $rc
