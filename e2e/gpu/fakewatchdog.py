#!/usr/bin/env python3
"""A toy stand-in for bin/watchdog, only to exercise run.sh's plumbing in a dry run on a
machine without the real binary (python3 standard library only). It is NOT the product:
its "rules" are crude and exist so that the harness has incidents to time.

  fakewatchdog.py detector --http ADDR [...ignored]      GET /api/v1/incidents
  fakewatchdog.py sidecar --job J --node N --logs GLOB --http ADDR [...ignored]
                                                          GET /api/v1/snapshot, /metrics
  fakewatchdog.py nvml-probe --n N                        N fake JSON lines

The sidecar writes its view to $FAKE_WATCHDOG_DIR/<job>.<node>.json; the detector reads
those files (the real pair talks through etcd).
"""
import datetime
import glob
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIR = os.environ.get("FAKE_WATCHDOG_DIR", "/tmp/fakewatchdog")
OPL = re.compile(r"^(?:\[([^\]]+)\] )?\S+?:(\d+):\d+ \[(\d+)\] NCCL INFO (\w+): opCount \S+ sendbuff \S+ recvbuff \S+ count (\d+) datatype (\d+)")


def flags(argv):
    out = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                k, v = a[2:], argv[i + 1]
                i += 1
            else:
                k, v = a[2:], "true"
            out[k] = v
        i += 1
    return out


def serve(addr, routes):
    host, port = addr.rsplit(":", 1)

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            fn = routes.get(self.path.split("?")[0])
            if not fn:
                self.send_error(404)
                return
            body, ctype = fn()
            b = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer((host, int(port)), H)
    srv.daemon_threads = True
    srv.serve_forever()


def rfc3339(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sidecar(f):
    job, node = f.get("job", "job"), f.get("node", "node")
    os.makedirs(DIR, exist_ok=True)
    state = {"procs": {}}
    started = time.time()

    def scan():
        while True:
            procs = {}
            for path in sorted(glob.glob(f.get("logs", "*.log"))):
                seq, last, rank, pid = [], 0.0, -1, 0
                with open(path, errors="replace") as fh:
                    for line in fh:
                        m = OPL.match(line)
                        if not m:
                            continue
                        pid, rank = int(m.group(2)), int(m.group(3))
                        if m.group(1):
                            last = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
                        if m.group(4) not in ("Send", "Recv"):
                            seq.append([m.group(4), m.group(5), m.group(6)])
                procs[path] = {"rank": rank, "pid": pid, "file": path, "last": last, "ops": len(seq), "seq": seq[-4000:]}
            state["procs"] = procs
            doc = {"job": job, "node": node, "t": time.time(), "procs": list(procs.values())}
            tmp = os.path.join(DIR, f".{job}.{node}.tmp")
            with open(tmp, "w") as fh:
                json.dump(doc, fh)
            os.replace(tmp, os.path.join(DIR, f"{job}.{node}.json"))
            time.sleep(0.5)

    def gpus():
        now = time.time()
        out = []
        for i in range(2):
            busy = any(p["rank"] == i and now - p["last"] < 2 for p in state["procs"].values())
            out.append({"i": i, "bus": f"{0x18 + 16 * i:x}000", "t": int(now * 1e6), "util": 99 if busy else 0,
                        "memutil": 20 if busy else 0, "pw": 550.0 if busy else 75.0, "pwmax": 700.0,
                        "sm": 1980 if busy else 345, "smmax": 1980, "temp": 40,
                        "state": "computing" if busy else "idle"})
        return out

    def snapshot():
        procs = [{"host": node, "pid": p["pid"], "rank": p["rank"], "lrank": p["rank"], "file": p["file"],
                  "last": int(p["last"] * 1e6), "cudadev": p["rank"]} for p in state["procs"].values()]
        return json.dumps({"v": 1, "job": job, "node": node, "t": int(time.time() * 1e6),
                           "started": int(started * 1e6), "procs": procs, "gpus": gpus()}), "application/json"

    def metrics():
        lines = []
        for g in gpus():
            lines.append(f'ncclwatch_gpu_utilization_ratio{{gpu="{g["i"]}"}} {g["util"] / 100}')
            lines.append(f'ncclwatch_gpu_power_watts{{gpu="{g["i"]}"}} {g["pw"]}')
            lines.append(f'ncclwatch_gpu_sm_clock_hertz{{gpu="{g["i"]}"}} {g["sm"] * 1e6}')
            for s in ("computing", "waiting", "idle"):
                lines.append(f'ncclwatch_gpu_state{{gpu="{g["i"]}",state="{s}"}} {int(g["state"] == s)}')
        return "\n".join(lines) + "\n", "text/plain"

    threading.Thread(target=scan, daemon=True).start()
    serve(f.get("http", "127.0.0.1:9301"), {"/api/v1/snapshot": snapshot, "/metrics": metrics})


def detector(f):
    floor = 10.0
    incidents = {}
    lock = threading.Lock()

    def evaluate():
        now = time.time()
        for path in glob.glob(os.path.join(DIR, "*.json")):
            try:
                with open(path) as fh:
                    doc = json.load(fh)
            except (OSError, ValueError):
                continue
            job, procs = doc["job"], [p for p in doc["procs"] if p["ops"] > 0]
            if len(procs) < 2:
                continue
            a, b = sorted(procs, key=lambda p: p["rank"])[:2]
            n = min(len(a["seq"]), len(b["seq"]))
            pos = next((i for i in range(n) if a["seq"][i] != b["seq"][i]), None)
            if pos is not None and (job, "mismatch") not in incidents:
                incidents[(job, "mismatch")] = {
                    "id": f"{job}-mismatch", "kind": "mismatch", "state": "open", "severity": "critical",
                    "job": job, "seq": pos + 1, "culprits": [{"rank": b["rank"], "host": doc["node"], "pid": b["pid"]}],
                    "summary": f"toy: op {pos + 1} differs: {a['seq'][pos]} vs {b['seq'][pos]}", "evidence": [],
                    "opened_at": rfc3339(now), "resolved_at": None}
            stale = all(now - p["last"] > floor for p in procs) and now - doc["t"] < 5
            if stale and (job, "hang") not in incidents:
                culprit = min(procs, key=lambda p: p["last"])
                incidents[(job, "hang")] = {
                    "id": f"{job}-hang", "kind": "hang", "state": "open", "severity": "critical", "job": job,
                    "culprits": [{"rank": culprit["rank"], "host": doc["node"], "pid": culprit["pid"]}],
                    "summary": "toy: no rank logged for 10 s", "evidence": [],
                    "opened_at": rfc3339(now), "fault_at": rfc3339(culprit["last"]), "resolved_at": None}

    def loop():
        while True:
            with lock:
                evaluate()
            time.sleep(0.5)

    def api():
        with lock:
            return json.dumps(list(incidents.values())), "application/json"

    threading.Thread(target=loop, daemon=True).start()
    serve(f.get("http", "127.0.0.1:9300"), {"/api/v1/incidents": api, "/metrics": lambda: ("# fake\n", "text/plain")})


def nvml_probe(f):
    for i in range(int(f.get("n", "5"))):
        print(json.dumps({"fake": True, "i": 0, "util": 0, "pw": 75.0, "sm": 345}), flush=True)
        time.sleep(0.2)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: fakewatchdog.py detector|sidecar|nvml-probe [flags]")
    f = flags(sys.argv[2:])
    {"detector": detector, "sidecar": sidecar, "nvml-probe": nvml_probe}[sys.argv[1]](f)


if __name__ == "__main__":
    main()
