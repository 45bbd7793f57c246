"""Checks what profiler/test/device-smoke.sh collected under OUT and prints PASS/FAIL/INFO
lines (exit status 1 on any FAIL). Usage: smoke_check.py OUT"""
import glob
import json
import os
import sys

OUT = sys.argv[1]
MAIN = os.path.join(OUT, "main")
failed = False


def say(status, what, detail=""):
    global failed
    failed |= status == "FAIL"
    print("%-4s %s%s" % (status, what, (": " + detail) if detail else ""))


def check(cond, what, detail=""):
    say("PASS" if cond else "FAIL", what, detail)
    return cond


def load_dump(name):
    path = os.path.join(MAIN, "dump-%s.json" % name)
    try:
        with open(path) as f:
            entries = json.load(f)
    except (OSError, ValueError) as e:
        say("FAIL", "dump %s readable" % name, repr(e))
        return {}
    by_rank = {}
    for e in entries:
        if e.get("error"):
            say("FAIL", "dump %s: %s" % (name, e["path"]), e["error"])
            continue
        by_rank[e["region"]["process"]["rank"]] = e["region"]
    check(sorted(by_rank) == [0, 1], "dump %s has the regions of ranks 0 and 1" % name, "ranks %s" % sorted(by_rank))
    return by_rank


def op_str(op):
    if not op:
        return "none"
    return "%s seq %s %s(count %s %s) ch %s/%s/%s proxy_open %s" % (
        op["kind"], op["seq"], op["func"], op["count"], op["datatype"], op["kch_done"], op["kch_started"],
        op["nchannels"], op["proxy_open"])


def logs():
    texts = {}
    for p in sorted(glob.glob(os.path.join(MAIN, "nccl.*.log"))):
        with open(p, errors="replace") as f:
            texts[p] = f.read()
    check(len(texts) >= 2, "NCCL debug files of both ranks", "%d files" % len(texts))
    for p, t in texts.items():
        loaded = [l for l in t.splitlines() if "PROFILER/Plugin: Loaded" in l]
        check(any("ncclwatch" in l for l in loaded), "%s: NCCL loaded the plugin" % os.path.basename(p),
              (loaded[0].split("NCCL INFO ")[-1] if loaded else "no 'PROFILER/Plugin: Loaded' line"))
        ours = [l for l in t.splitlines() if "NCCL watchdog profiler" in l]
        check(any("recording to" in l for l in ours), "%s: the plugin's own INFO line" % os.path.basename(p),
              ours[0].split("NCCL INFO ")[-1] if ours else "none")


def hang():
    r = load_dump("hang")
    if sorted(r) != [0, 1]:
        return
    r0, r1 = r[0], r[1]
    waiting = [c for c in r0["comms"] if c.get("in_flight") and c["in_flight"]["count"] == 4 << 20]
    if not check(waiting, "rank 0 shows its 16 MiB all-reduce in flight",
                 "; ".join("%s: %s" % (c["id"], op_str(c.get("in_flight"))) for c in r0["comms"])):
        return
    c0 = waiting[0]
    op = c0["in_flight"]
    check(op["func"] == "AllReduce" and op["kch_started"] > 0 and op.get("gpu_started"),
          "its kernel started on the GPU and has not finished", op_str(op))
    peer = [p for p in c0.get("peers", []) if p["rank"] == 1]
    if check(peer, "rank 0 has a peer row for rank 1"):
        s, v = peer[0]["send"], peer[0]["recv"]
        detail = "send %s/%s ops, %s/%s steps, state %s; recv %s/%s ops, %s/%s steps, state %s" % (
            s.get("proxy_ops_done", 0), s.get("proxy_ops", 0), s.get("steps_done", 0), s.get("steps", 0),
            s.get("state", ""), v.get("proxy_ops_done", 0), v.get("proxy_ops", 0), v.get("steps_done", 0),
            v.get("steps", 0), v.get("state", ""))
        check(s.get("proxy_ops", 0) > s.get("proxy_ops_done", 0) and v.get("proxy_ops", 0) > v.get("proxy_ops_done", 0),
              "rank 0 has open proxy send and recv ops to peer 1", detail)
    c1 = [c for c in r1["comms"] if c["id"] == c0["id"]]
    if check(c1, "rank 1 has the same communicator (same commId)", c0["id"]):
        c1 = c1[0]
        check(c1["coll_issued"] == c0["coll_issued"] - 1 and not c1.get("in_flight"),
              "rank 1 is one collective behind and idle",
              "rank 0 issued %s (done %s), rank 1 issued %s (done %s, in flight %s)" % (
                  c0["coll_issued"], c0["coll_done"], c1["coll_issued"], c1["coll_done"], op_str(c1.get("in_flight"))))


