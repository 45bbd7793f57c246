#!/usr/bin/env bash
# The 4-GPU validation on a 2-GPU machine (nvidia-h100-x2), when no 4-GPU kind is lent: each
# named part runs fourgpu.sh's harness with 2 ranks (one per GPU), or with 4 ranks sharing
# the 2 GPUs (SHARE_GPUS=2: each rank its own NCCL host, NET/Socket between the ranks of one
# GPU) for the cases that need two tensor-parallel pairs. Each part's results are packed into
# one file, $OUT/<part>.tar, so that several parts fit the device's 8 files.
#
#   bash e2e/gpu/twogpu.sh A2 B4 B2      # parts in order, each given LIMIT_<part> seconds
#
# Parts:
#   A2   slowdown phase jobs, 2 ranks: phases_nvl2 phases_sock2                  (~330 s)
#   B4   4 ranks on 2 GPUs, Flight Recorder hangs: skip_sub left_pg frozen order_inversion
#   B2   2 ranks: silent crash gpu_hang wrong_dtype
#   C2   the plugin's overhead (overhead4.sh) and chaining (chain4.sh), 2 ranks
#   A3   phases_nvl2 alone (a rerun of the slowdown gauntlet)                       (~230 s)
#   O2   where the plugin's cost on the socket transport goes: overhead4 on sockets at
#        three sizes, once as is and once with NCCLWATCH_PROFILER_STEPS=0 (the network
#        steps' events off: what NCCL and the plugin spend per network step)       (~170 s)
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/tmp/twogpu-out}
mkdir -p "$OUT"
for part in "$@"; do
  d="$OUT/$part"
  mkdir -p "$d"
  t=$(date +%s)
  case $part in
    A2) CASES="phases_nvl2 phases_sock2" NPROC=2 LIMIT_S=${LIMIT_A2:-360} OUT="$d" bash e2e/gpu/fourgpu.sh A ;;
    B4) CASES=${CASES_B4:-"skip_sub left_pg frozen order_inversion"} NPROC=4 SHARE_GPUS=2 LIMIT_S=${LIMIT_B4:-260} OUT="$d" bash e2e/gpu/fourgpu.sh B ;;
    B2) CASES=${CASES_B2:-"silent crash gpu_hang wrong_dtype"} NPROC=2 LIMIT_S=${LIMIT_B2:-250} OUT="$d" bash e2e/gpu/fourgpu.sh B ;;
    C2) NPROC=2 BUDGET_S=${BUDGET_C2:-200} OUT="$d" bash e2e/gpu/overhead4.sh
        NPROC=2 OUT="$d" bash e2e/gpu/chain4.sh ;;
    A3) CASES="phases_nvl2" NPROC=2 LIMIT_S=${LIMIT_A3:-250} OUT="$d" bash e2e/gpu/fourgpu.sh A ;;
    O2) for steps in 1 0; do
          NCCLWATCH_PROFILER_STEPS=$steps NPROC=2 TRANSPORTS=socket SIZES=${SIZES_O2:-65536,1048576,16777216} REPS=${REPS_O2:-6} \
            BUDGET_S=${BUDGET_O2:-60} OUT="$d/steps$steps" bash e2e/gpu/overhead4.sh
          rm -f "$d/steps$steps/overhead4-raw.tgz"
        done ;;
    *) echo "twogpu: unknown part $part" >&2; continue ;;
  esac
  echo "twogpu: part $part rc=$? in $(( $(date +%s) - t )) s"
  tar -C "$OUT" -cf "$OUT/$part.tar" "$part" && rm -rf "$d"
done
ls -la "$OUT"
