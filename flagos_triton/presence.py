"""Is the flagos *host* accelerator the one this process runs on?

Triton calls the driver's ``is_active()`` (and through it this function) in
every process that picks a driver, compile workers included. The answer is
yes only where the flagos runtime is already loaded: this package is a
top-level one precisely so that Triton's back-end discovery does not import
torch_fl (and torch) into every process that imports triton. A compile
worker sees flagos when torch autoloads torch_fl (the ``torch.backends``
entry point) or when it inherited it (fork). Tests monkeypatch
``host_accelerator_active``.
"""

import sys


def host_accelerator_active() -> bool:
    """True when ``torch_fl._C`` is loaded and reports the accelerator ``"host"``."""
    runtime = sys.modules.get("torch_fl._C")
    if runtime is None:
        return False
    name_fn = getattr(runtime, "_accelerator_name", None)
    if name_fn is None:
        return False
    try:
        return name_fn() == "host"
    except Exception:
        return False
