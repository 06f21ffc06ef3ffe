"""torch.fdev: the device module, much smaller than torch.cuda (no streams, events,
synchronize or memory statistics: those live only in torch's generic APIs)."""

import contextlib

import torch

from . import _C


def is_available():
    return True


def device_count():
    return _C.device_count()


def current_device():
    return _C.current_device()


def set_device(device):
    _C.set_device(torch.device(device).index if not isinstance(device, int) else device)


def is_initialized():
    return True


def _is_in_bad_fork():
    return False


def manual_seed_all(seed):
    # the CPU fallback draws from torch's CPU generator, which torch.manual_seed seeds already
    pass


@contextlib.contextmanager
def device(index):
    previous = current_device()
    set_device(index)
    try:
        yield
    finally:
        set_device(previous)
