"""torch's ``torch.backends`` entry point for flagos, kept outside torch_fl so it can decline.

torch calls every ``torch.backends`` entry point at ``import torch``, and this one
imports torch_fl, which registers the PrivateUse1 device. PyTorch (2.8 through at
least 2.13) then takes PrivateUse1 for the process's one accelerator
(``at::getAccelerator()`` prefers it), and the autograd engine fails every backward
over native CUDA tensors with "opt_ready_stream && opt_parent_stream INTERNAL ASSERT
FAILED" (pytorch/pytorch#161129). So a process that trains on ``cuda`` must not load
torch_fl: ``FLAGOS_AUTOLOAD=0`` keeps it out (the pytest plugin sets it for a run on
any device but flagos) and leaves other backends' autoload alone;
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns off every backend's.
"""

import os

AUTOLOAD_ENV = "FLAGOS_AUTOLOAD"


def enabled(env=None) -> bool:
    """Whether this entry point loads torch_fl (torch itself skips every entry point
    under TORCH_DEVICE_BACKEND_AUTOLOAD=0, before asking)."""
    env = os.environ if env is None else env
    return env.get(AUTOLOAD_ENV, "1") != "0"


def load() -> None:
    if enabled():
        import torch_fl  # noqa: F401  (registers the device)
