"""Keeps torch_fl out of a run whose device under test is not flagos.

torch's ``torch.backends`` entry point arms flagos at ``import torch`` (flagos_autoload):
``torch.flagos`` loads torch_fl, which takes PrivateUse1, on first use. A loaded torch_fl
makes PyTorch 2.8 to 2.13 treat PrivateUse1 as the process's one accelerator, so every
backward over CUDA tensors fails (pytorch/pytorch#161129), and a vendor's own PrivateUse1
device cannot register at all. So before anything imports torch (this runs ahead of the
conftests), a run on any other device turns flagos's autoload off, for this process and
the compile workers it starts, and removes the armed ``torch.flagos`` if torch is
imported already.
"""

from __future__ import annotations

import os
import sys

import pytest

import flagos_autoload

from . import options


def keep_torch_fl_out(early_config: pytest.Config) -> None:
    spec = options.early_device_spec(early_config)
    if not spec:
        return  # inert
    name = spec.partition(":")[0].strip()
    if name == "flagos":
        return
    if "torch_fl" in sys.modules and name != "cpu":
        raise pytest.UsageError(
            f"flagos: torch_fl was already loaded when the run on {spec!r} started, and with it loaded PyTorch "
            "treats flagos as this process's accelerator (CUDA backward fails, another PrivateUse1 device cannot "
            f"register). Run with {flagos_autoload.AUTOLOAD_ENV}=0 and without importing torch_fl."
        )
    os.environ[flagos_autoload.AUTOLOAD_ENV] = "0"
    flagos_autoload.disarm()
