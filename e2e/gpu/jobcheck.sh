#!/usr/bin/env bash
# Runs job.py's control flow for every scenario and both ranks against a stub torch
# (e2e/gpu/stubtorch: no GPU, no math) and checks the marker lines and the injected ops.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
fail=0
check() {  # check SCENARIO RANK WANT_RC PATTERN...
  local sc=$1 rank=$2 want=$3; shift 3
  local out err rc p
  out=$(mktemp); err=$(mktemp)
  env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$HERE/stubtorch" SCENARIO="$sc" RANK="$rank" WORLD_SIZE=2 LOCAL_RANK="$rank" \
    STEPS=8 FAULT_STEP=4 PAUSE_S=0.2 STRAGGLE_S=0.01 COMPUTE_S=0.002 \
    timeout 3 python3 "$HERE/job.py" > "$out" 2> "$err"
  rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL $sc rank $rank: rc=$rc want $want"; tail -5 "$err"; fail=1; fi
  for p in "$@"; do
    if ! grep -q -- "$p" "$out" "$err"; then echo "FAIL $sc rank $rank: no '$p'"; fail=1; fi
  done
  python3 - "$out" <<'PY' || { echo "FAIL $sc rank $rank: bad marker JSON"; fail=1; }
import json, re, sys
for l in open(sys.argv[1]):
    m = re.search(r"WATCHDOG_(\w+) (\{.*\})", l)
    if m:
        o = json.loads(m.group(2))
        assert isinstance(o["t"], float) and "rank" in o, l
        if m.group(1) == "FAULT":
            assert o["rank"] == 1 and o["step"] == 4 and o["scenario"], l
PY
  rm -f "$out" "$err"
}
for sc in healthy silent crash wrong_op wrong_size wrong_dtype straggler_onset pause; do
  check "$sc" 0 0 'WATCHDOG_INFO' '"phase": "steps_start"' '"phase": "steps_end"' 'done'
done
check healthy 1 0 '"phase": "steps_end"'
check silent 1 124 'WATCHDOG_FAULT {.*"scenario": "silent"'
check crash 1 3 'WATCHDOG_FAULT {.*"exit_code": 3'
check wrong_op 1 0 'WATCHDOG_FAULT' 'STUB Broadcast n=4194304 float32 group=g1'
check wrong_size 1 0 'WATCHDOG_FAULT' 'STUB AllReduce n=3145728 float32 group=g1'
check wrong_dtype 1 0 'WATCHDOG_FAULT' 'STUB AllReduce n=4194304 int32 group=g1'
check straggler_onset 1 0 'WATCHDOG_FAULT {.*"sleep_s": 0.01'
check pause 1 0 'WATCHDOG_FAULT {.*"pause_s": 0.2' '"phase": "pause_start"' '"phase": "pause_end"'
check pause 0 0 '"phase": "pause_start"' '"phase": "pause_end"'
check bogus 0 1 'unknown SCENARIO'
[ $fail = 0 ] && echo "jobcheck: all scenarios OK" || echo "jobcheck: FAILED"
exit $fail
