"""torch_fl: the flagos device runtime for PyTorch.

Importing this package registers the PrivateUse1 device ``flagos``: tensors on
``"flagos:0"``, the ``torch.flagos`` namespace (this package's ``flagos``
module), streams, events, the caching allocator and per-device RNG.

torch imports it by itself through the ``torch.backends`` entry point (see
``_autoload``), so a fresh interpreter -- an inductor compile worker, say --
sees the device after a plain ``import torch``. Set
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` to turn that off.
"""


def _autoload():
    """Entry point of the ``torch.backends`` group.

    Importing this package does the registration. Defined before ``import
    torch`` because when ``import torch_fl`` comes first, torch's autoload
    re-enters this half-imported module and looks this function up.
    """


import torch  # noqa: E402,F401  (torch first: _C links against it)

from . import _C  # noqa: E402,F401  (registers the device's kernels, guard, hooks, allocator)
from ._registration import register as _register  # noqa: E402

flagos = _register()

from .compile import install as _install_compile  # noqa: E402

_install_compile()

__all__ = ["flagos"]
