#!/usr/bin/env python3
"""Dry-run stand-in for `torchrun job.py` (python3 standard library only).

Replays a real NCCL capture (two rank logs, default: testdata/captures/nccl-2.28.9-2xH200/
multicomm, which has three communicators, Send/Recv and coalesced groups) into --out at a
job's pace, with fresh µs timestamps, and injects the same faults as job.py by editing or
withholding rank 1's lines. Prints the same WATCHDOG_INFO/PHASE/FAULT lines as job.py and,
for hanging scenarios, a PyTorch-style "Watchdog caught collective operation timeout" line
after --pg-timeout seconds.

Each rank log is cut into a header (init, the ops before and in the first steps, connection
setup), one step's collective lines (the template, repeated once per replayed step), and a
footer (destroy lines).
"""
import argparse
import datetime
import glob
import json
import os
import re
import sys
import time

TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] ")
PREFIX = re.compile(r"^(?:\[[^\]]*\] )?(\S+?):(\d+):(\d+) \[(\d+)\] NCCL ")
OPLINE = re.compile(r"NCCL INFO \w+: opCount ")


def now_prefix(t):
    return datetime.datetime.fromtimestamp(t).strftime("[%Y-%m-%d %H:%M:%S.%f] ")


def orig_time(line):
    m = TS.match(line)
    if not m:
        return None
    s = m.group(1)
    fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in s else "%Y-%m-%d %H:%M:%S"
    return datetime.datetime.strptime(s, fmt).timestamp()


def restamp(line, t):
    if not line.strip():
        return line
    body = TS.sub("", line, count=1)
    return now_prefix(t) + body


class Rank:
    def __init__(self, path, marker):
        self.name = os.path.basename(path)
        with open(path, errors="replace") as f:
            self.lines = f.read().splitlines()
        m = next((PREFIX.match(l) for l in self.lines if PREFIX.match(l)), None)
        if not m:
            raise SystemExit(f"replay: {path}: no NCCL line prefix found")
        self.host, self.pid, self.rank = m.group(1), int(m.group(2)), int(m.group(4))
        occ = [i for i, l in enumerate(self.lines) if marker.search(l)]
        if len(occ) < 7:
            raise SystemExit(f"replay: {path}: step marker found {len(occ)} times, need 7")
        # occ[0] is the op before the loop, occ[k] starts step k-1.
        self.header = self.lines[: occ[3]]          # init + pre-loop op + steps 0..1
        self.header_steps = 2
        self.template = [l for l in self.lines[occ[5]: occ[6]] if OPLINE.search(l)]
        last_op = max(i for i, l in enumerate(self.lines) if OPLINE.search(l))
        self.footer = self.lines[last_op + 1:]
        self.f = None

    def open(self, outdir):
        self.f = open(os.path.join(outdir, self.name), "w", buffering=1)

    def write(self, lines, t=None):
        for l in lines:
            self.f.write(restamp(l, t or time.time()) + "\n")


def mark(tag, **kw):
    kw.setdefault("t", time.time())
    print(f"WATCHDOG_{tag} {json.dumps(kw, sort_keys=True)}", flush=True)


def pytorch_timeout_line(rank, pg_timeout_s, seq):
    t = datetime.datetime.now()
    ms = int(pg_timeout_s * 1000)
    return (f"[rank{rank}]:[E{t:%m%d %H:%M:%S}.{t.microsecond:06d}000 ProcessGroupNCCL.cpp:689] "
            f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
            f"OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)={ms}) ran for "
            f"{ms + 53} milliseconds before timing out.")


