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
# shellcheck disable=SC2086
"$(dirname "$0")/apt-install.sh" install-prometheus $packages
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
# Where systemd runs, the package enabled and started its own service: keep it stopped.
if [ -d /run/systemd/system ] && case " $packages " in *" prometheus "*) true ;; *) false ;; esac; then
	$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
promtool --version 2>&1 | head -1 >&2
