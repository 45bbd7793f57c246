# shellcheck shell=bash
# The shared start of the device commands (onegpu.sh, fourgpu.sh), sourced after they set HERE:
# T0, ROOT (and cd there), and devcmd_start NAME [FILE...]: OUT (default tmp/NAME-out), the
# binaries carried from here exported (WATCHDOG, PLUGIN_SO, PROFDUMP), exit 2 with a sentence
# in $OUT/run.log when one of them or of the FILEs is missing. free_ports N prints N free
# local ports (dry runs: other sessions may run theirs on the same machine).
set -u
T0=$(date +%s)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1

devcmd_start() {
  local name=$1 f missing=""
  shift
  export OUT=${OUT:-$ROOT/tmp/$name-out}
  mkdir -p "$OUT"
  export WATCHDOG=${WATCHDOG:-bin/watchdog-linux-amd64}
  export PLUGIN_SO=${PLUGIN_SO:-bin/libnccl-profiler-ncclwatch.so}
  export PROFDUMP=${PROFDUMP:-bin/profdump-linux-amd64}
  for f in "$WATCHDOG" "$PROFDUMP"; do [ -f "$f" ] && chmod +x "$f" 2>/dev/null; done
  for f in "$WATCHDOG" "$PLUGIN_SO" "$PROFDUMP" "$@"; do [ -f "$f" ] || missing="$missing $f"; done
  if [ -n "$missing" ]; then
    echo "$name: missing$missing: build them here and carry them (see e2e/gpu/README.md)" | tee "$OUT/run.log"
    exit 2
  fi
}

free_ports() {
  python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))' "$1"
}
