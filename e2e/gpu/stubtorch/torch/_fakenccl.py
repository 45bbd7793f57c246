"""A stand-in for NCCL inside the stub torch, so that e2e/gpu's dry run can run job.py with
several ranks (stubrun.py launches them) and no GPU: every collective is logged the way NCCL
2.28.9 logs it, reported to the real profiler plugin when NCCL_PROFILER_PLUGIN is set (through
its ncclProfiler_v5 table, as NCCL calls it), and completes only once every member of its
communicator has reached it, so that hangs, frozen and crashed ranks and deadlocks happen as in
a real job.

The model of the GPU: each process runs its operations in issue order per stream (one stream
per process group, as PyTorch does), or in one queue when CUDA_DEVICE_MAX_CONNECTIONS=1. The
operation at the head of a queue "arrives" (its kernel starts); it completes when every member
of its communicator has arrived at the same sequence position. Ranks see each other through a
small JSON file per process in STUB_NCCL_DIR, written by a progress thread that stops with the
process (SIGSTOP freezes it like NCCL's own threads). PyTorch's watchdog is modelled too: an
operation pending longer than its process group's timeout prints PyTorch's timeout line and
aborts the process.

Without STUB_NCCL_DIR (jobcheck.sh runs one rank alone) nothing is written and every
operation completes at once.

More of a real job, for the 4-GPU harness:
- the device: torch.cuda.set_device(k) makes the rank's lines say cudaDev k and its bus id;
- the socket transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): before an operation
  "arrives", its rank sends count*4/STUB_NET_SCALE (64) bytes over a real loopback TCP
  connection, through libc's send(), so the rate-limit shim (ratelimit/shim.c) slows that
  rank's operations as it would slow NCCL's proxy threads;
- a slow GPU: the fake compute (torch's matmul) takes 1 + W*D times longer while hog.py
  says W workers of duty D compute on the rank's GPU (HOG_DIR/gpu<k>.state);
- Flight Recorder (TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE > 0): every
  operation is recorded as PyTorch records it; with TORCH_NCCL_DUMP_ON_TIMEOUT=1 the rank
  whose watchdog times out writes the dump (a plain-data pickle in PyTorch 2.11's layout) to
  TORCH_FR_DUMP_TEMP_FILE<rank> and signals the others, which dump too (PyTorch does it
  through the TCPStore); torch._C._distributed_c10d._dump_nccl_trace_json gives the JSON
  form; TORCH_NCCL_ENABLE_TIMING=1 adds the "started" state;
- destroy_process_group(group) of one group: its communicator is destroyed on this rank only.
"""
import collections
import ctypes
import datetime
import hashlib
import json
import os
import pickle
import random
import signal
import socket
import sys
import threading
import time

VERSION = "2.28.9"
# torch dtype name -> (NCCL datatype enum as NCCL's COLL lines print it, the profiler's name)
DTYPES = {"float32": (7, "ncclFloat32"), "int32": (2, "ncclInt32"), "int64": (4, "ncclInt64"), "uint8": (1, "ncclUint8")}
OPTYPES = {"AllReduce": "ALLREDUCE", "Broadcast": "BROADCAST", "Send": "SEND", "Recv": "RECV"}
POLL_S = 0.002


def _hash64(*parts):
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little")


class _Log:
    """NCCL_DEBUG_FILE as NCCL writes it: '[time] host:pid:tid [dev] NCCL INFO ...'."""

    def __init__(self):
        level = os.environ.get("NCCL_DEBUG", "").upper()
        self.info = level in ("INFO", "TRACE")
        self.warn = self.info or level == "WARN"
        subsys = os.environ.get("NCCL_DEBUG_SUBSYS", "INIT,COLL").upper().split(",")
        self.coll = self.info and ("COLL" in subsys or "ALL" in subsys)
        self.stamp = os.environ.get("NCCL_DEBUG_TIMESTAMP_LEVELS", "") != ""
        self.host = socket.gethostname().split(".")[0]
        self.pid = os.getpid()
        self.f = None
        path = os.environ.get("NCCL_DEBUG_FILE")
        if path and self.warn:
            path = path.replace("%h", self.host).replace("%p", str(self.pid))
            self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    dev = 0  # the CUDA device, as NCCL prints it in brackets

    def _write(self, level, msg, src=""):
        if not self.f:
            return
        pre = ""
        if self.stamp:
            pre = datetime.datetime.now().strftime("[%Y-%m-%d %H:%M:%S.%f] ")
        tid = threading.get_native_id()
        with self.lock:
            self.f.write(f"{pre}{self.host}:{self.pid}:{tid} [{self.dev}] {src}NCCL {level} {msg}\n")

    def info_line(self, msg):
        if self.info:
            self._write("INFO", msg)

    def coll_line(self, msg):
        if self.coll:
            self._write("INFO", msg)

    def warn_line(self, src, msg):
        if self.warn:
            self._write("WARN", msg, src + " ")


