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
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-etcd: no apt-get; install an etcd 3.4 server and set NCCLWATCH_ETCD34_BIN" >&2
	exit 1
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi
policy=/usr/sbin/policy-rc.d
added_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod 0755 "$policy"
	added_policy=1
fi
cleanup() { if [ -n "$added_policy" ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
echo "install-etcd: apt-get install etcd-server etcd-client (Debian's etcd 3.4)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null
if [ -d /run/systemd/system ]; then
	$SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
/usr/bin/etcd --version 2>&1 | head -1 >&2
