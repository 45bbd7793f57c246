#!/usr/bin/env bash
# The per-rank evidence of issue 22 on a real GPU, in about a minute: what NVML lists on a
# GPU (its compute processes, their memory and names) and what /proc says of each rank
# process (scheduler state, CPU time, CPU use), through `watchdog nvml-probe` and a running
# sidecar's /api/v1/snapshot and /metrics.
#
#   bash e2e/gpu/evidence.sh        # on the device (nvidia-h100-x1 or nvidia-h200), carrying
#                                   # bin/watchdog-linux-amd64 (a cgo build, see README.md)
#   DRYRUN=1 bash e2e/gpu/evidence.sh   # here: no GPU, no torch; only the /proc part
#
# Three "ranks" (python3), each with an NCCL log named nccl.<host>.<pid>.log so the sidecar
# follows it: "busy" multiplies matrices on GPU 0 in a loop, "holder" holds 1 GiB of GPU 0
# and sleeps, "stopped" is the holder's twin, SIGSTOPped. Expected: GPU 0 lists the 3 pids
# (the device runs them in the sidecar's pid namespace, so NVML's pids are theirs), named
# python3, with memory; ncclwatch_gpu_processes{gpu="0"} 3; busy R or S with tens of
# percent CPU or more, holder S near 0 %, stopped T. Results in $OUT: evidence.json (the
# checks and what was read), nvml-probe.jsonl, snapshot.json, metrics.txt, sidecar.log.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/tmp/evidence-out}
WATCHDOG=${WATCHDOG:-bin/watchdog-linux-amd64}
DRYRUN=${DRYRUN:-0}
WORK=$(mktemp -d /tmp/evidence-work.XXXXXX)
mkdir -p "$OUT" "$WORK/logs"
[ -f "$WATCHDOG" ] && chmod +x "$WATCHDOG" 2>/dev/null
[ -x "$WATCHDOG" ] || { echo "evidence: $WATCHDOG missing: build it here and carry it" | tee "$OUT/run.log"; exit 2; }
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
  [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# A rank: python3 running $1 (a program), its log written as NCCL would name it; its pid
# in RANK_PID (not echoed: a command substitution would wait for the rank's stdout).
rank() {
  python3 -c "$1" > /dev/null &
  RANK_PID=$!
  PIDS+=("$RANK_PID")
  local host
  host=$(hostname | cut -d. -f1)
  printf '%s:%d:%d [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n' "$host" "$RANK_PID" "$RANK_PID" \
    > "$WORK/logs/nccl.$host.$RANK_PID.log"
}
if [ "$DRYRUN" = 1 ]; then
  busy='import time
while True: pass'
  holder='import time; time.sleep(600)'
  nvml=false
else
  busy='import torch
x = torch.randn(8192, 8192, device="cuda:0")
while True:
    y = x @ x
    torch.cuda.synchronize()'
  holder='import torch, time
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
time.sleep(600)'
  nvml=true
fi
rank "$busy"; BUSY=$RANK_PID
rank "$holder"; HOLDER=$RANK_PID
rank "$holder"; STOPPED=$RANK_PID
sleep "${SETTLE_S:-15}" # CUDA contexts up (torch import and context creation take seconds)
kill -STOP "$STOPPED"

if [ "$nvml" = true ]; then
  timeout 30 "$WATCHDOG" nvml-probe --every 500ms --n 3 > "$OUT/nvml-probe.jsonl" 2> "$OUT/nvml-probe.err"
  echo "nvml-probe rc=$?"
fi
# The sidecar, with no etcd to publish to: its HTTP API serves the snapshot all the same.
"$WATCHDOG" sidecar --job evidence --logs "$WORK/logs/*.log" --state-dir "" --profiler-dir "" --ras-addr "" \
  --http 127.0.0.1:9319 --etcd-endpoints http://127.0.0.1:1 --nvml="$nvml" --log-format text \
  > "$OUT/sidecar.log" 2>&1 &
PIDS+=($!)
sleep 6 # the rank logs followed, two /proc reads a window apart, a GPU sample
curl -s --max-time 5 http://127.0.0.1:9319/api/v1/snapshot > "$OUT/snapshot.json"
curl -s --max-time 5 http://127.0.0.1:9319/metrics > "$OUT/metrics.txt"

python3 - "$OUT" "$BUSY" "$HOLDER" "$STOPPED" "$nvml" <<'EOF'
import json, sys
out, busy, holder, stopped, nvml = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "true"
checks = []
def check(name, ok, seen):
    checks.append({"check": name, "ok": bool(ok), "seen": seen})
snap = json.load(open(f"{out}/snapshot.json"))
procs = {p["pid"]: p for p in snap.get("procs") or []}
for pid, what, ok in [
    (busy, "busy: running or waiting on its GPU, using CPU", lambda p: p.get("stat") in ("R", "S") and p.get("cpupct", 0) >= 10),
    (holder, "holder: asleep, no CPU", lambda p: p.get("stat") == "S" and p.get("cpupct", 0) < 5),
    (stopped, "stopped: T, no CPU", lambda p: p.get("stat") == "T" and p.get("cpupct", 0) < 1),
]:
    p = procs.get(pid, {})
    check(what, ok(p), {k: p.get(k) for k in ("pid", "state", "stat", "cpu", "cpupct")})
if nvml:
    first = json.loads(open(f"{out}/nvml-probe.jsonl").readline())
    g0 = first["gpus"][0]
    listed = {p["pid"]: p for p in g0.get("procs") or []}
    check("nvml-probe: GPU 0 lists the 3 ranks, named, with memory",
          all(pid in listed and listed[pid].get("mem", 0) > 0 and listed[pid].get("name", "").startswith("python")
              for pid in (busy, holder, stopped)), {"procs": g0.get("procs"), "na": g0.get("na")})
    sg0 = (snap.get("gpus") or [{}])[0]
    check("snapshot: GPU 0 has the 3 processes", {busy, holder, stopped} <= {p["pid"] for p in sg0.get("procs") or []},
          sg0.get("procs"))
    metric = [l for l in open(f"{out}/metrics.txt") if l.startswith('ncclwatch_gpu_processes{gpu="0"}')]
    check("/metrics: ncclwatch_gpu_processes{gpu=\"0\"} is 3 (or more: other processes on the GPU)",
          metric and float(metric[0].split()[-1]) >= 3, metric)
json.dump({"checks": checks, "ok": all(c["ok"] for c in checks)}, open(f"{out}/evidence.json", "w"), indent=1)
for c in checks:
    print("ok  " if c["ok"] else "FAIL", c["check"], json.dumps(c["seen"]))
sys.exit(0 if all(c["ok"] for c in checks) else 1)
EOF
