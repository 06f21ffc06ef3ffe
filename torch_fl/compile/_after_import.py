"""Run a callback once a module has finished importing.

flagos registers with dynamo/inductor only in processes that compile: doing
it inside ``import torch`` (the torch.backends autoload) would import
torch._dynamo and torch._inductor there, about a second more for every
``import torch``. torch compiles only after importing ``torch._dynamo``, so a
one-shot import finder on that module is the earliest point that is always
early enough.
"""

import importlib.abc
import importlib.util
import sys
import warnings


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, loader, callback):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._callback()
        except Exception as error:  # never break the import of torch._dynamo itself
            warnings.warn(f"flagos: registration with torch.compile failed: {error!r}", RuntimeWarning, stacklevel=2)

    def __getattr__(self, name):  # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self._loader, name)


class _OneShotFinder(importlib.abc.MetaPathFinder):
    def __init__(self, module_name, callback):
        self.module_name = module_name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module_name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _CallbackLoader(spec.loader, self.callback)
        return spec


def call_after_import(module_name: str, callback) -> None:
    """``callback()`` right after ``module_name`` is imported (now, if it already is)."""
    if module_name in sys.modules:
        callback()
        return
    sys.meta_path.insert(0, _OneShotFinder(module_name, callback))
