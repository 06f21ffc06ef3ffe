"""torch's ``torch.backends`` entry point for flagos: it arms flagos, it does not take PrivateUse1.

torch calls every ``torch.backends`` entry point at ``import torch``, in an order nobody
chooses. PrivateUse1 is one slot per process: the first backend that renames it and
registers its kernels owns it, and a second one that loads its extension afterwards
aborts the process in c10 ("PrivateUse1HooksInterface only could be registered once",
"Tried to register multiple backend fallbacks"). So by default this entry point only
*arms* flagos: ``torch.flagos`` is a placeholder that loads torch_fl (and with it takes
PrivateUse1) the first time it is used, as ``import torch_fl`` and
``torch.compile(backend="flagos")`` do. A process that never uses flagos leaves
PrivateUse1 to whichever backend it imports, by entry point or explicitly.

``FLAGOS_AUTOLOAD`` chooses:

- unset (or ``lazy``): arm, as above;
- ``1``: flagos is this process's device: load torch_fl at ``import torch``, so that
  ``torch.device("flagos:0")`` parses right away. torch_fl sets it for the processes a
  flagos process starts (inductor's compile workers, subprocesses), which must see the
  device after a bare ``import torch``. Where another ``torch.backends`` entry point is
  installed it only arms: torch runs the entry points in no set order, and the other
  backend's extension would abort the process if it loaded after flagos;
- ``0``: nothing (the pytest plugin sets it for a run on any device but flagos): a
  registered PrivateUse1 backend also makes PyTorch 2.8 to 2.13 take PrivateUse1 for the
  process's accelerator, and every backward over native CUDA tensors then fails
  (pytorch/pytorch#161129). ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns off every backend's
  entry point.

If another backend already holds PrivateUse1 when this entry point runs, it arms anyway:
using flagos in that process is then the one-line error of torch_fl, not an abort.
"""

import sys

from .device_type import DEVICE_TYPE
from .placeholder import armed, is_placeholder
from .setting import AUTOLOAD_ENV, EAGER, LAZY, OFF, enabled, mode, other_backends

__all__ = [
    "AUTOLOAD_ENV",
    "DEVICE_TYPE",
    "EAGER",
    "LAZY",
    "OFF",
    "arm",
    "disarm",
    "enabled",
    "is_placeholder",
    "load",
    "mode",
    "other_backends",
]


def _load():
    import torch_fl  # replaces the placeholder with the real torch.flagos

    return torch_fl.flagos


def _privateuse1_owner():
    """The name another backend gave PrivateUse1 in this process, or None."""
    torch = sys.modules.get("torch")
    name = torch._C._get_privateuse1_backend_name() if torch is not None else "privateuseone"
    return None if name in ("privateuseone", DEVICE_TYPE) else name


def arm() -> None:
    """Put the ``torch.flagos`` placeholder in place (not over a real torch.flagos)."""
    import torch

    if getattr(torch, DEVICE_TYPE, None) is None:
        placeholder = armed(f"torch.{DEVICE_TYPE}", "flagos, loaded on first use (flagos_autoload)", _load)
        setattr(torch, DEVICE_TYPE, placeholder)


def disarm() -> None:
    """Remove the placeholder (a run that must keep flagos out, after torch was imported)."""
    torch = sys.modules.get("torch")
    if torch is not None and is_placeholder(getattr(torch, DEVICE_TYPE, None)):
        delattr(torch, DEVICE_TYPE)


def load() -> None:
    chosen = mode()
    if chosen == OFF:
        return
    if chosen == EAGER and _privateuse1_owner() is None and not other_backends():
        import torch_fl  # noqa: F401  (registers the device)

        return
    arm()
