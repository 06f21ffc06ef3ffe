"""torch_fl: the flagos device runtime for PyTorch.

Importing this package registers the PrivateUse1 device ``flagos``: tensors on
``"flagos:0"``, the ``torch.flagos`` namespace (this package's ``flagos``
module), streams, events, the caching allocator and per-device RNG.

PrivateUse1 is one slot per process, so importing this package is what takes it;
if another backend holds it already, the import is a one-line ImportError that says
so (_registration.claim_privateuse1), never an abort in c10. torch's
``torch.backends`` entry point (``flagos_autoload``) only arms flagos: the first
use of ``torch.flagos`` or ``backend="flagos"`` imports this package. Once loaded,
flagos is the process's device, and the processes it starts (inductor's compile
workers) load it at their own ``import torch`` (``FLAGOS_AUTOLOAD=1``).
"""

import torch  # noqa: F401  (torch first: _C links against it)

from ._registration import claim_privateuse1 as _claim

_claim()  # before _C: loading it next to another PrivateUse1 backend would abort the process

from . import _C  # noqa: E402,F401  (registers the device's kernels, guard, hooks, allocator)
from ._registration import register as _register  # noqa: E402

flagos = _register()

# On the cuda accelerator, pin_memory=True factories take CUDA's pinned allocator (aten prefers it)
# without initialising flagos in ATen's context, whose is_pinned() answers False until flagos is
# initialised there: initialise now (free: importing torch.flagos chose the accelerator already).
if flagos.accelerator_name() == "cuda":
    flagos._lazy_init()

from .compile import install as _install_compile  # noqa: E402

_install_compile()

from .distributed import register as _register_distributed  # noqa: E402

_register_distributed()

__all__ = ["flagos"]
