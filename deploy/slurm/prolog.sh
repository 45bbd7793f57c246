#!/bin/bash
# Slurm Prolog for the NCCL watchdog: starts this node's sidecar for the job.
#
# slurm.conf:  Prolog=/etc/slurm/prolog.d/ncclwatch-prolog.sh   (runs as root on each node)
#              PrologFlags=Alloc   (run at allocation, so the sidecar is up before the job)
# Settings: /etc/ncclwatch/slurm.conf (or $NCCLWATCH_CONF), shell assignments; every
# NCCLWATCH_* variable in it or in the environment that names a sidecar flag (e.g.
# NCCLWATCH_ETCD_ENDPOINTS for --etcd-endpoints) is handed to the sidecar.
#
# The sidecar logs in to etcd as its job's own user, ncclwatch-sidecar-<job> (it may write only
# that job's node keys), which prolog-slurmctld.sh created: its password derives from the
# site key NCCLWATCH_JOB_PASSWORD_KEY (`watchdog etcd-roles --write-password`) into
# $NCCLWATCH_RUN_DIR/<job>.<node>.etcd-password (root:ncclwatch 0440, which the job's user
# cannot read); epilog.sh removes it. NCCLWATCH_SIDECAR_ROLE=shared keeps NCCLWATCH_ETCD_USER.
#
# The sidecar runs as the systemd unit ncclwatch-sidecar@<job>.service where systemd runs,
# else (containers, one-machine quick start) as a background process with a pid file.
# A watchdog problem never fails the job: errors are logged and the prolog exits 0.
set -u

conf=${NCCLWATCH_CONF:-/etc/ncclwatch/slurm.conf}
if [ -r "$conf" ]; then
	set -a
	# shellcheck disable=SC1090
	. "$conf"
	set +a
fi
: "${NCCLWATCH_BIN:=/usr/local/bin/watchdog}"
: "${NCCLWATCH_LOG_ROOT:=/var/log/nccl}"        # NCCL logs: $NCCLWATCH_LOG_ROOT/<job>/
: "${NCCLWATCH_RUN_DIR:=/run/ncclwatch}"        # per-job environment and pid files
: "${NCCLWATCH_STATE_ROOT:=/var/lib/ncclwatch}" # per-job read offsets
: "${NCCLWATCH_SUPERVISOR:=auto}"               # systemd, background or auto
: "${NCCLWATCH_HTTP_HOST:=0.0.0.0}"
: "${NCCLWATCH_HTTP_PORT:=9301}"
: "${NCCLWATCH_TARGETS_DIR:=}"                  # Prometheus file_sd folder (shared); empty: none
: "${NCCLWATCH_TARGET_HOST:=$(hostname -f 2>/dev/null || hostname)}"
: "${NCCLWATCH_LOG_GROUP:=ncclwatch}"           # group that may read the NCCL logs
: "${NCCLWATCH_PLUGIN:=}"                       # the NCCL profiler plugin; empty: INFO logs only
: "${NCCLWATCH_PROFILER_ROOT:=$NCCLWATCH_RUN_DIR/profiler}" # the plugin's files: <root>/<job>/ (tmpfs)
: "${NCCLWATCH_SIDECAR_ROLE:=job}"              # job: the job's own etcd user; shared: NCCLWATCH_ETCD_USER
: "${NCCLWATCH_JOB_PASSWORD_KEY:=}"             # the site key the job users' passwords derive from

log() {
	if command -v logger >/dev/null 2>&1; then logger -t ncclwatch-prolog -- "$*" 2>/dev/null; fi
	echo "ncclwatch-prolog: $*" >&2
}

job=${SLURM_JOB_ID:-}
if [ -z "$job" ]; then
	log "SLURM_JOB_ID is not set; nothing to do"
	exit 0
fi
case $job in *[!A-Za-z0-9_.-]*) log "odd job id '$job'; nothing to do"; exit 0 ;; esac
node=${NCCLWATCH_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}
logdir=$NCCLWATCH_LOG_ROOT/$job
: "${NCCLWATCH_LOGS:=$logdir/*.log}"
unit_id=$job
instance=$job.$node

