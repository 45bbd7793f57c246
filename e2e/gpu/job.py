# A small real PyTorch/NCCL training job with one injected fault, for the live end-to-end
# test of the watchdog (run.sh). Run under: torchrun --standalone --nproc_per_node=N job.py
#
# Per step: a compute phase (fp32 matmuls, ~COMPUTE_S seconds, so the GPUs show the
# "computing" NVML signature), then collectives on three kinds of communicators (world + two
# new_group children made by ncclCommSplit), Send/Recv between partner ranks, and a
# coalesced group. With 2 ranks both children hold both ranks; with 4 (or more, even) ranks
# they are Megatron-like: tensor-parallel pairs {0,1} {2,3} ... and data-parallel groups of
# the even and of the odd ranks ({0,2} {1,3} with 4), and each step starts with a
# tensor-parallel all-reduce followed by a world all-reduce (a gradient-norm reduction).
#
# ONE_GPU=1: every rank runs on GPU 0 and claims its own NCCL_HOSTID, so NCCL treats the ranks
# as separate hosts and talks NET/Socket over loopback (NCCL_SOCKET_IFNAME=lo): several ranks
# on one GPU, with the network proxy operations the profiler plugin reports.
#
# Faults happen on rank FAULT_RANK (default: 1, except as noted) at step FAULT_STEP, chosen
# by SCENARIO:
#   healthy          no fault
#   silent           the rank stops issuing work and stays alive (host code stuck): hang
#                    (4+ ranks: rank 2)
#   frozen           the rank stops itself with SIGSTOP (a frozen process: its NCCL threads
#                    stop too); run.sh sends SIGCONT at the end (4+ ranks: rank 3)
#   crash            the rank's process exits (os._exit)
#   wrong_op         the rank calls Broadcast where its dp peers call AllReduce (same size): hang
#   wrong_size       the rank AllReduces 3/4 of the count on its dp group
#   wrong_dtype      the rank AllReduces the same bytes as int32 instead of float32
#   sub_mismatch     4+ ranks: rank 3 AllReduces 3/4 of the count on its dp group {1,3}, a
#                    communicator whose ranks are not 0..n-1 (comm rank 1 is global rank 3)
#   order_inversion  4+ ranks, the world and the tensor-parallel groups only, each step a
#                    tensor-parallel all-reduce then a world all-reduce (the job):
#                    the rank (1) calls the world one first while every other rank calls
#                    them the other way round; with CUDA_DEVICE_MAX_CONNECTIONS=1 (as
#                    Megatron sets it, and as this scenario sets it) the kernels queue in
#                    call order and the job deadlocks. INVERSION_FULL_STEP=1: the usual full
#                    step (p2p, dp groups, world ops) follows the inverted pair, so every
#                    rank issues more before it blocks
#   gpu_hang         the rank's GPU runs one long kernel (torch.cuda._sleep, GPU_HANG_S,
#                    past PyTorch's timeout) before its step's collectives: its host issues
#                    them as usual, they queue behind the kernel, its peers spin in them
#   p2p_skip         the rank skips its Send/Recv exchange with its partner (rank ^ 1) once:
#                    the partner's receive never completes
#   straggler_onset  the rank sleeps STRAGGLE_S before its collectives from FAULT_STEP on
#   pause            ALL ranks sleep PAUSE_S between two steps, GPUs idle (a checkpoint):
#                    must raise no incident
#   skip_sub         4+ ranks: rank 3 skips one all-reduce on its dp group {1,3} (a skipped
#                    collective on a sub-group; its next dp op pairs with the peer's skipped one)
#   left_pg          4+ ranks: rank 3 leaves its tensor-parallel group {2,3}
#                    (destroy_process_group(tp); LEFT_PG=abandon: just stops using it) and
#                    lives on, issuing the rest of every step: rank 2 waits in tp for ever
#   phases           no single fault: the phase plan of PHASES (JSON list, or @file) runs
#                    phase after phase, e.g. healthy, a slow host on rank 1, healthy, a slow
#                    GPU on rank 3, ... (see run_phases below)
# The fault matrix's classes (matrix.py; from the fault step on, on the faulty rank):
#   host_lag         sleeps LAG_FACTOR x its own healthy step before its collectives, every step
#   host_jitter      sleeps JITTER_MIN_S..JITTER_MAX_S before its collectives with probability
#                    JITTER_P per step (FAULT_SEED seeds the draws)
#   periodic_pause   sleeps PAUSE_LEN_S every PERIOD_S seconds (an evaluation, a checkpoint of
#                    its own), the first at the fault step
#   long_stall       sleeps STALL_S once, then goes on (a stall the job recovers from)
#   cpu_starve       moves its threads to STARVE_CPUS (2) cores of its own (or keeps those of
#                    CPUS_PER_RANK), starts CPU_HOGS busy processes (duty CPU_HOG_DUTY) there
#                    (they inherit its affinity) and lowers its own threads' priority by CPU_NICE
#   gpu_hog          turns hog.py's warm workers on its GPU on: HOG_DIR/gpu<k>.ctl gets
#                    "on HOG_WORKERS HOG_DUTY" (the harness turns them off after the job)
#   slow_nic         writes NIC_RATE (bytes/s, K/M/G) into its RATELIMIT_FILE: the LD_PRELOAD
#                    shim (ratelimit/) limits its TCP sends from then on
#   flap_nic         the same at FLAP_RATE, on FLAP_ON_S of every FLAP_EVERY_S seconds (a thread)
#   oom              allocates on its GPU, doubling from 256 MiB, until torch.OutOfMemoryError,
#                    which it does not catch (PyTorch prints it with its "[rankN]: " prefix)
#   exit_early       leaves the loop (out of data): destroy_process_group, exit 0
#   pg_destroyed     destroy_process_group() of everything, then stays alive (sleeps)
# RUN_S > 0 (the matrix): time instead of steps. The job runs until RUN_S seconds after its
# first step, every rank voting each step in a one-element world all-reduce (MAX), so all stop
# at the same step; the fault starts on the faulty rank at its first step FAULT_AT_S seconds
# after the first step (FAULT_STEP is ignored). STEP_LOG=<file> (%r: the rank): each step's
# end time and length, one line per step, for the harness's measured slowdown.
# CPUS_PER_RANK=k (with CPU_FIRST, default 0): rank r runs on cores CPU_FIRST+k*r ..
# CPU_FIRST+k*r+k-1, set before torch starts a thread (every thread inherits it); no pinning
# when those cores are not all available.
#
# Machine-readable lines on stdout (one JSON object each, flushed):
#   WATCHDOG_INFO  {rank, pid, local_rank, gpu, pci_bus_id, nccl, torch, ...}
#   WATCHDOG_PHASE {phase: steps_start|pause_start|pause_end|steps_end, rank, t, ...}
#   WATCHDOG_FAULT {scenario, rank, t, step, pid}  t = unix seconds at the injection moment
#   phase plans (rank 0, at each phase's end; "start" lines at its start):
#   WATCHDOG_PHASE {phase, event: start|end, index, fault, rank, class, t_start, t_end,
#                   severity, steps, step_s_median, slowdown, ...}
#   WATCHDOG_EVENT {what, rank, t, phase, ...}  the fault rank's own on/off moments (a stall,
#                   the GPU hog or the rate limit turned on or off; the matrix's stalls and
#                   link flaps, with "s" the stall's length)
#
# Flight Recorder: FR_JSON_DIR set: a thread writes PyTorch's JSON dump of this rank's
# Flight Recorder (torch._C._distributed_c10d._dump_nccl_trace_json; PyTorch itself writes
# only the pickle on a timeout, to TORCH_FR_DUMP_TEMP_FILE<rank>) to FR_JSON_DIR/rank_<r>.json
# every FR_JSON_EVERY_S (2) seconds once the fault step is reached, so a hang leaves a JSON
# form from at most 2 s before the end.
import datetime
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

