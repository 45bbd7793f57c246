#!/usr/bin/env python3
"""Background samplers for the live end-to-end test (python3 standard library only).

  monitor.py incidents --url URL --out FILE --stop STOPFILE
      polls the detector's GET /api/v1/incidents; writes one JSON line per new or changed
      incident: {"t": poll time, "inc": {...}} (so the first line of an id is when it was
      first seen), and {"t", "err"} when polling starts or stops failing.
  monitor.py snapshot --url URL --out FILE --stop STOPFILE [--metrics-url URL --metrics-out FILE]
      polls the sidecar's GET /api/v1/snapshot; one line per poll: {"t", "snap"} with the
      bulky per-communicator history (recent ops, marks) dropped; every --metrics-every
      seconds appends the ncclwatch_gpu_* lines of /metrics to --metrics-out; with --job-url,
      the detector's view of the job each tick into --job-out.
  monitor.py stamp --in FILE --out FILE --stop STOPFILE
      follows a growing file (the job's stdout) and writes "<unix time>\\t<line>" for each
      line as it appears, so marker and PyTorch timeout lines get a wall-clock time.
  monitor.py regions --profdump BIN --dir DIR --out FILE --stop STOPFILE
      runs profdump on the profiler plugin's folder every tick: one line per tick,
      {"t", "regions": [...]} (profdump's JSON), or {"t", "err"}.
  monitor.py warncopy --src DIR --dst DIR --stop STOPFILE
      follows every *.log in DIR (NCCL logs at INFO level) and copies their WARN lines, as
      they appear, to files of the same names in --dst: what the same job would have
      logged with NCCL_DEBUG=WARN (NCCL creates its file at init, so an empty copy appears
      as soon as the log does). One job then feeds two sidecars: INFO logs, and WARN logs
      plus the profiler plugin.

Each runs until STOPFILE exists (then drains and exits), SIGTERM, or --max-s.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True


def should_stop(a, t0):
    return stopping or os.path.exists(a.stop) or time.time() - t0 > a.max_s


def fetch(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def tick(every, t_next):
    t_next += every
    d = t_next - time.time()
    if d > 0:
        time.sleep(d)
    else:
        t_next = time.time()
    return t_next


def run_incidents(a):
    t0 = time.time()
    seen = {}  # id -> json text of the last version written
    last_err = None
    t_next = time.time()
    with open(a.out, "a", buffering=1) as out:
        while not should_stop(a, t0):
            now = time.time()
            try:
                data = json.loads(fetch(a.url))
                if isinstance(data, dict):  # tolerate {"incidents": [...]}
                    data = data.get("incidents") or []
                if last_err is not None:
                    out.write(json.dumps({"t": now, "err": None}) + "\n")
                    last_err = None
                for inc in data or []:
                    if not isinstance(inc, dict):
                        continue
                    key = str(inc.get("id"))
                    text = json.dumps(inc, sort_keys=True)
                    if seen.get(key) != text:
                        if len(seen) < 100000:
                            seen[key] = text
                        out.write(json.dumps({"t": now, "inc": inc}, sort_keys=True) + "\n")
            except Exception as e:  # detector not up yet, restarting, bad JSON: keep polling
                msg = f"{type(e).__name__}: {e}"[:300]
                if msg != last_err:
                    out.write(json.dumps({"t": now, "err": msg}) + "\n")
                    last_err = msg
            t_next = tick(a.every, t_next)


def slim(snap):
    for p in snap.get("procs") or []:
        for c in p.get("comms") or []:
            c.pop("recent", None)
            c.pop("marks", None)
    return snap


def run_snapshot(a):
    t0 = time.time()
    last_err = None
    t_next = time.time()
    t_metrics = 0.0
    mout = open(a.metrics_out, "a", buffering=1) if a.metrics_out else None
    jout = open(a.job_out, "a", buffering=1) if a.job_out and a.job_url else None
    with open(a.out, "a", buffering=1) as out:
        while not should_stop(a, t0):
            now = time.time()
            if jout:  # the detector's view of this job (per rank: behind, waiting, gpu state)
                try:
                    jout.write(json.dumps({"t": now, "job": json.loads(fetch(a.job_url))}) + "\n")
                except Exception as e:
                    jout.write(json.dumps({"t": now, "err": f"{type(e).__name__}: {e}"[:200]}) + "\n")
            try:
                snap = json.loads(fetch(a.url))
                out.write(json.dumps({"t": now, "snap": slim(snap)}, sort_keys=True) + "\n")
                last_err = None
            except Exception as e:
                msg = f"{type(e).__name__}: {e}"[:300]
                if msg != last_err:
                    out.write(json.dumps({"t": now, "err": msg}) + "\n")
                    last_err = msg
            if mout and a.metrics_url and now - t_metrics >= a.metrics_every:
                t_metrics = now
                try:
                    text = fetch(a.metrics_url).decode(errors="replace")
                    lines = [l for l in text.splitlines() if l.startswith("ncclwatch_gpu_")]
                    mout.write(f"# t={now:.3f}\n" + "\n".join(lines) + "\n")
                except Exception as e:
                    mout.write(f"# t={now:.3f} error {type(e).__name__}: {e}\n")
            t_next = tick(a.every, t_next)
    for f in (mout, jout):
        if f:
            f.close()


def run_stamp(a):
    t0 = time.time()
    f = None
    buf = b""
    with open(a.out, "a", buffering=1) as out:
        while True:
            stop = should_stop(a, t0)
            if f is None and os.path.exists(a.inp):
                f = open(a.inp, "rb")
            got = False
            if f is not None:
                chunk = f.read(1 << 16)
                if chunk:
                    got = True
                    now = time.time()
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        out.write(f"{now:.6f}\t{line.decode(errors='replace')}\n")
                    if len(buf) > 1 << 20:  # a runaway line without newline: cut it
                        out.write(f"{now:.6f}\t{buf.decode(errors='replace')}\n")
                        buf = b""
            if stop and not got:
                if buf:
                    out.write(f"{time.time():.6f}\t{buf.decode(errors='replace')}\n")
                return
            if not got:
                time.sleep(0.05)


def run_regions(a):
    t0 = time.time()
    t_next = time.time()
    last_err = None
    with open(a.out, "a", buffering=1) as out:
        while not should_stop(a, t0):
            now = time.time()
            try:
                r = subprocess.run([a.profdump, "-dir", a.dir], capture_output=True, timeout=5)
                regions = json.loads(r.stdout or b"null")
                out.write(json.dumps({"t": now, "regions": regions}) + "\n")
                last_err = None
            except Exception as e:  # no region yet, a region being created: keep polling
                msg = f"{type(e).__name__}: {e}"[:300]
                if msg != last_err:
                    out.write(json.dumps({"t": now, "err": msg}) + "\n")
                    last_err = msg
            t_next = tick(a.every, t_next)


WARN_MARK = b" NCCL WARN "


def run_warncopy(a):
    t0 = time.time()
    os.makedirs(a.dst, exist_ok=True)
    files = {}  # name -> [input file, output file, partial line]
    while True:
        stop = should_stop(a, t0)
        got = False
        try:
            names = sorted(n for n in os.listdir(a.src) if n.endswith(".log"))
        except OSError:
            names = []
        for n in names:
            if n not in files:
                if len(files) >= 4096:
                    continue
                try:
                    files[n] = [open(os.path.join(a.src, n), "rb"), open(os.path.join(a.dst, n), "ab", buffering=0), b""]
                except OSError:
                    continue
            f = files[n]
            chunk = f[0].read(1 << 20)
            if not chunk:
                continue
            got = True
            *lines, f[2] = (f[2] + chunk).split(b"\n")
            out = b"".join(l + b"\n" for l in lines if WARN_MARK in l)
            if out:
                f[1].write(out)
            if len(f[2]) > 1 << 20:
                f[2] = b""
        if stop and not got:
            for f in files.values():
                if WARN_MARK in f[2]:
                    f[1].write(f[2] + b"\n")
                f[0].close()
                f[1].close()
            return
        if not got:
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["incidents", "snapshot", "stamp", "regions", "warncopy"])
    ap.add_argument("--url")
    ap.add_argument("--out", help="where the samples go (every mode but warncopy)")
    ap.add_argument("--in", dest="inp")
    ap.add_argument("--stop", required=True)
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--max-s", type=float, default=600)
    ap.add_argument("--metrics-url")
    ap.add_argument("--metrics-out")
    ap.add_argument("--metrics-every", type=float, default=5)
    ap.add_argument("--job-url", help="snapshot mode: also poll the detector's /api/v1/jobs/<job>")
    ap.add_argument("--job-out")
    ap.add_argument("--profdump", help="regions mode: the profdump binary")
    ap.add_argument("--dir", help="regions mode: the plugin's folder")
    ap.add_argument("--src", help="warncopy mode: the folder of INFO logs")
    ap.add_argument("--dst", help="warncopy mode: the folder for their WARN lines")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    if a.mode in ("incidents", "snapshot") and not a.url:
        ap.error("--url is required")
    if a.mode == "stamp" and not a.inp:
        ap.error("--in is required")
    if a.mode == "regions" and not (a.profdump and a.dir):
        ap.error("--profdump and --dir are required")
    if a.mode == "warncopy" and not (a.src and a.dst):
        ap.error("--src and --dst are required")
    if a.mode != "warncopy" and not a.out:
        ap.error("--out is required")
    {"incidents": run_incidents, "snapshot": run_snapshot, "stamp": run_stamp, "regions": run_regions,
     "warncopy": run_warncopy}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
