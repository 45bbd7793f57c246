"""One rank of profiler/test/device-smoke.sh's job: two ranks share GPU 0 and talk over
NET/Socket on loopback (each claims its own NCCL_HOSTID), so that NCCL runs network proxy ops
the plugin can report. Phases (PHASES, comma-separated):

  ops    collectives of several kinds and sizes, send/recv both ways, batch_isend_irecv,
         a new_group (an ncclCommSplit child) with its own all-reduces
  bench  timed small and large all-reduces (the run without the plugin compares them)
  hang   rank 1 stops issuing for HANG_S seconds while rank 0 waits in a 16 MiB all-reduce;
         rank 1 dumps the regions half-way (dump-hang.json)
  end    everything synchronised; rank 0 dumps the regions (dump-end.json) before teardown

Every line printed is one JSON object.
"""
import datetime
import json
import os
import subprocess
import sys
import time

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
# Before torch loads NCCL: two ranks on one GPU must look like two hosts to NCCL.
os.environ["NCCL_HOSTID"] = "smoke-host-%d" % RANK

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

OUT = os.environ["OUT"]
DUMP = os.environ.get("DUMP", "")
REGIONS = os.environ.get("NCCLWATCH_PROFILER_DIR", "")
MARKS = os.environ["MARKS"]
PHASES = os.environ.get("PHASES", "ops,bench,hang,end").split(",")
HANG_S = float(os.environ.get("HANG_S", "16"))
TAG = os.environ.get("TAG", "run")


def log(msg, **kv):
    rec = {"t": round(time.time(), 3), "rank": RANK, "tag": TAG, "msg": msg}
    rec.update(kv)
    print(json.dumps(rec), flush=True)


def dump(name):
    """Runs profdump on the region directory; the plugin's NCCL threads keep running."""
    if not DUMP or not REGIONS:
        return
    path = os.path.join(OUT, "dump-%s.json" % name)
    with open(path, "w") as f:
        r = subprocess.run([DUMP, "-dir", REGIONS], stdout=f, stderr=subprocess.PIPE, timeout=30)
    log("dump", path=path, rc=r.returncode, stderr=r.stderr.decode(errors="replace")[-400:])


def phase_ops(dev):
    world = WORLD
    peer = 1 - RANK
    x = torch.ones(1 << 20, device=dev)
    small = torch.ones(1024, device=dev)
    for _ in range(10):
        dist.all_reduce(x)
        dist.all_reduce(small)
    dist.broadcast(x, src=0)
    gathered = torch.empty(world * 1024, device=dev)
    dist.all_gather_into_tensor(gathered, small)
    part = torch.empty(1024, device=dev)
    dist.reduce_scatter_tensor(part, torch.ones(world * 1024, device=dev))
    buf = torch.ones(1 << 18, device=dev)
    for _ in range(5):
        if RANK == 0:
            dist.send(buf, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(buf, peer)
            dist.send(buf, peer)
    other = torch.empty_like(buf)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, peer), dist.P2POp(dist.irecv, other, peer)])
    for r in reqs:
        r.wait()
    group = dist.new_group([0, 1])
    for _ in range(5):
        dist.all_reduce(small, group=group)
    torch.cuda.synchronize()
    log("ops done")


def phase_bench(dev):
    for name, n, numel in (("small", 300, 1024), ("large", 40, 4 << 20)):
        t = torch.ones(numel, device=dev)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        log("bench", size=name, numel=numel, n=n, us_per_allreduce=round(dt / n * 1e6, 1))


def phase_hang(dev):
    big = torch.ones(4 << 20, device=dev)  # 16 MiB: several network steps per channel
    torch.cuda.synchronize()
    dist.barrier()
    if RANK == 1:
        log("hang: rank 1 stops issuing", seconds=HANG_S)
        time.sleep(HANG_S / 2)
        dump("hang")  # rank 0 has been waiting in its all-reduce for HANG_S/2
        time.sleep(HANG_S / 2)
        log("hang: rank 1 resumes")
        dist.all_reduce(big)
    else:
        log("hang: rank 0 issues a 16 MiB all-reduce and waits")
        t0 = time.perf_counter()
        dist.all_reduce(big)
        torch.cuda.synchronize()
        log("hang over", waited_s=round(time.perf_counter() - t0, 2))
    torch.cuda.synchronize()


def phase_end(dev):
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    mark = os.path.join(MARKS, "dumped")
    if RANK == 0:
        time.sleep(1)  # let the proxy threads report the barrier's kernel channels
        dump("end")
        open(mark, "w").close()
    else:
        deadline = time.time() + 30
        while not os.path.exists(mark) and time.time() < deadline:
            time.sleep(0.1)


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(MARKS, exist_ok=True)
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    log("start", torch=torch.__version__, nccl=".".join(map(str, torch.cuda.nccl.version())), phases=PHASES)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=120))
    phases = {"ops": phase_ops, "bench": phase_bench, "hang": phase_hang, "end": phase_end}
    for p in PHASES:
        phases[p](dev)
    dist.destroy_process_group()
    log("exit")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the log says what failed; torchrun reports the exit code
        log("error", error=repr(e))
        sys.exit(1)
