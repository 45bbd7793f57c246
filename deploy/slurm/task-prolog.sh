#!/bin/sh
# Slurm TaskProlog for the NCCL watchdog: gives every task the NCCL settings the watchdog
# reads (Slurm applies the "export NAME=value" lines this prints to the task).
#
# slurm.conf:  TaskProlog=/etc/slurm/ncclwatch-task-prolog.sh   (runs as the job's user)
# Settings: /etc/ncclwatch/slurm.conf (or $NCCLWATCH_CONF), as for prolog.sh. With
# NCCLWATCH_PLUGIN set there (the NCCL profiler plugin's path on the node, readable), jobs
# run in plugin mode: NCCL loads the plugin and logs at NCCLWATCH_PLUGIN_NCCL_DEBUG (WARN);
# otherwise NCCL logs at INFO.
# A job opts out with NCCLWATCH_DISABLE=1 (e.g. sbatch --export=ALL,NCCLWATCH_DISABLE=1), or
# out of the plugin alone (INFO logs, e.g. for NCCL before 2.26) with NCCLWATCH_PLUGIN_DISABLE=1.
# Outside Slurm, the same settings for a shell: eval "$(SLURM_JOB_ID=42 deploy/slurm/task-prolog.sh)"
[ "${NCCLWATCH_DISABLE:-0}" = 1 ] && exit 0
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
no_plugin=${NCCLWATCH_PLUGIN_DISABLE:-0} # the job's choice, before the site's settings
conf=${NCCLWATCH_CONF:-/etc/ncclwatch/slurm.conf}
if [ -r "$conf" ]; then
	# shellcheck disable=SC1090
	. "$conf"
fi
log_root=${NCCLWATCH_LOG_ROOT:-/var/log/nccl}
plugin=${NCCLWATCH_PLUGIN:-}
# A plugin NCCL cannot open would leave the job with WARN logs and nothing else to watch.
if [ "$no_plugin" = 1 ] || [ ! -r "$plugin" ]; then
	plugin=
fi
if [ -n "$plugin" ]; then
	case ${NCCLWATCH_PLUGIN_NCCL_DEBUG:-WARN} in
	INFO) debug=INFO ;;
	*) debug=WARN ;;
	esac
else
	debug=INFO
fi
echo "export NCCL_DEBUG=$debug"
[ "$debug" = INFO ] && echo "export NCCL_DEBUG_SUBSYS=INIT,COLL,NET"
# %h: host, %p: pid. One file per rank process.
echo "export NCCL_DEBUG_FILE=$log_root/$SLURM_JOB_ID/nccl.%h.%p.log"
# µs timestamps on every line (NCCL 2.26+). "_" stands for a space (NCCL 2.26.3+ turns it
# into one), which keeps the value free of blanks; on 2.26.0-2.26.2 use "[%F %T.%6f] ".
echo "export NCCL_DEBUG_TIMESTAMP_LEVELS=ALL"
echo "export NCCL_DEBUG_TIMESTAMP_FORMAT=[%F_%T.%6f]_"
if [ -n "$plugin" ]; then
	# The plugin's files go where prolog.sh pointed this job's sidecar.
	echo "export NCCL_PROFILER_PLUGIN=$plugin"
	echo "export NCCLWATCH_PROFILER_DIR=${NCCLWATCH_PROFILER_ROOT:-${NCCLWATCH_RUN_DIR:-/run/ncclwatch}/profiler}/$SLURM_JOB_ID"
fi
