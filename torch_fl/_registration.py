"""Makes PrivateUse1 answer to the name ``flagos`` everywhere in torch."""

import torch

from . import _C

DEVICE_TYPE = "flagos"


def register():
    from . import flagos

    if torch._C._get_privateuse1_backend_name() != DEVICE_TYPE:
        torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    if getattr(torch, DEVICE_TYPE, None) is not flagos:
        torch._register_device_module(DEVICE_TYPE, flagos)
    # Tensor.flagos(), Tensor.is_flagos, Module.flagos(), storage methods.
    if not hasattr(torch.Tensor, "is_" + DEVICE_TYPE):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    # Choose the accelerator now, so a bad FLAGOS_ACCELERATOR fails the import
    # with the list of choices instead of surfacing at the first tensor.
    _C._accelerator_name()
    # Structured ops straight to the compute device's kernels (csrc/aten/ops.cpp).
    _C._route_to_compute_kernels()
    # LSTM/GRU cells where the compute device lacks aten's fused ones (csrc/aten/rnn.cpp).
    _C._register_rnn_cells()
    return flagos
