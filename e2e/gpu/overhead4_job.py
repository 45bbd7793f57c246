# One rank of the 4-GPU overhead benchmark (overhead4.py starts it under torchrun, once).
#
# The rank imports torch once and then runs the plan PLAN_FILE names, run after run: each run
# is a child process forked before CUDA or NCCL start (so a run costs a CUDA context and an
# NCCL init, about 2 s, not the 8-10 s of a torchrun launch), with its transport's and
# variant's environment (NCCL reads it at its init), its own FileStore rendezvous, rank r on
# cuda:r. FORK=0 starts a fresh python for each run instead (the import paid every time).
#
# A run measures every cell (operation x message size) of its plan in a shuffled order (the
# plan's seed): all-reduce, all-gather (the size is the gathered output, nccl-tests' way) and a
# ring of sends (each rank sends the size to r+1 and receives it from r-1 in one group).
# Per cell: warm-up, one op timed to choose how many fit the cell's time (agreed by all
# ranks), then TRIALS trials of N ops enqueued back to back and one synchronize:
#   us_per_op      wall time of the trial / N (host, NCCL proxy and GPU: the op's cost)
#   enq_us         wall time of the N enqueues alone / N (before the synchronize)
#   enq_cpu_us     CPU time of this thread in the N enqueues / N (time.thread_time: the
#                  enqueue path, where the plugin's Group/Coll calls sit)
# and one line per cell: "OVH4 {json}". Rank 0 decides, before each run, whether it still
# fits the deadline, and tells the others through a file (all ranks are on one host).
#
# DRYRUN (torch is e2e/gpu's stub, under stubrun.py): the collectives are the stub's no-ops,
# and each op drives the real profiler plugin through its ncclProfiler_v5 table the way NCCL
# does (torch._fakenccl's _Profiler), so the plumbing (plan, forks, plugin, regions, chain,
# parsing, statistics) runs end to end without a GPU; timings mean nothing.
import datetime
import json
import os
import random
import signal
import sys
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ.get("LOCAL_RANK", rank))
HERE = os.path.dirname(os.path.abspath(__file__))

import torch  # noqa: E402  (once, before any fork; CUDA is not touched here)

DRY = getattr(torch, "__version__", "") == "stub"


def emit(kind, **kw):
    kw.update(kind=kind, rank=rank, t=round(time.time(), 3))
    # One write per line: the ranks share stdout.
    os.write(1, ("OVH4 " + json.dumps(kw, sort_keys=True) + "\n").encode())


# ---- the collectives, real or dry --------------------------------------------------------