class _Profiler:
    """Calls the plugin's ncclProfiler_v5 table the way NCCL 2.28 does."""

    class Coll(ctypes.Structure):
        _fields_ = [("seqNumber", ctypes.c_uint64), ("func", ctypes.c_char_p), ("sendBuff", ctypes.c_void_p),
                    ("recvBuff", ctypes.c_void_p), ("count", ctypes.c_size_t), ("root", ctypes.c_int),
                    ("datatype", ctypes.c_char_p), ("nChannels", ctypes.c_uint8), ("nWarps", ctypes.c_uint8),
                    ("algo", ctypes.c_char_p), ("proto", ctypes.c_char_p), ("parentGroup", ctypes.c_void_p)]

    class P2p(ctypes.Structure):
        _fields_ = [("func", ctypes.c_char_p), ("buff", ctypes.c_void_p), ("datatype", ctypes.c_char_p),
                    ("count", ctypes.c_size_t), ("peer", ctypes.c_int), ("nChannels", ctypes.c_uint8),
                    ("parentGroup", ctypes.c_void_p)]

    class ProxyOp(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_int), ("channelId", ctypes.c_uint8), ("peer", ctypes.c_int),
                    ("nSteps", ctypes.c_int), ("chunkSize", ctypes.c_int), ("isSend", ctypes.c_int)]

    class KernelCh(ctypes.Structure):
        _fields_ = [("channelId", ctypes.c_uint8), ("pTimer", ctypes.c_uint64)]

    class Union(ctypes.Union):
        pass

    Union._fields_ = [("coll", Coll), ("p2p", P2p), ("proxyOp", ProxyOp), ("kernelCh", KernelCh)]

    class Descr(ctypes.Structure):
        pass

    Descr._fields_ = [("type", ctypes.c_uint64), ("parentObj", ctypes.c_void_p), ("rank", ctypes.c_int), ("u", Union)]

    class StateArgs(ctypes.Union):
        _fields_ = [("pTimer", ctypes.c_uint64), ("transSize", ctypes.c_size_t)]

    INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.POINTER(ctypes.c_int),
                            ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
    START = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr))
    STOP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
    STATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(StateArgs))
    FINALIZE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    class Table(ctypes.Structure):
        pass

    Table._fields_ = [("name", ctypes.c_char_p), ("init", INIT), ("startEvent", START), ("stopEvent", STOP),
                      ("recordEventState", STATE), ("finalize", FINALIZE)]

    GROUP, COLL, P2P, PROXY_OP, KERNEL_CH = 1, 2, 4, 8, 64
    PROXY_OP_IN_PROGRESS, KERNEL_CH_STOP = 19, 22

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.t = self.Table.in_dll(self.lib, "ncclProfiler_v5")
        self.lock = threading.Lock()  # NCCL's user and proxy threads both call in

    def init(self, comm_id, nnodes, nranks, rank):
        ctx, mask = ctypes.c_void_p(), ctypes.c_int(0)
        self.t.init(ctypes.byref(ctx), comm_id, ctypes.byref(mask), None, nnodes, nranks, rank, None)
        return ctx, mask.value

    def _start(self, ctx, mask, typ, parent, rank, fill):
        if not mask & typ:
            return None
        d = self.Descr()
        d.type, d.parentObj, d.rank = typ, parent, rank
        fill(d.u)
        h = ctypes.c_void_p()
        with self.lock:
            self.t.startEvent(ctx, ctypes.byref(h), ctypes.byref(d))
        return h.value

    def stop(self, h):
        if h:
            with self.lock:
                self.t.stopEvent(h)

    def state(self, h, st, timer=0):
        if h:
            a = self.StateArgs()
            a.pTimer = timer
            with self.lock:
                self.t.recordEventState(h, st, ctypes.byref(a))

    def issue(self, comm, op):
        """Enqueue: a Group (the plan) and the Coll/P2p task, both stopped at once."""
        ctx, mask = comm.prof
        g = self._start(ctx, mask, self.GROUP, None, comm.rank, lambda u: None)
        op.bytes_keep = [op.func.encode(), DTYPES[op.dtype][1].encode(), b"RING", b"SIMPLE"]
        if op.peer is None:
            def fill(u):
                c = u.coll
                c.seqNumber, c.func, c.count, c.root = op.k - 1, op.bytes_keep[0], op.count, op.root
                c.datatype, c.nChannels, c.algo, c.proto = op.bytes_keep[1], 2, op.bytes_keep[2], op.bytes_keep[3]
                c.parentGroup = g
            op.task = self._start(ctx, mask, self.COLL, None, comm.rank, fill)
        else:
            def fill(u):
                p = u.p2p
                p.func, p.datatype, p.count, p.peer, p.nChannels = op.bytes_keep[0], op.bytes_keep[1], op.count, op.peer_comm, 1
                p.parentGroup = g
            op.task = self._start(ctx, mask, self.P2P, None, comm.rank, fill)
        self.stop(op.task)
        self.stop(g)

    def arrive(self, comm, op, peers):
        """The kernel starts: its channels, and a send and a receive proxy op per peer."""
        ctx, mask = comm.prof
        now = time.time_ns()
        nch = 2 if op.peer is None else 1
        for ch in range(nch):
            def fill(u, ch=ch):
                u.kernelCh.channelId, u.kernelCh.pTimer = ch, now
            op.kch.append(self._start(ctx, mask, self.KERNEL_CH, op.task, comm.rank, fill))
        for peer, is_send in peers:
            def fill(u, peer=peer, is_send=is_send):
                o = u.proxyOp
                o.pid, o.channelId, o.peer, o.nSteps, o.chunkSize, o.isSend = os.getpid(), 0, peer, 4, 131072, is_send
            h = self._start(ctx, mask, self.PROXY_OP, op.task, comm.rank, fill)
            self.state(h, self.PROXY_OP_IN_PROGRESS)
            op.proxy.append(h)

    def complete(self, op):
        for h in op.proxy:
            self.stop(h)
        for h in op.kch:
            self.state(h, self.KERNEL_CH_STOP, time.time_ns())
            self.stop(h)

    def finalize(self, comm):
        with self.lock:
            self.t.finalize(comm.prof[0])


