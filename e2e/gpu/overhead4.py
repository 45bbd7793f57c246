#!/usr/bin/env python3
"""The profiler plugin's cost on 4 GPUs (python3 standard library only): overhead4_job.py under
one torchrun launch, 4 ranks, rank r on cuda:r, runs a randomized plan of runs, each a
(transport, variant) pair, REPS times:

  transports  nvlink: NCCL's own choice (P2P/NVLink between the GPUs)
              socket: NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
  variants    none: no NCCL_PROFILER_PLUGIN;  plugin: the watchdog's plugin
  cells       all-reduce, all-gather, a ring of sends; 1 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB

Always NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1;
NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT in both variants (no line per op; NCCL says which
transport it took and whether it loaded the plugin). The order of the four pairs is shuffled in
every repetition, and the cells in every run, from a seed that is recorded.

Per (transport, op, size), over the runs: the median µs per op of each variant, the
difference, a bootstrap 95 % interval of the difference of medians (runs resampled), the
enqueue path's CPU µs per op (time.thread_time around the back-to-back enqueues, mean over
ranks) and its difference, and whether the goal holds (the difference at most 0.5 µs or 1 %
of the op). The plugin runs' regions (profdump, when given) say what the plugin recorded: ops
issued and done, events dropped, and its own timing of the ops.

  python3 e2e/gpu/overhead4.py --out DIR              # on the GPU machine
  python3 e2e/gpu/overhead4.py --out DIR --dry        # here: stubrun.py and the stub torch

Writes DIR/overhead4.json, DIR/overhead4.md and DIR/work/ (the plan, the job's output, each
run's NCCL logs and regions) for overhead4.sh to pack.
"""
import argparse
import glob
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from overhead import records as line_records  # noqa: E402  (one parser of the jobs' JSON lines)

ALWAYS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
          "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}
SOCKET = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}
SIZES = [1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]
OPS = ["allreduce", "allgather", "sendrecv"]


