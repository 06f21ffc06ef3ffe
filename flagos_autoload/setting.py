"""What ``FLAGOS_AUTOLOAD`` asks for, and whether another backend's entry point is installed.

A leaf (it imports nothing of the project): torch_fl reads the setting too, and must not
import flagos_autoload's package code, which loads torch_fl.
"""

import os

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

    # flagos's entry point is declared on the package (pyproject: "flagos_autoload:load").
    return sorted(
        {ep.name for ep in entry_points(group="torch.backends") if ep.value.split(":")[0].strip() != __package__}
    )


def enabled(env=None) -> bool:
    """Whether a fresh interpreter with ``env`` loads torch_fl at ``import torch`` (torch
    itself skips every entry point under TORCH_DEVICE_BACKEND_AUTOLOAD=0, before asking)."""
    return mode(env) == EAGER and not other_backends()
