#!/bin/bash
# Slurm PrologSlurmctld for the NCCL watchdog: creates the job's own etcd role and user,
# ncclwatch-sidecar-<job>, which may write only that job's node keys and their bases, so the
# credential its sidecars hold reaches nothing of other jobs nor of the detectors
# (docs/security.md). Its password derives from the site key NCCLWATCH_JOB_PASSWORD_KEY,
# from which each node's prolog.sh writes it for the sidecar; epilog-slurmctld.sh removes
# role and user when the job ends.
#
# slurm.conf:  PrologSlurmctld=/etc/slurm/ncclwatch-prolog-slurmctld.sh
#              (once per job, on the slurmctld host, as SlurmUser)
# Settings: /etc/ncclwatch/slurm.conf (or $NCCLWATCH_CONF) on the slurmctld host:
#   NCCLWATCH_ETCD_ENDPOINTS, NCCLWATCH_ETCD_CA_FILE  etcd, as for the sidecars
#   NCCLWATCH_ROLES_ETCD_USER (root)                  etcd's root, which alone may add users
#   NCCLWATCH_ROLES_ETCD_PASSWORD_FILE                its password (readable by SlurmUser only)
#   NCCLWATCH_ROLES_ETCD_CERT_FILE, _KEY_FILE         its client certificate (CN root)
#   NCCLWATCH_JOB_PASSWORD_KEY                        the site key (at least 32 bytes)
# A watchdog problem never fails the job: errors are logged and the script exits 0 (the
# job then runs unwatched: its sidecars' logins are refused, and say so).
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
	if command -v logger >/dev/null 2>&1; then logger -t ncclwatch-prolog-slurmctld -- "$*" 2>/dev/null; fi
	echo "ncclwatch-prolog-slurmctld: $*" >&2
}

job=${SLURM_JOB_ID:-}
[ -n "$job" ] || exit 0
case $job in *[!A-Za-z0-9_.-]*) log "odd job id '$job'; nothing to do"; exit 0 ;; esac
if [ -z "${NCCLWATCH_JOB_PASSWORD_KEY:-}" ] || [ -z "${NCCLWATCH_ETCD_ENDPOINTS:-}" ]; then
	log "NCCLWATCH_JOB_PASSWORD_KEY or NCCLWATCH_ETCD_ENDPOINTS is not set: no etcd user for job $job"
	exit 0
fi

# `watchdog etcd-roles` gets its settings as flags only: the NCCLWATCH_* variables here
# would be its flags' defaults.
# shellcheck disable=SC2046
if ! out=$(env $(env | sed -n 's/^\(NCCLWATCH_[A-Za-z0-9_]*\)=.*/-u \1/p') "$NCCLWATCH_BIN" etcd-roles --apply --jobs-only \
	--jobs "$job" --job-password-key "$NCCLWATCH_JOB_PASSWORD_KEY" \
	--etcd-endpoints "$NCCLWATCH_ETCD_ENDPOINTS" --etcd-ca-file "${NCCLWATCH_ETCD_CA_FILE:-}" \
	--etcd-cert-file "${NCCLWATCH_ROLES_ETCD_CERT_FILE:-}" --etcd-key-file "${NCCLWATCH_ROLES_ETCD_KEY_FILE:-}" \
	--etcd-user "$NCCLWATCH_ROLES_ETCD_USER" --etcd-password-file "${NCCLWATCH_ROLES_ETCD_PASSWORD_FILE:-}" 2>&1); then
	log "the etcd user of job $job was not created: $out"
	exit 0
fi
log "etcd role and user ncclwatch-sidecar-$job created"
exit 0
