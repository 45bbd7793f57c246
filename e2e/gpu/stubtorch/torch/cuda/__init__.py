from . import nccl  # noqa: F401
from .._fakenccl import nccl as _fake


class _Props:
    name = "stub GPU"
    pci_bus_id = 0
    uuid = "stub"


def set_device(i):
    pass


def get_device_properties(i):
    return _Props()


def synchronize():
    _fake.synchronize()


def _sleep(cycles):
    """The real one spins the GPU; here the rank's host waits as long (at ~2 GHz)."""
    import time
    time.sleep(cycles / 2e9)
