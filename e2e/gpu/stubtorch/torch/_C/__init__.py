"""Stub of torch._C: only what job.py touches (the Flight Recorder's JSON dump)."""
from . import _distributed_c10d  # noqa: F401
