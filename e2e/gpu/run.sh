#!/usr/bin/env bash
# Live end-to-end test on real GPUs: faulty PyTorch/NCCL jobs (job.py) caught by the watchdog
# (detector with embedded etcd + one sidecar per case), with detection latency, PyTorch's
# own timeout and NVML readings recorded. See e2e/gpu/README.md.
#
#   bash e2e/gpu/run.sh               # on the device machine, from the repo root, $OUT set
#   ONE_GPU=1 bash e2e/gpu/run.sh     # 4 ranks sharing GPU 0 (NCCL_HOSTID per rank, NET/Socket)
#   FOUR_GPU=1 bash e2e/gpu/run.sh    # 4 ranks, rank r on cuda:r; both feeds from one job run
#                                     # (INFO logs + the plugin; two sidecars), Flight Recorder
#                                     # on, phase jobs of slowdowns (fourgpu.sh drives it)
#   LOGMODE=plugin ...                # NCCL_DEBUG=WARN + the profiler plugin (default: INFO logs)
#   DRYRUN=1 bash e2e/gpu/run.sh      # no GPU/torch: replay.py stands in for torchrun; with
#                                     # ONE_GPU=1 or FOUR_GPU=1, stubrun.py runs job.py on the
#                                     # stub torch
#
# A case token is a scenario of job.py, or SCENARIO:MODE to run it in the other log mode
# (job name SCENARIO-MODE), e.g. CASES="order_inversion order_inversion:info".
#
# Results under $OUT: results.json, results.md, run.log, logs.tgz, samples.tgz, and prof.tgz
# (plugin regions) and fr.tgz (Flight Recorder) when there are any (FOUR_GPU: .tar.zst).
# Every knob below can be set from the environment.
set -u
MAIN_PID=$$
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
T0=$(date +%s)
T0F=$(date +%s.%N)

OUT=${OUT:-$ROOT/tmp/e2e-gpu-out}
WORK=${WORK:-/tmp/e2e-gpu-work}
WATCHDOG=${WATCHDOG:-bin/watchdog-linux-amd64}
DRYRUN=${DRYRUN:-0}
ONE_GPU=${ONE_GPU:-0}
FOUR_GPU=${FOUR_GPU:-0}
[ "$FOUR_GPU" = 1 ] && ONE_GPU=0
LOGMODE=${LOGMODE:-info}         # info: NCCL_DEBUG=INFO logs; plugin: NCCL_DEBUG=WARN + the profiler plugin
# FEEDS=both: the job logs at INFO *and* loads the plugin; sidecar <case>-info reads the INFO
# logs only (no plugin files), sidecar <case>-plugin reads the plugin's regions and a
# WARN-only copy of the same logs (monitor.py warncopy: what NCCL_DEBUG=WARN would have
# written); one detector judges both. FEEDS=single: one sidecar per case, LOGMODE's feed.
FEEDS=${FEEDS:-$([ "$FOUR_GPU" = 1 ] && echo both || echo single)}
FR=${FR:-$([ "$FOUR_GPU" = 1 ] && echo 1 || echo 0)}  # Flight Recorder on, dumps on timeout, fr_trace after
FR_TIMING=${FR_TIMING:-0}        # TORCH_NCCL_ENABLE_TIMING=1: dumps say "started" too
if [ "$FOUR_GPU" = 1 ]; then
  # One rank per GPU on an NVLink node: no NVLS multicast (its fabric state is not ours to
  # set up), in every process started here (sidecars, hogs, the job, fr_trace).
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  CASES=${CASES:-"phases_nvl phases_sock silent frozen left_pg skip_sub order_inversion gpu_hang crash sub_mismatch wrong_dtype"}
elif [ "$ONE_GPU" = 1 ]; then
  CASES=${CASES:-"healthy silent frozen crash order_inversion sub_mismatch"}
else
  CASES=${CASES:-"healthy silent wrong_op crash wrong_dtype wrong_size straggler_onset pause"}
fi
PLUGIN_SO=${PLUGIN_SO:-bin/libnccl-profiler-ncclwatch.so}
PROFDUMP=${PROFDUMP:-bin/profdump-linux-amd64}
# Time: cases are only started if they can end by T0+TOTAL_S-RESERVE_S; a guard sends
# SIGTERM at T0+HARD_S; the final collect/tar then takes a few seconds (< 9.5 min in all).
TOTAL_S=${TOTAL_S:-530}
RESERVE_S=${RESERVE_S:-20}
HARD_S=${HARD_S:-545}
POST_S=${POST_S:-4}              # keep watching this long after the job ended
PG_TIMEOUT=${PG_TIMEOUT:-45}     # PyTorch ProcessGroupNCCL timeout (s), all cases
FREEZE_S=${FREEZE_S:-$((PG_TIMEOUT + 5))}  # frozen case: SIGCONT this long after the SIGSTOP
COMPUTE_S=${COMPUTE_S:-0.15}     # compute phase per step (job.py calibrates matmuls to it)
STEP_S=${STEP_S:-0.17}           # replay.py's step time in a dry run
PAUSE_S=${PAUSE_S:-60}           # pause case: both ranks idle this long
STRAGGLE_S=${STRAGGLE_S:-0.2}    # straggler_onset: rank 1's extra sleep per step
CRASH_MONITOR_S=${CRASH_MONITOR_S:-15}  # crash case: torchrun --monitor-interval, so the
                                         # survivor waits like a rank on another node would