MATRIX_SCENARIOS = ("host_lag", "host_jitter", "periodic_pause", "long_stall", "cpu_starve", "gpu_hog",
                    "slow_nic", "flap_nic", "oom", "exit_early", "pg_destroyed")
SCENARIOS = ("healthy", "silent", "frozen", "crash", "wrong_op", "wrong_size", "wrong_dtype",
             "sub_mismatch", "order_inversion", "straggler_onset", "pause", "gpu_hang", "p2p_skip",
             "skip_sub", "left_pg", "phases") + MATRIX_SCENARIOS
NEED_4 = ("sub_mismatch", "order_inversion", "skip_sub", "left_pg")  # need two tensor-parallel pairs
FAULT_RANK_4 = {"silent": 2, "frozen": 3, "sub_mismatch": 3, "skip_sub": 3, "left_pg": 3}  # with 4+ ranks; else rank 1

scen = os.environ.get("SCENARIO", "healthy")
if scen not in SCENARIOS:
    sys.exit(f"job.py: unknown SCENARIO {scen!r}; want one of {SCENARIOS}")
steps = int(os.environ.get("STEPS", "100"))
fault_step = int(os.environ.get("FAULT_STEP", "30"))
NEVER = 1 << 60  # the fault step while a time-based fault has not started yet
run_s = float(os.environ.get("RUN_S", "0") or 0)
fault_at_s = float(os.environ.get("FAULT_AT_S", "0") or 0)
if run_s > 0:
    steps, fault_step = NEVER, NEVER  # the vote ends the job; the clock starts the fault