def bus_id(dev):
    """A bus id per device, as NCCL prints it (e.g. 18000)."""
    return f"{0x18 + 0x11 * dev:x}000"


_hog = {"t": 0.0, "f": 1.0}


def _nice():
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return 0


_NICE0 = _nice()  # the priority the process started with (a dry run may run niced as a whole)


def cpu_factor():
    """A starved CPU in a dry run: a calling thread reniced by n since the start makes the fake
    compute 1 + n/4 times longer (the matrix's cpu_starve lowers its rank's priority)."""
    return 1.0 + max(0, _nice() - _NICE0) / 4.0


def hog_factor():
    """How much slower this rank's GPU computes now: 1 + W*D while hog.py runs W workers of
    duty D on it (HOG_DIR/gpu<k>.state), else 1. Read at most every 50 ms."""
    d = os.environ.get("HOG_DIR")
    if not d:
        return 1.0
    now = time.time()
    if now - _hog["t"] < 0.05:
        return _hog["f"]
    _hog["t"] = now
    try:
        with open(os.path.join(d, f"gpu{nccl.device}.state")) as f:
            w, duty = f.read().split()[:2]
        _hog["f"] = 1.0 + max(0, int(w)) * max(0.0, float(duty))
    except (OSError, ValueError):
        _hog["f"] = 1.0
    return _hog["f"]


def _fr_size():
    for k in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        v = os.environ.get(k)
        if v:
            try:
                return int(v)
            except ValueError:
                return 0
    return 0


