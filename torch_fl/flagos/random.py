"""Per-device random number generators.

Each flagos device has one default generator; ``torch.randn(...,
device="flagos")`` and every other random op on the device draw from it.
"""

import torch

from .. import _C
from ._device import _checked, device_count


class _DefaultGenerators:
    """``torch.flagos.default_generators[i]``: the default generator of flagos:i."""

    def __len__(self):
        return device_count()

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"flagos: device index {index} out of range for {len(self)} flagos device(s)")
        return _C._default_generator(index)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def _is_in_bad_fork() -> bool:
    """torch.manual_seed seeds flagos only if the module has this (and manual_seed_all).

    The host accelerator keeps no state a fork could corrupt; an accelerator
    with a driver context (cuda) must answer for itself.
    """
    return False


# The generator state functions are opaque to dynamo, as torch.cuda's are (torch's own modules
# are skipped by its trace rules; a third-party module is traced into): torch's
# freeze_rng_state and fork_rng call them under no_dispatch(), where tracing their state
# tensors fails instead of breaking the graph.
_not_traced = torch.compiler.disable


def _generator(device=None) -> torch.Generator:
    return default_generators[_checked(device)]


@_not_traced
def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    _generator().manual_seed(int(seed))


@_not_traced
def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


@_not_traced
def seed() -> None:
    """Seeds the current device's generator with a non-deterministic number."""
    _generator().seed()


@_not_traced
def seed_all() -> None:
    first = _generator(0)
    first.seed()
    for g in default_generators[1:]:
        g.manual_seed(first.initial_seed())


def initial_seed() -> int:
    return _generator().initial_seed()


@_not_traced
def get_rng_state(device=None) -> torch.Tensor:
    return _generator(device).get_state()


@_not_traced
def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    _generator(device).set_state(new_state.cpu() if new_state.device.type != "cpu" else new_state)


@_not_traced
def get_rng_state_all() -> list:
    return [g.get_state() for g in default_generators]


@_not_traced
def set_rng_state_all(new_states) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)
