# One rank of the profiler plugin's overhead measurement (overhead.py runs it under torchrun,
# with and without NCCL_PROFILER_PLUGIN, 1 or 2 ranks on GPU 0).
#
# 1. A tight loop of small all-reduces (NUMEL float32, default 1024 = 4 KiB), TRIALS times:
#    "enqueue": ITERS back-to-back, one synchronize at the end (the host and proxy cost per
#    op, where the plugin's calls sit); "latency": ITERS/4 ops, each waited for.
# 2. The results: CHECKS all-reduces of seeded random data; each must equal, bit for bit, the
#    sum computed here from every rank's seeded input (exact for 1 and 2 ranks: a sum of two
#    floats does not depend on their order), and a digest of all of them is printed so that
#    the runs with and without the plugin can be compared.
#
# Prints one JSON line per trial and one "result" line (prefix OVERHEAD).
import datetime
import hashlib
import json
import os
import struct
import sys
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
# PER_GPU=1 (a machine with a GPU per rank): rank r on GPU r, NCCL's own transport (NVLink,
# P2P). Otherwise every rank on GPU 0, and before torch loads NCCL, ranks must look like
# separate hosts (NET/Socket on lo).
per_gpu = os.environ.get("PER_GPU") == "1"
gpu = int(os.environ.get("LOCAL_RANK", "0")) if per_gpu else 0
if world > 1 and not per_gpu:
    os.environ["NCCL_HOSTID"] = f"ncclwatch-overhead-rank{rank}"
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_IB_DISABLE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

NUMEL = int(os.environ.get("NUMEL", "1024"))
ITERS = int(os.environ.get("ITERS", "2000"))
TRIALS = int(os.environ.get("TRIALS", "5"))
WARMUP = int(os.environ.get("WARMUP", "200"))
CHECKS = int(os.environ.get("CHECKS", "20"))
TAG = os.environ.get("TAG", "")


def out(kind, **kw):
    kw.update(kind=kind, rank=rank, world=world, tag=TAG, t=time.time())
    # One write per line: the ranks share one stdout, and print's separate write of the
    # newline (PYTHONUNBUFFERED) let two ranks' lines run into one, which the parser dropped.
    os.write(1, ("OVERHEAD " + json.dumps(kw, sort_keys=True) + "\n").encode())


def timed(buf, n, wait_each):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(buf)
        if wait_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def check_results(dev):
    """CHECKS seeded all-reduces against the sums computed locally; their digest."""
    h = hashlib.sha256()
    bad = 0
    for it in range(CHECKS):
        ins = []
        for r in range(world):
            g = torch.Generator(device=dev).manual_seed(1000 * it + r)
            ins.append(torch.randn(NUMEL, generator=g, device=dev))
        want = ins[0].clone()
        for x in ins[1:]:
            want = want + x
        mine = ins[rank].clone()
        dist.all_reduce(mine)
        torch.cuda.synchronize()
        if not torch.equal(mine, want):
            bad += 1
        vals = mine.cpu().tolist()
        h.update(struct.pack(f"<{len(vals)}f", *vals))
    return bad, h.hexdigest()


def main():
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=60))
    buf = torch.zeros(NUMEL, device=dev)
    for _ in range(WARMUP):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    for trial in range(TRIALS):
        enq = timed(buf, ITERS, False)
        lat = timed(buf, max(1, ITERS // 4), True)
        out("trial", trial=trial, us_per_op=round(enq, 3), us_per_op_waited=round(lat, 3), iters=ITERS)
    bad, digest = check_results(dev)
    out("result", checks=CHECKS, mismatched=bad, digest=digest, numel=NUMEL,
        nccl=".".join(map(str, torch.cuda.nccl.version())), torch=torch.__version__,
        plugin=os.environ.get("NCCL_PROFILER_PLUGIN") or None)
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
