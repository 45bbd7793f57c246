#!/usr/bin/env bash
# The one-GPU validation of issue 15 as two device commands of at most 9 minutes each (the
# device allows 10 minutes per command and 8 files back): 4 NCCL ranks share GPU 0 (one
# NCCL_HOSTID each, NET/Socket on loopback).
#
#   bash e2e/gpu/onegpu.sh plugin   # NCCL_DEBUG=WARN + the profiler plugin: healthy, silent,
#                                   # frozen, crash, order_inversion, sub_mismatch (~6 min,
#                                   # at most ~7.5 with every job at its cap), then
#                                   # order_inversion_full if it still fits
#   bash e2e/gpu/onegpu.sh info     # the plugin's overhead (1 and 2 ranks, with and without,
#                                   # 3 interleaved runs each, <= 3.3 min), then the same cases
#                                   # with INFO logs and no plugin, the order inversion first
#                                   # (the log-only rule), as many as fit
#
# Here, the same without GPU: DRYRUN=1 bash e2e/gpu/onegpu.sh plugin|info (stub torch).
# Carried from here (no Go and no gcc there): bin/watchdog-linux-amd64 (cgo build),
# bin/libnccl-profiler-ncclwatch.so and bin/profdump-linux-amd64 (make plugin).
# Results under $OUT: results.json, results.md, run.log, logs.tgz, samples.tgz, prof.tgz (run.sh) and,
# for "info", overhead.json and overhead.tgz (overhead.md + every run's output): 7 files.
# Time guards: run.sh starts a case only if its cap fits and SIGTERMs itself at HARD_S; the
# overhead stops starting runs after OVERHEAD_S; the whole command ends before 9 minutes.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/devcmd.sh"
part=${1:-}
LIMIT_S=${LIMIT_S:-540}          # the whole command
OVERHEAD_S=${OVERHEAD_S:-200}    # part "info": the overhead measurement
devcmd_start onegpu

export ONE_GPU=1 PG_TIMEOUT=${PG_TIMEOUT:-30} CRASH_MONITOR_S=${CRASH_MONITOR_S:-15}
dry=()
if [ "${DRYRUN:-0}" = 1 ]; then  # here, without GPU: stubrun.py and the stub torch
  read -r p1 p2 p3 < <(free_ports 3)
  export DRYRUN COMPUTE_S=${COMPUTE_S:-0.05} DET_PORT=${DET_PORT:-$p1} ETCD_PORT=${ETCD_PORT:-$p2} SC_PORT=${SC_PORT:-$p3}
  export RAS_ADDR=${RAS_ADDR:-127.0.0.1:1}
  dry=(--dry)
fi
export STEPS_sub_mismatch=${STEPS_sub_mismatch:-90}  # if NCCL does not hang on it, end soon
# Dry runs may share this machine (ports above): each gets its own work folder too.
if [ "${DRYRUN:-0}" = 1 ]; then export WORK=${WORK:-$(mktemp -d /tmp/e2e-onegpu-work.XXXXXX)}; fi
export WORK=${WORK:-/tmp/e2e-onegpu-work}
case $part in
  plugin)
    export LOGMODE=plugin CASES=${CASES:-"healthy silent frozen crash order_inversion sub_mismatch order_inversion_full"}
    ;;
  info)
    oh_work=$WORK-overhead
    rm -rf "$oh_work"
    timeout -k 5 $((OVERHEAD_S + 20)) python3 "$HERE/overhead.py" --out "$oh_work" --max-s "$OVERHEAD_S" \
      --plugin "$PLUGIN_SO" "${dry[@]}" > "$oh_work.log" 2>&1
    echo "onegpu: overhead.py rc=$? after $(( $(date +%s) - T0 ))s"
    cp "$oh_work/overhead.json" "$OUT/" 2>/dev/null
    cp "$oh_work.log" "$oh_work/overhead.log" 2>/dev/null
    (cd "$oh_work" && tar czf "$OUT/overhead.tgz" .) 2>/dev/null
    cat "$oh_work/overhead.md" 2>/dev/null || tail -20 "$oh_work.log"
    export LOGMODE=info CASES=${CASES:-"order_inversion sub_mismatch silent crash healthy frozen order_inversion_full"}
    ;;
  *)
    echo "usage: bash e2e/gpu/onegpu.sh plugin|info" >&2
    exit 2
    ;;
esac
# run.sh's own clock starts now: give it what is left of LIMIT_S, less 30 s for what it does
# after its guard fires (stop the case, collect, tar).
spent=$(( $(date +%s) - T0 ))
export HARD_S=$((LIMIT_S - spent - 30)) TOTAL_S=$((LIMIT_S - spent - 40))
bash "$HERE/run.sh"
rc=$?
echo "onegpu $part: run.sh rc=$rc, $(( $(date +%s) - T0 ))s in all; $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $rc