class FlightRecorder:
    """PyTorch's Flight Recorder as far as a dump shows it: per operation its process group,
    sequence ids, sizes, dtypes, state and times; per group its ranks and status."""
    VERSION = "2.10"
    DTYPE = {"float32": "Float", "int32": "Int", "int64": "Long", "uint8": "Byte"}
    NAMES = {"AllReduce": "all_reduce", "Broadcast": "broadcast", "Send": "send", "Recv": "recv"}

    def __init__(self, rank):
        self.rank = rank
        self.size = _fr_size()
        self.entries = collections.deque(maxlen=max(1, self.size))
        self.timing = os.environ.get("TORCH_NCCL_ENABLE_TIMING") == "1"
        self.pg_config, self.pg_status = {}, {}
        self.next_id = 0
        self.lock = threading.Lock()
        self.dumped = False

    @property
    def on(self):
        return self.size > 0

    def add_pg(self, comm):
        if not self.on:
            return
        with self.lock:
            self.pg_config[comm.pg_name] = {"name": comm.pg_name, "desc": comm.pg_desc, "ranks": str(list(comm.ranks))}
            self.pg_status[comm.pg_name] = {"last_enqueued_collective": -1, "last_started_collective": -1,
                                            "last_completed_collective": -1}

    def record(self, op):
        if not self.on:
            return
        c = op.comm
        name = "nccl:" + self.NAMES.get(op.func, op.func.lower())
        if op.peer is not None:
            me, peer = c.rank, op.peer_comm
            name += f" {me}->{peer}" if op.func == "Send" else f" {me}<-{peer}"
        shape = [[op.count]]
        e = {"record_id": 0, "pg_id": c.pg_id, "process_group": (c.pg_name, c.pg_desc),
             "collective_seq_id": c.seq, "p2p_seq_id": c.p2p_total, "op_id": c.pg_seq,
             "profiling_name": name, "time_created_ns": time.time_ns(),
             "input_sizes": shape, "input_dtypes": [self.DTYPE.get(op.dtype, op.dtype)],
             "output_sizes": shape, "output_dtypes": [self.DTYPE.get(op.dtype, op.dtype)],
             "state": "scheduled", "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
             "retired": False, "timeout_ms": int(c.timeout_s * 1000), "is_p2p": op.peer is not None,
             "frames": [{"name": self.NAMES.get(op.func, op.func.lower()), "filename": "e2e/gpu/job.py", "line": 0}],
             "thread_id": str(threading.get_ident()), "thread_name": "python"}
        with self.lock:
            e["record_id"] = self.next_id
            self.next_id += 1
            self.entries.append(e)
            if op.peer is None:
                self.pg_status[c.pg_name]["last_enqueued_collective"] = c.seq
        op.fr = e

    def started(self, op):
        e = getattr(op, "fr", None)
        if e is None or not self.timing:
            return
        with self.lock:
            e["state"] = "started"
            e["time_discovered_started_ns"] = time.time_ns()
            if op.peer is None:
                self.pg_status[op.comm.pg_name]["last_started_collective"] = e["collective_seq_id"]

    def completed(self, op):
        e = getattr(op, "fr", None)
        if e is None:
            return
        with self.lock:
            e["state"] = "completed"
            e["time_discovered_completed_ns"] = time.time_ns()
            e["retired"] = True
            if op.peer is None:
                self.pg_status[op.comm.pg_name]["last_completed_collective"] = e["collective_seq_id"]

    def snapshot(self, frames=True):
        with self.lock:
            entries = [dict(e) for e in self.entries]
            d = {"version": self.VERSION, "pg_config": {k: dict(v) for k, v in self.pg_config.items()},
                 "comm_lib_version": VERSION, "pg_status": {k: dict(v) for k, v in self.pg_status.items()},
                 "entries": entries}
        if not frames:
            for e in entries:
                e.pop("frames", None)
        return d

    def dump_json(self):
        d = self.snapshot(frames=False)
        for e in d["entries"]:
            e["process_group"] = list(e["process_group"])
        return json.dumps(d)

    def dump_file(self, why):
        """The pickle PyTorch writes on a timeout: TORCH_FR_DUMP_TEMP_FILE<rank>."""
        if not self.on or self.dumped or os.environ.get("TORCH_NCCL_DUMP_ON_TIMEOUT") != "1":
            return None
        self.dumped = True
        prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or "/tmp/nccl_trace_rank_"
        path = f"{prefix}{self.rank}"
        t = datetime.datetime.now()
        print(f"[rank{self.rank}]:[E{t:%m%d %H:%M:%S}.{t.microsecond:06d}000 ProcessGroupNCCL.cpp:1628] [PG ID 0 PG GUID 0(default_pg) "
              f"Rank {self.rank}] ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1, only active collectives: 0 ({why})",
              file=sys.stderr, flush=True)
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path + ".stubtmp", "wb") as f:
                pickle.dump(self.snapshot(), f, protocol=2)
            os.replace(path + ".stubtmp", path)
        except OSError as e:
            print(f"stub Flight Recorder: cannot write {path}: {e}", file=sys.stderr, flush=True)
        return path


