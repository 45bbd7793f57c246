#!/usr/bin/env bash
# Instructions per plugin call, by event kind: runs profiler/test/microbench under callgrind
# and divides each phase function's inclusive instruction count by its calls. Exact and the
# same on a loaded machine, unlike nanoseconds (`make bench-plugin-instr`).
#
#   profiler/test/instr.sh MICROBENCH PLUGIN.so|none [BATCHES]
#
# Environment passes through (NCCLWATCH_PROFILER_STEPS=0, NCCLWATCH_PROFILER_CHAIN=...).
set -euo pipefail
bench=${1:?usage: instr.sh MICROBENCH PLUGIN.so|none [BATCHES]}
plugin=${2:?usage: instr.sh MICROBENCH PLUGIN.so|none [BATCHES]}
batches=${3:-50}
command -v valgrind >/dev/null || { echo "instr.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/regions"
NCCLWATCH_PROFILER_DIR=${NCCLWATCH_PROFILER_DIR:-$tmp/regions} \
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$bench" "$plugin" "$batches" 1 >"$tmp/out.txt" 2>"$tmp/err.txt" ||
  { cat "$tmp/err.txt" >&2; exit 1; }
callgrind_annotate --inclusive=yes --threshold=100 "$tmp/cg.out" >"$tmp/annot.txt"
awk -v calls="$(grep '^CALLS' "$tmp/out.txt")" '
  BEGIN {
    n = split(calls, kv, " ")
    for (i = 2; i <= n; i++) { split(kv[i], p, "="); want[p[1]] = p[2]; order[i - 1] = p[1] }
    nphases = n - 1
  }
  # "  1,234,567 (12.34%)  /path/microbench.c:ph_coll_start [/path/microbench]"
  {
    for (f in want) if (index($0, ":" f " ") > 0) { v = $1; gsub(",", "", v); ir[f] = v }
  }
  END {
    printf "%-16s %12s %10s\n", "phase", "calls", "instr/call"
    for (i = 1; i <= nphases; i++) {
      f = order[i]
      printf "%-16s %12d %10.1f\n", substr(f, 4), want[f], ir[f] / want[f]
    }
    enq = (ir["ph_group_start"] + ir["ph_coll_start"] + ir["ph_coll_stop"] + ir["ph_group_stop"]) / want["ph_group_start"]
    printf "%-16s %12s %10.1f   (Group+Coll start and stop, per collective)\n", "enqueue/coll", "", enq
  }' "$tmp/annot.txt"
