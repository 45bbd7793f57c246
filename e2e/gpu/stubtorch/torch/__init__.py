"""A stub of the few torch calls job.py makes, so jobcheck.sh can run job.py's control flow
(scenarios, fault injection, marker lines) on a machine without torch or GPUs. No math."""
import math
import os as _os
import time as _time

from . import _C, cuda, distributed  # noqa: F401
from ._fakenccl import cpu_factor as _cpu_factor
from ._fakenccl import hog_factor as _hog_factor

__version__ = "stub"
uint8, int32, int64, float32, bfloat16 = "uint8", "int32", "int64", "float32", "bfloat16"
calls = []  # (op, args) log, read by distributed


class device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index


class Tensor:
    def __init__(self, n, dtype=float32):
        self.n, self.dtype = n, dtype

    def numel(self):
        return self.n

    def __truediv__(self, other):
        return self

    def __matmul__(self, other):
        # "compute" takes a little time, so calibration has something to time; longer while
        # hog.py computes on this rank's GPU (a dry run's slow GPU)
        _time.sleep(0.0005 * _hog_factor() * _cpu_factor())
        return self

    def __getitem__(self, s):
        start, stop, _ = s.indices(self.n)
        return Tensor(stop - start, self.dtype)

    def view(self, dtype):
        return Tensor(self.n, dtype)

    def fill_(self, v):
        self.value = v
        return self

    def clone(self):
        return Tensor(self.n, self.dtype)

    def __add__(self, other):
        return Tensor(self.n, self.dtype)

    def cpu(self):
        return self

    def tolist(self):
        return [0.0] * self.n

    def item(self):
        cuda.synchronize()  # as torch: the value is there once the stream got to it
        return self.value

    def __repr__(self):
        return f"Tensor(n={self.n}, {self.dtype})"


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class)."""


_GIB = 1 << 30
_SIZES = {uint8: 1, int32: 4, int64: 8, float32: 4, bfloat16: 2}
_mem = {"used": 0}  # bytes this process holds on its stub GPU (STUB_GPU_GIB of it, default 80)


def empty(*shape, dtype=float32, device=None):
    """Allocates on the stub GPU: too much raises PyTorch's CUDA out-of-memory error."""
    n = _numel(shape) * _SIZES.get(dtype, 4)
    total = float(_os.environ.get("STUB_GPU_GIB", "80")) * _GIB
    free = total - _mem["used"] - 0.6 * _GIB  # the context and NCCL's buffers
    if n > free:
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {n / _GIB:.2f} GiB. GPU 0 has a total capacity of "
            f"{total / _GIB:.2f} GiB of which {max(0, free) / _GIB:.2f} GiB is free. Including non-PyTorch memory, "
            f"this process has {(_mem['used'] + 0.6 * _GIB) / _GIB:.2f} GiB memory in use. Of the allocated memory "
            f"{_mem['used'] / _GIB:.2f} GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. "
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "to avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    _mem["used"] += n
    return Tensor(_numel(shape), dtype)


def _numel(shape):
    return math.prod(shape) if shape else 1


class Generator:
    def __init__(self, device=None):
        pass

    def manual_seed(self, s):
        return self


def equal(a, b):
    return a.n == b.n and a.dtype == b.dtype


def randn(*shape, device=None, dtype=float32, generator=None):
    return Tensor(_numel(shape), dtype)


def zeros(*shape, device=None, dtype=float32):
    return Tensor(_numel(shape), dtype)


def ones(*shape, device=None, dtype=float32):
    return Tensor(_numel(shape), dtype)


def tensor(values, device=None, dtype=float32):
    t = Tensor(len(values), dtype)
    t.value = values[0]
    return t


def tanh(t):
    return t


def manual_seed(s):
    pass
