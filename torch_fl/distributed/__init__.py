"""torch.distributed on flagos: a c10d backend named ``flagos`` over existing engines.

flagos has no collective library of its own. Its backend runs each collective on the compute
device's engine over zero-copy views of the flagos tensors: Gloo on the host accelerator (flagos
memory *is* host RAM), NCCL on the cuda accelerator (flagos memory is CUDA memory, flagos streams
are CUDA streams). CPU tensors go to Gloo on both. So any of these works::

    dist.init_process_group()                         # flagos is the accelerator -> "flagos"
    dist.init_process_group("flagos")                 # flagos and CPU tensors
    dist.init_process_group("cpu:gloo,flagos:flagos")

and DistributedDataParallel trains flagos modules, eager or compiled. Registered at import of
torch_fl (only a process that loaded flagos has the name).
"""

from datetime import timedelta

from .. import _C
from ..compile import _inductor_adapter

BACKEND = "flagos"


def _engines(store, rank: int, size: int, timeout: timedelta):
    """(engine for flagos tensors, engine for CPU tensors), by the compute device."""
    import torch.distributed as dist

    gloo = dist.ProcessGroupGloo(store, rank, size, timeout) if dist.is_gloo_available() else None
    compute = _C._compute_device()
    if compute == "cpu":
        if gloo is None:
            raise RuntimeError("flagos: torch.distributed on the host accelerator needs Gloo; this torch has none.")
        return gloo, gloo
    if compute == "cuda":
        if not dist.is_nccl_available():
            raise RuntimeError("flagos: torch.distributed on the cuda accelerator needs NCCL; this torch has none.")
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, options), gloo
    raise RuntimeError(f"flagos: no collective engine for the compute device {compute!r}.")


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    device_engine, cpu_engine = _engines(store, rank, size, timeout)
    return _C._distributed_backend(device_engine, cpu_engine, rank, size)


def register() -> bool:
    """Registers the backend with torch.distributed once; False where torch has no c10d."""
    import torch.distributed as dist

    if not dist.is_available() or not hasattr(_C, "_distributed_backend"):
        return False
    if BACKEND not in dist.Backend.backend_list:
        # The device type is PrivateUse1's name ("flagos"); CPU tensors are served too (Gloo).
        dist.Backend.register_backend(
            BACKEND, _create_backend, devices=["cpu", _inductor_adapter.privateuse1_backend_name()]
        )
    return True


__all__ = ["BACKEND", "register"]
