"""Stub collectives: they check their arguments lightly, log one line each to stderr and, in a
dry run of several ranks (STUB_NCCL_DIR set by stubrun.py), go through the fake NCCL
(torch._fakenccl): NCCL's log lines, the profiler plugin, completion only when every member
of the communicator got there."""
import contextlib
import os
import sys

from .._fakenccl import nccl


class ReduceOp:
    SUM, MAX = "sum", "max"


class GroupMember:
    NON_GROUP_MEMBER = object()


class _Group:
    def __init__(self, name, timeout, ranks, comm):
        self.name, self.timeout, self.ranks, self.comm = name, timeout, list(ranks), comm


_world = None
_groups = []


def _rank():
    return int(os.environ.get("RANK", "0"))


def _group(group):
    if group is GroupMember.NON_GROUP_MEMBER:
        raise RuntimeError("collective on a group this rank is not a member of")
    return group or _world


def _log(name, t, group=None, **kw):
    if os.environ.get("STUB_QUIET") == "1":  # the fault matrix's dry run: its stdout is the job's
        return
    g = group.name if group else "world"
    print(f"STUB {name} n={t.n} {t.dtype} group={g} {kw}", file=sys.stderr, flush=True)


class TCPStore:
    """The store's server side only (the fault matrix's agent store): it listens."""

    def __init__(self, host_name, port, world_size=None, is_master=False, timeout=None, wait_for_workers=True,
                 multi_tenant=False, use_libuv=True):
        self.host, self.port = host_name, port
        self.sock = None
        if is_master:
            import socket
            self.sock = socket.socket()
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host_name, port))
            self.sock.listen(64)
            self.port = self.sock.getsockname()[1]


def _excepthook():
    """As init_process_group does since PyTorch 2.2: an uncaught exception's lines get the
    rank's "[rankN]: " prefix."""
    import io
    old_hook = sys.excepthook
    prefix = f"[rank{_rank()}]"

    def hook(*args):
        old_stderr = sys.stderr
        sys.stderr = buf = io.StringIO()
        try:
            old_hook(*args)
        finally:
            sys.stderr = old_stderr
        msg = "\n".join(f"{prefix}: {s}" if s != "" else "" for s in buf.getvalue().split("\n"))
        sys.stderr.write(msg)
        sys.stderr.flush()

    sys.excepthook = hook


def init_process_group(backend, timeout=None, device_id=None):
    global _world
    assert backend == "nccl" and timeout is not None and device_id is not None
    nccl.refresh()
    nccl.init_world(timeout.total_seconds())
    _excepthook()
    _world = _Group("world", timeout, range(int(os.environ.get("WORLD_SIZE", "1"))), nccl.world_comm)


def new_group(ranks, timeout=None):
    assert timeout is not None, "new_group without timeout"
    comm = nccl.split(ranks, timeout.total_seconds())
    g = _Group(f"g{len(_groups) + 1}", timeout, ranks, comm)
    _groups.append(g)
    return g if _rank() in ranks else GroupMember.NON_GROUP_MEMBER


def all_reduce(t, op=ReduceOp.SUM, group=None):
    g = _group(group)
    _log("AllReduce", t, group, op=op)
    nccl.collective(g.comm, "AllReduce", t.n, t.dtype, tensor=t, red=op)


def broadcast(t, src, group=None):
    g = _group(group)
    assert src in g.ranks, f"broadcast from {src}, not in {g.ranks}"
    _log("Broadcast", t, group, src=src)
    nccl.collective(g.comm, "Broadcast", t.n, t.dtype, root=g.ranks.index(src))


def send(t, dst, group=None):
    _log("Send", t, group, peer=dst)
    nccl.p2p(_group(group).comm, "Send", t.n, t.dtype, dst)


def recv(t, src, group=None):
    _log("Recv", t, group, peer=src)
    nccl.p2p(_group(group).comm, "Recv", t.n, t.dtype, src)


@contextlib.contextmanager
def _coalescing_manager(group=None, device=None, async_ops=False):
    yield


def destroy_process_group(group=None):
    if group is None or group is _world:
        nccl.destroy()
    else:
        nccl.destroy_comm(_group(group).comm)
