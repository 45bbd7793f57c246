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
    g = group.name if group else "world"
    print(f"STUB {name} n={t.n} {t.dtype} group={g} {kw}", file=sys.stderr, flush=True)


def init_process_group(backend, timeout=None, device_id=None):
    global _world
    assert backend == "nccl" and timeout is not None and device_id is not None
    nccl.init_world(timeout.total_seconds())
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
