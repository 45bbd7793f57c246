#!/usr/bin/env bash
# Runs job.py's control flow for every scenario and rank against a stub torch
# (e2e/gpu/stubtorch: no GPU, no math; one rank alone, so every collective completes at once)
# and checks the marker lines, the injected ops and their order, and the exit codes; with 2
# ranks (two GPUs) and with 4 (ONE_GPU=1, the one-GPU mode).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
fail=0
check() {  # check WORLD SCENARIO RANK WANT_RC PATTERN...   (FAULT_RANK=n in the caller's env: the rank the fault marker must name)
  local world=$1 sc=$2 rank=$3 want=$4; shift 4
  local out err rc p one=0
  [ "$world" -gt 2 ] && one=1
  out=$(mktemp); err=$(mktemp)
  # A loaded machine (2 shared cores) can take seconds to start python: 20 s for a job
  # that must finish, 10 s for one that must still be running (silent, frozen).
  local to=${JOBCHECK_TIMEOUT_S:-20}; [ "$want" = 124 ] && to=10
  env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$HERE/stubtorch" SCENARIO="$sc" RANK="$rank" WORLD_SIZE="$world" LOCAL_RANK="$rank" \
    ONE_GPU=$one STEPS=8 FAULT_STEP=4 PAUSE_S=0.2 STRAGGLE_S=0.01 COMPUTE_S=0.002 \
    timeout -k 1 "$to" python3 "$HERE/job.py" > "$out" 2> "$err"
  rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL $sc/$world rank $rank: rc=$rc want $want"; tail -5 "$err"; fail=1; fi
  for p in "$@"; do
    if ! grep -q -- "$p" "$out" "$err"; then echo "FAIL $sc/$world rank $rank: no '$p'"; fail=1; fi
  done
  WANT_FAULT_RANK=${FAULT_RANK:-1} python3 - "$out" <<'PY' || { echo "FAIL $sc/$world rank $rank: bad marker JSON"; fail=1; }
import json, os, re, sys
for l in open(sys.argv[1]):
    m = re.search(r"WATCHDOG_(\w+) (\{.*\})", l)
    if m:
        o = json.loads(m.group(2))
        assert isinstance(o["t"], float) and "rank" in o, l
        if m.group(1) == "FAULT":
            assert o["rank"] == int(os.environ["WANT_FAULT_RANK"]) and o["scenario"] and o["pid"] > 0, l
            assert os.environ.get("RUN_S") or o["step"] == 4, l  # RUN_S: the fault starts by the clock
PY
  LAST_ERR=$(cat "$err")
  LAST_OUT=$(cat "$out")
  rm -f "$out" "$err"
}
# Two ranks (two GPUs).
for sc in healthy silent frozen crash wrong_op wrong_size wrong_dtype straggler_onset pause; do
  check 2 "$sc" 0 0 'WATCHDOG_INFO' '"phase": "steps_start"' '"phase": "steps_end"' 'done'
done
check 2 healthy 1 0 '"phase": "steps_end"'
check 2 silent 1 124 'WATCHDOG_FAULT {.*"scenario": "silent"'
check 2 frozen 1 124 'WATCHDOG_FAULT {.*"signal": "SIGSTOP"'
check 2 crash 1 3 'WATCHDOG_FAULT {.*"exit_code": 3'
check 2 wrong_op 1 0 'WATCHDOG_FAULT' 'STUB Broadcast n=4194304 float32 group=g1'
check 2 wrong_size 1 0 'WATCHDOG_FAULT' 'STUB AllReduce n=3145728 float32 group=g1'
check 2 wrong_dtype 1 0 'WATCHDOG_FAULT' 'STUB AllReduce n=4194304 int32 group=g1'
check 2 straggler_onset 1 0 'WATCHDOG_FAULT {.*"sleep_s": 0.01'
check 2 pause 1 0 'WATCHDOG_FAULT {.*"pause_s": 0.2' '"phase": "pause_start"' '"phase": "pause_end"'
check 2 pause 0 0 '"phase": "pause_start"' '"phase": "pause_end"'
check 2 order_inversion 0 1 'needs 4 ranks'
check 2 bogus 0 1 'unknown SCENARIO'
check 3 healthy 0 1 'want 2 or an even number'
# Four ranks on one GPU: tp pairs {0,1} {2,3} (g1, g2), dp groups {0,2} {1,3} (g3, g4).
for r in 0 1 2 3; do
  check 4 healthy "$r" 0 '"phase": "steps_end"' '"one_gpu": true' '"gpu": 0' 'ncclwatch-e2e-rank' 'STUB AllReduce n=8 float32 group=world'