def replay_timed(ranks, parts, speed_cap, align=None):
    """Writes each rank's lines with the capture's own spacing (gaps capped), interleaved.
    With align (a line predicate), every rank's first matching line is written at the same
    moment: the ranks' headers differ in length (rank 0 logs more at init), and replaying
    each from its own first line would start rank 0's collectives hundreds of ms after the
    others', a skew the capture did not have."""
    events = []
    for r in ranks:
        base = None
        prev = 0.0
        mine = []
        for k, l in enumerate(parts(r)):
            ot = orig_time(l)
            if ot is not None and base is None:
                base = ot
            off = prev if ot is None else min(ot - base, prev + speed_cap)
            prev = off
            mine.append([off, r.rank, k, r, l])
        if align is not None:
            first = next((e[0] for e in mine if align(e[4])), 0.0)
            for e in mine:
                e[0] -= first
        events.extend(mine)
    lead = min((e[0] for e in events), default=0.0)
    events = [(e[0] - lead, e[1], e[2], e[3], e[4]) for e in events]
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    t0 = time.time()
    for off, _, _, r, l in events:
        d = t0 + off - time.time()
        if d > 0:
            time.sleep(d)
        r.write([l])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--capture", default=os.path.join(here, "../../testdata/captures/nccl-2.28.9-2xH200/multicomm"))
    ap.add_argument("--out", required=True, help="directory for the NCCL logs")
    ap.add_argument("--scenario", default=os.environ.get("SCENARIO", "healthy"))
    ap.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "100")))
    ap.add_argument("--fault-step", type=int, default=int(os.environ.get("FAULT_STEP", "30")))
    ap.add_argument("--step-s", type=float, default=float(os.environ.get("STEP_S", "0.17")))
    ap.add_argument("--pg-timeout", type=float, default=float(os.environ.get("PG_TIMEOUT", "45")))
    ap.add_argument("--pause-s", type=float, default=float(os.environ.get("PAUSE_S", "60")))
    ap.add_argument("--straggle-s", type=float, default=float(os.environ.get("STRAGGLE_S", "0.2")))
    ap.add_argument("--crash-hold-s", type=float, default=float(os.environ.get("CRASH_HOLD_S", "15")),
                    help="how long the survivor waits before the launcher kills it")
    ap.add_argument("--step-marker", default=r"AllReduce: .* count 65536 ")
    ap.add_argument("--grad-count", type=int, default=1048576, help="count of the op the faults edit")
    a = ap.parse_args()

    paths = sorted(glob.glob(os.path.join(a.capture, "nccl.*.log")))
    if len(paths) != 2:
        raise SystemExit(f"replay: want 2 rank logs in {a.capture}, found {len(paths)}")
    ranks = sorted((Rank(p, re.compile(a.step_marker)) for p in paths), key=lambda r: r.rank)
    r0, r1 = ranks
    os.makedirs(a.out, exist_ok=True)
    for r in ranks:
        r.open(a.out)
        mark("INFO", rank=r.rank, pid=r.pid, local_rank=r.rank, gpu=r.rank, scenario=a.scenario,
             steps=a.steps, fault_step=a.fault_step, replay=True, template_ops=len(r.template))
    grad = re.compile(rf"AllReduce: .* count {a.grad_count} ")

    def edited(lines, how):
        out = []
        done = False
        for l in lines:
            if not done and grad.search(l):
                done = True
                if how == "wrong_op":
                    l = l.replace("AllReduce:", "Broadcast:", 1)
                elif how == "wrong_size":
                    l = l.replace(f"count {a.grad_count} ", f"count {a.grad_count * 3 // 4} ", 1)
                elif how == "wrong_dtype":
                    l = l.replace(" datatype 7 ", " datatype 2 ", 1)
            out.append(l)
        return out

    replay_timed(ranks, lambda r: r.header, speed_cap=0.5, align=lambda l: OPLINE.search(l) is not None)
    for r in ranks:
        mark("PHASE", phase="steps_start", rank=r.rank, steps=a.steps)
    sc, k = a.scenario, a.fault_step
    seq = 0
    for i in range(ranks[0].header_steps, a.steps):
        t = time.time()
        seq += len(r0.template)
        if i == k and sc in ("silent", "crash"):
            mark("FAULT", scenario=sc, rank=1, step=i)
            r0.write(r0.template)
            if sc == "crash":
                time.sleep(0.2)
                r0.write([f"{r0.host}:{r0.pid}:{r0.pid + 40} [0] NCCL INFO [Service thread] Connection closed by localRank 1"])
                time.sleep(a.crash_hold_s)
                print("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: rank 1 exitcode 3", flush=True)
                return 1
            time.sleep(a.pg_timeout)
            print(pytorch_timeout_line(0, a.pg_timeout, seq), flush=True)
            return 1
        if i == k and sc == "pause":
            mark("FAULT", scenario=sc, rank=1, step=i, pause_s=a.pause_s)
            for r in ranks:
                mark("PHASE", phase="pause_start", rank=r.rank, step=i)
            time.sleep(a.pause_s)
            for r in ranks:
                mark("PHASE", phase="pause_end", rank=r.rank, step=i)
            t = time.time()
        if i == k and sc in ("wrong_op", "wrong_size", "wrong_dtype"):
            mark("FAULT", scenario=sc, rank=1, step=i)
            r0.write(r0.template)
            r1.write(edited(r1.template, sc))
            if sc == "wrong_op":
                time.sleep(a.pg_timeout)
                for r in ranks:
                    print(pytorch_timeout_line(r.rank, a.pg_timeout, seq), flush=True)
                return 1
        elif sc == "straggler_onset" and i >= k:
            if i == k:
                mark("FAULT", scenario=sc, rank=1, step=i, sleep_s=a.straggle_s)
            r0.write(r0.template)
            time.sleep(a.straggle_s)
            r1.write(r1.template)
        else:
            for r in ranks:
                r.write(r.template)
        d = t + a.step_s + (a.straggle_s if sc == "straggler_onset" and i >= k else 0) - time.time()
        if d > 0:
            time.sleep(d)
    for r in ranks:
        mark("PHASE", phase="steps_end", rank=r.rank)
    replay_timed(ranks, lambda r: r.footer, speed_cap=0.3)
    for r in ranks:
        print(f"[rank {r.rank}] done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