def end():
    r = load_dump("end")
    for rank, reg in sorted(r.items()):
        p = reg["process"]
        say("INFO", "rank %d process" % rank, "abi v%s, nccl %s, mask %s, plugin %s, host %s, pid %s" % (
            p["abi"], p.get("nccl_version", "?"), p["event_mask"], p["plugin"], p["host"], p["pid"]))
        check(p["abi"] == 5, "rank %d: NCCL picked ncclProfiler_v5" % rank, "v%s" % p["abi"])
        check(not p.get("disabled") and not p.get("dropped_events") and not p.get("dropped_comms"),
              "rank %d: not disabled, nothing dropped" % rank,
              "%s %s" % (p.get("disabled_reason", ""), {k: p.get(k) for k in ("dropped_events", "dropped_comms", "dropped_peers")}))
        comms = reg["comms"]
        check(len(comms) >= 2, "rank %d: at least 2 communicators (world and new_group)" % rank, "%d" % len(comms))
        for c in comms:
            say("INFO", "rank %d comm %s" % (rank, c["id"]),
                "rank %s/%s nodes %s, coll issued %s started %s done %s (nccl seq %s), p2p %s/%s, peers %s, last %s" % (
                    c["rank"], c["nranks"], c["nnodes"], c["coll_issued"], c["coll_started"], c["coll_done"],
                    c["nccl_seq"], c["p2p_done"], c["p2p_issued"], [p["rank"] for p in c.get("peers", [])],
                    op_str(c.get("last"))))
            check(c["coll_done"] == c["coll_issued"] and c["p2p_done"] == c["p2p_issued"] and c["pending"] == 0,
                  "rank %d comm %s: everything issued completed" % (rank, c["id"]),
                  "pending %s, in flight %s" % (c["pending"], op_str(c.get("in_flight"))))
    if sorted(r) == [0, 1]:
        ids = [sorted(c["id"] for c in r[k]["comms"]) for k in (0, 1)]
        check(ids[0] == ids[1], "both ranks see the same commIds", "%s / %s" % tuple(ids))


def final():
    r = load_dump("final")
    for rank, reg in sorted(r.items()):
        p = reg["process"]
        say("INFO", "rank %d after exit" % rank, "state %s, comms inited %s, finalized %s, live slots %d" % (
            p["state"], p["comms_inited"], p["comms_finalized"], len(reg.get("comms") or [])))


def bench():
    rows = {}
    for tag in ("main", "baseline"):
        try:
            with open(os.path.join(OUT, tag, "job.log"), errors="replace") as f:
                for line in f:
                    i = line.find("{")
                    try:
                        rec = json.loads(line[i:]) if i >= 0 else None
                    except ValueError:
                        continue
                    if rec and rec.get("msg") == "bench":
                        rows.setdefault(rec["size"], {}).setdefault(tag, []).append(rec["us_per_allreduce"])
        except OSError:
            pass
    for size, by in sorted(rows.items()):
        say("INFO", "all-reduce %s, us per op (both ranks)" % size,
            "with plugin %s, without %s" % (by.get("main"), by.get("baseline", "not run")))


logs()
hang()
end()
final()
bench()
print("RESULT", "FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
