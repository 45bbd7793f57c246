#!/bin/sh
# Prints the watchdog's version: what `watchdog --version` says, the image's tag and the
# chart's appVersion when `make image` and `make chart` build them (the Makefile's VERSION).
#   at a tag vX.Y.Z           X.Y.Z
#   N commits past it         X.Y.Z-N-g<sha>      (git describe)
#   no tag yet                X.Y.Z-dev.<sha>     (X.Y.Z: the newest version CHANGELOG.md names)
#   no .git (a tarball)       X.Y.Z-dev
# with "-dirty" appended when the work tree has changes. Every form is a valid SemVer and a
# valid image tag.
set -eu
cd "$(dirname "$0")/../.."
if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
	echo "${v#v}"
	exit 0
fi
base=$(sed -n 's/^## \[\([0-9][0-9.]*\)\].*/\1/p' CHANGELOG.md | head -1)
if [ -z "$base" ]; then
	echo "version.sh: no '## [X.Y.Z]' heading in CHANGELOG.md" >&2
	exit 1
fi
if sha=$(git rev-parse --short HEAD 2>/dev/null); then
	dirty=
	git diff --quiet HEAD 2>/dev/null || dirty=-dirty
	echo "$base-dev.$sha$dirty"
else
	echo "$base-dev"
fi
