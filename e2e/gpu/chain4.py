#!/usr/bin/env python3
"""Chaining on 4 GPUs (python3 standard library only): one run of overhead4_job.py, 4 ranks,
NVLink, with the watchdog's profiler plugin loaded by NCCL and the test stand-in
(profiler/test/standin.c) chained beside it (NCCLWATCH_PROFILER_CHAIN), while a sidecar reads
the plugin's regions and serves /metrics. It checks that both outputs are complete:

  - every rank's region (dumped before finalize): the chain active, called through the ABI
    version NCCL uses (or the stand-in's newest below it), nothing dropped, every collective
    and p2p issued also completed;
  - every rank's stand-in log: no handle or parent that was not its own, no call after its
    finalize; per communicator (by commId) as many Coll and P2p starts as the region counts
    collectives and p2p ops issued; every kernel channel and proxy event it got stopped;
  - NCCL's log: the plugin loaded on every rank, and its line saying the stand-in is chained;
  - the sidecar's /metrics: the bandwidth series of the run's communicators (and, where
    promtool is installed, `promtool check metrics` on the page).

  python3 e2e/gpu/chain4.py --out DIR [--watchdog bin/watchdog-linux-amd64]
  python3 e2e/gpu/chain4.py --out DIR --dry      # here: stub torch (no sidecar series)

Writes DIR/chain4.json (verdict and checks), DIR/chain4-metrics.txt and DIR/work/.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import overhead4 as o4  # noqa: E402


def standin_logs(d):
    """Per stand-in log: its last summary, and per context its comm id and its starts by type."""
    out = []
    for p in sorted(glob.glob(os.path.join(d, "standin.*.log"))):
        summ, ctx_id, starts = {}, {}, {}
        with open(p, errors="replace") as f:
            for line in f:
                if line.startswith("summary "):
                    summ = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
                elif line.startswith("init ctx="):
                    m = re.match(r"init ctx=(\d+) v=\d+ id=(\S+)", line)
                    if m:
                        ctx_id[m.group(1)] = m.group(2)
                elif line.startswith("start ctx="):
                    m = re.match(r"start ctx=(\d+) ev=\d+ type=(\w+)", line)
                    if m:
                        k = starts.setdefault(m.group(1), {})
                        k[m.group(2)] = k.get(m.group(2), 0) + 1
        out.append({"file": os.path.basename(p), "summary": summ,
                    "by_comm": {ctx_id.get(c, "ctx" + c): n for c, n in starts.items()}})
    return out


def check(a, run, work, metrics):
    facts, problems = {}, []
    recs = o4.records(os.path.join(work, "job.log"))
    done = [r for r in recs if r["kind"] == "done"]
    facts["ranks_done"] = sorted(r["rank"] for r in done)
    if len(done) != a.nproc or not all(r.get("check") for r in done):
        problems.append(f"the run did not complete on every rank: {facts['ranks_done']}, errors "
                        f"{[r.get('error') for r in recs if r['kind'] == 'error'][:2]}")
    nccl_logs = "".join(open(p, errors="replace").read() for p in glob.glob(os.path.join(run["dir"], "nccl.*.log")))
    facts["plugin_loaded"] = nccl_logs.count("PROFILER/Plugin: Loaded")
    facts["chain_line"] = nccl_logs.count("NCCL watchdog profiler: chained standin")
    if not a.dry and (facts["plugin_loaded"] < a.nproc or facts["chain_line"] < a.nproc):
        problems.append(f"NCCL's logs: plugin loaded {facts['plugin_loaded']}, chained line {facts['chain_line']} "
                        f"(want {a.nproc} each)")
    regs = o4.regions_of(run["dir"]) or []
    facts["regions"] = []
    issued = {}
    for e in regs:
        reg = e.get("region") or {}
        p = reg.get("process", {})
        r = {"pid": p.get("pid"), "abi": p.get("abi"), "chain": p.get("chain"), "chain_abi": p.get("chain_abi"),
             "chain_name": p.get("chain_name"), "chain_dropped": p.get("chain_dropped", 0),
             "chain_error": p.get("chain_error"), "dropped_events": p.get("dropped_events", 0), "comms": []}
        for c in reg.get("comms") or []:
            r["comms"].append({k: c.get(k, 0) for k in ("id", "coll_issued", "coll_done", "p2p_issued", "p2p_done")})
            issued.setdefault(p.get("pid"), {})[c.get("id")] = (c.get("coll_issued", 0), c.get("p2p_issued", 0))
        facts["regions"].append(r)
        want_abi = min(p.get("abi") or 0, 6)
        if r["chain"] != "active" or r["chain_abi"] != want_abi or r["chain_name"] != "standin" or r["chain_dropped"]:
            problems.append(f"region of pid {r['pid']}: chain {r['chain']} v{r['chain_abi']} {r['chain_name']!r} "
                            f"dropped {r['chain_dropped']} error {r['chain_error']!r} (NCCL's ABI v{p.get('abi')})")
        if r["dropped_events"] or any(c["coll_done"] != c["coll_issued"] or c["p2p_done"] != c["p2p_issued"]
                                      for c in r["comms"]):
            problems.append(f"region of pid {r['pid']}: dropped {r['dropped_events']}, comms {r['comms']}")
    if len(regs) != a.nproc:
        problems.append(f"{len(regs)} region dumps, want {a.nproc}")
    logs = standin_logs(run["env"]["STANDIN_DIR"])
    facts["standin"] = logs
    if len(logs) != a.nproc:
        problems.append(f"{len(logs)} stand-in logs, want {a.nproc}")
    for lg in logs:
        s = lg["summary"]
        pid = int(s.get("pid", -1))
        bad = {k: s.get(k) for k in ("bad_handle", "bad_parent", "after_fin", "overflow", "open") if s.get(k) != "0"}
        if not s or bad:
            problems.append(f"{lg['file']}: summary {s or 'missing'}")
        for cid, (colls, p2ps) in issued.get(pid, {}).items():
            got = lg["by_comm"].get(cid, {})
            if got.get("Coll", 0) != colls or got.get("P2p", 0) != p2ps:
                problems.append(f"{lg['file']} comm {cid}: the stand-in saw {got.get('Coll', 0)} Coll and "
                                f"{got.get('P2p', 0)} P2p starts, the watchdog counted {colls} and {p2ps} issued")
    facts["metrics_series"] = len([l for l in metrics.splitlines() if l.startswith("ncclwatch_comm_op_duration_seconds_count")])
    if a.watchdog and facts["metrics_series"] == 0:
        problems.append("the sidecar's /metrics has no ncclwatch_comm_op_duration_seconds series")
    promtool = shutil.which("promtool")
    if promtool and metrics:
        pt = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True, text=True)
        facts["promtool"] = (pt.stdout + pt.stderr).strip() or "clean"
        if pt.returncode != 0 or facts["promtool"] != "clean":
            problems.append(f"promtool check metrics: {facts['promtool'][:400]}")
    else:
        facts["promtool"] = "not run here: promtool check metrics < chain4-metrics.txt"
    return facts, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--plugin", default=os.path.join(o4.ROOT, "bin", "libnccl-profiler-ncclwatch.so"))
    ap.add_argument("--standin", default=os.path.join(o4.ROOT, "bin", "libnccl-profiler-standin.so"))
    ap.add_argument("--profdump", default=os.path.join(o4.ROOT, "bin", "profdump-linux-amd64"))
    ap.add_argument("--watchdog", default=os.path.join(o4.ROOT, "bin", "watchdog-linux-amd64"))
    ap.add_argument("--port", type=int, default=9391)
    ap.add_argument("--budget-s", type=float, default=50)
    ap.add_argument("--torchrun", default=None)
    ap.add_argument("--dry", action="store_true")
    a = ap.parse_args()
    a.no_fork = False
    a.plugin, a.standin = os.path.abspath(a.plugin), os.path.abspath(a.standin)
    if not os.path.exists(a.watchdog):
        a.watchdog = None
    t0 = time.time()
    work = os.path.join(a.out, "work")
    d = os.path.join(work, "runs", "01-nvlink-plugin-chain")
    os.makedirs(d, exist_ok=True)
    cells = {str(s): {"warmup": 2, "trials": 2, "max_n": 50, "cell_s": 0.1} for s in (1 << 20, 16 << 20)}
    run = {"name": "01-nvlink-plugin-chain", "index": 1, "rep": 0, "transport": "nvlink", "variant": "plugin+chain",
           "dir": d, "seed": 1, "ops": o4.OPS, "sizes": [1 << 20, 16 << 20], "timeout_s": 40, "limit_s": a.budget_s - 10,
           "cells": cells, "profdump": a.profdump,
           "env": o4.run_env("nvlink", "plugin", a.plugin, os.path.join(d, "prof"), chain=a.standin,
                             standin_dir=os.path.join(d, "standin"))}
    os.makedirs(run["env"]["NCCLWATCH_PROFILER_DIR"], exist_ok=True)
    sidecar = None
    if a.watchdog:
        # The run's logs and regions; etcd is absent (its writes fail and retry): /metrics is
        # what this check reads. Dry: no GPUs to sample.
        sidecar = subprocess.Popen(
            [a.watchdog, "sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "chain4", "--node", "n0",
             "--logs", os.path.join(d, "nccl.*.log"), "--profiler-dir", run["env"]["NCCLWATCH_PROFILER_DIR"],
             "--state-dir", "", "--ras-addr", "", "--http", f"127.0.0.1:{a.port}", f"--nvml={str(not a.dry).lower()}"],
            stdout=open(os.path.join(work, "sidecar.log"), "w"), stderr=subprocess.STDOUT, start_new_session=True)
    plan = {"deadline": t0 + a.budget_s, "estimate_s": {"nvlink": 5}, "runs": [run]}
    rc, took = o4.launch(a, plan, work, a.budget_s)
    metrics = ""
    if sidecar:
        time.sleep(2.5)  # two region polls after the ranks' last ops
        try:
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{a.port}/metrics", timeout=5).read().decode()
        except OSError as e:
            metrics = ""
            print(f"chain4: /metrics: {e}", file=sys.stderr)
        os.killpg(sidecar.pid, signal.SIGTERM)
        try:
            sidecar.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(sidecar.pid, signal.SIGKILL)
    with open(os.path.join(a.out, "chain4-metrics.txt"), "w") as f:
        f.write(metrics)
    facts, problems = check(a, run, work, metrics)
    doc = {"verdict": {"pass": not problems, "problems": problems}, "launch_rc": rc, "launch_s": round(took, 1),
           "elapsed_s": round(time.time() - t0, 1), "dry": a.dry, "sidecar": bool(sidecar), **facts}
    with open(os.path.join(a.out, "chain4.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc["verdict"], indent=1))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