# (The sidecar creates its own state folder, as its own user.)
mkdir -p "$logdir" "$NCCLWATCH_RUN_DIR" || { log "cannot create $logdir or $NCCLWATCH_RUN_DIR"; exit 0; }
if [ "$(id -u)" = 0 ] && [ -n "${SLURM_JOB_UID:-}" ]; then
	# The job writes its NCCL logs here; the sidecar's group reads them, and may write
	# them: the sidecar frees the part of each log it has read (--log-keep-mib), which
	# needs a writable descriptor. NCCL creates its logs with the job's umask (0644 under
	# the usual 022), so the group's write access comes from a default ACL, which new files
	# inherit whatever the umask (docs/quickstart-slurm.md#log-space).
	if getent group "$NCCLWATCH_LOG_GROUP" >/dev/null 2>&1; then
		chown "$SLURM_JOB_UID:$NCCLWATCH_LOG_GROUP" "$logdir" && chmod 2750 "$logdir"
		if command -v setfacl >/dev/null 2>&1; then
			setfacl -m "g:$NCCLWATCH_LOG_GROUP:rx,d:g:$NCCLWATCH_LOG_GROUP:rw" "$logdir" ||
				log "setfacl on $logdir failed (no ACL support on its filesystem?): the sidecar cannot free log space; the logs grow"
		else
			log "no setfacl (package acl): the sidecar cannot free the job's log space unless the job runs with umask 002; the logs grow"
		fi
	else
		chown "$SLURM_JOB_UID" "$logdir" && chmod 0755 "$logdir"
	fi
fi

# Plugin mode: the job's ranks write the profiler plugin's files (task-prolog.sh points
# NCCLWATCH_PROFILER_DIR here) and the sidecar reads them. A tmpfs: a region on a disk would
# be written back now and then.
profdir=
if [ -n "$NCCLWATCH_PLUGIN" ]; then
	[ -r "$NCCLWATCH_PLUGIN" ] || log "NCCLWATCH_PLUGIN=$NCCLWATCH_PLUGIN is not readable here: jobs on this node run without the plugin (INFO logs)"
	profdir=$NCCLWATCH_PROFILER_ROOT/$job
	if mkdir -p "$profdir"; then
		if [ "$(id -u)" = 0 ] && [ -n "${SLURM_JOB_UID:-}" ]; then
			if getent group "$NCCLWATCH_LOG_GROUP" >/dev/null 2>&1; then
				chown "$SLURM_JOB_UID:$NCCLWATCH_LOG_GROUP" "$profdir" && chmod 2750 "$profdir"
			else
				chown "$SLURM_JOB_UID" "$profdir" && chmod 0755 "$profdir"
			fi
		fi
	else
		log "cannot create $profdir"
		profdir=
	fi
fi

# The job's own etcd credential (with etcd authentication: NCCLWATCH_ETCD_USER or the key set).
# `watchdog etcd-roles` runs without this script's NCCLWATCH_* settings, which would be
# its flags' defaults.
roles() {
	# shellcheck disable=SC2046
	env $(env | sed -n 's/^\(NCCLWATCH_[A-Za-z0-9_]*\)=.*/-u \1/p') "$NCCLWATCH_BIN" etcd-roles "$@"
}
if [ "$NCCLWATCH_SIDECAR_ROLE" = job ] && [ -n "$NCCLWATCH_JOB_PASSWORD_KEY" ]; then
	pw_file=$NCCLWATCH_RUN_DIR/$instance.etcd-password
	if roles --write-password "$pw_file" --jobs "$job" --job-password-key "$NCCLWATCH_JOB_PASSWORD_KEY"; then
		getent group "$NCCLWATCH_LOG_GROUP" >/dev/null 2>&1 && chgrp "$NCCLWATCH_LOG_GROUP" "$pw_file" && chmod 0440 "$pw_file"
		NCCLWATCH_ETCD_USER=ncclwatch-sidecar-$job
		NCCLWATCH_ETCD_PASSWORD_FILE=$pw_file
		export NCCLWATCH_ETCD_USER NCCLWATCH_ETCD_PASSWORD_FILE
	else
		log "cannot write the etcd password of job $job to $pw_file: its sidecar is not started"
		exit 0
	fi
