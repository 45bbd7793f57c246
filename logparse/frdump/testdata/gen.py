#!/usr/bin/env python3
"""Writes the Flight Recorder dumps the frdump and analyze tests read.

Each case is a folder of dumps named <prefix><rank> as TORCH_FR_DUMP_TEMP_FILE makes them,
in the shape torch's FlightRecorder writes (format 2.10: torch 2.9-2.11), pickled with the
standard library at protocol 2 as torch's own pickler does; some cases add the logs a job
prints beside them. The jobs are made up: four ranks, one per GPU, whose fault is known.
Real dumps from a GPU run are not committed here.

Run: python3 gen.py   (from this folder; it rewrites every case)
"""

import json
import os
import pickle
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_780_000_000_000_000_000  # ns: 2026-05-28
STEP = 50_000_000  # ns between works
PREFIX = "nccl_trace_rank_"

FRAMES = {
    "all_reduce": [
        {"name": "all_reduce", "filename": "/opt/conda/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", "line": 2950},
        {"name": "wrapper", "filename": "/opt/conda/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", "line": 81},
        {"name": "train_step", "filename": "/work/train.py", "line": 42},
        {"name": "main", "filename": "/work/train.py", "line": 97},
    ],
}


def frames(op):
    return FRAMES.get(op, FRAMES["all_reduce"])


class Rank:
    """One rank's recorder: entries in record order, the groups it belongs to."""

    def __init__(self, rank, groups):
        self.rank = rank
        self.groups = groups  # name -> (desc, ranks, pg_id)
        self.entries = []
        self.coll = {g: 0 for g in groups}
        self.p2p = {g: 0 for g in groups}
        self.op_id = {g: 0 for g in groups}
        self.t = T0 + rank * 1_000_000

    def work(self, group, op, numel, state, dtype="Float", out=None, peer=None):
        desc, ranks, pg_id = self.groups[group]
        is_p2p = op in ("send", "recv")
        if is_p2p:
            self.p2p[group] += 1
        else:
            self.coll[group] += 1
        self.op_id[group] += 1
        name = "nccl:" + op
        me = ranks.index(self.rank)
        if op == "send":
            name += " %d->%d" % (me, peer)
        elif op == "recv":
            name += " %d<-%d" % (me, peer)
        self.t += STEP
        created = self.t
        started = created + 2_000_000 if state in ("started", "completed") else None
        completed = created + 9_000_000 if state == "completed" else None
        insize = [[numel]]
        outsize = out if out is not None else [[numel]]
        e = {
            "frames": frames(op),
            "record_id": len(self.entries),
            "pg_id": pg_id,
            "process_group": (group, desc),
            "thread_name": "pt_main_thread",
            "thread_id": "139912345678912",
            "collective_seq_id": self.coll[group],
            "p2p_seq_id": self.p2p[group],
            "op_id": self.op_id[group],
            "profiling_name": name,
            "time_created_ns": created,
        }
        if state == "completed":
            e["duration_ms"] = 6.25
        e.update({
            "input_sizes": insize,
            "input_dtypes": [dtype],
            "output_sizes": outsize,
            "output_dtypes": [dtype],
            "state": state,
            "time_discovered_started_ns": started,
            "time_discovered_completed_ns": completed,
            "retired": state == "completed",
            "timeout_ms": 600000,
            "is_p2p": is_p2p,
        })
        self.entries.append(e)

    def dump(self, version="2.10"):
        pg_config = {}
        pg_status = {}
        for g, (desc, ranks, pg_id) in sorted(self.groups.items(), key=lambda kv: kv[1][2]):
            pg_config[g] = {"name": g, "desc": desc, "ranks": "[" + ", ".join(str(r) for r in ranks) + "]"}
            last_started = max([e["collective_seq_id"] for e in self.entries
                                if e["pg_id"] == pg_id and not e["is_p2p"] and e["state"] != "scheduled"] or [-1])
            last_done = max([e["collective_seq_id"] for e in self.entries
                             if e["pg_id"] == pg_id and not e["is_p2p"] and e["state"] == "completed"] or [-1])
            pg_status[str(pg_id)] = {
                "last_enqueued_collective": self.coll[g] if self.coll[g] else -1,
                "last_started_collective": last_started,
                "last_completed_collective": last_done,
            }
        return {
            "version": version,
            "pg_config": pg_config,
            "comm_lib_version": "2.21.5",
            "pg_status": pg_status,
            "entries": self.entries,
        }


