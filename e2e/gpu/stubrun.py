#!/usr/bin/env python3
"""Dry-run stand-in for torchrun (python3 standard library only): starts N ranks of a script
against the stub torch (e2e/gpu/stubtorch), with the fake NCCL that lets them wait for each
other (a shared STUB_NCCL_DIR), and behaves like torchrun where run.sh relies on it: the
environment of each rank (RANK, LOCAL_RANK, WORLD_SIZE, ...), a check of the ranks every
--monitor-interval seconds, and when one fails, its "failed (exitcode: ...)" line, SIGTERM
to the others (SIGKILL 5 s later) and exit status 1.

  stubrun.py --standalone --nproc_per_node=4 --monitor-interval=0.5 job.py
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--nnodes", default="1")
    ap.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, default=1)
    ap.add_argument("--monitor-interval", "--monitor_interval", dest="monitor", type=float, default=0.5)
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()

    rdv = tempfile.mkdtemp(prefix="stubnccl.")
    run_id = uuid.uuid4().hex[:12]
    stub = os.path.join(HERE, "stubtorch")
    procs = []
    stopping = []

    def on_term(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    for r in range(a.nproc):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.nproc), LOCAL_WORLD_SIZE=str(a.nproc),
                   GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", TORCHELASTIC_RUN_ID=run_id,
                   STUB_NCCL_DIR=rdv, PYTHONPATH=stub + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   PYTHONDONTWRITEBYTECODE="1")
        procs.append(subprocess.Popen([sys.executable, a.script] + a.args, env=env))
    rc = 0
    try:
        while not stopping:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                t = time.strftime("%m%d %H:%M:%S")
                print(f"E{t}.000000 {os.getpid()} torch/distributed/elastic/multiprocessing/api.py:986] failed "
                      f"(exitcode: {c}) local_rank: {r} (pid: {procs[r].pid}) of binary: {sys.executable}", flush=True)
                rc = 1
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(a.monitor)
        if stopping:
            rc = 128 + stopping[0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 5
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(rdv, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
