#!/bin/bash
# Slurm Epilog for the NCCL watchdog: stops this node's sidecar for the job and removes its
# Prometheus target. The NCCL logs stay for post-mortems (`watchdog analyze <dir>`) unless
# NCCLWATCH_KEEP_LOGS=0.
#
# slurm.conf:  Epilog=/etc/slurm/epilog.d/ncclwatch-epilog.sh   (runs as root on each node)
# Never fails: errors are logged and the epilog exits 0.
set -u

conf=${NCCLWATCH_CONF:-/etc/ncclwatch/slurm.conf}
if [ -r "$conf" ]; then
	set -a
	# shellcheck disable=SC1090
	. "$conf"
	set +a
fi
: "${NCCLWATCH_LOG_ROOT:=/var/log/nccl}"
: "${NCCLWATCH_RUN_DIR:=/run/ncclwatch}"
: "${NCCLWATCH_STATE_ROOT:=/var/lib/ncclwatch}"
: "${NCCLWATCH_SUPERVISOR:=auto}"
: "${NCCLWATCH_TARGETS_DIR:=}"
: "${NCCLWATCH_KEEP_LOGS:=1}"
: "${NCCLWATCH_PROFILER_ROOT:=$NCCLWATCH_RUN_DIR/profiler}"

log() {
	if command -v logger >/dev/null 2>&1; then logger -t ncclwatch-epilog -- "$*" 2>/dev/null; fi
	echo "ncclwatch-epilog: $*" >&2
}

job=${SLURM_JOB_ID:-}
[ -n "$job" ] || exit 0
case $job in *[!A-Za-z0-9_.-]*) exit 0 ;; esac
node=${NCCLWATCH_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}
instance=$job.$node

# Remove the target first: Prometheus then stops scraping instead of alerting SidecarDown.
[ -n "$NCCLWATCH_TARGETS_DIR" ] && rm -f "$NCCLWATCH_TARGETS_DIR/$instance.json"

pid_file=$NCCLWATCH_RUN_DIR/$instance.pid
if [ -f "$pid_file" ]; then
	pid=$(cat "$pid_file")
	if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$pid_file"
fi
if [ "$NCCLWATCH_SUPERVISOR" != background ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemctl stop "ncclwatch-sidecar@$job.service" 2>/dev/null
	rm -f "$NCCLWATCH_RUN_DIR/$job.env"
fi
rm -f "$NCCLWATCH_RUN_DIR/$instance.env" "$NCCLWATCH_RUN_DIR/$instance.etcd-password"
rm -rf "${NCCLWATCH_STATE_ROOT:?}/$instance"
# The profiler plugin's files live in memory: they go with the job (the logs may stay).
rm -rf "${NCCLWATCH_PROFILER_ROOT:?}/$job"
if [ "$NCCLWATCH_KEEP_LOGS" = 0 ]; then
	rm -rf "${NCCLWATCH_LOG_ROOT:?}/$job"
fi
log "sidecar for job $job on $node stopped"
exit 0