def world(n=4):
    return {"0": ("default_pg", list(range(n)), 0)}


def write_case(name, ranks, form="pickle", protocol=2, extra=None):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for r in ranks:
        dump = r.dump()
        path = os.path.join(d, PREFIX + str(r.rank))
        if form == "json":
            with open(path + ".json", "w") as f:
                json.dump(as_json(dump), f)
        else:
            with open(path, "wb") as f:
                f.write(pickle.dumps(dump, protocol=protocol))
    for fname, text in (extra or {}).items():
        with open(os.path.join(d, fname), "w") as f:
            f.write(text)
    return d


def as_json(dump):
    """The JSON form: what dump_json writes (no frames, strings for pg_status, 0 for unseen times)."""
    out = dict(dump)
    out["pg_status"] = {k: {kk: str(vv) for kk, vv in v.items()} for k, v in dump["pg_status"].items()}
    entries = []
    for e in dump["entries"]:
        e = dict(e)
        e.pop("frames", None)
        e["process_group"] = list(e["process_group"])
        e["time_discovered_started_ns"] = e["time_discovered_started_ns"] or 0
        e["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] or 0
        entries.append(e)
    out["entries"] = entries
    return out


def healthy():
    ranks = [Rank(r, world()) for r in range(4)]
    for r in ranks:
        for _ in range(6):
            r.work("0", "all_reduce", 1048576, "completed")
    return ranks


def skipped_subgroup():
    """Rank 1 skips step 5's all_reduce on its sub-group {0,1}: rank 0 waits in it, rank 1
    and the other sub-group go on to the world all_reduce and wait there for rank 0."""
    groups = lambda: {"0": ("default_pg", [0, 1, 2, 3], 0), "1": ("tp", [0, 1], 1), "2": ("tp", [2, 3], 2)}
    ranks = []
    for r in range(4):
        rk = Rank(r, {k: v for k, v in groups().items() if r in v[1]})
        sub = "1" if r < 2 else "2"
        for step in range(1, 6):
            last = step == 5
            if not (r == 1 and last):
                state = "started" if (r == 0 and last) else "completed"
                rk.work(sub, "all_reduce", 262144, state, dtype="BFloat16")
            if r == 0 and last:
                continue
            rk.work("0", "all_reduce", 4096, "started" if last else "completed")
        ranks.append(rk)
    return ranks


def left_group():
    """Rank 3 stops taking part in the world group after step 4 (it left it and went on with
    its own work); the others wait in step 5's all_reduce."""
    ranks = [Rank(r, world()) for r in range(4)]
    for r in ranks:
        for step in range(1, 6):
            if r.rank == 3 and step == 5:
                break
            r.work("0", "all_reduce", 65536, "started" if step == 5 else "completed")
    return ranks


def order_inversion():
    """Ranks 0 and 1 call all_reduce on group A then B; ranks 2 and 3 call B then A. Each
    waits in its first and has the second scheduled behind it."""
    groups = lambda: {"0": ("default_pg", [0, 1, 2, 3], 0), "1": ("grad_a", [0, 1, 2, 3], 1), "2": ("grad_b", [0, 1, 2, 3], 2)}
    ranks = [Rank(r, groups()) for r in range(4)]
    for r in ranks:
        for _ in range(3):
            r.work("1", "all_reduce", 8192, "completed")
            r.work("2", "all_reduce", 8192, "completed")
        first, second = ("1", "2") if r.rank < 2 else ("2", "1")
        r.work(first, "all_reduce", 8192, "started")
        r.work(second, "all_reduce", 8192, "scheduled")
    return ranks


def p2p_pipeline():
    """A pipeline: each step rank r receives from r-1 and sends to r+1. Rank 3 stops after
    step 2 (it never posts step 3's receive): rank 2's send waits, and so does everyone
    behind it."""
    ranks = [Rank(r, world()) for r in range(4)]
    for step in range(1, 4):
        for r in ranks:
            me = r.rank
            if me == 3 and step == 3:
                continue
            if me > 0:
                r.work("0", "recv", 4096, "completed", peer=me - 1)
            if me < 3:
                state = "completed"
                if step == 3 and me == 2:
                    state = "started"
                r.work("0", "send", 4096, state, peer=me + 1)
    return ranks


def signal_killed():
    """Rank 2 is killed by SIGKILL (the OOM killer) after step 3: it writes no dump; the
    others wait in step 4's all_gather. torchrun's failure record and the survivors'
    watchdog lines come beside the dumps."""
    ranks = [Rank(r, world()) for r in range(4)]
    for r in ranks:
        for step in range(1, 5):
            r.work("0", "_allgather_base", 1024, "started" if step == 4 else "completed", out=[[4096]])
    survivors = [r for r in ranks if r.rank != 2]
    console = []
    for r in survivors:
        console.append("[rank%d]:[E528 10:40:12.000000000 ProcessGroupNCCL.cpp:632] [Rank %d] Watchdog caught "
                       "collective operation timeout: WorkNCCL(SeqNum=4, OpType=_ALLGATHER_BASE, NumelIn=1024, "
                       "NumelOut=4096, Timeout(ms)=600000) ran for 600012 milliseconds before timing out." % (r.rank, r.rank))
    console += [
        "W0528 10:40:20.000000 1200 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1211 closing signal SIGTERM",
        "E0528 10:40:21.000000 1200 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 2 (pid: 1212) of binary: /opt/conda/bin/python3",
        "Traceback (most recent call last):",
        '  File "/opt/conda/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=======================================================",
        "train.py FAILED",
        "-------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "-------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-05-28_10:40:21",
        "  host      : gpu-node03",
        "  rank      : 2 (local_rank: 2)",
        "  exitcode  : -9 (pid: 1212)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 1212",
        "=======================================================",
    ]
    return survivors, {"console.log": "\n".join(console) + "\n"}


def main():
    write_case("healthy", healthy())
    write_case("skipped_subgroup", skipped_subgroup())
    write_case("left_group", left_group())
    write_case("p2p_pipeline", p2p_pipeline())
    write_case("order_inversion", order_inversion())
    survivors, logs = signal_killed()
    write_case("signal_killed", survivors)
    write_case("signal_killed_logs", survivors, extra=logs)
    write_case("healthy_json", healthy(), form="json")
    write_case("healthy_protocol4", healthy(), protocol=4)

    # Bad input beside good dumps: a truncated dump, a newer format, another job's dump.
    d = write_case("bad_input", skipped_subgroup())
    p = os.path.join(d, PREFIX + "1")
    with open(p, "rb") as f:
        b = f.read()
    with open(p, "wb") as f:
        f.write(b[: len(b) * 2 // 3])
    p = os.path.join(d, PREFIX + "3")
    r3 = skipped_subgroup()[3]
    dump = r3.dump(version="3.1")
    dump["entries"][0]["new_field_of_3_1"] = {"what": "unknown"}
    with open(p, "wb") as f:
        f.write(pickle.dumps(dump, protocol=2))
    other = Rank(4, {"0": ("default_pg", list(range(8)), 0)})
    for _ in range(3):
        other.work("0", "all_reduce", 16, "completed")
    with open(os.path.join(d, PREFIX + "4"), "wb") as f:
        f.write(pickle.dumps(other.dump(), protocol=2))


if __name__ == "__main__":
    main()
