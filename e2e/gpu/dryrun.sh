#!/usr/bin/env bash
# Dry run of run.sh without GPU or torch. Two GPUs (default): replay.py replays a real
# capture (with the same faults injected) instead of torchrun. ONE_GPU=1: stubrun.py runs
# job.py's ranks on the stub torch, whose fake NCCL writes NCCL's log lines, drives the real
# profiler plugin (LOGMODE=plugin) and makes ranks wait for each other, so hangs, crashes and
# the order-inversion deadlock happen. The sidecar runs with --nvml=false.
# $WATCHDOG must have the detector and sidecar subcommands (the build of this tree); the toy
# e2e/gpu/fakewatchdog.py stands in only when asked for with FAKE_WATCHDOG=1.
#
#   bash e2e/gpu/dryrun.sh                       # two GPUs, all cases, shortened (~4 min)
#   CASES="healthy silent" bash e2e/gpu/dryrun.sh
#   ONE_GPU=1 LOGMODE=plugin bash e2e/gpu/dryrun.sh   # the one-GPU cases, WARN + plugin
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
W=${WATCHDOG:-bin/watchdog-linux-amd64}
if [ "${FAKE_WATCHDOG:-0}" = 1 ]; then
  echo "dryrun: FAKE_WATCHDOG=1: the toy e2e/gpu/fakewatchdog.py stands in for the watchdog (its verdicts mean nothing)"
  export WATCHDOG=$HERE/fakewatchdog.py
  export FAKE_WATCHDOG_DIR=${FAKE_WATCHDOG_DIR:-/tmp/e2e-gpu-fake}
  rm -rf "$FAKE_WATCHDOG_DIR"
elif [ -x "$W" ] && "$W" 2>&1 | grep -q '^ *detector' && "$W" 2>&1 | grep -q '^ *sidecar'; then
  export WATCHDOG=$W
else
  echo "dryrun: $W is missing or has no detector/sidecar subcommands. Build it" >&2
  echo "  CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build -o bin/watchdog-linux-amd64 ./cmd/watchdog" >&2
  echo "or set WATCHDOG=<binary>; FAKE_WATCHDOG=1 runs the plumbing against a toy stand-in." >&2
  exit 2
fi
export DRYRUN=1
export OUT=${OUT:-/tmp/e2e-gpu-dry-out}
export WORK=${WORK:-/tmp/e2e-gpu-dry-work}
# Free ports, so a dry run here never meets another etcd or detector (another session's dry
# run, say): run.sh would talk to that one.
read -r p1 p2 p3 < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
export DET_PORT=${DET_PORT:-$p1} ETCD_PORT=${ETCD_PORT:-$p2} SC_PORT=${SC_PORT:-$p3}
export RAS_ADDR=${RAS_ADDR:-127.0.0.1:1}
# Shorter than the real run: a 20 s "PyTorch timeout", a 20 s pause, fewer steps.
export PG_TIMEOUT=${PG_TIMEOUT:-20} PAUSE_S=${PAUSE_S:-20} CRASH_MONITOR_S=${CRASH_MONITOR_S:-15}
export STEPS_healthy=${STEPS_healthy:-60} BUDGET_healthy=${BUDGET_healthy:-25}
export STEPS_wrong_dtype=${STEPS_wrong_dtype:-60} STEPS_wrong_size=${STEPS_wrong_size:-60}
export BUDGET_wrong_dtype=${BUDGET_wrong_dtype:-25} BUDGET_wrong_size=${BUDGET_wrong_size:-25}
export STEPS_straggler_onset=${STEPS_straggler_onset:-70}
export STEPS_pause=${STEPS_pause:-50}
if [ "${ONE_GPU:-0}" = 1 ]; then
  # The stub's steps are short (its "matmuls" sleep): ~0.1 s per step.
  export COMPUTE_S=${COMPUTE_S:-0.05} EXTRA_S=${EXTRA_S:-0}
  if [ "${FAKE_WATCHDOG:-0}" != 1 ]; then
    make -s plugin > /dev/null || { echo "dryrun: make plugin failed" >&2; exit 2; }
  fi
fi
rm -rf "$OUT"
bash "$HERE/run.sh"
rc=$?
echo "dryrun: run.sh rc=$rc; results in $OUT"
exit $rc