pg_timeout = float(os.environ.get("PG_TIMEOUT", "45"))
compute_s = float(os.environ.get("COMPUTE_S", "0.15"))
pause_s = float(os.environ.get("PAUSE_S", "60"))
straggle_s = float(os.environ.get("STRAGGLE_S", "0.2"))
gpu_hang_s = float(os.environ.get("GPU_HANG_S", "0") or 0) or pg_timeout + 30
one_gpu = os.environ.get("ONE_GPU", "0") == "1"
# SHARE_GPUS=N: the ranks share N GPUs (rank r on cuda:r%N), each rank its own NCCL_HOSTID so
# that NCCL talks NET/Socket between ranks of one GPU, as ONE_GPU does on one: the 4-rank
# cases on a 2-GPU machine when no 4-GPU one is lent.
share_gpus = int(os.environ.get("SHARE_GPUS", "0") or 0)
left_pg_how = os.environ.get("LEFT_PG", "destroy")
fr_json_dir = os.environ.get("FR_JSON_DIR", "")
fr_json_every = float(os.environ.get("FR_JSON_EVERY_S", "2"))

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
if world < 2 or (world > 2 and world % 2):
    sys.exit(f"job.py: WORLD_SIZE {world}: want 2 or an even number of ranks")
if scen in NEED_4 and world < 4:
    sys.exit(f"job.py: SCENARIO {scen} needs 4 ranks or more (two tensor-parallel pairs), not {world}")
FAULTY = int(os.environ.get("FAULT_RANK") or (FAULT_RANK_4.get(scen, 1) if world >= 4 else 1))
if not 0 <= FAULTY < world:
    sys.exit(f"job.py: FAULT_RANK {FAULTY} outside 0..{world - 1}")

# Before torch loads NCCL: what NCCL reads from the environment at its first init.
if one_gpu or share_gpus:
    os.environ["NCCL_HOSTID"] = f"ncclwatch-e2e-rank{rank}"  # one "host" per rank: NET/Socket
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_IB_DISABLE", "1")
if scen == "order_inversion":
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"


def pin_cpus():
    """CPUS_PER_RANK=k: this rank on its own k cores, before any thread starts (threads inherit
    the affinity of the thread that makes them); None when not asked or not possible."""
    k = int(os.environ.get("CPUS_PER_RANK", "0") or 0)
    if k <= 0 or not hasattr(os, "sched_setaffinity"):
        return None
    first = int(os.environ.get("CPU_FIRST", "0") or 0) + k * rank
    want = set(range(first, first + k))
    if not want <= os.sched_getaffinity(0):
        return None
    os.sched_setaffinity(0, want)
    return sorted(want)


cpus = pin_cpus()  # one hardware queue: kernels run in call order
full_step = scen != "order_inversion" or os.environ.get("INVERSION_FULL_STEP") == "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def mark(tag, **kw):
    kw.setdefault("rank", rank)
    kw["t"] = time.time()
    # One write per line: the ranks share torchrun's stdout, and print's separate write of
    # the newline lets another rank's line land in between.
    os.write(1, f"WATCHDOG_{tag} {json.dumps(kw, sort_keys=True)}\n".encode())


def fault(step, **kw):
    kw.setdefault("pid", os.getpid())
    mark("FAULT", scenario=scen, step=step, **kw)
    fr_json_start.set()


def load_phases():
    """The phase plan: PHASES is a JSON list, or @path of a file holding one."""
    src = os.environ.get("PHASES", "")
    if src.startswith("@"):
        with open(src[1:]) as f:
            src = f.read()
    try:
        plan = json.loads(src)
    except ValueError as e:
        sys.exit(f"job.py: PHASES is not JSON: {e}")
    if not isinstance(plan, list) or not plan or not all(isinstance(p, dict) for p in plan):
        sys.exit("job.py: PHASES must be a non-empty JSON list of objects")
    for p in plan:
        if p.get("fault") not in (None, "host", "gpu", "link") or (p.get("fault") and not 0 <= int(p.get("rank", -1)) < world):
            sys.exit(f"job.py: bad phase {p}: fault must be host, gpu or link, on a rank of 0..{world - 1}")
    return plan


fr_json_start = __import__("threading").Event()


