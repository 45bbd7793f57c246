# A small real PyTorch/NCCL training job with one injected fault, for the live end-to-end
# test of the watchdog (run.sh). Run under: torchrun --standalone --nproc_per_node=2 job.py
#
# Per step: a compute phase (fp32 matmuls, ~COMPUTE_S seconds, so the GPUs show the
# "computing" NVML signature), then collectives on three communicators (world + two
# new_group children made by ncclCommSplit), Send/Recv between the two ranks, and a
# coalesced group. Faults happen on rank 1 at step FAULT_STEP, chosen by SCENARIO:
#   healthy          no fault
#   silent           rank 1 stops issuing work and stays alive (host code stuck): hang
#   crash            rank 1 process exits (os._exit)
#   wrong_op         rank 1 calls Broadcast where rank 0 calls AllReduce (same size): hang
#   wrong_size       rank 1 AllReduces 3/4 of the count: finishes with wrong data
#   wrong_dtype      rank 1 AllReduces the same bytes as int32 instead of float32: finishes
#   straggler_onset  rank 1 sleeps STRAGGLE_S before its collectives from FAULT_STEP on
#   pause            BOTH ranks sleep PAUSE_S between two steps, GPUs idle (a checkpoint):
#                    must raise no incident
#
# Machine-readable lines on stdout (one JSON object each, flushed):
#   WATCHDOG_INFO  {rank, pid, local_rank, gpu, pci_bus_id, nccl, torch, ...}
#   WATCHDOG_PHASE {phase: steps_start|pause_start|pause_end|steps_end, rank, t, ...}
#   WATCHDOG_FAULT {scenario, rank, t, step}     t = unix seconds at the injection moment
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

SCENARIOS = ("healthy", "silent", "crash", "wrong_op", "wrong_size", "wrong_dtype",
             "straggler_onset", "pause")

scen = os.environ.get("SCENARIO", "healthy")
if scen not in SCENARIOS:
    sys.exit(f"job.py: unknown SCENARIO {scen!r}; want one of {SCENARIOS}")
steps = int(os.environ.get("STEPS", "100"))
fault_step = int(os.environ.get("FAULT_STEP", "30"))
pg_timeout = float(os.environ.get("PG_TIMEOUT", "45"))
compute_s = float(os.environ.get("COMPUTE_S", "0.15"))
pause_s = float(os.environ.get("PAUSE_S", "60"))
straggle_s = float(os.environ.get("STRAGGLE_S", "0.2"))

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
FAULTY = world - 1  # rank 1 on two GPUs


def mark(tag, **kw):
    kw.setdefault("rank", rank)
    kw["t"] = time.time()
    print(f"WATCHDOG_{tag} {json.dumps(kw, sort_keys=True)}", flush=True)


def fault(step, **kw):
    mark("FAULT", scenario=scen, step=step, **kw)


torch.cuda.set_device(local)
dev = torch.device("cuda", local)
props = torch.cuda.get_device_properties(local)
pg_td = datetime.timedelta(seconds=pg_timeout)
dist.init_process_group("nccl", timeout=pg_td, device_id=dev)
# new_group does not inherit init_process_group's timeout (it would be 10 min): pass it, so
# PyTorch's timeout fires PG_TIMEOUT after the first stuck op whatever its communicator.
dp = dist.new_group(list(range(world)), timeout=pg_td)  # "data parallel" (ncclCommSplit child)
tp = dist.new_group(list(range(world)), timeout=pg_td)  # "tensor parallel" (another child)

torch.manual_seed(1234 + rank)
w = torch.randn(4096, 4096, device=dev) / 64.0
x = torch.randn(4 << 20, device=dev)          # 16 MiB "gradient" bucket on dp: Simple protocol
y = torch.randn(1 << 16, device=dev)          # tp all-reduce and world broadcast
p2p = torch.randn(1 << 16, device=dev)        # Send/Recv between the two ranks (world comm)
bufs = [torch.randn(1 << 14, device=dev) for _ in range(4)]  # coalesced group on dp
loss = torch.zeros(1, device=dev)


def compute(n):
    a = w
    for _ in range(n):
        a = torch.tanh(a @ w)
    return a