done
for sc in silent frozen crash sub_mismatch order_inversion wrong_op; do
  check 4 "$sc" 0 0 '"phase": "steps_end"'   # rank 0 is never the faulty one
done
FAULT_RANK=2 check 4 silent 2 124 'WATCHDOG_FAULT {.*"scenario": "silent"'
check 4 p2p_skip 1 0 'WATCHDOG_FAULT {.*"skipped": "Send/Recv"' '"phase": "steps_end"'
GPU_HANG_S=0.1 check 4 gpu_hang 1 0 'WATCHDOG_FAULT {.*"kernel_s": 0.1' '"phase": "steps_end"'
FAULT_RANK=3 check 4 frozen 3 124 'WATCHDOG_FAULT {.*"signal": "SIGSTOP"'
check 4 crash 1 3 'WATCHDOG_FAULT {.*"exit_code": 3'
FAULT_RANK=3 check 4 sub_mismatch 3 0 'WATCHDOG_FAULT {.*"comm_rank": 1' 'STUB AllReduce n=3145728 float32 group=g4'
check 4 wrong_op 1 0 'STUB Broadcast n=4194304 float32 group=g4'
FAULT_RANK=3 check 4 skip_sub 3 0 'WATCHDOG_FAULT {.*"skipped": "AllReduce"' '"phase": "steps_end"'
n=$(printf '%s\n' "$LAST_ERR" | grep -c 'STUB AllReduce n=4194304 float32 group=g4')
[ "$n" = 7 ] || { echo "FAIL skip_sub rank 3: $n dp gradient all-reduces, want 7 of 8"; fail=1; }
FAULT_RANK=3 check 4 left_pg 3 0 'WATCHDOG_FAULT {.*"left": "tp"' '"how": "destroy"' '"phase": "steps_end"'
n=$(printf '%s\n' "$LAST_ERR" | grep -c 'STUB AllReduce n=65536 float32 group=g2')
[ "$n" = 4 ] || { echo "FAIL left_pg rank 3: $n tp all-reduces, want 4 (steps 0-3)"; fail=1; }
# A phase plan: alone, a rank's own vote ends each phase; rank 0 prints the phase markers,
# rank 1 plays the fault of phase 1 from step 4.
plan='[{"name": "h", "min_s": 0, "min_steps": 4, "max_s": 0.3}, {"name": "slow", "fault": "host", "rank": 1, "severity": {"sleep_s": 0.01}, "min_s": 0, "min_steps": 3, "max_s": 0.3}, {"name": "h2", "min_s": 0, "min_steps": 2, "max_s": 0.3}]'
PHASES=$plan check 4 phases 0 0 '"event": "start"' '"event": "end".*"phase": "h2"' '"slowdown"' '"phase": "steps_end"'
PHASES=$plan check 4 phases 1 0 'WATCHDOG_FAULT {.*"fault": "host".*"step": 4' '"phase": "steps_end"'
PHASES='[{"fault": "disk"}]' check 4 phases 0 1 'fault must be host, gpu or link'
# The inversion: each step a tp all-reduce (n=65536, g1/g2) and a world one (n=8); on rank 1,
# at the fault step (4) only, the world one first. INVERSION_FULL_STEP=1: the full step
# follows, and the world one comes right before the tp one there alone.
for r in 0 1 2 3; do
  check 4 order_inversion "$r" 0 '"phase": "steps_end"' '"dp": \[\]'
  printf '%s\n' "$LAST_ERR" | RANK_=$r python3 -c '
import os, re, sys
ops = [("tp" if m.group(2) in ("g1", "g2") else "world") for l in sys.stdin
       for m in [re.match(r"STUB AllReduce n=(65536|8) float32 group=(\w+)", l)] if m]
pairs = [tuple(ops[i:i + 2]) for i in range(0, len(ops), 2)]
r = os.environ["RANK_"]
want = [("world", "tp") if r == "1" and k == 4 else ("tp", "world") for k in range(8)]
sys.exit(0 if pairs == want else f"rank {r}: steps {pairs}")' || { echo "FAIL order_inversion rank $r: wrong order"; fail=1; }
done
check 4 order_inversion 1 0 'WATCHDOG_FAULT {.*"cuda_device_max_connections": "1"'
for r in 0 1; do
  INVERSION_FULL_STEP=1 check 4 order_inversion "$r" 0 '"phase": "steps_end"' 'STUB AllReduce n=4194304 float32 group=g'
  n=$(printf '%s\n' "$LAST_ERR" | grep -A1 'STUB AllReduce n=8 float32 group=world' | grep -c 'STUB AllReduce n=65536 float32 group=g[12]')
  want=0; [ "$r" = 1 ] && want=1
  if [ "$n" != "$want" ]; then echo "FAIL order_inversion (full step) rank $r: world before tp $n times, want $want"; fail=1; fi
