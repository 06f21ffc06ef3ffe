"""Makes PrivateUse1 answer to the name ``flagos`` everywhere in torch."""

import os

import torch

# flagos_autoload's leaf modules: its package module loads torch_fl, so taking names from it would tie a circle.
from flagos_autoload.device_type import DEVICE_TYPE
from flagos_autoload.placeholder import is_placeholder
from flagos_autoload.setting import AUTOLOAD_ENV, OFF, mode

from .compile import _inductor_adapter as adapter  # cheap: it imports inductor only when asked


class PrivateUse1Taken(ImportError):
    """Another PrivateUse1 backend owns this process; flagos cannot load next to it."""


def claim_privateuse1() -> None:
    """Raise PrivateUse1Taken (one line, what to do) if another backend holds PrivateUse1.

    Two signs, both before torch_fl._C loads: PrivateUse1 renamed to another name, or a
    PrivateUse1 fallback registered by an extension that has not renamed it (yet).
    """
    name = adapter.privateuse1_backend_name()
    if name in ("privateuseone", DEVICE_TYPE) and not _foreign_fallback(name):
        return
    owner = f"the {name!r} device" if name != "privateuseone" else "another backend's extension"
    raise PrivateUse1Taken(
        f"flagos: PrivateUse1 is already {owner} in this process (one PrivateUse1 backend per process): "
        f"run flagos in a process of its own, and start this one with {AUTOLOAD_ENV}=0 "
        "so that nothing in it loads flagos"
    )


def _foreign_fallback(name: str) -> bool:
    """A PrivateUse1 fallback registered while torch_fl._C is not loaded is someone else's."""
    if name == DEVICE_TYPE:
        return False
    return adapter.has_privateuse1_fallback()


def register():
    from . import _C, flagos

    if adapter.privateuse1_backend_name() != DEVICE_TYPE:
        torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    current = getattr(torch, DEVICE_TYPE, None)
    if current is not flagos:
        if is_placeholder(current):
            delattr(torch, DEVICE_TYPE)  # the armed placeholder steps aside for the real module
        torch._register_device_module(DEVICE_TYPE, flagos)
    # Tensor.flagos(), Tensor.is_flagos, Module.flagos(), storage methods.
    if not hasattr(torch.Tensor, "is_" + DEVICE_TYPE):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    # Choose the accelerator now, so a bad FLAGOS_ACCELERATOR fails the import
    # with the list of choices instead of surfacing at the first tensor.
    _C._accelerator_name()
    # Structured ops straight to the compute device's kernels (csrc/aten/registration.cpp).
    _C._route_to_compute_kernels()
    # LSTM/GRU cells where the compute device lacks aten's fused ones (csrc/aten/rnn.cpp).
    _C._register_rnn_cells()
    # flagos is this process's device now: the processes it starts (inductor's compile
    # workers above all) must see it after a bare `import torch`.
    if mode() != OFF:
        os.environ[AUTOLOAD_ENV] = "1"
    return flagos
