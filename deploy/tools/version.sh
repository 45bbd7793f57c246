#!/bin/sh
# Prints the watchdog's version, the one source of it: the newest "## [X.Y.Z]" heading of
# CHANGELOG.md. `watchdog --version`, the image's tag and the chart's version and appVersion
# (make build, make image, make chart; Chart.yaml is checked against it) all say X.Y.Z,
# whether the commit is the release's tag or one on the way to it: which commit a binary or
# an image was built from is its revision (REVISION, `watchdog --version`, the image's OCI
# labels), not its version. At a tag vX.Y.Z the tag must name the same version.
set -eu
cd "$(dirname "$0")/../.."
base=$(sed -n 's/^## \[\([0-9][0-9.]*\)\].*/\1/p' CHANGELOG.md | head -1)
if [ -z "$base" ]; then
	echo "version.sh: no '## [X.Y.Z]' heading in CHANGELOG.md" >&2
	exit 1
fi
if tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null) && [ "${tag#v}" != "$base" ]; then
	echo "version.sh: HEAD is tagged $tag but CHANGELOG.md's newest version is $base" >&2
	exit 1
fi
echo "$base"
