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

import os
import sys
import types

AUTOLOAD_ENV = "FLAGOS_AUTOLOAD"
OFF, LAZY, EAGER = "off", "lazy", "eager"


def mode(env=None) -> str:
    """OFF, LAZY or EAGER, from ``FLAGOS_AUTOLOAD`` in ``env`` (default os.environ)."""
    env = os.environ if env is None else env
    value = env.get(AUTOLOAD_ENV, "").strip().lower()
    if value == "0":
        return OFF
    if value == "1":
        return EAGER
    return LAZY


def other_backends() -> list:
    """Names of the installed ``torch.backends`` entry points that are not flagos's."""
    from importlib.metadata import entry_points

    return sorted(
        {ep.name for ep in entry_points(group="torch.backends") if ep.value.split(":")[0].strip() != __name__}
    )


def enabled(env=None) -> bool:
    """Whether a fresh interpreter with ``env`` loads torch_fl at ``import torch`` (torch
    itself skips every entry point under TORCH_DEVICE_BACKEND_AUTOLOAD=0, before asking)."""
    return mode(env) == EAGER and not other_backends()


class _ArmedFlagos(types.ModuleType):
    """``torch.flagos`` before torch_fl is loaded: the first real attribute loads it.

    Dunder lookups (``__file__``, ``__path__``, ...) never load it: inspect, pickle and
    import machinery ask them of every module they meet.
    """

    def __getattr__(self, name):
        if _is_dunder(name):
            raise AttributeError(name)
        return getattr(_load(), name)

    def __setattr__(self, name, value):  # e.g. torch.flagos.flagos_capabilities = {...}
        if _is_dunder(name):
            super().__setattr__(name, value)
        else:
            setattr(_load(), name, value)

    def __delattr__(self, name):  # e.g. a test removing an API: del torch.flagos.get_device_properties
        if _is_dunder(name):
            super().__delattr__(name)
        else:
            delattr(_load(), name)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _load():
    import torch_fl  # replaces the placeholder with the real torch.flagos

    return torch_fl.flagos


def is_placeholder(module) -> bool:
    return isinstance(module, _ArmedFlagos)


def _privateuse1_owner():
    """The name another backend gave PrivateUse1 in this process, or None."""
    torch = sys.modules.get("torch")
    name = torch._C._get_privateuse1_backend_name() if torch is not None else "privateuseone"
    return None if name in ("privateuseone", "flagos") else name


def arm() -> None:
    """Put the ``torch.flagos`` placeholder in place (not over a real torch.flagos)."""
    import torch

    if getattr(torch, "flagos", None) is None:
        torch.flagos = _ArmedFlagos("torch.flagos", "flagos, loaded on first use (flagos_autoload)")


def disarm() -> None:
    """Remove the placeholder (a run that must keep flagos out, after torch was imported)."""
    torch = sys.modules.get("torch")
    if torch is not None and is_placeholder(getattr(torch, "flagos", None)):
        del torch.flagos


def load() -> None:
    chosen = mode()
    if chosen == OFF:
        return
    if chosen == EAGER and _privateuse1_owner() is None and not other_backends():
        import torch_fl  # noqa: F401  (registers the device)

        return
    arm()
