"""torch_fl: the flagos device runtime for PyTorch.

Importing this package registers the PrivateUse1 device ``flagos``: tensors on
``"flagos:0"``, the ``torch.flagos`` namespace (this package's ``flagos``
module), streams, events, the caching allocator and per-device RNG.

torch imports it by itself through the ``torch.backends`` entry point
(``flagos_autoload``), so a fresh interpreter -- an inductor compile worker,
say -- sees the device after a plain ``import torch``. ``FLAGOS_AUTOLOAD=0``
turns that off (see flagos_autoload for why a CUDA training process wants to).
"""

import torch  # noqa: F401  (torch first: _C links against it)

from . import _C  # noqa: E402,F401  (registers the device's kernels, guard, hooks, allocator)
from ._registration import register as _register  # noqa: E402

flagos = _register()

from .compile import install as _install_compile  # noqa: E402

_install_compile()

from .distributed import register as _register_distributed  # noqa: E402

_register_distributed()

__all__ = ["flagos"]
