"""fdev: a foreign PrivateUse1 test device, written as a vendor new to PyTorch would.

Importing it registers the device: ``torch.device("fdev")``, ``torch.fdev`` (a small device
module without Stream/Event/synchronize: streams and events exist only through torch's
generic ``torch.Stream``/``torch.Event``/``torch.accelerator``), and a ``torch.compile``
backend named ``"fdev"`` (graphs compiled for the host with inductor's C++ code generator:
this device's memory is host memory). inductor itself knows nothing about fdev.

The extension ``fdev._C`` is built by ``tests/foreign_device/build.py``; ``fdev._autoload``
is the target of the package's own ``torch.backends`` entry point, when it is installed
with one.
"""

import torch

from . import _C  # noqa: F401  (registers the kernels, CPU fallback, guard, hooks, allocator)
from . import device as _device_module

DEVICE_TYPE = "fdev"

torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
torch._register_device_module(DEVICE_TYPE, _device_module)
torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)

from .backend import register as _register_backend  # noqa: E402

_register_backend()


def _autoload():
    """torch.backends entry point: importing this package did the work."""