class Comm:
    def __init__(self, key, ranks, me, comm_id, pg_desc, pg_id, timeout_s):
        self.key, self.ranks, self.me = key, list(ranks), me
        self.rank = self.ranks.index(me)
        self.nranks = len(self.ranks)
        self.comm_id = comm_id
        self.ptr = "0x%x" % random.getrandbits(40)
        self.seq = 0            # collectives issued
        self.pg_seq = 0         # PyTorch's SeqNum on this process group (p2p included)
        self.p2p_seq = collections.Counter()  # per peer pair
        self.p2p_total = 0      # PyTorch's p2p_seq_id on this process group
        self.pg_desc, self.pg_id, self.timeout_s = pg_desc, pg_id, timeout_s
        self.pg_name = str(pg_id)
        self.prof = None


class Op:
    def __init__(self, comm, key, k, func, count, dtype, root=0, peer=None, tensor=None, red=None):
        self.comm, self.key, self.k = comm, key, k
        self.tensor, self.red = tensor, red  # a tensor with a value (torch.tensor) is reduced for real
        self.func, self.count, self.dtype, self.root = func, count, dtype, root
        self.peer = peer  # global rank for Send/Recv
        self.peer_comm = comm.ranks.index(peer) if peer is not None else -1
        self.members = [comm.me, peer] if peer is not None else comm.ranks
        self.issue_t = time.time()
        self.pg_seq = comm.pg_seq
        self.arrived = False
        self.task, self.kch, self.proxy = None, [], []
        self.fr = None