# Calibrate the compute phase to ~COMPUTE_S on this GPU; both ranks take the larger count.
compute(3)
torch.cuda.synchronize()
t = time.time()
compute(10)
torch.cuda.synchronize()
per_iter = max((time.time() - t) / 10, 1e-5)
n_iter = torch.tensor([max(1, min(5000, round(compute_s / per_iter)))], device=dev, dtype=torch.int64)
dist.all_reduce(n_iter, op=dist.ReduceOp.MAX)
iters = int(n_iter.item())
torch.cuda.synchronize()

mark("INFO", pid=os.getpid(), local_rank=local, world=world, gpu=local,
     pci_bus_id=getattr(props, "pci_bus_id", None), gpu_name=props.name,
     uuid=str(getattr(props, "uuid", "")), nccl=".".join(map(str, torch.cuda.nccl.version())),
     torch=torch.__version__, compute_iters=iters, per_iter_ms=round(per_iter * 1e3, 3),
     scenario=scen, steps=steps, fault_step=fault_step, pg_timeout=pg_timeout)


def coalesced_allreduce():
    try:
        with dist._coalescing_manager(group=dp, device=dev):
            for b in bufs:
                dist.all_reduce(b, group=dp)
    except AttributeError:  # private API gone: plain calls still give the same sequence
        for b in bufs:
            dist.all_reduce(b, group=dp)


def gradient_allreduce(i):
    """The dp all-reduce of the big bucket: where op/size/dtype faults are injected."""
    if rank == FAULTY and i == fault_step:
        if scen == "wrong_op":
            fault(i, op="Broadcast", peer_op="AllReduce", count=x.numel())
            dist.broadcast(x, src=0, group=dp)
            return
        if scen == "wrong_size":
            n = x.numel() * 3 // 4
            fault(i, op="AllReduce", count=n, peer_count=x.numel())
            dist.all_reduce(x[:n], group=dp)
            return
        if scen == "wrong_dtype":
            fault(i, op="AllReduce", dtype="int32", peer_dtype="float32", count=x.numel())
            dist.all_reduce(x.view(torch.int32), group=dp)
            return
    dist.all_reduce(x, group=dp)


def collectives(i):
    dist.all_reduce(y, group=tp)
    peer = rank ^ 1  # two ranks: 0 <-> 1
    if peer < world:
        if rank % 2 == 0:
            dist.send(p2p, dst=peer)
            dist.recv(p2p, src=peer)
        else:
            dist.recv(p2p, src=peer)
            dist.send(p2p, dst=peer)
    coalesced_allreduce()
    gradient_allreduce(i)
    dist.broadcast(y, src=0)
    loss.fill_(float(i))
    dist.all_reduce(loss)


mark("PHASE", phase="steps_start", steps=steps)
t_loop = time.time()
for i in range(steps):
    if rank == FAULTY and i == fault_step:
        if scen == "silent":
            fault(i)
            time.sleep(3600)  # alive, holding its communicators, issuing nothing
        if scen == "crash":
            fault(i, exit_code=3)
            os._exit(3)
    if scen == "pause" and i == fault_step:
        if rank == FAULTY:
            fault(i, pause_s=pause_s)
        mark("PHASE", phase="pause_start", step=i)
        time.sleep(pause_s)  # both ranks: a checkpoint write, GPUs idle, nothing in flight
        mark("PHASE", phase="pause_end", step=i)
    s = time.time()
    compute(iters)
    torch.cuda.synchronize()  # a clean compute phase; also makes the straggler's sleep real
    if scen == "straggler_onset" and rank == FAULTY and i >= fault_step:
        if i == fault_step:
            fault(i, sleep_s=straggle_s)
        time.sleep(straggle_s)
    collectives(i)
    torch.cuda.synchronize()
    if i < 3 or i % 20 == 0 or abs(i - fault_step) <= 1:
        print(f"[rank {rank}] step {i} {time.time() - s:.3f}s", flush=True)
mark("PHASE", phase="steps_end", elapsed_s=round(time.time() - t_loop, 3))
try:
    dist.destroy_process_group()
except Exception as e:  # a wrong_size/wrong_dtype job may leave NCCL unhappy at teardown
    print(f"[rank {rank}] destroy_process_group: {e!r}", flush=True)
print(f"[rank {rank}] done", flush=True)
