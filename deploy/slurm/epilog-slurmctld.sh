#!/bin/bash
# Slurm EpilogSlurmctld for the NCCL watchdog: removes the job's etcd role and user
# (ncclwatch-sidecar-<job>, made by prolog-slurmctld.sh) once the job has ended.
#
# slurm.conf:  EpilogSlurmctld=/etc/slurm/ncclwatch-epilog-slurmctld.sh
# Settings: those of prolog-slurmctld.sh. Never fails: errors are logged and it exits 0.
set -u

conf=${NCCLWATCH_CONF:-/etc/ncclwatch/slurm.conf}
if [ -r "$conf" ]; then
	set -a
	# shellcheck disable=SC1090
	. "$conf"
	set +a
fi
: "${NCCLWATCH_BIN:=/usr/local/bin/watchdog}"
: "${NCCLWATCH_ROLES_ETCD_USER:=root}"

log() {
	if command -v logger >/dev/null 2>&1; then logger -t ncclwatch-epilog-slurmctld -- "$*" 2>/dev/null; fi
	echo "ncclwatch-epilog-slurmctld: $*" >&2
}

job=${SLURM_JOB_ID:-}
[ -n "$job" ] || exit 0
case $job in *[!A-Za-z0-9_.-]*) exit 0 ;; esac
[ -n "${NCCLWATCH_JOB_PASSWORD_KEY:-}" ] && [ -n "${NCCLWATCH_ETCD_ENDPOINTS:-}" ] || exit 0

# shellcheck disable=SC2046
if ! out=$(env $(env | sed -n 's/^\(NCCLWATCH_[A-Za-z0-9_]*\)=.*/-u \1/p') "$NCCLWATCH_BIN" etcd-roles --remove --jobs "$job" \
	--etcd-endpoints "$NCCLWATCH_ETCD_ENDPOINTS" --etcd-ca-file "${NCCLWATCH_ETCD_CA_FILE:-}" \
	--etcd-cert-file "${NCCLWATCH_ROLES_ETCD_CERT_FILE:-}" --etcd-key-file "${NCCLWATCH_ROLES_ETCD_KEY_FILE:-}" \
	--etcd-user "$NCCLWATCH_ROLES_ETCD_USER" --etcd-password-file "${NCCLWATCH_ROLES_ETCD_PASSWORD_FILE:-}" 2>&1); then
	log "the etcd user of job $job was not removed: $out"
	exit 0
fi
log "etcd role and user ncclwatch-sidecar-$job removed"
exit 0