def fr_json_writer():
    """PyTorch's JSON form of this rank's Flight Recorder, rewritten every few seconds."""
    import threading
    fr_json_start.wait()
    try:
        from torch._C import _distributed_c10d as c10d_c
    except ImportError:
        return
    dump = getattr(c10d_c, "_dump_nccl_trace_json", None) or getattr(c10d_c, "_dump_fr_trace_json", None)
    os.makedirs(fr_json_dir, exist_ok=True)
    path = os.path.join(fr_json_dir, f"rank_{rank}.json")
    if dump is None:
        with open(path + ".err", "w") as f:
            f.write("no _dump_nccl_trace_json in this torch\n")
        return
    while True:
        try:
            data = dump()
            if isinstance(data, bytes):
                data = data.decode()
            with open(path + ".tmp", "w") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
        except Exception as e:  # keep the job going whatever the dump does
            with open(path + ".err", "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            return
        threading.Event().wait(fr_json_every)


gpu = 0 if one_gpu else (local % share_gpus if share_gpus else local)
torch.cuda.set_device(gpu)
dev = torch.device("cuda", gpu)
props = torch.cuda.get_device_properties(gpu)
pg_td = datetime.timedelta(seconds=pg_timeout)
dist.init_process_group("nccl", timeout=pg_td, device_id=dev)
# new_group does not inherit init_process_group's timeout (it would be 10 min): pass it, so
# PyTorch's timeout fires PG_TIMEOUT after the first stuck op whatever its communicator.
# Every rank creates every group, in the same order (each is an ncclCommSplit of the world).
if fr_json_dir:
    __import__("threading").Thread(target=fr_json_writer, name="fr-json", daemon=True).start()
if world == 2:
    dp = dist.new_group([0, 1], timeout=pg_td)  # "data parallel" (ncclCommSplit child)
    tp = dist.new_group([0, 1], timeout=pg_td)  # "tensor parallel" (another child)
    dp_ranks = tp_ranks = [0, 1]
else:
    tp_groups = [[r, r + 1] for r in range(0, world, 2)]
    dp_groups = [list(range(0, world, 2)), list(range(1, world, 2))] if full_step else []
    made = {tuple(g): dist.new_group(g, timeout=pg_td) for g in tp_groups + dp_groups}
    tp_ranks = tp_groups[rank // 2]
    dp_ranks = dp_groups[rank % 2] if dp_groups else []
    tp, dp = made[tuple(tp_ranks)], made.get(tuple(dp_ranks))

torch.manual_seed(1234 + rank)
w = torch.randn(4096, 4096, device=dev) / 64.0
x = torch.randn(4 << 20, device=dev)          # 16 MiB "gradient" bucket on dp: Simple protocol
y = torch.randn(1 << 16, device=dev)          # tp all-reduce and world broadcast
norm = torch.ones(8, device=dev)              # world all-reduce after the tp one (4+ ranks)
p2p = torch.randn(1 << 16, device=dev)        # Send/Recv between partner ranks (world comm)
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

mark("INFO", pid=os.getpid(), local_rank=local, world=world, gpu=gpu, one_gpu=one_gpu,
     pci_bus_id=getattr(props, "pci_bus_id", None), gpu_name=props.name,
     uuid=str(getattr(props, "uuid", "")), nccl=".".join(map(str, torch.cuda.nccl.version())),
     torch=torch.__version__, compute_iters=iters, per_iter_ms=round(per_iter * 1e3, 3),
     scenario=scen, steps=steps, fault_step=fault_step, fault_rank=FAULTY, pg_timeout=pg_timeout,
     tp=tp_ranks, dp=dp_ranks, nccl_hostid=os.environ.get("NCCL_HOSTID"),
     profiler_plugin=os.environ.get("NCCL_PROFILER_PLUGIN"), nccl_debug=os.environ.get("NCCL_DEBUG"),
     p2p_disable=os.environ.get("NCCL_P2P_DISABLE"), ratelimit=bool(os.environ.get("LD_PRELOAD")),
     cpus=cpus, run_s=run_s or None, fault_at_s=fault_at_s if run_s else None)


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
        if scen == "skip_sub":
            fault(i, skipped="AllReduce", count=x.numel(), group=dp_ranks, comm_rank=dp_ranks.index(rank))
            return
        if scen == "wrong_op":
            fault(i, op="Broadcast", peer_op="AllReduce", count=x.numel())
            dist.broadcast(x, src=dp_ranks[0], group=dp)
            return
        if scen in ("wrong_size", "sub_mismatch"):
            n = x.numel() * 3 // 4
            fault(i, op="AllReduce", count=n, peer_count=x.numel(), group=dp_ranks,
                  comm_rank=dp_ranks.index(rank))
            dist.all_reduce(x[:n], group=dp)
            return
        if scen == "wrong_dtype":
            fault(i, op="AllReduce", dtype="int32", peer_dtype="float32", count=x.numel())
            dist.all_reduce(x.view(torch.int32), group=dp)
            return
    dist.all_reduce(x, group=dp)


left_tp = []  # left_pg: set once the rank has left its tensor-parallel group


def leave_tp(i):
    how = left_pg_how
    err = None
    if how == "destroy":
        try:
            dist.destroy_process_group(tp)
        except Exception as e:  # a torch that will not destroy one group alone: stop using it
            how, err = "abandon", f"{type(e).__name__}: {e}"[:200]
    fault(i, left="tp", group=tp_ranks, how=how, destroy_error=err)
    left_tp.append(how)


def tp_then_world(i):
    """The step's first two collectives; the order_inversion fault swaps them on one rank."""
    invert = scen == "order_inversion" and rank == FAULTY and i == fault_step
    if invert:
        fault(i, first="world AllReduce", then="tp AllReduce", tp=tp_ranks,
              cuda_device_max_connections=os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"))
        dist.all_reduce(norm)
    if scen == "left_pg" and rank == FAULTY and i == fault_step:
        leave_tp(i)
    if not left_tp:
        dist.all_reduce(y, group=tp)
    if world > 2 and not invert:
        dist.all_reduce(norm)


def collectives(i):
    tp_then_world(i)
    if not full_step:
        return  # the job: the pair is the step's last issue before it synchronizes
    peer = rank ^ 1  # the tensor-parallel partner: 0 <-> 1, 2 <-> 3
    if scen == "p2p_skip" and rank == FAULTY and i == fault_step:
        fault(i, skipped="Send/Recv", peer=peer)
    elif peer < world:
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


class PhaseFault:
    """One phase's fault as this rank plays it: a slow host sleeps before its collectives
    (every step, or a stall every few steps); a slow GPU turns the harness's hog processes
    on its GPU on (hog.py, through HOG_DIR/gpu<k>.ctl); a slow link sets its own rate limit
    (the LD_PRELOAD shim's RATELIMIT_FILE). Intermittent GPU and link faults go on for on_s
    of every every_s seconds. Only the phase's rank acts; the others only wait."""

    def __init__(self, ph, idx, baseline):
        self.ph, self.idx = ph, idx
        self.fault = ph.get("fault")
        self.mine = bool(self.fault) and int(ph.get("rank", -1)) == rank
        self.sev = ph.get("severity") or {}
        self.intermittent = ph.get("mode") == "intermittent"
        self.on = None
        self.t0 = time.time()
        self.sleep_s = float(self.sev.get("sleep_s") or 0)
        if self.fault == "host" and not self.intermittent and not self.sleep_s:
            # A target slowdown: the sleep that makes this rank's step that much longer.
            self.sleep_s = max(0.0, float(self.sev.get("factor", 2)) - 1) * baseline

    def event(self, what, **kw):
        mark("EVENT", what=what, phase=self.ph.get("name"), index=self.idx, fault=self.fault, **kw)

    def ctl_file(self):
        if self.fault == "gpu":
            d = os.environ.get("HOG_DIR")
            return os.path.join(d, f"gpu{gpu}.ctl") if d else None
        pat = os.environ.get("RATELIMIT_FILE")
        return pat.replace("%r", str(rank)) if pat and self.fault == "link" else None

    def write_ctl(self, text):
        path = self.ctl_file()
        if path:
            with open(path + ".tmp", "w") as f:
                f.write(text + "\n")
            os.replace(path + ".tmp", path)
        return path

    def switch(self, on):
        """Turn a GPU or link fault on, or pause it (the off part of an intermittent one)."""
        if on == self.on:
            return
        self.on = on
        if self.fault == "gpu":
            text = f"on {int(self.sev.get('workers', 1))} {float(self.sev.get('duty', 1.0))}" if on else "pause"
        else:
            text = str(self.sev.get("rate", "100M")) if on else "0"
        self.event(f"{self.fault}_{'on' if on else 'off'}", ctl=text, file=self.write_ctl(text))

    def start(self, i):
        if not self.mine:
            return
        fault(i, phase=self.ph.get("name"), fault=self.fault, mode=self.ph.get("mode", "persistent"),
              severity=self.sev, sleep_s=round(self.sleep_s, 4) if self.fault == "host" else None)
        if self.fault in ("gpu", "link"):
            self.switch(True)

    def before_collectives(self, k):
        """Called every step between compute and collectives."""
        if not self.mine:
            return
        if self.fault == "host":
            if not self.intermittent:
                time.sleep(self.sleep_s)
            elif k % int(self.sev.get("every", 10)) == int(self.sev.get("first", 2)) % int(self.sev.get("every", 10)):
                st = float(self.sev.get("stall_s", 2.0))
                self.event("stall", s=st)
                time.sleep(st)
        elif self.intermittent:
            on_s, every = float(self.sev.get("on_s", 2.0)), float(self.sev.get("every_s", 6.0))
            self.switch(((time.time() - self.t0) % every) < on_s)

    def stop(self):
        """The phase's end: the hogs exit (their CUDA contexts go), the rate is unlimited."""
        if self.mine and self.fault in ("gpu", "link"):
            text = "off" if self.fault == "gpu" else "0"
            self.event(f"{self.fault}_off", ctl=text, file=self.write_ctl(text), end=True)


def run_phases(plan):
    """Phase after phase. Each rank votes every step whether the phase has run long enough
    (min_s seconds and min_steps steps, by its own clock) and a one-element world all-reduce
    (MAX) of the votes ends it: every rank changes phase at the same step."""
    import statistics
    ctl = torch.zeros(1, device=dev, dtype=torch.int64)
    baseline = None
    i = 0
    default_s = float(os.environ.get("PHASE_S", "20"))
    default_steps = int(os.environ.get("PHASE_STEPS", "20"))
    for idx, ph in enumerate(plan):
        pf = PhaseFault(ph, idx, baseline if baseline is not None else 0.1)
        min_s = float(ph.get("min_s", default_s))
        min_steps = int(ph.get("min_steps", default_steps))
        max_s = float(ph.get("max_s", max(3 * min_s, min_s + 60)))
        meta = {"phase": ph.get("name") or f"phase{idx}", "index": idx, "fault": pf.fault,
                "rank": int(ph["rank"]) if pf.fault else None, "class": ph.get("class") or pf.fault,
                "mode": ph.get("mode", "persistent") if pf.fault else None, "severity": pf.sev or None}
        t_start = time.time()
        if rank == 0:
            mark("PHASE", event="start", t_start=t_start, step=i, **meta)
        pf.t0 = t_start
        pf.start(i)
        times = []
        k = 0
        while True:
            s = time.time()
            compute(iters)
            torch.cuda.synchronize()
            pf.before_collectives(k)
            collectives(i)
            el = time.time() - t_start
            done = (el >= min_s and k + 1 >= min_steps) or el >= max_s
            ctl.fill_(1 if done else 0)
            dist.all_reduce(ctl, op=dist.ReduceOp.MAX)
            torch.cuda.synchronize()
            times.append(time.time() - s)
            k += 1
            i += 1
            if int(ctl.item()):
                break
        pf.stop()
        t_end = time.time()
        med = statistics.median(times)
        if baseline is None and not pf.fault:
            baseline = statistics.median(times[min(5, len(times) // 2):])
        if rank == 0:
            mark("PHASE", event="end", t_start=t_start, t_end=t_end, steps=k, step_s_median=round(med, 4),
                 step_s_mean=round(sum(times) / len(times), 4), step_s_max=round(max(times), 4),
                 baseline_step_s=round(baseline, 4) if baseline else None,
                 slowdown=round(sum(times) / len(times) / baseline, 3) if baseline else None, **meta)
    return i


# A busy loop for the CPU starvation fault: a fresh python (no torch), burning duty x of a
# core in 50 ms bursts on the cores it inherited, until its parent (the rank) is gone.
CPU_HOG = r"""
import os, sys, time
parent, duty, end = os.getppid(), float(sys.argv[1]), time.time() + float(sys.argv[2])
while time.time() < end and os.getppid() == parent:
    t = time.time()
    while time.time() - t < 0.05:
        pass
    if duty < 1:
        time.sleep(0.05 * (1 - duty) / duty)
"""


def write_ctl(path, text):
    """A control file another process polls (hog.py's, the rate-limit shim's): whole or not at all."""
    if not path:
        return None
    with open(path + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(path + ".tmp", path)
    return path


def env_f(k, d):
    return float(os.environ.get(k, "") or d)


class MatrixFault:
    """The fault matrix's classes, on the faulty rank: start() at the fault step (before its
    compute), act() every step from then on between compute and collectives."""

    def __init__(self):
        self.rng = random.Random(int(os.environ.get("FAULT_SEED", "0") or 0))
        self.ends = []        # this rank's step end times, for its healthy step
        self.lag_s = 0.0
        self.next_pause = None

    def healthy_step(self):
        d = [b - a for a, b in zip(self.ends, self.ends[1:])][2:]
        return statistics.median(d) if d else compute_s

    def event(self, what, **kw):
        mark("EVENT", what=what, scenario=scen, **kw)

    def start(self, i):
        """Returns "leave" when the rank leaves the loop (exit_early)."""
        if scen == "host_lag":
            base = self.healthy_step()
            self.lag_s = env_f("LAG_FACTOR", 0.5) * base
            fault(i, lag_s=round(self.lag_s, 4), factor=env_f("LAG_FACTOR", 0.5), healthy_step_s=round(base, 4))
        elif scen == "host_jitter":
            fault(i, p=env_f("JITTER_P", 0.15), min_s=env_f("JITTER_MIN_S", 0.2), max_s=env_f("JITTER_MAX_S", 0.8))
        elif scen == "periodic_pause":
            self.next_pause = time.time()
            fault(i, period_s=env_f("PERIOD_S", 6), pause_s=env_f("PAUSE_LEN_S", 2))
        elif scen == "long_stall":
            fault(i, stall_s=env_f("STALL_S", 25))
        elif scen == "cpu_starve":
            n, duty, nice = int(env_f("CPU_HOGS", 4)), env_f("CPU_HOG_DUTY", 1.0), int(env_f("CPU_NICE", 0))
            pinned = self.pin_threads()
            pids = [subprocess.Popen([sys.executable, "-c", CPU_HOG, str(duty), str(env_f("CPU_HOG_MAX_S", 300))],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
                    for _ in range(n)]
            reniced = 0
            if nice > 0:  # every thread of this rank, NCCL's and PyTorch's included (nice is per thread)
                for tid in os.listdir("/proc/self/task"):
                    try:
                        os.setpriority(os.PRIO_PROCESS, int(tid), max(nice, os.getpriority(os.PRIO_PROCESS, int(tid))))
                        reniced += 1
                    except OSError:
                        pass
            fault(i, hogs=pids, duty=duty, nice=nice, reniced_threads=reniced, cpus=pinned)
        elif scen == "gpu_hog":
            d = os.environ.get("HOG_DIR")
            text = f"on {int(env_f('HOG_WORKERS', 1))} {env_f('HOG_DUTY', 1.0)}"
            path = write_ctl(os.path.join(d, f"gpu{gpu}.ctl") if d else None, text)
            fault(i, gpu=gpu, ctl=text, file=path)
        elif scen in ("slow_nic", "flap_nic"):
            pat = os.environ.get("RATELIMIT_FILE", "")
            path = pat.replace("%r", str(rank)) if pat else None
            if scen == "slow_nic":
                rate = os.environ.get("NIC_RATE", "200M")
                fault(i, rate=rate, file=write_ctl(path, rate))
            else:
                rate, on_s, every = os.environ.get("FLAP_RATE", "30M"), env_f("FLAP_ON_S", 2), env_f("FLAP_EVERY_S", 6)
                fault(i, rate=rate, on_s=on_s, every_s=every, file=path)
                __import__("threading").Thread(target=self.flap, args=(path, rate, on_s, every), daemon=True).start()
        elif scen == "oom":
            fault(i, how="doubling from 256 MiB until torch.OutOfMemoryError, uncaught")
            held = []
            n = 256 << 20
            while True:  # the error escapes: PyTorch's excepthook prints it, the process exits 1
                held.append(torch.empty(n, dtype=torch.uint8, device=dev))
                n *= 2
        elif scen == "exit_early":
            fault(i, steps_done=i, exit_code=0)
            # A destroy that waits on peers must not turn "left" into "stuck": out after 20 s.
            def leave():
                time.sleep(env_f("EXIT_EARLY_MAX_S", 20))
                mark("PHASE", phase="exit_forced", step=i)
                os._exit(0)
            __import__("threading").Thread(target=leave, daemon=True).start()
            return "leave"
        elif scen == "pg_destroyed":
            fault(i, destroyed="all")
            err = None
            try:
                dist.destroy_process_group()
            except Exception as e:  # noqa: BLE001  (recorded; the rank stays alive either way)
                err = f"{type(e).__name__}: {e}"[:200]
            mark("PHASE", phase="destroyed", step=i, error=err)
            time.sleep(3600)  # alive, its process groups gone
        return None

    def pin_threads(self):
        """cpu_starve: the rank's cores, which its CPU hogs then share (they inherit the
        affinity). A rank pinned from the start (CPUS_PER_RANK) keeps its cores; else every
        thread of it moves now to STARVE_CPUS (2) cores of its own (cores 2+k*rank.., or the
        last k), when the machine has k+2 cores or more; None when it does not."""
        if cpus:
            return cpus
        k = int(env_f("STARVE_CPUS", 2))
        avail = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if k <= 0 or len(avail) < k + 2:
            return None
        first = 2 + k * rank
        want = set(avail[first:first + k] if first + k <= len(avail) else avail[-k:])
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), want)
            except OSError:
                pass
        return sorted(want)

    def flap(self, path, rate, on_s, every):
        t0, state = time.time(), None
        while True:
            on = (time.time() - t0) % every < on_s
            if on != state:
                state = on
                write_ctl(path, rate if on else "0")
                self.event("link_on" if on else "link_off", rate=rate if on else "0")
            time.sleep(0.02)

    def act(self, i):
        if scen == "host_lag":
            time.sleep(self.lag_s)
        elif scen == "host_jitter":
            if self.rng.random() < env_f("JITTER_P", 0.15):
                d = self.rng.uniform(env_f("JITTER_MIN_S", 0.2), env_f("JITTER_MAX_S", 0.8))
                self.event("stall", s=round(d, 4), step=i)
                time.sleep(d)
        elif scen == "periodic_pause":
            now = time.time()
            if now >= self.next_pause:
                d = env_f("PAUSE_LEN_S", 2)
                self.event("stall", s=d, step=i)
                time.sleep(d)
                self.next_pause = now + env_f("PERIOD_S", 6)
        elif scen == "long_stall" and i == fault_step:
            d = env_f("STALL_S", 25)
            self.event("stall", s=d, step=i)
            time.sleep(d)
            self.event("resumed", step=i)


matrix = MatrixFault()
ctl = torch.zeros(1, device=dev, dtype=torch.int64) if run_s else None
step_log = None
if os.environ.get("STEP_LOG"):
    step_log = open(os.environ["STEP_LOG"].replace("%r", str(rank)), "a", buffering=1)

mark("PHASE", phase="steps_start", steps=None if run_s else steps, run_s=run_s or None)
t_loop = time.time()
t_prev = t_loop
for i in range(steps if scen != "phases" else 0):
    if run_s and fault_step == NEVER and rank == FAULTY and scen != "healthy" and time.time() - t_loop >= fault_at_s:
        fault_step = i  # the time-based fault starts here, on this rank only
    if i == fault_step:
        fr_json_start.set()  # every rank: Flight Recorder's JSON form from here on
    if rank == FAULTY and i == fault_step:
        if scen == "silent":
            fault(i)
            time.sleep(3600)  # alive, holding its communicators, issuing nothing
        if scen == "frozen":
            fault(i, pid=os.getpid(), signal="SIGSTOP")
            os.kill(os.getpid(), signal.SIGSTOP)  # every thread stops, NCCL's included
            mark("PHASE", phase="resumed", step=i)  # after run.sh's SIGCONT
        if scen == "crash":
            fault(i, exit_code=3)
            os._exit(3)
        if scen in MATRIX_SCENARIOS and matrix.start(i) == "leave":
            break
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
    if scen == "gpu_hang" and rank == FAULTY and i == fault_step:
        # ~2 GHz SM clocks: cycles for gpu_hang_s; the collectives below queue behind it.
        fault(i, kernel_s=gpu_hang_s)
        torch.cuda._sleep(int(gpu_hang_s * 2e9))
    if scen in MATRIX_SCENARIOS and rank == FAULTY and i >= fault_step:
        matrix.act(i)
    collectives(i)
    if run_s:  # the vote: every rank stops at the step where the first of them ran out of time
        ctl.fill_(1 if time.time() - t_loop >= run_s else 0)
        dist.all_reduce(ctl, op=dist.ReduceOp.MAX)
    torch.cuda.synchronize()
    t_end = time.time()
    if fault_step == NEVER and len(matrix.ends) < 200:
        matrix.ends.append(t_end)
    if step_log:
        step_log.write(f"{i} {t_end:.6f} {t_end - t_prev:.6f}\n")
    t_prev = t_end
    if i < 3 or i % 20 == 0 or abs(i - fault_step) <= 1:
        print(f"[rank {rank}] step {i} {time.time() - s:.3f}s", flush=True)
    if run_s and int(ctl.item()):
        break
if scen == "phases":
    run_phases(load_phases())
mark("PHASE", phase="steps_end", elapsed_s=round(time.time() - t_loop, 3))
try:
    dist.destroy_process_group()
except Exception as e:  # a wrong_size/wrong_dtype job may leave NCCL unhappy at teardown
    print(f"[rank {rank}] destroy_process_group: {e!r}", flush=True)
print(f"[rank {rank}] done", flush=True)
