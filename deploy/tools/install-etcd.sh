#!/bin/sh
# Installs Debian's etcd-server and etcd-client packages (etcd 3.4) when /usr/bin/etcd or
# etcdctl is missing: the tests that run the watchdog against a real etcd 3.4 server
# (internal/etcdexec) need it, beside the embedded 3.7 one, and the role script
# (watchdog etcd-roles --print) is tested with etcdctl. Used by `make test`; idempotent
# and quick when they are there. Needs root or sudo; the package's daemon is kept from
# starting.
set -eu
if [ -x /usr/bin/etcd ] && /usr/bin/etcd --version 2>/dev/null | grep -q 'etcd Version: 3\.4\.' && command -v etcdctl >/dev/null 2>&1; then
	exit 0
fi
"$(dirname "$0")/apt-install.sh" install-etcd etcd-server etcd-client
if [ -d /run/systemd/system ]; then
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
/usr/bin/etcd --version 2>&1 | head -1 >&2
