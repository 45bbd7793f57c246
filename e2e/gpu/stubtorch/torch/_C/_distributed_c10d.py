"""Stub of torch._C._distributed_c10d: the Flight Recorder's JSON dump of this rank."""
from .._fakenccl import nccl


def _dump_nccl_trace_json(includeCollectives=None, onlyActive=None):
    return nccl.fr.dump_json()
