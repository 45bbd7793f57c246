#!/bin/sh
# Installs Debian packages for the Makefile's tools: apt-get as root or through sudo, with
# the packages' daemons kept from starting where services can start (a policy-rc.d for the
# length of the install, in containers without systemd). Usage: apt-install.sh WHO PACKAGE...
# (WHO prefixes the messages). The caller stops a daemon systemd started.
set -eu
who=$1
shift
if ! command -v apt-get >/dev/null 2>&1; then
	echo "$who: no apt-get; install $* by hand" >&2
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
echo "$who: apt-get install $*" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
