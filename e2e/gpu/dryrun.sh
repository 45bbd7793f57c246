#!/usr/bin/env bash
# Dry run of run.sh without GPU or torch: replay.py replays a real capture (with the same
# faults injected) instead of torchrun, the sidecar runs with --nvml=false --check-pids=false.
# Uses $WATCHDOG if it has the detector/sidecar subcommands, else the toy fakewatchdog.py.
#
#   bash e2e/gpu/dryrun.sh                       # all cases, shortened (~4 min)
#   CASES="healthy silent" bash e2e/gpu/dryrun.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
W=${WATCHDOG:-bin/watchdog-linux-amd64}
if [ -x "$W" ] && "$W" 2>&1 | grep -q '^ *detector' && "$W" 2>&1 | grep -q '^ *sidecar'; then
  export WATCHDOG=$W
else
  echo "dryrun: $W has no detector/sidecar subcommands: using the toy e2e/gpu/fakewatchdog.py"
  export WATCHDOG=$HERE/fakewatchdog.py
  export FAKE_WATCHDOG_DIR=${FAKE_WATCHDOG_DIR:-/tmp/e2e-gpu-fake}
  rm -rf "$FAKE_WATCHDOG_DIR"
fi
export DRYRUN=1
export OUT=${OUT:-/tmp/e2e-gpu-dry-out}
export WORK=${WORK:-/tmp/e2e-gpu-dry-work}
# Other ports than the real run's, so a dry run here never meets another etcd on 2379.
export DET_PORT=${DET_PORT:-19300} ETCD_PORT=${ETCD_PORT:-12379} SC_PORT=${SC_PORT:-19301}
export RAS_ADDR=${RAS_ADDR:-127.0.0.1:1}
# Shorter than the real run: a 20 s "PyTorch timeout", a 20 s pause, fewer steps.
export PG_TIMEOUT=${PG_TIMEOUT:-20} PAUSE_S=${PAUSE_S:-20} CRASH_MONITOR_S=${CRASH_MONITOR_S:-15}
export STEPS_healthy=${STEPS_healthy:-60} BUDGET_healthy=${BUDGET_healthy:-25}
export STEPS_wrong_dtype=${STEPS_wrong_dtype:-60} STEPS_wrong_size=${STEPS_wrong_size:-60}
export BUDGET_wrong_dtype=${BUDGET_wrong_dtype:-25} BUDGET_wrong_size=${BUDGET_wrong_size:-25}
export STEPS_straggler_onset=${STEPS_straggler_onset:-70}
export STEPS_pause=${STEPS_pause:-50}
rm -rf "$OUT"
bash "$HERE/run.sh"
rc=$?
echo "dryrun: run.sh rc=$rc; results in $OUT"
exit $rc