done
# The fault matrix's time-based runs (RUN_S: the job ends by a vote after RUN_S seconds, the
# fault starts FAULT_AT_S seconds after the first step) and its classes, on rank 1.
T=$(mktemp -d)
export RUN_S=1.2 FAULT_AT_S=0.3
RUN_S=0.5 STEP_LOG="$T/steps.%r.log" check 4 healthy 0 0 '"run_s": 0.5' '"phase": "steps_end"' 'done'
[ -s "$T/steps.0.log" ] || { echo "FAIL healthy/RUN_S: no step log"; fail=1; }
LAG_FACTOR=0.5 check 4 host_lag 1 0 'WATCHDOG_FAULT {.*"lag_s"' '"phase": "steps_end"'
JITTER_P=1 JITTER_MIN_S=0.01 JITTER_MAX_S=0.02 check 4 host_jitter 1 0 'WATCHDOG_EVENT {.*"what": "stall"'
PERIOD_S=0.4 PAUSE_LEN_S=0.05 check 4 periodic_pause 1 0 'WATCHDOG_FAULT {.*"period_s": 0.4' 'WATCHDOG_EVENT {.*"what": "stall"'
STALL_S=0.3 check 4 long_stall 1 0 'WATCHDOG_EVENT {.*"what": "stall"' 'WATCHDOG_EVENT {.*"what": "resumed"' 'done'
CPU_HOGS=1 CPU_HOG_DUTY=0.05 CPU_NICE=3 check 4 cpu_starve 1 0 'WATCHDOG_FAULT {.*"hogs": \[[0-9]' '"nice": 3' 'done'
hog=$(printf '%s\n' "$LAST_OUT" | grep -o '"hogs": \[[0-9]*' | grep -o '[0-9]*$')
sleep 0.5
if [ -n "$hog" ] && [ -r "/proc/$hog/cmdline" ] && tr '\0' ' ' < "/proc/$hog/cmdline" | grep -q 'getppid'; then
  echo "FAIL cpu_starve: CPU hog $hog outlived its rank"; kill "$hog"; fail=1
fi
HOG_DIR=$T HOG_WORKERS=2 check 4 gpu_hog 1 0 'WATCHDOG_FAULT {.*"ctl": "on 2 1.0"'
grep -q '^on 2 1.0$' "$T/gpu0.ctl" 2>/dev/null || { echo "FAIL gpu_hog: $T/gpu0.ctl does not say on 2 1.0"; fail=1; }
RATELIMIT_FILE="$T/rl.%r" NIC_RATE=5M check 4 slow_nic 1 0 'WATCHDOG_FAULT {.*"rate": "5M"'
grep -q '^5M$' "$T/rl.1" 2>/dev/null || { echo "FAIL slow_nic: $T/rl.1 does not say 5M"; fail=1; }
RATELIMIT_FILE="$T/fl.%r" FLAP_RATE=1M FLAP_ON_S=0.2 FLAP_EVERY_S=0.4 check 4 flap_nic 1 0 'WATCHDOG_EVENT {.*"link_on"' 'WATCHDOG_EVENT {.*"link_off"'
check 4 oom 1 1 'WATCHDOG_FAULT {.*"scenario": "oom"' '^\[rank1\]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate'
check 4 exit_early 1 0 'WATCHDOG_FAULT {.*"exit_code": 0' '"phase": "steps_end"' 'done'
check 4 pg_destroyed 1 124 'WATCHDOG_FAULT {.*"destroyed": "all"' '"phase": "destroyed"'
check 4 exit_early 0 0 '"phase": "steps_end"'   # not the faulty rank: runs to the end
CPUS_PER_RANK=1 CPU_FIRST=0 check 2 healthy 1 0 '"cpus": \[1\]'
unset RUN_S FAULT_AT_S
rm -rf "$T"
[ $fail = 0 ] && echo "jobcheck: all scenarios OK" || echo "jobcheck: FAILED"
exit $fail