MONITOR_S=${MONITOR_S:-0.5}      # torchrun --monitor-interval for the other cases
if [ "$ONE_GPU" = 1 ] || [ "$FOUR_GPU" = 1 ]; then NPROC=${NPROC:-4}; EXTRA_S=${EXTRA_S:-10}; else NPROC=${NPROC:-2}; EXTRA_S=${EXTRA_S:-0}; fi
STUBBED=0  # job.py's ranks on the stub torch (dry run of the one- or four-GPU layouts)
[ "$DRYRUN" = 1 ] && { [ "$ONE_GPU" = 1 ] || [ "$FOUR_GPU" = 1 ]; } && STUBBED=1
RATELIMIT_SO=${RATELIMIT_SO:-bin/ratelimit.so}  # the slow-link shim (phases_sock)
if [ "$STUBBED" = 1 ]; then
  TORCHRUN=${TORCHRUN:-"python3 $HERE/stubrun.py"}  # job.py on the stub torch and its fake NCCL
elif [ -z "${TORCHRUN:-}" ]; then
  if command -v torchrun > /dev/null 2>&1; then TORCHRUN=torchrun; else TORCHRUN="python3 -m torch.distributed.run"; fi
fi
# The python with torch, for the GPU hogs and fr_trace: python3, else torchrun's own.
TORCH_PY=${TORCH_PY:-python3}
if [ "$DRYRUN" != 1 ] && ! python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null; then
  tp=$(head -1 "$(command -v torchrun 2>/dev/null || echo /dev/null)" 2>/dev/null | sed -n 's/^#! *//p')
  [ -n "$tp" ] && [ -x "${tp%% *}" ] && TORCH_PY=$tp
fi
DET_PORT=${DET_PORT:-9300}
ETCD_PORT=${ETCD_PORT:-2379}
SC_PORT=${SC_PORT:-9301}
SC_PORT2=${SC_PORT2:-$((SC_PORT + 1))}  # FEEDS=both: the plugin feed's sidecar
RAS_ADDR=${RAS_ADDR:-127.0.0.1:28028}
DETECTOR_FLAGS=${DETECTOR_FLAGS:-}  # e.g. "--hang-floor 10s --hang-k 4"
SIDECAR_FLAGS=${SIDECAR_FLAGS:-}
NODE=${NODE:-$(hostname 2>/dev/null | cut -d. -f1)}
NODE=${NODE:-node0}
# The replayed logs name the capture's pids, not live processes: no /proc checks then.
if [ "$DRYRUN" = 1 ]; then NVML=${NVML:-false}; CHECK_PIDS=${CHECK_PIDS:-$([ "$STUBBED" = 1 ] && echo true || echo false)}
else NVML=${NVML:-true}; CHECK_PIDS=${CHECK_PIDS:-true}; fi
DET_URL=http://127.0.0.1:$DET_PORT
SC_URL=http://127.0.0.1:$SC_PORT
SC_URL2=http://127.0.0.1:$SC_PORT2
# Extra sidecar flags per case, {case} = the case's folder (e.g. '--stdout-logs {case}/stdout.log'
# to let the sidecar read PyTorch's own output, or a Flight Recorder dump folder {case}/fr).
SIDECAR_CASE_FLAGS=${SIDECAR_CASE_FLAGS:-}

# Per-case plan: BUDGET (s, hard cap on the job), STEPS, FAULT_STEP. Expected durations on
# 2x H200 (~8 s torch start, ~0.17 s steps): healthy 29, silent/wrong_op 8+5+PG_TIMEOUT+3,
# crash 8+5+CRASH_MONITOR_S+2, wrong_dtype/size 25, straggler_onset 35, pause 18+PAUSE_S.
# One GPU (4 ranks): EXTRA_S (10) more per case for the slower start, the fault at step 20.
# Override one with e.g. BUDGET_pause=100 STEPS_healthy=60 FAULT_STEP_silent=20.
case_plan() {
  local c=$1 b s f
  PHASE_PLAN=""
  case $c in
    phases_*)        # a phase plan of phases.py: its expected length, plus start and slack
      PHASE_PLAN=$c
      b=$(python3 "$HERE/phases.py" "$c" --estimate) || return 1
      b=$(( b + 35 )); s=0; f=100000 ;;
    healthy)         b=40; s=110; f=100000 ;;
    silent|wrong_op|order_inversion|order_inversion_full) b=$((PG_TIMEOUT + 25)); s=430; f=30 ;;
    sub_mismatch)    b=$((PG_TIMEOUT + 25)); s=90; f=30 ;;  # NCCL may hang on it, or finish
    frozen)          b=$((FREEZE_S + 25)); s=430; f=30 ;;
    crash)           b=$((CRASH_MONITOR_S + 25)); s=430; f=30 ;;
    wrong_dtype|wrong_size) b=35; s=90; f=30 ;;
    straggler_onset) b=45; s=90; f=30 ;;
    gpu_hang|p2p_skip|skip_sub|left_pg) b=$((PG_TIMEOUT + 25)); s=430; f=30 ;;
    pause)           b=$(( ${PAUSE_S%.*} + 30 )); s=60; f=30 ;;
    *) return 1 ;;
  esac
  if [ "$ONE_GPU" = 1 ] || [ "$FOUR_GPU" = 1 ]; then
    b=$((b + EXTRA_S)); [ "$f" -lt 100000 ] && f=20
    [ "$c" = healthy ] && s=60
    [ "$c" = straggler_onset ] && s=50  # ~0.5 s steps once rank 1 sleeps: 90 outlast the cap
  fi
  local v
  v=BUDGET_$c; BUDGET=${!v:-$b}
  v=STEPS_$c; STEPS=${!v:-$s}
  v=FAULT_STEP_$c; FAULT_STEP=${!v:-$f}
  v=FAULT_RANK_$c; FAULT_RANK=${!v:-}
  MI=$MONITOR_S; [ "$c" = crash ] && MI=$CRASH_MONITOR_S
  return 0
}

