#!/usr/bin/env python3
"""The NCCL profiler plugin's cost on a GPU (python3 standard library only): overhead_job.py's
tight loop of small all-reduces with 1 and 2 ranks on GPU 0 (2 ranks: one NCCL_HOSTID each,
NET/Socket on loopback, so the network proxy steps the plugin records happen), without and
with NCCL_PROFILER_PLUGIN, REPS interleaved runs of each (ABBA order per world size, so a
drift of the machine falls on both), and a check that the reduced values are the same.

  python3 e2e/gpu/overhead.py --out DIR            # on the GPU machine, from the repo root
  python3 e2e/gpu/overhead.py --out DIR --dry      # here: stubrun.py and the stub torch

Writes DIR/overhead.json (every run, trial and digest; per world size and variant the median
µs per op, the range over runs, the difference with the plugin and whether it is within the
run-to-run noise) and DIR/overhead.md (the table for docs/validation.md); DIR/runs/ holds each
run's output and NCCL's INIT lines. NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT in both
variants: no line per collective, and NCCL says whether it loaded the plugin.
"""
import argparse
import glob
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def med(v):
    return round(statistics.median(v), 3) if v else None


def records(line, tag="OVERHEAD"):
    """The JSON objects after each "<tag> " on a line."""
    dec, out, i = json.JSONDecoder(), [], line.find(tag + " {")
    while i >= 0:
        try:
            o, end = dec.raw_decode(line, i + len(tag) + 1)
        except ValueError:
            end = i + 1
        else:
            if isinstance(o, dict):
                out.append(o)
        i = line.find(tag + " {", end)
    return out