def size_name(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def run_env(transport, variant, plugin, prof_dir, chain=None, standin_dir=None):
    """The environment of one run; None removes a variable."""
    env = dict(ALWAYS)
    for k in SOCKET:
        env[k] = SOCKET[k] if transport == "socket" else None
    env["NCCL_PROFILER_PLUGIN"] = plugin if variant != "none" else None
    env["NCCLWATCH_PROFILER_DIR"] = prof_dir if variant != "none" else None
    env["NCCLWATCH_PROFILER_CHAIN"] = chain
    env["STANDIN_DIR"] = standin_dir
    return env


def cell_config(transport, size, a):
    """Warm-up ops, trials, cap on ops per trial and the time of a cell, by transport and size:
    long enough for a median at the small sizes, one trial of one op for socket 256 MiB."""
    big = size >= (16 << 20)
    cell_s = a.cell_s if transport == "nvlink" else a.cell_s_socket
    warmup = 1 if big else 3
    if transport == "socket" and size >= (256 << 20):
        # Kept short: a socket 256 MiB op takes a few hundred ms. The op that sizes the cell
        # warms it; then one trial of one op.
        cell_s, warmup = 0.05, 0
    return {"warmup": warmup, "trials": a.trials, "max_n": 2000 if size <= (64 << 10) else 500, "cell_s": cell_s}


def records(path):
    """Every 'OVH4 {json}' record in the job's output."""
    with open(path, errors="replace") as f:
        return [o for line in f for o in line_records(line, "OVH4")]


def launcher(a):
    if a.dry:
        return [sys.executable, os.path.join(HERE, "stubrun.py")]
    if a.torchrun:
        return shlex.split(a.torchrun)
    tr = shutil.which("torchrun")
    return [tr] if tr else [sys.executable, "-m", "torch.distributed.run"]


def launch(a, plan, work, limit_s, extra_env=None):
    """One torchrun launch of overhead4_job.py over the plan; its output in work/job.log."""
    plan_file = os.path.join(work, "plan.json")
    with open(plan_file, "w") as f:
        json.dump(plan, f, indent=1)
    env = dict(os.environ, PLAN_FILE=plan_file, PYTHONUNBUFFERED="1", FORK="0" if a.no_fork else "1")
    env.update(extra_env or {})
    cmd = ["timeout", "-k", "10", str(int(limit_s))] + launcher(a) + [
        "--standalone", f"--nproc_per_node={a.nproc}", "--monitor-interval=0.5", os.path.join(HERE, "overhead4_job.py")]
    t0 = time.time()
    with open(os.path.join(work, "job.log"), "w") as f:
        rc = subprocess.call(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    return rc, time.time() - t0


def nccl_facts(run_dir):
    """From a run's NCCL INIT lines: the plugin loaded (ranks), the transports seen."""
    loaded, via, version = 0, set(), None
    for p in glob.glob(os.path.join(run_dir, "nccl.*.log")):
        with open(p, errors="replace") as f:
            text = f.read()
        loaded += "PROFILER/Plugin: Loaded" in text
        via.update(re.findall(r" via (\S+)", text))
        m = re.search(r"NCCL version (\S+)", text)
        version = version or (m and m.group(1))
    kinds = sorted({v.split("/")[0] for v in via})
    return {"plugin_loaded_ranks": loaded, "transports": kinds, "nccl_log_version": version}


def regions_of(run_dir):
    """The plugin's regions of a run as each rank dumped its own before finalize (None: none)."""
    files = sorted(glob.glob(os.path.join(run_dir, "prof-rank*.json")))
    if not files:
        return None
    out = []
    for p in files:
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        out.extend(doc if isinstance(doc, list) else [doc])
    return out


def region_summary(regions):
    """Per plugin run: what the plugin recorded over its ranks' communicators."""
    s = {"regions": len(regions), "dropped_events": 0, "comms": 0, "coll_issued": 0, "coll_done": 0, "p2p_issued": 0,
         "p2p_done": 0, "merged_ops": 0, "abi": None, "timed_ops": 0, "gpu_timed_ops": 0, "chain": None, "timings": {}}
    for r in regions:
        reg = r.get("region", r)
        p = reg.get("process", {})
        s["abi"] = s["abi"] or p.get("abi")
        s["chain"] = s["chain"] or p.get("chain")
        s["dropped_events"] += p.get("dropped_events", 0)
        for c in reg.get("comms") or []:
            s["comms"] += 1
            for k in ("coll_issued", "coll_done", "p2p_issued", "p2p_done", "merged_ops"):
                s[k] += c.get(k, 0)
            for t in c.get("timings") or []:
                s["timed_ops"] += t.get("ops", 0)
                s["gpu_timed_ops"] += t.get("gpu_timed", 0)
                # The plugin's own mean execution time per op, by function and size bucket:
                # to hold against the benchmark's µs per op at the large sizes.
                k = f"{t.get('func')}/{t.get('bucket')}"
                agg = s["timings"].setdefault(k, {"ops": 0, "exec_ns": 0})
                agg["ops"] += t.get("ops", 0)
                agg["exec_ns"] += t.get("exec_ns", 0)
    for agg in s["timings"].values():
        agg["mean_exec_us"] = round(agg.pop("exec_ns") / 1000 / max(1, agg["ops"]), 2)
    return s


def bootstrap_diff(xs, ys, n=2000, seed=1):
    """95 % interval of median(ys) - median(xs), runs resampled with replacement."""
    if len(xs) < 2 or len(ys) < 2:
        return None, None
    rnd = random.Random(seed)
    d = sorted(statistics.median(rnd.choices(ys, k=len(ys))) - statistics.median(rnd.choices(xs, k=len(xs)))
               for _ in range(n))
    return round(d[int(0.025 * n)], 3), round(d[int(0.975 * n) - 1], 3)


def summarize(cells):
    """cells: [{transport, op, size, variant, us_per_op, enq_cpu_us, enq_us}] one per run."""
    groups = {}
    for c in cells:
        groups.setdefault((c["transport"], c["op"], c["size"]), {}).setdefault(c["variant"], []).append(c)
    out = []
    for (tr, op, size), by in sorted(groups.items(), key=lambda kv: (kv[0][0], OPS.index(kv[0][1]), kv[0][2])):
        row = {"transport": tr, "op": op, "size": size, "size_name": size_name(size)}
        for v in ("none", "plugin"):
            rs = by.get(v, [])
            row[v] = {"runs": len(rs),
                      "us_per_op": round(statistics.median([r["us_per_op"] for r in rs]), 3) if rs else None,
                      "enq_cpu_us": round(statistics.median([r["enq_cpu_us"] for r in rs]), 3) if rs else None,
                      "enq_us": round(statistics.median([r["enq_us"] for r in rs]), 3) if rs else None,
                      "values": [round(r["us_per_op"], 3) for r in rs]}
        a, b = row["none"], row["plugin"]
        if a["us_per_op"] is not None and b["us_per_op"] is not None:
            row["diff_us"] = round(b["us_per_op"] - a["us_per_op"], 3)
            row["diff_pct"] = round(100 * row["diff_us"] / a["us_per_op"], 2) if a["us_per_op"] else None
            lo, hi = bootstrap_diff([r["us_per_op"] for r in by["none"]], [r["us_per_op"] for r in by["plugin"]])
            row["ci95_us"] = [lo, hi]
            row["enq_cpu_diff_us"] = round(b["enq_cpu_us"] - a["enq_cpu_us"], 3)
            lo2, hi2 = bootstrap_diff([r["enq_cpu_us"] for r in by["none"]], [r["enq_cpu_us"] for r in by["plugin"]])
            row["enq_cpu_ci95_us"] = [lo2, hi2]
            limit = max(0.5, 0.01 * a["us_per_op"])
            row["goal_limit_us"] = round(limit, 3)
            row["goal_met"] = row["diff_us"] <= limit
            row["significant"] = lo is not None and (lo > 0 or hi < 0)
        out.append(row)
    return out


def table(rows):
    head = ("| transport | op | size | none µs/op | plugin µs/op | difference (95 % CI) | % | enqueue CPU µs/op none / "
            "plugin (diff) | goal ≤ max(0.5 µs, 1 %) | runs |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        a, b = r["none"], r["plugin"]

        def f(x):
            return "–" if x is None else (f"{x:.1f}" if x >= 100 else f"{x:.2f}")
        if r.get("diff_us") is None:
            lines.append(f"| {r['transport']} | {r['op']} | {r['size_name']} | {f(a['us_per_op'])} | {f(b['us_per_op'])} "
                         f"| – | – | – | – | {a['runs']}/{b['runs']} |")
            continue
        lo, hi = r["ci95_us"]
        ci = f" ({lo:+.2f} to {hi:+.2f})" if lo is not None else ""
        goal = "met" if r["goal_met"] else "**not met**"
        lines.append(f"| {r['transport']} | {r['op']} | {r['size_name']} | {f(a['us_per_op'])} | {f(b['us_per_op'])} | "
                     f"{r['diff_us']:+.2f}{ci} | {r['diff_pct']:+.1f} | {f(a['enq_cpu_us'])} / {f(b['enq_cpu_us'])} "
                     f"({r['enq_cpu_diff_us']:+.2f}) | {goal} | {a['runs']}/{b['runs']} |")
    return "\n".join(lines)


def build_plan(a, work, prof_root):
    rnd = random.Random(a.seed)
    runs = []
    pairs = [(t, v) for t in a.transports for v in ("none", "plugin")]
    for rep in range(a.reps):
        order = pairs[:]
        rnd.shuffle(order)
        for t, v in order:
            idx = len(runs) + 1
            name = f"{idx:02d}-{t}-{v}"
            d = os.path.join(work, "runs", name)
            runs.append({"name": name, "index": idx, "rep": rep, "transport": t, "variant": v, "dir": d,
                         "seed": a.seed, "ops": OPS, "sizes": a.sizes, "timeout_s": 60, "limit_s": a.run_limit_s,
                         "cells": {str(s): cell_config(t, s, a) for s in a.sizes},
                         "profdump": a.profdump, "env": run_env(t, v, a.plugin, os.path.join(prof_root, name))})
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=6, help="repetitions of each (transport, variant); at least 5 count")
    ap.add_argument("--seed", type=int, default=None, help="the plan's random order (default: from the clock, recorded)")
    ap.add_argument("--transports", default="nvlink,socket")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--cell-s", type=float, default=0.12, help="time per cell, NVLink")
    ap.add_argument("--cell-s-socket", type=float, default=0.2, help="time per cell, socket")
    ap.add_argument("--budget-s", type=float, default=255, help="the whole launch; runs that would end later are skipped")
    ap.add_argument("--run-limit-s", type=float, default=60, help="a run still going after this is killed")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--plugin", default=os.path.join(ROOT, "bin", "libnccl-profiler-ncclwatch.so"))
    ap.add_argument("--profdump", default=os.path.join(ROOT, "bin", "profdump-linux-amd64"))
    ap.add_argument("--torchrun", default=None)
    ap.add_argument("--no-fork", action="store_true", help="a fresh python per run (FORK=0) instead of a fork")
    ap.add_argument("--prof-root", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None,
                    help="where the plugin's regions go (a tmpfs; default /dev/shm)")
    ap.add_argument("--dry", action="store_true", help="stubrun.py and the stub torch (no GPU): plumbing only")
    a = ap.parse_args()
    t_start = time.time()
    a.seed = a.seed if a.seed is not None else int(time.time()) % 100000
    a.plugin = os.path.abspath(a.plugin)
    a.transports = [t for t in a.transports.split(",") if t]
    a.sizes = [int(s) for s in a.sizes.split(",") if s]
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    # The plugin's regions on a tmpfs, as deployed (on a disk the kernel writes their pages
    # back now and then, a cost that is not the plugin's).
    prof_root = os.path.join(a.prof_root or work, f"ovh4-prof.{os.getpid()}")
    os.makedirs(prof_root, exist_ok=True)
    runs = build_plan(a, work, prof_root)
    # The launch's own start (python, torch import) comes out of the budget; so does the end.
    deadline = t_start + a.budget_s - 15
    plan = {"deadline": deadline, "estimate_s": {t: (12 if t == "nvlink" else 20) for t in a.transports}, "runs": runs}
    rc, took = launch(a, plan, work, a.budget_s + 20)
    recs = records(os.path.join(work, "job.log"))

    by_run = {}
    for r in recs:
        if "run" in r:
            by_run.setdefault(r["run"], []).append(r)
    cells, run_rows, problems = [], [], []
    for run in runs:
        rr = by_run.get(run["name"], [])
        kinds = {r["kind"] for r in rr}
        row = {"run": run["name"], "transport": run["transport"], "variant": run["variant"], "rep": run["rep"],
               "skipped": "skipped" in kinds and "cell" not in kinds}
        row["ranks_done"] = sorted(r["rank"] for r in rr if r["kind"] == "done")
        row["check"] = all(r.get("check") for r in rr if r["kind"] == "done") and len(row["ranks_done"]) == a.nproc
        row["errors"] = [r["error"] for r in rr if r["kind"] == "error"]
        starts = [r for r in rr if r["kind"] == "run"]
        row["init_s"] = max((r["init_s"] for r in starts), default=None)
        row["nccl"] = next((r["nccl"] for r in starts), None)
        row["s"] = max((r["s"] for r in rr if r["kind"] == "exit"), default=None)
        if os.path.isdir(run["dir"]):
            row.update(nccl_facts(run["dir"]))
        if run["variant"] == "plugin":
            regs = regions_of(run["dir"])
            if regs is not None:
                row["plugin_regions"] = region_summary(regs)
        complete = not row["skipped"] and row["check"] and not row["errors"]
        row["complete"] = complete
        if not row["skipped"] and not complete:
            problems.append(f"{run['name']}: check {row['check']}, ranks done {row['ranks_done']}, errors {row['errors'][:2]}")
        # The variant and the transport must be what the run says (NCCL's own INIT lines).
        if complete and not a.dry:
            if run["variant"] == "plugin" and row.get("plugin_loaded_ranks", 0) < a.nproc:
                problems.append(f"{run['name']}: NCCL {row.get('nccl')} loaded the plugin on "
                                f"{row.get('plugin_loaded_ranks', 0)} of {a.nproc} ranks")
            seen = set(row.get("transports", []))
            if seen and ((run["transport"] == "socket") != (seen == {"NET"})):
                problems.append(f"{run['name']}: NCCL connected its ranks via {sorted(seen)}")
        if complete:
            per = {}
            for r in rr:
                if r["kind"] == "cell":
                    per.setdefault((r["op"], r["size"]), []).append(r)
            for (op, size), rs in per.items():
                r0 = [r for r in rs if r["rank"] == 0]
                if not r0:
                    continue
                us = statistics.median(t["us_per_op"] for t in r0[0]["trials"])
                enq = statistics.mean(statistics.median(t["enq_us"] for t in r["trials"]) for r in rs)
                cpu = statistics.mean(statistics.median(t["enq_cpu_us"] for t in r["trials"]) for r in rs)
                cells.append({"run": run["name"], "transport": run["transport"], "variant": run["variant"], "op": op,
                              "size": size, "us_per_op": us, "enq_us": enq, "enq_cpu_us": cpu, "n": r0[0]["n"]})
        run_rows.append(row)
    shutil.rmtree(prof_root, ignore_errors=True)  # each rank dumped its region as JSON
    rows = summarize(cells)
    done = [r for r in run_rows if r["complete"]]
    reps_done = {(t, v): sum(1 for r in done if r["transport"] == t and r["variant"] == v)
                 for t in a.transports for v in ("none", "plugin")}
    nccl = next((r["nccl"] for r in run_rows if r.get("nccl")), None)
    meta = {"dry": a.dry, "seed": a.seed, "reps_planned": a.reps, "reps_done": {f"{t}/{v}": n for (t, v), n in reps_done.items()},
            "nproc": a.nproc, "transports": a.transports, "sizes": a.sizes, "ops": OPS, "trials": a.trials,
            "cell_s": a.cell_s, "cell_s_socket": a.cell_s_socket, "fork": not a.no_fork, "plugin": a.plugin,
            "nccl": nccl, "launch_rc": rc, "launch_s": round(took, 1), "elapsed_s": round(time.time() - t_start, 1),
            "env_always": ALWAYS, "env_socket": SOCKET,
            "transports_seen": {t: sorted({x for r in run_rows if r["transport"] == t for x in r.get("transports", [])})
                                for t in a.transports}}
    goal = [r for r in rows if r.get("goal_met") is False]
    verdict = {"complete": all(n >= 5 for n in reps_done.values()) and not problems,
               "cells_over_goal": [f"{r['transport']} {r['op']} {r['size_name']}: {r['diff_us']:+.2f} µs "
                                   f"({r['diff_pct']:+.1f} %), CI {r['ci95_us']}" for r in goal],
               "problems": problems}
    doc = {"meta": meta, "verdict": verdict, "cells": rows, "runs": run_rows}
    with open(os.path.join(a.out, "overhead4.json"), "w") as f:
        json.dump(doc, f, indent=1)
    head = (f"Profiler plugin overhead on {a.nproc} GPUs{' (DRY RUN: stub torch, timings meaningless)' if a.dry else ''}: "
            f"NCCL {nccl}, seed {a.seed}, runs per transport and variant {meta['reps_done']}, {a.trials} trials per "
            f"cell; µs per op = the median over runs of rank 0's median trial (N ops back to back, one synchronize); "
            f"enqueue CPU = time.thread_time over the N enqueues, mean over ranks. Transports seen: "
            f"{meta['transports_seen']}.\n\n")
    notes = ""
    if problems:
        notes += "\n\nRuns with problems: " + "; ".join(problems)
    if goal:
        notes += "\n\nOver the goal: " + "; ".join(verdict["cells_over_goal"])
    md = head + table(rows) + notes + "\n"
    with open(os.path.join(a.out, "overhead4.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if rows and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
