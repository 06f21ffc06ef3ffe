"""The armed ``torch.flagos``: a module that loads the real one on first use.

A leaf (it imports nothing of the project): the loader is handed in by whoever arms it,
so torch_fl can recognise the placeholder without importing the code that loads torch_fl.
"""

import types


class _ArmedFlagos(types.ModuleType):
    """``torch.flagos`` before torch_fl is loaded: the first real attribute loads it.

    Dunder lookups (``__file__``, ``__path__``, ...) never load it: inspect, pickle and
    import machinery ask them of every module they meet.
    """

    def __init__(self, name, doc, load):
        super().__init__(name, doc)
        # A dunder, so that it is stored on the placeholder instead of loading the real module.
        super().__setattr__("__flagos_load__", load)

    def __getattr__(self, name):
        if _is_dunder(name):
            raise AttributeError(name)
        return getattr(self.__flagos_load__(), name)

    def __setattr__(self, name, value):  # e.g. torch.flagos.flagos_capabilities = {...}
        if _is_dunder(name):
            super().__setattr__(name, value)
        else:
            setattr(self.__flagos_load__(), name, value)

    def __delattr__(self, name):  # e.g. a test removing an API: del torch.flagos.get_device_properties
        if _is_dunder(name):
            super().__delattr__(name)
        else:
            delattr(self.__flagos_load__(), name)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def armed(name: str, doc: str, load) -> types.ModuleType:
    """A placeholder module that returns ``load()``'s attributes (``load`` imports the real module)."""
    return _ArmedFlagos(name, doc, load)


def is_placeholder(module) -> bool:
    return isinstance(module, _ArmedFlagos)