class FakeNCCL:
    def __init__(self):
        self.pid = os.getpid()
        self.dir = os.environ.get("STUB_NCCL_DIR")
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.log = _Log() if self.dir else None
        self.lock = threading.Lock()
        self.queues = collections.OrderedDict()  # stream -> deque of Op
        self.serial = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
        self.arrived = {}   # op key -> last sequence position this rank arrived at
        self.values = {}    # op key -> {position: value} of the last all-reduces that carry a value
        self.comms = []
        self.splits = 0
        self.world_comm = None
        self.warned_dead = set()
        self.prof = None
        self.thread = None
        self.device = 0
        self.fr = FlightRecorder(self.rank)
        # STUB_NET=1: the same with the one-GPU layout's NET/Socket (NCCL_HOSTID per rank).
        self.net = (os.environ.get("NCCL_P2P_DISABLE") == "1" and os.environ.get("NCCL_SHM_DISABLE") == "1") or \
            os.environ.get("STUB_NET") == "1"
        self.tx = None
        self.net_scale = max(1, int(os.environ.get("STUB_NET_SCALE", "64")))
        self.dump_signal = os.path.join(self.dir, "fr_dump_signal") if self.dir else None
        plugin = os.environ.get("NCCL_PROFILER_PLUGIN", "")
        if self.dir and plugin and plugin != "none":
            try:
                self.prof = _Profiler(plugin)
            except (OSError, ValueError) as e:
                self.log.info_line(f"PROFILER/Plugin: Could not find: {plugin} ({e})")

    @property
    def active(self):
        return self.dir is not None

    def refresh(self):
        """A process forked after torch was imported (the fault matrix's zygote.py) reads its
        own environment at init_process_group, as NCCL does at its first init; the device set
        before it is kept."""
        if self.pid != os.getpid() or self.dir != os.environ.get("STUB_NCCL_DIR"):
            dev = self.device
            self.__init__()
            self.set_device(dev)

    def set_device(self, dev):
        self.device = int(dev)
        _Log.dev = self.device

    # ---- communicators ------------------------------------------------------------------
    def _init_lines(self, comm, what):
        self.log.info_line(f"{what} - Init START")
        nodes, local = (comm.nranks, 1) if os.environ.get("ONE_GPU") == "1" else (1, comm.nranks)
        self.log.info_line(f"comm {comm.ptr} rank {comm.rank} nRanks {comm.nranks} nNodes {nodes} localRanks {local} localRank {comm.rank if local > 1 else 0} MNNVL 0")
        if comm.nranks > 1:
            via = "NET/Socket/0" if self.net or os.environ.get("ONE_GPU") == "1" else "P2P/CUMEM/read"
            nxt, prv = (comm.rank + 1) % comm.nranks, (comm.rank - 1) % comm.nranks
            dev = lambda r: comm.ranks[r] if os.environ.get("ONE_GPU") != "1" else 0  # noqa: E731
            self.log.info_line(f"Channel 00/0 : {prv}[{dev(prv)}] -> {comm.rank}[{dev(comm.rank)}] [receive] via {via}")
            self.log.info_line(f"Channel 00/0 : {comm.rank}[{dev(comm.rank)}] -> {nxt}[{dev(nxt)}] [send] via {via}")
        if self.prof:
            comm.prof = self.prof.init(comm.comm_id, comm.nranks, comm.nranks, comm.rank)
            self.log.info_line("PROFILER/Plugin: Loaded ncclwatch (v5)")
        self.log.info_line(f"{what} - Init COMPLETE")

    def init_world(self, timeout_s):
        if not self.active:
            return
        self.log.info_line(f"NCCL version {VERSION}+cuda13.0")
        self.log.info_line("NET/Socket : Using [0]lo:127.0.0.1<0>")
        self.log.info_line("Using network Socket")
        if self.net:
            self._net_start()
        cid = _hash64(self.dir, "world")
        c = Comm("world", range(self.world), self.rank, cid, "default_pg", 0, timeout_s)
        self._init_lines(c, f"ncclCommInitRankConfig comm {c.ptr} rank {c.rank} nranks {c.nranks} cudaDev {self.device} nvmlDev {self.device} busId {bus_id(self.device)} commId 0x{cid:016x}")
        self.world_comm = c
        self.comms.append(c)
        self.fr.add_pg(c)
        self._publish()
        self.thread = threading.Thread(target=self._progress, name="fakenccl-progress", daemon=True)
        self.thread.start()

    def split(self, ranks, timeout_s):
        """ncclCommSplit of the world: every rank calls it; non-members get no communicator."""
        if not self.active:
            return None
        self.splits += 1
        ranks = sorted(ranks)
        if self.rank not in ranks:
            return None
        color = _hash64(*ranks) & 0x7FFFFFFF
        key = f"split{self.splits}:" + "-".join(map(str, ranks))
        cid = _hash64(self.dir, key)
        c = Comm(key, ranks, self.rank, cid, "undefined", self.splits, timeout_s)
        w = self.world_comm
        self._init_lines(c, f"ncclCommSplit comm {c.ptr} rank {c.rank} nranks {c.nranks} cudaDev {self.device} nvmlDev {self.device} busId {bus_id(self.device)} parent {w.ptr} splitCount {self.splits} color {color} key {c.rank}")
        self.comms.append(c)
        self.fr.add_pg(c)
        return c

    def destroy_comm(self, c):
        """destroy_process_group(group): this rank's communicator of one group goes."""
        if not self.active or c is None or c not in self.comms:
            return
        with self.lock:
            for q in self.queues.values():
                for op in [o for o in q if o.comm is c]:
                    q.remove(op)
        if self.prof and c.prof:
            self.prof.finalize(c)
        self.log.info_line(f"comm {c.ptr} rank {c.rank} nranks {c.nranks} cudaDev {self.device} busId {bus_id(self.device)} - Destroy COMPLETE")
        self.comms.remove(c)

    # ---- the socket transport ---------------------------------------------------------------
    def _net_start(self):
        """A loopback TCP connection to a sink thread: what the rank 'sends' goes through it."""
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        self.tx = socket.create_connection(ls.getsockname())
        rx, _ = ls.accept()
        ls.close()
        self.txbuf = memoryview(bytearray(1 << 20))

        def drain():
            while rx.recv(1 << 20):
                pass
        threading.Thread(target=drain, name="fakenccl-net-sink", daemon=True).start()

    def _transmit(self, op):
        n = max(1024, op.count * 4 // self.net_scale)
        while n > 0:
            k = min(n, len(self.txbuf))
            self.tx.sendall(self.txbuf[:k])
            n -= k

    # ---- operations -----------------------------------------------------------------------
    def collective(self, comm, func, count, dtype, root=0, tensor=None, red=None):
        if not self.active or comm is None:
            return
        comm.seq += 1
        comm.pg_seq += 1
        op = Op(comm, comm.key, comm.seq, func, count, dtype, root=root, tensor=tensor, red=red)
        self.fr.record(op)
        self._issue(op, f"{func}: opCount 0 sendbuff 0x7f0000000000 recvbuff 0x7f0000000000 count {count} "
                        f"datatype {DTYPES[dtype][0]} op 0 root {root} comm {comm.ptr} [nranks={comm.nranks}] stream (nil)")

    def p2p(self, comm, func, count, dtype, peer):
        if not self.active or comm is None:
            return
        lo, hi = sorted((comm.me, peer))
        pair = f"p2p:{comm.key}:{lo}-{hi}"
        comm.p2p_seq[pair] += 1
        comm.pg_seq += 1
        comm.p2p_total += 1
        op = Op(comm, pair, comm.p2p_seq[pair], func, count, dtype, peer=peer)
        self.fr.record(op)
        self._issue(op, f"{func}: opCount 0 sendbuff (nil) recvbuff 0x7f0000000000 count {count} datatype {DTYPES[dtype][0]} "
                        f"op 0 root {comm.ranks.index(peer)} comm {comm.ptr} [nranks={comm.nranks}] stream 0x7f00000000")

    def _issue(self, op, line):
        self.log.coll_line(line)
        if self.prof and op.comm.prof:
            self.prof.issue(op.comm, op)
        stream = "all" if self.serial else op.comm.key
        with self.lock:
            self.queues.setdefault(stream, collections.deque()).append(op)

    def synchronize(self):
        """torch.cuda.synchronize: until every queue is empty (the watchdog may abort first)."""
        if not self.active:
            return
        while True:
            with self.lock:
                if not any(self.queues.values()):
                    return
            time.sleep(POLL_S)

    def destroy(self):
        if not self.active:
            return
        self.synchronize()
        for c in reversed(self.comms):
            if self.prof and c.prof:
                self.prof.finalize(c)
            self.log.info_line(f"comm {c.ptr} rank {c.rank} nranks {c.nranks} cudaDev {self.device} busId {bus_id(self.device)} - Destroy COMPLETE")
        self.comms = []

    # ---- progress -------------------------------------------------------------------------
    def _publish(self):
        path = os.path.join(self.dir, f"rank{self.rank}.json")
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "rank": self.rank, "arrived": self.arrived, "values": self.values}, f)
        os.replace(tmp, path)

    def _peers(self):
        out = {}
        for r in range(self.world):
            try:
                with open(os.path.join(self.dir, f"rank{r}.json")) as f:
                    out[r] = json.load(f)
            except (OSError, ValueError):
                pass
        return out

    def _proxy_peers(self, op):
        if op.peer is not None:
            return [(op.peer_comm, 1 if op.func == "Send" else 0)]
        n, r = op.comm.nranks, op.comm.rank
        return [((r + 1) % n, 1), ((r - 1) % n, 0)] if n > 1 else []

    def _progress(self):
        next_signal_check = 0.0
        while True:
            changed = False
            with self.lock:
                heads = [q[0] for q in self.queues.values() if q and not q[0].arrived]
            if self.net:  # the bytes go out first (the rate-limit shim may hold them back)
                for op in heads:
                    self._transmit(op)
            with self.lock:
                for q in self.queues.values():
                    if q and not q[0].arrived and q[0] in heads:
                        self._arrive(q[0])
                        changed = True
            if changed:
                self._publish()
            if self.fr.on and not self.fr.dumped and time.time() >= next_signal_check:
                next_signal_check = time.time() + 0.2
                if os.path.exists(self.dump_signal):
                    t = datetime.datetime.now()
                    print(f"[rank{self.rank}]:[E{t:%m%d %H:%M:%S}.{t.microsecond:06d}000 ProcessGroupNCCL.cpp:1849] [PG ID 0 PG GUID 0(default_pg) "
                          f"Rank {self.rank}] Observed flight recorder dump signal from another rank via TCPStore.", file=sys.stderr, flush=True)
                    self.fr.dump_file("signal from another rank")
            peers = self._peers()
            changed = False
            with self.lock:
                for q in self.queues.values():
                    while q and q[0].arrived and all(peers.get(m, {}).get("arrived", {}).get(q[0].key, 0) >= q[0].k
                                                     for m in q[0].members if m != self.rank):
                        op = q.popleft()
                        self._reduce(op, peers)
                        if self.prof and op.comm.prof:
                            self.prof.complete(op)
                        self.fr.completed(op)
                        if q and not self.net:
                            self._arrive(q[0])
                            changed = True
                heads = [q[0] for q in self.queues.values() if q]
            if changed:
                self._publish()
            self._watch(heads, peers)
            time.sleep(POLL_S)

    def _reduce(self, op, peers):
        """An all-reduce of a value (job.py's calibration: MAX of the iteration counts)."""
        if op.tensor is None or not hasattr(op.tensor, "value"):
            return
        # Peers keep their last few positions: one may already be at the next one.
        vals = [op.tensor.value] + [peers.get(m, {}).get("values", {}).get(op.key, {}).get(str(op.k))
                                    for m in op.members if m != self.rank]
        vals = [v for v in vals if v is not None]
        op.tensor.value = max(vals) if op.red == "max" else sum(vals)

    def _arrive(self, op):
        op.arrived = True
        self.arrived[op.key] = op.k
        self.fr.started(op)
        if op.tensor is not None and hasattr(op.tensor, "value"):
            v = self.values.setdefault(op.key, {})
            v[str(op.k)] = op.tensor.value
            for old in sorted(v, key=int)[:-8]:
                del v[old]
        if self.prof and op.comm.prof:
            self.prof.arrive(op.comm, op, self._proxy_peers(op))

    def _watch(self, heads, peers):
        now = time.time()
        for op in heads:
            for m in op.members:
                p = peers.get(m)
                if m == self.rank or not p or m in self.warned_dead or _alive(p.get("pid")):
                    continue
                if p.get("arrived", {}).get(op.key, 0) >= op.k:
                    continue  # it got there before it exited (a clean end): nothing is lost
                # NET/Socket notices a dead peer when its connection closes (on lo: 127.0.0.1).
                self.warned_dead.add(m)
                self.log.warn_line("misc/socket.cc:901", f"socketProgress: Connection closed by remote peer 127.0.0.1<{40000 + m}>")
        if heads:
            op = min(heads, key=lambda o: o.issue_t)
            if now - op.issue_t > op.comm.timeout_s:
                self._timeout(op, now)

    def _timeout(self, op, now):
        ms = int(op.comm.timeout_s * 1000)
        t = datetime.datetime.now()
        where = f"Rank {op.comm.rank}" if op.comm.pg_id == 0 else f"PG ID {op.comm.pg_id} PG GUID {op.comm.pg_id}({op.comm.pg_desc}) Rank {op.comm.rank}"
        print(f"[rank{self.rank}]:[E{t:%m%d %H:%M:%S}.{t.microsecond:06d}000 ProcessGroupNCCL.cpp:689] [{where}] "
              f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={op.pg_seq}, OpType={OPTYPES.get(op.func, op.func.upper())}, "
              f"NumelIn={op.count}, NumelOut={op.count}, Timeout(ms)={ms}) ran for {int((now - op.issue_t) * 1000)} "
              "milliseconds before timing out.", file=sys.stderr, flush=True)
        if self.fr.dump_file("collective timeout on this rank"):
            with open(self.dump_signal, "w") as f:  # PyTorch: a key in the TCPStore
                f.write(str(self.rank))
            time.sleep(1.0)  # the others dump meanwhile (PyTorch waits for its own dump)
        # TORCH_NCCL_ASYNC_ERROR_HANDLING: PyTorch takes the process down.
        os.kill(os.getpid(), signal.SIGABRT)


def _alive(pid):
    if not isinstance(pid, int):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for its peers
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


nccl = FakeNCCL()
