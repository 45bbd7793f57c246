#!/usr/bin/env bash
# Chaining on 4 GPUs as one device command (at most about a minute): chain4.py runs the
# watchdog's profiler plugin with the test stand-in chained beside it
# (NCCLWATCH_PROFILER_CHAIN) on 4 ranks over NVLink, a sidecar reading the regions, and checks
# that both plugins' outputs are complete. Three files under $OUT:
#
#   chain4.json          the verdict (pass, problems) and what was checked
#   chain4-metrics.txt   the sidecar's /metrics after the run (promtool check metrics < it)
#   chain4-raw.tgz       NCCL logs, region dumps, stand-in logs, the job's and sidecar's output
#
#   bash e2e/gpu/chain4.sh              # on nvidia-h100-x4, from the repo root
#   DRYRUN=1 bash e2e/gpu/chain4.sh     # here: stub torch, no GPU, no sidecar
#
# Needs bin/libnccl-profiler-ncclwatch.so, bin/libnccl-profiler-standin.so,
# bin/profdump-linux-amd64 (make plugin bin/libnccl-profiler-standin.so) and, for the
# metrics, bin/watchdog-linux-amd64.
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
OUT=${OUT:-$PWD/bin/chain4-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/chain4.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
args=(--out "$WORK")
[ "${DRYRUN:-0}" = 1 ] && args+=(--dry)
for f in bin/libnccl-profiler-ncclwatch.so bin/libnccl-profiler-standin.so bin/profdump-linux-amd64; do
  [ -e "$f" ] || { echo "chain4: $f missing (make plugin bin/libnccl-profiler-standin.so; carry it)"; exit 2; }
done
timeout -k 10 75 python3 e2e/gpu/chain4.py "${args[@]}" > "$WORK/chain4.out" 2>&1
rc=$?
cp "$WORK/chain4.json" "$WORK/chain4-metrics.txt" "$OUT/" 2>/dev/null
for d in "$WORK"/work/runs/*; do rm -rf "$d/store" "$d"/prof/*.bin; done
tar -C "$WORK" -czf "$OUT/chain4-raw.tgz" work chain4.out 2>/dev/null
echo "chain4: rc $rc in $(($(date +%s) - t0)) s; $(ls "$OUT" | tr '\n' ' ')"
tail -20 "$WORK/chain4.out"
exit $rc