def run_one(a, idx, world, plugin, rep, limit_s):
    tag = f"{idx:02d}-ws{world}-{'plugin' if plugin else 'none'}"
    d = os.path.join(a.out, "runs", tag)
    os.makedirs(os.path.join(d, "prof"), exist_ok=True)
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT", NCCL_DEBUG_FILE=os.path.join(d, "nccl.%h.%p.log"),
               ITERS=str(a.iters[world]), TRIALS=str(a.trials), NUMEL=str(a.numel), TAG=tag, PYTHONUNBUFFERED="1")
    env.pop("NCCL_PROFILER_PLUGIN", None)
    if plugin:
        env.update(NCCL_PROFILER_PLUGIN=a.plugin, NCCLWATCH_PROFILER_DIR=os.path.join(d, "prof"))
    cmd = ["timeout", "-k", "5", str(int(limit_s))] + shlex.split(a.torchrun) + [
        "--standalone", f"--nproc_per_node={world}", "--monitor-interval=0.5", os.path.join(HERE, "overhead_job.py")]
    t0 = time.time()
    with open(os.path.join(d, "job.log"), "w") as f:
        rc = subprocess.call(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    dur = time.time() - t0
    trials, results = {}, {}
    with open(os.path.join(d, "job.log"), errors="replace") as f:
        for line in f:
            # Every record on the line: older jobs' lines could run into each other.
            for o in records(line):
                if o.get("kind") == "trial":
                    trials.setdefault(o["rank"], []).append(o)
                elif o.get("kind") == "result":
                    results[o["rank"]] = o
    loaded = 0
    for p in glob.glob(os.path.join(d, "nccl.*.log")):
        with open(p, errors="replace") as f:
            loaded += any("PROFILER/Plugin: Loaded" in l for l in f)
    r0 = trials.get(0, [])
    return {
        "run": tag, "index": idx, "rep": rep, "world": world, "plugin": plugin, "rc": rc, "duration_s": round(dur, 1),
        "us_per_op": [t["us_per_op"] for t in r0], "us_per_op_waited": [t["us_per_op_waited"] for t in r0],
        "median_us_per_op": med([t["us_per_op"] for t in r0]), "median_us_per_op_waited": med([t["us_per_op_waited"] for t in r0]),
        "digests": sorted({r.get("digest") for r in results.values()}), "mismatched": sum(r.get("mismatched", 0) for r in results.values()),
        "ranks_reported": sorted(results), "nccl": next((r.get("nccl") for r in results.values()), None),
        "plugin_loaded_ranks": loaded, "plugin_regions": len(glob.glob(os.path.join(d, "prof", "ncclwatch-prof.*.bin"))),
    }


def summarize(runs, worlds):
    out = {}
    for w in worlds:
        s = {}
        for plugin in (False, True):
            rs = [r for r in runs if r["world"] == w and r["plugin"] == plugin and r["median_us_per_op"] is not None]
            key = "plugin" if plugin else "none"
            s[key] = {"runs": len(rs)}
            for m in ("median_us_per_op", "median_us_per_op_waited"):
                v = [r[m] for r in rs]
                s[key][m.replace("median_", "")] = {"median": med(v), "min": min(v) if v else None, "max": max(v) if v else None}
        for m in ("us_per_op", "us_per_op_waited"):
            off, on = s["none"][m], s["plugin"][m]
            if off["median"] is None or on["median"] is None:
                continue
            noise = max(off["max"] - off["min"], on["max"] - on["min"])
            delta = round(on["median"] - off["median"], 3)
            s[m + "_delta"] = delta
            s[m + "_noise"] = round(noise, 3)
            s[m + "_within_noise"] = abs(delta) <= noise
        mine = [r for r in runs if r["world"] == w]
        digests = {d for r in mine for d in r["digests"]}
        s["results_identical"] = bool(mine) and len(digests) == 1 and all(r["mismatched"] == 0 and r["rc"] == 0 for r in mine)
        s["digests"] = sorted(d for d in digests if d)
        s["plugin_loaded"] = all(r["plugin_regions"] >= w for r in mine if r["plugin"]) if any(r["plugin"] for r in mine) else None
        s["goal_met"] = (s.get("us_per_op_delta") is not None
                         and (s["us_per_op_delta"] <= 0.5 or s.get("us_per_op_within_noise")))
        out[str(w)] = s
    return out


def table(summary):
    lines = []
    lines.append("| ranks | variant | runs | µs/op, enqueued (median, range over runs) | µs/op, each waited for | reduced values |")
    lines.append("|---|---|---|---|---|---|")
    for w, s in summary.items():
        for key, label in (("none", "no plugin"), ("plugin", "plugin")):
            v = s[key]

            def cell(x):
                return "–" if x["median"] is None else f"{x['median']:.2f} ({x['min']:.2f}–{x['max']:.2f})"
            res = ("identical, all exact" if s["results_identical"] else "**DIFFER or wrong**") if key == "plugin" else ""
            lines.append(f"| {w} | {label} | {v['runs']} | {cell(v['us_per_op'])} | {cell(v['us_per_op_waited'])} | {res} |")
        if s.get("us_per_op_delta") is not None:
            lines.append(f"| {w} | **difference** | | {s['us_per_op_delta']:+.2f} (noise {s['us_per_op_noise']:.2f}: "
                         f"{'within' if s['us_per_op_within_noise'] else 'beyond'}) | "
                         f"{s.get('us_per_op_waited_delta', 0):+.2f} (noise {s.get('us_per_op_waited_noise', 0):.2f}) | "
                         f"goal ≤ 0.5 µs or within noise: {'met' if s['goal_met'] else '**not met**'} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3, help="runs of each variant per world size")
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--numel", type=int, default=1024)
    ap.add_argument("--iters1", type=int, default=2000, help="ops per trial with 1 rank")
    ap.add_argument("--iters2", type=int, default=400, help="ops per trial with 2 ranks (NET/Socket: ms per op)")
    ap.add_argument("--plugin", default=os.path.join(ROOT, "bin", "libnccl-profiler-ncclwatch.so"))
    ap.add_argument("--torchrun", default=None)
    ap.add_argument("--max-s", type=float, default=200, help="stop starting runs that could end after this")
    ap.add_argument("--dry", action="store_true", help="stubrun.py and the stub torch (no GPU): plumbing only")
    a = ap.parse_args()
    t_start = time.time()
    a.plugin = os.path.abspath(a.plugin)
    a.iters = {1: a.iters1, 2: a.iters2}
    if a.torchrun is None:
        if a.dry:
            a.torchrun = f"{sys.executable} {os.path.join(HERE, 'stubrun.py')}"
        else:
            a.torchrun = shutil.which("torchrun") or f"{sys.executable} -m torch.distributed.run"
    worlds = [int(w) for w in a.worlds.split(",") if w]
    os.makedirs(a.out, exist_ok=True)
    plan = []
    for rep in range(a.reps):
        for w in worlds:
            order = (False, True) if rep % 2 == 0 else (True, False)  # ABBA
            plan.extend((w, p, rep) for p in order)
    runs, skipped = [], []
    longest = {}
    for idx, (w, plugin, rep) in enumerate(plan):
        left = a.max_s - (time.time() - t_start)
        need = longest.get(w, 30.0) * 1.3
        if left < need:
            skipped.append({"world": w, "plugin": plugin, "rep": rep, "why": f"{left:.0f}s left, a run takes ~{need:.0f}s"})
            continue
        r = run_one(a, idx, w, plugin, rep, min(120, left))
        longest[w] = max(longest.get(w, 0), r["duration_s"])
        runs.append(r)
        print(f"overhead: {r['run']} rc={r['rc']} {r['duration_s']}s median {r['median_us_per_op']} µs/op "
              f"(waited {r['median_us_per_op_waited']}) regions {r['plugin_regions']} digests {len(r['digests'])}", flush=True)
    summary = summarize(runs, worlds) if runs else {}
    meta = {"dry": a.dry, "numel": a.numel, "dtype": "float32", "trials": a.trials, "iters": a.iters,
            "reps": a.reps, "plugin": a.plugin, "nccl": next((r["nccl"] for r in runs if r["nccl"]), None),
            "elapsed_s": round(time.time() - t_start, 1)}
    doc = {"meta": meta, "summary": summary, "runs": runs, "skipped": skipped}
    with open(os.path.join(a.out, "overhead.json"), "w") as f:
        json.dump(doc, f, indent=1)
    md = table(summary) if runs else "no run completed"
    head = (f"Plugin overhead{' (DRY RUN: stub torch, timings meaningless)' if a.dry else ''}: NCCL {meta['nccl']}, "
            f"{a.numel} float32 per all-reduce, {a.trials} trials per run, {a.reps} interleaved runs per variant; "
            f"{len(skipped)} run(s) skipped for time.\n\n")
    with open(os.path.join(a.out, "overhead.md"), "w") as f:
        f.write(head + md + "\n")
    print(head + md)
    bad = [w for w, s in summary.items() if not s["results_identical"]]
    return 1 if bad or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
