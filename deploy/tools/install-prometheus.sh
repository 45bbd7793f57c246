#!/bin/sh
# Installs Debian's prometheus package (prometheus and promtool) when either is missing,
# and curl (the quick start's) if it is. Used by `make tools`; idempotent and quick when
# they are there. Needs root or sudo.
set -eu
packages=
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || packages=prometheus
command -v curl >/dev/null 2>&1 || packages="$packages curl"
if [ -z "$packages" ]; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-prometheus: no apt-get; install prometheus and promtool (2.42+) by hand" >&2
	exit 1
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi
# The package would start a prometheus daemon on :9090 where services can start
# (containers without systemd): forbid that for the length of the install.
policy=/usr/sbin/policy-rc.d
added_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod 0755 "$policy"
	added_policy=1
fi
cleanup() { if [ -n "$added_policy" ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
echo "install-prometheus: apt-get install $packages (Debian's prometheus package has promtool)" >&2
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $packages >/dev/null
# Where systemd runs, the package enabled and started its own service: keep it stopped.
if [ -d /run/systemd/system ] && case " $packages " in *" prometheus "*) true ;; *) false ;; esac; then
	$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
promtool --version 2>&1 | head -1 >&2