mkdir -p "$OUT"
rm -rf "$WORK"; mkdir -p "$WORK/cases"
RUNLOG=$OUT/run.log; : > "$RUNLOG"
log() { printf '[%5ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" | tee -a "$RUNLOG"; }
now() { date +%s.%N; }

BG_PIDS=()          # every background process we started, killed by id at the end
JOB_PID=""
SIDECAR_PIDS=()
ABORT=0
kill_pid() {        # kill_pid PID [grace seconds]: TERM, wait, KILL
  local p=$1 g=${2:-3} i
  [ -n "$p" ] || return 0
  kill -0 "$p" 2>/dev/null || return 0
  kill -TERM "$p" 2>/dev/null
  for ((i = 0; i < g * 10; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  return 0
}
kill_group() {      # the job's process group (timeout + torchrun), by its leader's id
  local p=$1
  [ -n "$p" ] || return 0
  kill -TERM -- "-$p" 2>/dev/null
  sleep 1
  kill -KILL -- "-$p" 2>/dev/null
  return 0
}
kill_leftover_ranks() {  # rank processes that outlived torchrun, by the pids they logged
  local d=$1 p
  for p in $( (ls "$d/nccl" 2>/dev/null | sed -n 's/^nccl\..*\.\([0-9][0-9]*\)\.log$/\1/p';
               grep -ao 'WATCHDOG_INFO {[^}]*}' "$d/stdout.log" 2>/dev/null | grep -o '"pid": [0-9]*' | grep -o '[0-9]*$') | sort -u); do
    [ -r "/proc/$p/cmdline" ] || continue
    if tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q 'e2e/gpu/\(job\|replay\)\.py'; then
      log "killing leftover rank process $p"
      kill -KILL "$p" 2>/dev/null
    fi
  done
}
on_term() {
  ABORT=1
  log "SIGTERM/INT: stopping the current case and finishing up"
  [ -n "$JOB_PID" ] && kill_group "$JOB_PID"
}
cleanup() {
  local p
  [ -n "$JOB_PID" ] && kill_group "$JOB_PID"
  for p in "${SIDECAR_PIDS[@]}"; do kill_pid "$p" 2; done
  for p in "${HOG_DIRS[@]}"; do kill_hogs "$p"; done
  for p in "${BG_PIDS[@]}" "${FR_BG_PIDS[@]}"; do kill_pid "$p" 2; done
}
trap on_term TERM INT
ulimit -c 0 2>/dev/null  # an aborting rank (PyTorch timeout) must not spend the budget on a core dump
trap cleanup EXIT

# Hard guard: whatever happens, SIGTERM ourselves at T0+HARD_S.
( trap 'kill $sp 2>/dev/null; exit 0' TERM; sleep "$HARD_S" & sp=$!; wait $sp; kill -TERM "$MAIN_PID" 2>/dev/null ) &
GUARD_PID=$!
BG_PIDS+=("$GUARD_PID")

http_get() {        # http_get URL: body to stdout; curl if there is one, else python
  if command -v curl > /dev/null 2>&1; then curl -fsS -m 2 "$1" 2>/dev/null
  else python3 -c 'import sys,urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=2).read())' "$1" 2>/dev/null; fi
}
wait_http() {       # wait_http URL SECONDS
  local u=$1 n=$(( $2 * 5 )) i
  for ((i = 0; i < n; i++)); do
    http_get "$u" > /dev/null && return 0
    [ "$ABORT" = 1 ] && return 1
    sleep 0.2
  done
  return 1
}

json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# Absolute: some steps run from a case's folder (offline analyze).
case $WATCHDOG in /*) ;; */*) WATCHDOG=$ROOT/$WATCHDOG ;; esac
log "e2e/gpu: dryrun=$DRYRUN one_gpu=$ONE_GPU nproc=$NPROC logmode=$LOGMODE watchdog=$WATCHDOG torchrun='$TORCHRUN' node=$NODE cases=[$CASES] pg_timeout=${PG_TIMEOUT}s out=$OUT work=$WORK"
if [ ! -x "$WATCHDOG" ]; then log "WARNING: $WATCHDOG is not an executable file; detector/sidecar will fail"; fi
# Plugin mode: NCCL loads the plugin by absolute path; the sidecar reads its files through
# NCCLWATCH_PROFILER_DIR (its --profiler-dir).
NEEDS_PLUGIN=false
for c in $CASES; do
  m=${c#*:}
  if [ "$m" = "$c" ]; then m=$LOGMODE; [ "$FEEDS" = both ] && m=both; fi
  [ "$m" != info ] && NEEDS_PLUGIN=true
done
SIDECAR_PROFILER=unknown
if [ "$NEEDS_PLUGIN" = true ]; then
  case $PLUGIN_SO in /*) ;; *) PLUGIN_SO=$ROOT/$PLUGIN_SO ;; esac
  [ -f "$PLUGIN_SO" ] || log "WARNING: $PLUGIN_SO missing (make plugin): plugin-mode jobs run without the plugin"
  [ -x "$PROFDUMP" ] || chmod +x "$PROFDUMP" 2>/dev/null || log "WARNING: $PROFDUMP missing (make plugin): no region dumps"
  if "$WATCHDOG" sidecar -h 2>&1 | grep -q -- '-profiler-dir'; then SIDECAR_PROFILER=true; else SIDECAR_PROFILER=false
    log "WARNING: this watchdog's sidecar has no --profiler-dir: in plugin mode it sees only the WARN lines"; fi
fi

# go-nvml dlopens libnvidia-ml.so.1: add the driver's usual folders in case they are not
# on the loader's path in this image.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
  [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH

# Context, and warm torch's files into the page cache while the detector starts.
if [ "$DRYRUN" != 1 ]; then
  (timeout 20 nvidia-smi --query-gpu=index,pci.bus_id,name,power.limit,clocks.max.sm,temperature.gpu --format=csv; timeout 20 nvidia-smi topo -m) > "$WORK/nvidia-smi.txt" 2>&1
  timeout 60 $TORCH_PY -c 'import torch,sys; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' > "$WORK/versions.txt" 2>&1 &
  BG_PIDS+=($!)
fi
# Raw go-nvml while idle (before anything runs on the GPUs), beside the detector's start.
timeout 20 "$WATCHDOG" nvml-probe --every 200ms --n 10 > "$WORK/nvml-probe.jsonl" 2> "$WORK/nvml-probe.err" &
PROBE_PID=$!

# The detector, with embedded etcd.
mkdir -p "$WORK/etcd"
# shellcheck disable=SC2086
"$WATCHDOG" detector --http "127.0.0.1:$DET_PORT" --embedded-etcd-listen "127.0.0.1:$ETCD_PORT" \
  --embedded-etcd-dir "$WORK/etcd" $DETECTOR_FLAGS > "$WORK/detector.log" 2>&1 &
DET_PID=$!
BG_PIDS+=("$DET_PID")
# Ours must answer, not another process on the port (ours then exits: address in use).
if wait_http "$DET_URL/api/v1/incidents" 30 && kill -0 "$DET_PID" 2>/dev/null; then DET_OK=true; log "detector up (pid $DET_PID)"
else DET_OK=false; log "WARNING: our detector is not answering on $DET_URL or has exited (see detector.log: port in use?); running the cases anyway"; fi
wait "$PROBE_PID"
log "nvml-probe rc=$? ($(wc -l < "$WORK/nvml-probe.jsonl") lines)"
python3 "$HERE/monitor.py" incidents --url "$DET_URL/api/v1/incidents" --out "$WORK/incidents.jsonl" \
  --stop "$WORK/stop-incidents" --every 0.5 --max-s "$HARD_S" > "$WORK/monitor-incidents.log" 2>&1 &
INC_MON_PID=$!
BG_PIDS+=("$INC_MON_PID")

# resume_frozen DIR: the frozen case's rank stops itself (SIGSTOP) and prints its pid; it gets
# SIGCONT FREEZE_S later (after PyTorch's timeout on its peers), or at the end of the case.
resume_frozen() {
  local d=$1 pid="" i
  for ((i = 0; i < BUDGET * 10; i++)); do
    pid=$(grep -ao 'WATCHDOG_FAULT {[^}]*"signal": "SIGSTOP"[^}]*}' "$d/stdout.log" 2>/dev/null | grep -o '"pid": [0-9]*' | head -1 | grep -o '[0-9]*$')
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] || return 0
  echo "$pid" > "$d/frozen.pid"
  sleep "$FREEZE_S"
  kill -CONT "$pid" 2>/dev/null && now > "$d/resumed.t"
  return 0
}

# Processes of the current case that cleanup must end too (hog supervisors and workers).
HOG_DIRS=()
kill_hogs() {       # kill_hogs DIR: the hog supervisors of a case, then any worker left, by id
  local d=$1 p
  [ -s "$d/hog/pids" ] || return 0
  for p in $(sort -u "$d/hog/pids"); do
    [ -r "/proc/$p/cmdline" ] && tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q 'e2e/gpu/hog\.py' && kill -TERM "$p" 2>/dev/null
  done
  sleep 1
  for p in $(sort -u "$d/hog/pids"); do
    if [ -r "/proc/$p/cmdline" ] && tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q 'e2e/gpu/hog\.py'; then
      log "killing leftover hog process $p"
      kill -KILL "$p" 2>/dev/null
    fi
  done
}

# fr_analyze DIR: PyTorch's own analyzer on the case's Flight Recorder dumps (in the
# background, beside the next case): as it stands, with --allow-incomplete-ranks (a frozen
# or crashed rank leaves no dump), and its entries (-j).
FR_BG_PIDS=()
fr_analyze() {
  local d=$1
  if ! timeout 60 $TORCH_PY -c 'import torch.distributed.flight_recorder.fr_trace' > /dev/null 2>&1; then
    echo "fr_trace not run: torch.distributed.flight_recorder is not importable here (dry run?)" > "$d/fr_trace.txt"
    return 0
  fi
  local m="$TORCH_PY -m torch.distributed.flight_recorder.fr_trace"
  # shellcheck disable=SC2086
  ( cd "$d" && timeout 120 $m fr --prefix rank_ > fr_trace.txt 2>&1; echo "[fr_trace rc=$?]" >> fr_trace.txt ) &
  # shellcheck disable=SC2086
  ( cd "$d" && timeout 120 $m fr --prefix rank_ --allow-incomplete-ranks > fr_trace.incomplete.txt 2>&1; echo "[fr_trace rc=$?]" >> fr_trace.incomplete.txt ) &
  # shellcheck disable=SC2086
  ( cd "$d" && timeout 120 $m fr --prefix rank_ --allow-incomplete-ranks -j > fr_trace.entries.txt 2>&1; echo "[fr_trace rc=$?]" >> fr_trace.entries.txt ) &
  wait
}

# offline_analyze DIR: `watchdog analyze` after the case (issue 22: offline must name the same
# roots): the INFO logs alone, and everything the case left (logs, stdout, Flight Recorder).
offline_analyze() {
  local d=$1 f
  ( cd "$d" && timeout 60 "$WATCHDOG" analyze --json nccl > analyze-logs.json 2> analyze-logs.err; echo "$?" > analyze-logs.rc )
  local -a all=(nccl stdout.log)
  for f in fr frjson; do [ -n "$(ls "$d/$f" 2>/dev/null)" ] && all+=("$f"); done
  ( cd "$d" && timeout 60 "$WATCHDOG" analyze --json "${all[@]}" > analyze-all.json 2> analyze-all.err; echo "$?" > analyze-all.rc )
}

run_case() {
  local tok=$1 idx=$2 c mode job d rc=-1 trimmed=false left t_start t_job_start t_job_end t_end i p
  c=${tok%%:*}; mode=${tok#*:}; job=$c
  if [ "$mode" = "$tok" ]; then mode=$LOGMODE; [ "$FEEDS" = both ] && mode=both; else job=$c-$mode; fi
  d="$WORK/cases/$job"
  if ! case_plan "$c" || { [ "$mode" != info ] && [ "$mode" != plugin ] && [ "$mode" != both ]; }; then log "unknown case $tok: skipped"; return; fi
  left=$(( T0 + TOTAL_S - RESERVE_S - $(date +%s) - POST_S - 5 ))
  mkdir -p "$d/nccl" "$d/prof"
  if [ "$ABORT" = 1 ] || [ "$left" -lt 20 ]; then
    log "case $job: SKIPPED (only ${left}s left)"
    printf '{"case":"%s","job":"%s","mode":"%s","index":%d,"skipped":true,"reason":"no time left (%ss)"}\n' "$c" "$job" "$mode" "$idx" "$left" > "$d/case.json"
    return
  fi
  if [ "$BUDGET" -gt "$left" ]; then BUDGET=$left; trimmed=true; fi
  # The feeds: one sidecar each; when both run, jobs CASE-info and CASE-plugin, files *-FEED.*
  local -a F_NAME F_JOB F_LOGS F_PROF F_PORT F_SUF F_PID
  if [ "$mode" = both ]; then
    F_NAME=(info plugin); F_JOB=("$job-info" "$job-plugin"); F_LOGS=("$d/nccl/*.log" "$d/warn/*.log")
    F_PROF=("" "$d/prof"); F_PORT=("$SC_PORT" "$SC_PORT2"); F_SUF=(-info -plugin)
  else
    F_NAME=("$mode"); F_JOB=("$job"); F_LOGS=("$d/nccl/*.log"); F_PORT=("$SC_PORT"); F_SUF=("")
    F_PROF=("$([ "$mode" = plugin ] && echo "$d/prof")")
  fi
  local socket=false
  case $PHASE_PLAN in *sock*) socket=true ;; esac
  log "case $job: mode=$mode budget ${BUDGET}s steps=$STEPS fault_step=$FAULT_STEP fault_rank=${FAULT_RANK:-default} plan=${PHASE_PLAN:-none} socket=$socket monitor_interval=$MI trimmed=$trimmed"
  t_start=$(now)
  local extra=${SIDECAR_CASE_FLAGS//\{case\}/$d}
  for i in "${!F_NAME[@]}"; do
    mkdir -p "$d/state${F_SUF[i]}"
    # The sidecar reads the plugin's files of this case only; with INFO logs none at all (its
    # default would also look in /dev/shm, where other runs may have left some).
    local -a pflag=()
    [ "$SIDECAR_PROFILER" = true ] && pflag=(--profiler-dir="${F_PROF[i]}")
    # shellcheck disable=SC2086
    env NCCLWATCH_PROFILER_DIR="${F_PROF[i]}" "$WATCHDOG" sidecar --etcd-endpoints "http://127.0.0.1:$ETCD_PORT" --job "${F_JOB[i]}" --node "$NODE" \
      --logs "${F_LOGS[i]}" --http "127.0.0.1:${F_PORT[i]}" --nvml="$NVML" --check-pids="$CHECK_PIDS" \
      --ras-addr "$RAS_ADDR" --state-dir "$d/state${F_SUF[i]}" "${pflag[@]}" $SIDECAR_FLAGS $extra > "$d/sidecar${F_SUF[i]}.log" 2>&1 &
    F_PID[i]=$!
    SIDECAR_PIDS+=("${F_PID[i]}")
  done
  local sc_ok=true
  for i in "${!F_NAME[@]}"; do
    if ! wait_http "http://127.0.0.1:${F_PORT[i]}/api/v1/snapshot" 10 || ! kill -0 "${F_PID[i]}" 2>/dev/null; then
      sc_ok=false; log "WARNING: the sidecar for ${F_JOB[i]} is not answering or has exited (see $job/sidecar${F_SUF[i]}.log)"
    fi
  done
  rm -f "$d/stop"
  local -a mon_pids=()
  for i in "${!F_NAME[@]}"; do
    python3 "$HERE/monitor.py" snapshot --url "http://127.0.0.1:${F_PORT[i]}/api/v1/snapshot" --out "$d/snapshots${F_SUF[i]}.jsonl" \
      --metrics-url "http://127.0.0.1:${F_PORT[i]}/metrics" --metrics-out "$d/metrics${F_SUF[i]}.txt" --stop "$d/stop" --every 0.5 \
      --job-url "$DET_URL/api/v1/jobs/${F_JOB[i]}" --job-out "$d/jobview${F_SUF[i]}.jsonl" \
      --max-s $((BUDGET + POST_S + 30)) >> "$d/monitor.log" 2>&1 &
    mon_pids+=($!)
  done
  : > "$d/stdout.log"
  python3 "$HERE/monitor.py" stamp --in "$d/stdout.log" --out "$d/stdout.stamped.log" --stop "$d/stop" \
    --max-s $((BUDGET + POST_S + 30)) >> "$d/monitor.log" 2>&1 &
  mon_pids+=($!)
  if [ "$mode" = both ]; then  # the WARN lines of the INFO logs, for the plugin feed's sidecar
    python3 "$HERE/monitor.py" warncopy --src "$d/nccl" --dst "$d/warn" --stop "$d/stop" \
      --max-s $((BUDGET + POST_S + 30)) >> "$d/monitor.log" 2>&1 &
    mon_pids+=($!)
  fi
  if [ "$mode" != info ] && [ -x "$PROFDUMP" ]; then
    python3 "$HERE/monitor.py" regions --profdump "$PROFDUMP" --dir "$d/prof" --out "$d/regions.jsonl" --stop "$d/stop" \
      --every 1 --max-s $((BUDGET + POST_S + 30)) >> "$d/monitor.log" 2>&1 &
    mon_pids+=($!)
  fi
  BG_PIDS+=("${mon_pids[@]}")

  # The job's NCCL settings: INFO logs, or the plugin and WARN logs, or both at once.
  local -a nccl_env=(NCCL_DEBUG_FILE="$d/nccl/nccl.%h.%p.log" NCCL_DEBUG_TIMESTAMP_LEVELS=ALL "NCCL_DEBUG_TIMESTAMP_FORMAT=[%F %T.%6f] ")
  case $mode in
    plugin) nccl_env+=(NCCL_DEBUG=WARN NCCL_PROFILER_PLUGIN="$PLUGIN_SO" NCCLWATCH_PROFILER_DIR="$d/prof") ;;
    both)   nccl_env+=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET NCCL_PROFILER_PLUGIN="$PLUGIN_SO" NCCLWATCH_PROFILER_DIR="$d/prof") ;;
    *)      nccl_env+=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET) ;;
  esac
  [ "$ONE_GPU" = 1 ] && nccl_env+=(ONE_GPU=1 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
  [ -n "$FAULT_RANK" ] && nccl_env+=(FAULT_RANK="$FAULT_RANK")
  # Flight Recorder: PyTorch dumps every rank's record on a timeout (the pickle), job.py
  # writes the JSON form every 2 s after the fault; fr_trace reads them after the case.
  if [ "$FR" = 1 ]; then
    mkdir -p "$d/fr"
    nccl_env+=(TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE="$d/fr/rank_")
    [ -z "$PHASE_PLAN" ] && nccl_env+=(FR_JSON_DIR="$d/frjson")
    [ "$FR_TIMING" = 1 ] && nccl_env+=(TORCH_NCCL_ENABLE_TIMING=1)
  else
    nccl_env+=(TORCH_NCCL_DUMP_ON_TIMEOUT=0)
  fi
  # order_inversion_full: job.py's order_inversion followed by its full step (p2p, dp, world).
  local scen=$c
  [ "$c" = order_inversion_full ] && { scen=order_inversion; nccl_env+=(INVERSION_FULL_STEP=1); }
  if [ -n "$PHASE_PLAN" ]; then
    # A phase job: the plan, the hogs of its slow-GPU phases (warm before the job needs them),
    # and for the socket plan NCCL's socket transport with the rate-limit shim in every rank.
    scen=phases
    mkdir -p "$d/hog" "$d/rl"
    python3 "$HERE/phases.py" "$PHASE_PLAN" > "$d/phases.json"
    nccl_env+=(PHASES="@$d/phases.json" HOG_DIR="$d/hog" PHASE_S="${PHASE_S:-20}")
    local gp
    for gp in $(python3 "$HERE/phases.py" "$PHASE_PLAN" --hogs); do
      env CUDA_DEVICE_ORDER=PCI_BUS_ID $TORCH_PY "$HERE/hog.py" --gpu "${gp%%:*}" --dir "$d/hog" --pool "${gp#*:}" \
        --max-s $((BUDGET + 30)) $([ "$DRYRUN" = 1 ] && echo --dry) >> "$d/hog/supervisor.log" 2>&1 &
      BG_PIDS+=($!)
    done
    HOG_DIRS+=("$d")
    if [ "$socket" = true ]; then
      local so=$RATELIMIT_SO
      case $so in /*) ;; *) so=$ROOT/$so ;; esac
      [ -f "$so" ] || log "WARNING: $so missing (gcc -O2 -shared -fPIC -o bin/ratelimit.so e2e/gpu/ratelimit/shim.c -ldl -lpthread): no slow link"
      nccl_env+=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 LD_PRELOAD="$so" RATELIMIT_FILE="$d/rl/rank%r")
    fi
  fi
  local resume_pid=""
  if [ "$c" = frozen ]; then
    resume_frozen "$d" &
    resume_pid=$!
    BG_PIDS+=("$resume_pid")
  fi
  t_job_start=$(now)
  if [ "$DRYRUN" = 1 ] && [ "$STUBBED" != 1 ]; then
    env SCENARIO="$c" STEPS="$STEPS" FAULT_STEP="$FAULT_STEP" PG_TIMEOUT="$PG_TIMEOUT" STEP_S="$STEP_S" \
      PAUSE_S="$PAUSE_S" STRAGGLE_S="$STRAGGLE_S" CRASH_HOLD_S="$CRASH_MONITOR_S" PYTHONUNBUFFERED=1 \
      timeout -k 5 "$BUDGET" python3 "$HERE/replay.py" --out "$d/nccl" >> "$d/stdout.log" 2>&1 &
  else
    # shellcheck disable=SC2086
    env SCENARIO="$scen" STEPS="$STEPS" FAULT_STEP="$FAULT_STEP" PG_TIMEOUT="$PG_TIMEOUT" COMPUTE_S="$COMPUTE_S" \
      PAUSE_S="$PAUSE_S" STRAGGLE_S="$STRAGGLE_S" "${nccl_env[@]}" \
      TORCH_NCCL_ASYNC_ERROR_HANDLING=1 \
      CUDA_DEVICE_ORDER=PCI_BUS_ID PYTHONUNBUFFERED=1 \
      timeout -k 5 "$BUDGET" $TORCHRUN --standalone --nproc_per_node="$NPROC" --monitor-interval="$MI" \
      "$HERE/job.py" >> "$d/stdout.log" 2>&1 &
  fi
  JOB_PID=$!
  wait "$JOB_PID"; rc=$?
  while [ "$ABORT" = 1 ] && kill -0 "$JOB_PID" 2>/dev/null; do kill_group "$JOB_PID"; wait "$JOB_PID"; rc=$?; done
  t_job_end=$(now)
  JOB_PID=""
  if [ -n "$resume_pid" ]; then  # the frozen rank gets its SIGCONT now at the latest
    kill_pid "$resume_pid" 1
    if [ -s "$d/frozen.pid" ] && [ ! -s "$d/resumed.t" ] && kill -CONT "$(cat "$d/frozen.pid")" 2>/dev/null; then now > "$d/resumed.t"; fi
  fi
  kill_leftover_ranks "$d"
  [ -n "$PHASE_PLAN" ] && kill_hogs "$d"
  log "case $job: job exited rc=$rc after $(python3 -c "print(round($t_job_end-$t_job_start,1))")s"
  if [ "$FR" = 1 ] && [ -n "$(ls "$d/fr" 2>/dev/null)" ]; then
    fr_analyze "$d" &
    FR_BG_PIDS+=($!)
  fi
  if [ "$mode" != plugin ]; then
    offline_analyze "$d" &
    FR_BG_PIDS+=($!)
  fi
  [ "$ABORT" = 1 ] || sleep "$POST_S"
  touch "$d/stop"
  for i in "${!F_NAME[@]}"; do kill_pid "${F_PID[i]}" 3 & done
  wait "${F_PID[@]}" 2>/dev/null
  SIDECAR_PIDS=()
  for ((i = 0; i < 30; i++)); do
    local alive=0
    for p in "${mon_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${mon_pids[@]}"; do kill_pid "$p" 1; done
  if [ "$mode" != info ] && [ -x "$PROFDUMP" ]; then timeout 10 "$PROFDUMP" -dir "$d/prof" > "$d/prof-final.json" 2> "$d/prof-final.err"; fi
  t_end=$(now)
  local feeds_json
  feeds_json=$(python3 -c 'import json,sys; a=sys.argv[1:]; n=len(a)//3; print(json.dumps([{"feed": a[i], "job": a[n+i], "suffix": a[2*n+i]} for i in range(n)]))' \
    "${F_NAME[@]}" "${F_JOB[@]}" "${F_SUF[@]}")
  printf '{"case":"%s","job":"%s","mode":"%s","one_gpu":%s,"four_gpu":%s,"nproc":%s,"index":%d,"skipped":false,"trimmed":%s,"budget_s":%s,"steps":%s,"fault_step":%s,"fault_rank":"%s","pg_timeout_s":%s,"monitor_interval_s":%s,"t_start":%s,"t_job_start":%s,"t_job_end":%s,"t_end":%s,"rc":%s,"sidecar_ok":%s,"sidecar_profiler":"%s","resumed_t":%s,"aborted":%s,"feeds":%s,"phase_plan":"%s","socket":%s,"fr":%s}\n' \
    "$c" "$job" "$mode" "$([ "$ONE_GPU" = 1 ] && echo true || echo false)" "$([ "$FOUR_GPU" = 1 ] && echo true || echo false)" "$NPROC" "$idx" "$trimmed" "$BUDGET" "$STEPS" "$FAULT_STEP" "$FAULT_RANK" "$PG_TIMEOUT" "$MI" \
    "$t_start" "$t_job_start" "$t_job_end" "$t_end" "$rc" "$sc_ok" "$([ "$mode" != info ] && echo "$SIDECAR_PROFILER" || echo n/a)" \
    "$(cat "$d/resumed.t" 2>/dev/null || echo null)" "$([ "$ABORT" = 1 ] && echo true || echo false)" "$feeds_json" "$PHASE_PLAN" "$socket" \
    "$([ "$FR" = 1 ] && echo true || echo false)" > "$d/case.json"
  grep -h 'WATCHDOG_FAULT\|Watchdog caught collective operation timeout' "$d/stdout.log" 2>/dev/null | head -3 | cut -c1-200 | sed 's/^/    /' | tee -a "$RUNLOG"
  if [ -s "$WORK/incidents.jsonl" ]; then
    python3 - "$WORK/incidents.jsonl" "${F_JOB[@]}" <<'EOF' | tee -a "$RUNLOG"
import json, sys
for job in sys.argv[2:]:
    seen = {}
    for l in open(sys.argv[1]):
        try: r = json.loads(l)
        except ValueError: continue
        i = r.get("inc")
        if i and i.get("job") == job and i.get("id") not in seen:
            seen[i.get("id")] = 1
            print(f"    {job}: {i.get('kind')} culprits={[c.get('rank') for c in i.get('culprits') or []]} cause={i.get('cause')} {str(i.get('summary'))[:110]}")
    print(f"    {len(seen)} incident(s) for job {job}")
EOF
  fi
}

idx=0
for c in $CASES; do
  run_case "$c" "$idx"     # after an abort this only records the case as skipped
  idx=$((idx + 1))
done

log "cases done; finishing"
touch "$WORK/stop-incidents"
sleep 0.6
kill_pid "$INC_MON_PID" 1
http_get "$DET_URL/api/v1/incidents" > "$WORK/incidents.final.json"
http_get "$DET_URL/metrics" > "$WORK/detector.metrics.txt"
kill_pid "$DET_PID" 3
# PyTorch's analyzer of the last cases' dumps may still be running: give it until the guard.
for p in "${FR_BG_PIDS[@]}"; do
  while kill -0 "$p" 2>/dev/null && [ "$ABORT" != 1 ] && [ $(( $(date +%s) - T0 )) -lt $(( HARD_S - 10 )) ]; do sleep 0.5; done
done
printf '{"t0":%s,"t_end":%s,"node":%s,"dryrun":%s,"one_gpu":%s,"four_gpu":%s,"nproc":%s,"logmode":"%s","feeds":"%s","fr":%s,"fr_timing":%s,"watchdog":%s,"cases":%s,"pg_timeout_s":%s,"freeze_s":%s,"compute_s":%s,"pause_s":%s,"straggle_s":%s,"detector_ok":%s,"detector_flags":%s,"sidecar_flags":%s,"sidecar_case_flags":%s,"nvml":%s,"check_pids":%s,"plugin_so":%s,"sidecar_profiler":"%s"}\n' \
  "$T0F" "$(now)" "$(json_str "$NODE")" "$([ "$DRYRUN" = 1 ] && echo true || echo false)" "$([ "$ONE_GPU" = 1 ] && echo true || echo false)" "$([ "$FOUR_GPU" = 1 ] && echo true || echo false)" "$NPROC" "$LOGMODE" "$FEEDS" \
  "$([ "$FR" = 1 ] && echo true || echo false)" "$([ "$FR_TIMING" = 1 ] && echo true || echo false)" "$(json_str "$WATCHDOG")" \
  "$(python3 -c 'import json,sys; print(json.dumps([c.replace(":", "-") for c in sys.argv[1].split()]))' "$CASES")" "$PG_TIMEOUT" "$FREEZE_S" "$COMPUTE_S" "$PAUSE_S" "$STRAGGLE_S" \
  "$DET_OK" "$(json_str "$DETECTOR_FLAGS")" "$(json_str "$SIDECAR_FLAGS")" "$(json_str "$SIDECAR_CASE_FLAGS")" "$NVML" "$CHECK_PIDS" "$(json_str "$PLUGIN_SO")" "$SIDECAR_PROFILER" > "$WORK/run.json"

timeout 60 python3 "$HERE/collect.py" --work "$WORK" --out "$OUT/results.json" >> "$RUNLOG" 2>&1 || log "WARNING: collect.py failed"
timeout 10 python3 "$HERE/summarize.py" "$OUT/results.json" > "$OUT/results.md" 2>> "$RUNLOG" || log "WARNING: summarize.py failed"
[ -s "$OUT/results.md" ] && cat "$OUT/results.md"

# Pack, each archive under 15 MiB (the device returns files of at most 16 MiB):
#   logs.*     NCCL logs (INFO, and their WARN copies), stdout, sidecar/detector/hog logs, case.json
#   samples.*  snapshot/incident/region samples (*.jsonl), metrics
#   fr.*       Flight Recorder dumps (pickles, JSON) and fr_trace's outputs
#   prof.*     the profiler plugin's region files (*.bin) and profdump's last reading
# Four GPUs: zstd when there is one (.tar.zst), else xz (.tar.xz), else gzip (.tgz); the other
# layouts keep gzip (.tgz) as before. PACK=gzip|xz|zstd.
if [ "$FOUR_GPU" = 1 ]; then
  PACK=${PACK:-$(command -v zstd > /dev/null && echo zstd || { command -v xz > /dev/null && echo xz || echo gzip; })}
fi
PACK=${PACK:-gzip}
case $PACK in
  zstd) PACK_EXT=tar.zst; PACK_ARGS=(-I "zstd -T0 -12") ;;
  xz)   PACK_EXT=tar.xz; PACK_ARGS=(-I "xz -T0 -6") ;;
  *)    PACK_EXT=tgz; PACK_ARGS=(-z) ;;
esac
pack_list() {       # pack_list NAME LISTFILE: the files listed (relative to WORK), cut if too big
  local name=$1 list=$2 f
  [ -s "$list" ] || return 0
  ( cd "$WORK" && timeout 60 tar -c "${PACK_ARGS[@]}" -f "$OUT/$name" -T "$list" 2>/dev/null ) || \
    ( cd "$WORK" && timeout 60 tar -czf "$OUT/$name" -T "$list" 2>/dev/null )
  local sz; sz=$(stat -c %s "$OUT/$name" 2>/dev/null || echo 0)
  if [ "$sz" -gt $((15 << 20)) ]; then
    log "$name is $sz bytes: cutting its big files to their first and last MiB"
    while read -r f; do
      [ -f "$WORK/$f" ] && [ "$(stat -c %s "$WORK/$f")" -gt $((2 << 20)) ] || continue
      { head -c 1048576 "$WORK/$f"; printf '\n...[cut by run.sh]...\n'; tail -c 1048576 "$WORK/$f"; } > "$WORK/$f.cut" && mv "$WORK/$f.cut" "$WORK/$f"
    done < "$list"
    ( cd "$WORK" && timeout 60 tar -c "${PACK_ARGS[@]}" -f "$OUT/$name" -T "$list" 2>/dev/null )
  fi
}
# PACK_EXTRA: files from outside (e.g. fourgpu.sh's C_PRE log) that go into logs.* too.
for f in ${PACK_EXTRA:-}; do [ -f "$f" ] && cp "$f" "$WORK/" 2>/dev/null; done
( cd "$WORK" && find . -type f ! -name '.list-*' ! -path './etcd/*' ! -path '*/state*/*' ! -name '*.jsonl' ! -name 'metrics*.txt' ! -name 'incidents.final.json' \
    ! -path '*/fr/*' ! -path '*/frjson/*' ! -name 'fr_trace*' ! -path '*/prof/*' ! -name 'prof-final.*' | sort ) > "$WORK/.list-logs"
( cd "$WORK" && find . -type f \( -name '*.jsonl' -o -name 'metrics*.txt' -o -name 'incidents.final.json' \) ! -path '*/hog/*' | sort ) > "$WORK/.list-samples"
( cd "$WORK" && find . -type f \( -path '*/fr/*' -o -path '*/frjson/*' -o -name 'fr_trace*' \) | sort ) > "$WORK/.list-fr"
( cd "$WORK" && find . -type f \( -path '*/prof/*' -o -name 'prof-final.*' \) | sort ) > "$WORK/.list-prof"
# hog/events.jsonl belongs with the logs (what the fault did), not the samples.
( cd "$WORK" && find . -type f -path '*/hog/*.jsonl' | sort ) >> "$WORK/.list-logs"
pack_list "logs.$PACK_EXT" "$WORK/.list-logs"
pack_list "samples.$PACK_EXT" "$WORK/.list-samples"
pack_list "fr.$PACK_EXT" "$WORK/.list-fr"
pack_list "prof.$PACK_EXT" "$WORK/.list-prof"
log "done in $(( $(date +%s) - T0 ))s; $OUT: $(cd "$OUT" && ls -l | awk 'NR>1{printf "%s(%s) ", $9, $5}')"
kill_pid "$GUARD_PID" 1
# Exit status 1 when a case failed its verdict (results.json has why).
python3 -c 'import json,sys; sys.exit(1 if json.load(open(sys.argv[1]))["summary"]["failed"] else 0)' "$OUT/results.json" 2>/dev/null
