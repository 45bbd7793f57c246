#!/bin/sh
# Slurm TaskProlog for the NCCL watchdog: gives every task the NCCL settings the watchdog
# reads (Slurm applies the "export NAME=value" lines this prints to the task).
#
# slurm.conf:  TaskProlog=/etc/slurm/ncclwatch-task-prolog.sh   (runs as the job's user)
# A job opts out with NCCLWATCH_DISABLE=1 (e.g. sbatch --export=ALL,NCCLWATCH_DISABLE=1).
# Outside Slurm, the same settings for a shell: eval "$(SLURM_JOB_ID=42 deploy/slurm/task-prolog.sh)"
[ "${NCCLWATCH_DISABLE:-0}" = 1 ] && exit 0
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
log_root=${NCCLWATCH_LOG_ROOT:-/var/log/nccl}
echo "export NCCL_DEBUG=INFO"
echo "export NCCL_DEBUG_SUBSYS=INIT,COLL,NET"
# %h: host, %p: pid. One file per rank process.
echo "export NCCL_DEBUG_FILE=$log_root/$SLURM_JOB_ID/nccl.%h.%p.log"
# µs timestamps on every line (NCCL 2.26+). "_" stands for a space (NCCL 2.26.3+ turns it
# into one), which keeps the value free of blanks; on 2.26.0-2.26.2 use "[%F %T.%6f] ".
echo "export NCCL_DEBUG_TIMESTAMP_LEVELS=ALL"
echo "export NCCL_DEBUG_TIMESTAMP_FORMAT=[%F_%T.%6f]_"
