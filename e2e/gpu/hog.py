#!/usr/bin/env python3
"""The "slow GPU" fault: other processes computing on one GPU while a job runs on it.

  hog.py --gpu K --dir HOGDIR --pool N [--dry]

A supervisor per GPU, started by run.sh before the job and killed after it. It keeps N
worker processes warm (torch imported, no CUDA context yet, so the GPU shows no extra
process in NVML) and follows the control file HOGDIR/gpuK.ctl, which the job's rank on
that GPU writes at phase boundaries (job.py, phase plans):

  on W D    W workers compute on cuda:K, each busy a share D (0-1] of the time (bf16
            matmuls of 8192x8192, in bursts of ~50 ms); each worker is its own process, so
            its own CUDA context: the GPU time-slices between the job and the hogs, and the
            job's share falls to about 1/(1 + W*D)
  pause     the workers stop computing but keep their contexts (the off part of an
            intermittent fault)
  off       the workers exit (their contexts go); fresh warm ones replace them

Events go to HOGDIR/events.jsonl ({"t", "gpu", "what", ...}: ctl changes, each worker's
first kernel and stop), the pids of every process to HOGDIR/pids (run.sh kills them by id
at the end), and "W D" of the workers computing now to HOGDIR/gpuK.state (the stub torch
of the dry run slows its rank's fake kernels by it). Workers exit when the supervisor dies
(their stdin closes). --dry: no torch, the workers only pretend.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

BURST_S = 0.05
MATMUL_N = 8192


def worker(a):
    """One hog process: warm, then compute on 'go D', pause on 'pause', exit on 'stop'/EOF."""
    torch = None
    if not a.dry:
        import torch  # noqa: F811 (warm: the import is what takes seconds)
    else:
        time.sleep(0.3)
    print("ready", flush=True)
    state = {"duty": 0.0, "stop": False}

    def read_cmds():
        for line in sys.stdin:
            w = line.split()
            if not w:
                continue
            if w[0] == "go":
                state["duty"] = min(1.0, max(0.01, float(w[1])))
            elif w[0] == "pause":
                state["duty"] = 0.0
            elif w[0] == "stop":
                break
        state["stop"] = True

    threading.Thread(target=read_cmds, daemon=True).start()
    x = y = None
    started = False
    while not state["stop"]:
        d = state["duty"]
        if d <= 0:
            time.sleep(0.01)
            continue
        if x is None and not a.dry:
            torch.cuda.set_device(a.gpu)
            x = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
            y = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16) / MATMUL_N ** 0.5
        t0 = time.time()
        while time.time() - t0 < BURST_S and not state["stop"]:
            if a.dry:
                time.sleep(0.005)
            else:
                for _ in range(4):
                    x = x @ y  # y scaled by 1/sqrt(N): x keeps its magnitude
                torch.cuda.synchronize()
        if not started:
            started = True
            print(f"started {t0:.6f}", flush=True)
        busy = time.time() - t0
        if d < 1:
            time.sleep(busy * (1 - d) / d)
    print(f"stopped {time.time():.6f}", flush=True)


class Pool:
    def __init__(self, a):
        self.a, self.ready, self.running = a, [], []
        self.all = []
        self.lock = threading.Lock()
        self.events = open(os.path.join(a.dir, "events.jsonl"), "a", buffering=1)
        self.pids = open(os.path.join(a.dir, "pids"), "a", buffering=1)

    def event(self, what, **kw):
        kw.update(t=round(time.time(), 6), gpu=self.a.gpu, what=what)
        self.events.write(json.dumps(kw, sort_keys=True) + "\n")

    def spawn(self):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--gpu", str(self.a.gpu)]
        if self.a.dry:
            cmd.append("--dry")
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.pids.write(f"{p.pid}\n")
        self.all.append(p)
        threading.Thread(target=self.follow, args=(p,), daemon=True).start()

    def follow(self, p):
        for line in p.stdout:
            w = line.split()
            if not w:
                continue
            if w[0] == "ready":
                with self.lock:
                    self.ready.append(p)
            elif w[0] == "started":
                self.event("compute_start", pid=p.pid, t_kernel=float(w[1]))
            elif w[0] == "stopped":
                self.event("compute_stop", pid=p.pid)

    def send(self, p, cmd):
        try:
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def set(self, want, duty, pause):
        with self.lock:
            while len(self.running) < want and self.ready:
                self.running.append(self.ready.pop(0))
            drop = self.running[want:]
            self.running = self.running[:want]
            run = list(self.running)
        for p in drop:
            self.send(p, "stop")
        for p in run:
            self.send(p, "pause" if pause else f"go {duty}")
        missing = want - len(run)
        return missing

    def refill(self):
        with self.lock:
            alive = [p for p in self.all if p.poll() is None]
            n = len(self.ready) + len(self.running)
            pending = len(alive) - n  # spawned, still importing
        for _ in range(max(0, self.a.pool - n - pending)):
            self.spawn()

    def kill_all(self):
        for p in self.all:
            if p.poll() is None:
                self.send(p, "stop")
        deadline = time.time() + 2
        for p in self.all:
            try:
                p.wait(timeout=max(0.05, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()


def supervisor(a):
    os.makedirs(a.dir, exist_ok=True)
    ctl = os.path.join(a.dir, f"gpu{a.gpu}.ctl")
    state_f = os.path.join(a.dir, f"gpu{a.gpu}.state")
    pool = Pool(a)
    pool.pids.write(f"{os.getpid()}\n")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    pool.refill()
    pool.event("supervisor_start", pool=a.pool, pid=os.getpid())
    last = logged = None
    t_end = time.time() + a.max_s
    while not stopping and time.time() < t_end:
        try:
            with open(ctl) as f:
                words = f.read().split()
        except OSError:
            words = []
        cmd = tuple(words[:3])
        if cmd != last:
            want, duty, pause = 0, 0.0, False
            if cmd and cmd[0] == "on":
                want = int(cmd[1]) if len(cmd) > 1 else 1
                duty = float(cmd[2]) if len(cmd) > 2 else 1.0
            elif cmd and cmd[0] == "pause":
                with pool.lock:
                    want = len(pool.running)
                pause = True
            missing = pool.set(want, duty, pause)
            if (cmd, missing) != logged:
                logged = (cmd, missing)
                pool.event("ctl", cmd=" ".join(cmd) or "off", workers=want - max(0, missing), missing=max(0, missing))
            if missing <= 0:
                last = cmd  # else: try again on the next tick, as warm workers arrive
            with open(state_f + ".tmp", "w") as f:
                f.write(f"{0 if pause else want - max(0, missing)} {duty}\n")
            os.replace(state_f + ".tmp", state_f)
            with pool.lock:
                for p in list(pool.all):
                    if p.poll() is not None and p in pool.ready:
                        pool.ready.remove(p)
        pool.refill()
        time.sleep(0.05)
    pool.event("supervisor_stop")
    with open(state_f, "w") as f:
        f.write("0 0\n")
    pool.kill_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", type=int, required=True)
    ap.add_argument("--dir", help="supervisor: the control folder")
    ap.add_argument("--pool", type=int, default=1, help="warm workers to keep ready")
    ap.add_argument("--max-s", type=float, default=900, help="supervisor: exit after this long whatever happens")
    ap.add_argument("--dry", action="store_true", help="no torch: pretend (dry run)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if not a.dir:
        ap.error("--dir is required")
    return supervisor(a)


if __name__ == "__main__":
    sys.exit(main())
