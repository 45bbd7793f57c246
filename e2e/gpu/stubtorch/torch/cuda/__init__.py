from . import nccl  # noqa: F401
from .._fakenccl import nccl as _fake


def __getattr__(name):
    if name == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
        import torch
        return torch.OutOfMemoryError
    raise AttributeError(name)


class _Props:
    name = "stub GPU"
    uuid = "stub"

    def __init__(self, i):
        self.pci_bus_id = i


def set_device(i):
    _fake.set_device(getattr(i, "index", i) or 0)


def get_device_properties(i):
    return _Props(i)


def synchronize():
    _fake.synchronize()


def _sleep(cycles):
    """The real one spins the GPU; here the rank's host waits as long (at ~2 GHz)."""
    import time
    time.sleep(cycles / 2e9)