class Real:
    def __init__(self, run):
        import torch.distributed as dist
        self.dist = dist
        torch.cuda.set_device(local_rank)
        self.dev = torch.device("cuda", local_rank)
        store = dist.FileStore(os.path.join(run["dir"], "store"), world)
        dist.init_process_group("nccl", store=store, rank=rank, world_size=world, device_id=self.dev,
                                timeout=datetime.timedelta(seconds=run["timeout_s"]))
        self.tiny = torch.zeros(2, device=self.dev)

    def sync(self):
        torch.cuda.synchronize()

    def agree(self, a, b):
        """Both numbers, maximum over the ranks (outside any timing)."""
        self.tiny[0], self.tiny[1] = a, b
        self.dist.all_reduce(self.tiny, op=self.dist.ReduceOp.MAX)
        v = self.tiny.tolist()
        return v[0], v[1]

    def buffers(self, op, nbytes):
        n = max(1, nbytes // 4)
        if op == "allgather":
            per = max(1, n // world)
            return torch.ones(per, device=self.dev), torch.empty(per * world, device=self.dev)
        if op == "sendrecv":
            return torch.ones(n, device=self.dev), torch.empty(n, device=self.dev)
        return torch.ones(n, device=self.dev), None

    def issue(self, op, a, b):
        d = self.dist
        if op == "allreduce":
            d.all_reduce(a)
        elif op == "allgather":
            d.all_gather_into_tensor(b, a)
        else:
            ops = [d.P2POp(d.isend, a, (rank + 1) % world), d.P2POp(d.irecv, b, (rank - 1) % world)]
            d.batch_isend_irecv(ops)

    def check(self):
        """The results are right: an all-reduce of the ranks' numbers and an all-gather."""
        x = torch.full((1024,), float(rank + 1), device=self.dev)
        self.dist.all_reduce(x)
        g = torch.empty(world, device=self.dev)
        self.dist.all_gather_into_tensor(g, torch.full((1,), float(rank), device=self.dev))
        torch.cuda.synchronize()
        return bool((x == world * (world + 1) / 2).all().item()) and g.tolist() == [float(r) for r in range(world)]

    def close(self):
        self.dist.destroy_process_group()

    def nccl(self):
        return ".".join(map(str, torch.cuda.nccl.version()))


class Dry:
    """No GPU: each op is reported to the real plugin as NCCL 2.28 would (Group, Coll/P2p,
    kernel channels; completed at once), through the stub's ctypes table."""

    def __init__(self, run):
        from torch._fakenccl import _Profiler
        self.p = None
        plugin = os.environ.get("NCCL_PROFILER_PLUGIN")
        if plugin:
            self.p = _Profiler(plugin)
            self.ctx = self.p.init(0xD0D0 + run["index"], 1, world, rank)

        class C:
            pass
        self.comm = C()
        self.comm.rank, self.comm.prof = rank, (self.ctx if self.p else None)
        self.k = 0

    def sync(self):
        pass

    def agree(self, a, b):
        return a, b

    def buffers(self, op, nbytes):
        return nbytes, None

    def issue(self, op, a, b):
        if not self.p:
            return

        class Op:
            pass
        o = Op()
        self.k += 1
        o.k, o.root, o.task, o.kch, o.proxy = self.k, 0, None, [], []
        o.func = {"allreduce": "AllReduce", "allgather": "AllGather", "sendrecv": "Send"}[op]
        o.dtype, o.count = "float32", max(1, a // 4)
        o.peer = None if op != "sendrecv" else (rank + 1) % world
        o.peer_comm = o.peer if o.peer is not None else -1
        self.p.issue(self.comm, o)
        self.p.arrive(self.comm, o, [])
        self.p.complete(o)

    def check(self):
        return True

    def close(self):
        if self.p:
            self.p.finalize(self.comm)

    def nccl(self):
        return "stub"


# ---- one run ---------------------------------------------------------------------------


def measure(be, op, nbytes, cfg):
    """cfg: warmup (ops), trials, max_n (ops per trial), cell_s (the cell's time)."""
    a, b = be.buffers(op, nbytes)
    for _ in range(cfg["warmup"]):
        be.issue(op, a, b)
    be.sync()
    t0 = time.perf_counter()
    be.issue(op, a, b)
    be.sync()
    one = time.perf_counter() - t0
    one, _ = be.agree(one, 0)
    per_trial = cfg["cell_s"] / cfg["trials"]
    n = int(max(1, min(cfg["max_n"], per_trial / max(one, 1e-7))))
    trials = cfg["trials"] if one * n * cfg["trials"] <= cfg["cell_s"] * 1.5 else 1
    out = []
    for _ in range(trials):
        be.agree(0, 0)  # every rank starts together
        be.sync()
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(n):
            be.issue(op, a, b)
        t1, c1 = time.perf_counter(), time.thread_time()
        be.sync()
        t2 = time.perf_counter()
        out.append({"us_per_op": (t2 - t0) / n * 1e6, "enq_us": (t1 - t0) / n * 1e6, "enq_cpu_us": (c1 - c0) / n * 1e6})
    del a, b
    return n, one * 1e6, out


def dump_region(run):
    """This rank's profiler region as profdump prints it, before the communicators' finalize
    frees their slots (run["profdump"]; nothing without the plugin)."""
    d = os.environ.get("NCCLWATCH_PROFILER_DIR")
    if not d or not os.environ.get("NCCL_PROFILER_PLUGIN") or not os.path.exists(run.get("profdump") or ""):
        return
    import glob
    import subprocess
    mine = [p for p in glob.glob(os.path.join(d, "ncclwatch-prof.*.bin")) if p.endswith(f".{os.getpid()}.bin")]
    if mine:
        with open(os.path.join(run["dir"], f"prof-rank{rank}.json"), "w") as f:
            subprocess.run([run["profdump"]] + mine, stdout=f, stderr=subprocess.DEVNULL, timeout=20)


def child(run):
    for k, v in run["env"].items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    os.environ["NCCL_DEBUG_FILE"] = os.path.join(run["dir"], "nccl.%h.%p.log")
    for k in ("NCCLWATCH_PROFILER_DIR", "STANDIN_DIR"):
        if os.environ.get(k):
            os.makedirs(os.environ[k], exist_ok=True)
    t0 = time.time()
    be = (Dry if DRY else Real)(run)
    t_init = time.time() - t0
    emit("run", run=run["name"], index=run["index"], transport=run["transport"], variant=run["variant"],
         rep=run["rep"], init_s=round(t_init, 2), nccl=be.nccl(), pid=os.getpid())
    cells = [(op, s) for op in run["ops"] for s in run["sizes"]]
    random.Random(run["seed"] * 1000 + run["index"]).shuffle(cells)
    for op, size in cells:
        n, one_us, trials = measure(be, op, size, run["cells"][str(size)])
        emit("cell", run=run["name"], index=run["index"], transport=run["transport"], variant=run["variant"],
             rep=run["rep"], op=op, size=size, n=n, one_us=round(one_us, 2), trials=trials)
    ok = be.check()
    be.sync()
    dump_region(run)
    emit("done", run=run["name"], index=run["index"], check=ok, s=round(time.time() - t0, 2))
    be.close()


def run_one(run):
    """The run in a child: forked (torch imported, CUDA untouched), or a fresh python."""
    if os.environ.get("FORK", "1") == "1":
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child(run)
            except BaseException as e:  # noqa: BLE001  (the child reports and leaves)
                emit("error", run=run["name"], error=repr(e)[:400])
                code = 1
            sys.stdout.flush()
            os._exit(code)
    else:
        import subprocess
        pid = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(run)]).pid
    deadline = time.time() + run["limit_s"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            emit("error", run=run["name"], error=f"killed after {run['limit_s']} s")
            return -9
        time.sleep(0.05)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
        return 0
    with open(os.environ["PLAN_FILE"]) as f:
        plan = json.load(f)
    deadline = plan["deadline"]
    took = dict(plan["estimate_s"])  # rank 0: the longest run so far per transport
    timed = set()
    for run in plan["runs"]:
        decision = os.path.join(run["dir"], "decision")
        if rank == 0:
            os.makedirs(run["dir"], exist_ok=True)
            go = time.time() + took[run["transport"]] * 1.15 <= deadline
            with open(decision + ".tmp", "w") as f:
                f.write("go" if go else "skip")
            os.replace(decision + ".tmp", decision)
        else:
            t_wait = time.time() + 60
            while not os.path.exists(decision) and time.time() < t_wait:
                time.sleep(0.02)
        try:
            with open(decision) as f:
                go = f.read() == "go"
        except OSError:
            go = False
        if not go:
            emit("skipped", run=run["name"], index=run["index"], transport=run["transport"], variant=run["variant"],
                 rep=run["rep"])
            continue
        t0 = time.time()
        rc = run_one(run)
        if rank == 0 and rc == 0:  # the plan's guess until a run of the transport is timed
            tr = run["transport"]
            took[tr] = max(took[tr], time.time() - t0) if tr in timed else time.time() - t0
            timed.add(tr)
        emit("exit", run=run["name"], index=run["index"], rc=rc, s=round(time.time() - t0, 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