elif [ "$NCCLWATCH_SIDECAR_ROLE" = job ] && [ -n "${NCCLWATCH_ETCD_USER:-}" ]; then
	log "NCCLWATCH_JOB_PASSWORD_KEY is not set: the sidecar of job $job logs in as the shared $NCCLWATCH_ETCD_USER, which may write every job's node keys (set the key for a per-job user, or NCCLWATCH_SIDECAR_ROLE=shared)"
fi

# The sidecar's environment: its NCCLWATCH_* flags; prolog-only settings stay here.
env_file=$NCCLWATCH_RUN_DIR/$instance.env
{
	echo "NCCLWATCH_JOB=$job"
	echo "NCCLWATCH_NODE=$node"
	echo "NCCLWATCH_LOGS=$NCCLWATCH_LOGS"
	echo "NCCLWATCH_STATE_DIR=$NCCLWATCH_STATE_ROOT/$instance"
	echo "NCCLWATCH_HTTP=$NCCLWATCH_HTTP_HOST:$NCCLWATCH_HTTP_PORT"
	[ -n "$profdir" ] && echo "NCCLWATCH_PROFILER_DIR=$profdir"
	env | grep '^NCCLWATCH_' | grep -v -E '^NCCLWATCH_(JOB|NODE|LOGS|STATE_DIR|HTTP|PROFILER_DIR|CONF|BIN|LOG_ROOT|RUN_DIR|STATE_ROOT|SUPERVISOR|HTTP_HOST|HTTP_PORT|TARGETS_DIR|TARGET_HOST|LOG_GROUP|PLUGIN|PLUGIN_NCCL_DEBUG|PLUGIN_DISABLE|PROFILER_ROOT|KEEP_LOGS|DISABLE|SIDECAR_ROLE|JOB_PASSWORD_KEY|ROLES_[A-Z_]*)=' || true
} > "$env_file.tmp" && mv "$env_file.tmp" "$env_file" || { log "cannot write $env_file"; exit 0; }

supervisor=$NCCLWATCH_SUPERVISOR
if [ "$supervisor" = auto ]; then
	supervisor=background
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then supervisor=systemd; fi
fi
case $supervisor in
systemd)
	# ncclwatch-sidecar@.service reads $NCCLWATCH_RUN_DIR/<job>.<node>.env
	ln -sf "$instance.env" "$NCCLWATCH_RUN_DIR/$unit_id.env"
	systemctl start --no-block "ncclwatch-sidecar@$unit_id.service" || log "systemctl start ncclwatch-sidecar@$unit_id failed"
	;;
background)
	pid_file=$NCCLWATCH_RUN_DIR/$instance.pid
	(
		set -a
		# shellcheck disable=SC1090
		. "$env_file"
		set +a
		exec setsid "$NCCLWATCH_BIN" sidecar </dev/null >>"$NCCLWATCH_RUN_DIR/$instance.log" 2>&1
	) &
	echo $! > "$pid_file"
	;;
*)
	log "NCCLWATCH_SUPERVISOR=$supervisor: want systemd, background or auto"
	exit 0
	;;
esac

# Tell Prometheus (file_sd) where this job's sidecar is, with the job's name as a label.
if [ -n "$NCCLWATCH_TARGETS_DIR" ]; then
	mkdir -p "$NCCLWATCH_TARGETS_DIR" &&
		printf '[{"targets": ["%s:%s"], "labels": {"ncclwatch_job": "%s", "node": "%s"}}]\n' \
			"$NCCLWATCH_TARGET_HOST" "$NCCLWATCH_HTTP_PORT" "$job" "$node" > "$NCCLWATCH_TARGETS_DIR/.$instance.json.tmp" &&
		mv "$NCCLWATCH_TARGETS_DIR/.$instance.json.tmp" "$NCCLWATCH_TARGETS_DIR/$instance.json" ||
		log "cannot write the Prometheus target of $instance"
fi
log "sidecar for job $job on $node started ($supervisor), logs $NCCLWATCH_LOGS${profdir:+, profiler plugin files $profdir}"
exit 0
