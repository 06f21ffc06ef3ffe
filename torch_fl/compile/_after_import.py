"""Run a callback once a module has been imported and the imports around it have settled.

flagos registers with dynamo/inductor only in processes that compile: doing
it inside ``import torch`` (the torch.backends autoload) would import
torch._dynamo and torch._inductor there, about two seconds more for every
``import torch``. torch compiles only after importing ``torch._dynamo``, so a
one-shot import finder on that module is the earliest safe trigger -- but
torch._dynamo is often imported from inside a half-imported
``torch._inductor`` module, where registering (which imports inductor's
codegen) would hit a circular import. The callback then waits until every
torch module that was mid-import has finished, checked at each later import.
"""

import importlib.abc
import importlib.util
import sys
import threading
import warnings


def _initializing(names):
    pending = []
    for name in names:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            pending.append(name)
    return pending


def _run(callback):
    try:
        callback()
    except Exception as error:  # never break the user's import
        if not threading.main_thread().is_alive():
            # The interpreter is shutting down (a late import from a thread or a finaliser): torch
            # cannot compile any more either, so a warning would only blame flagos for it.
            return
        warnings.warn(f"flagos: registration with torch.compile failed: {error!r}", RuntimeWarning, stacklevel=3)


class _CallbackLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the callback once imports settle."""

    def __init__(self, loader, callback):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.__spec__._initializing = False  # this module is done; only its importers may not be
        _run_when_settled(self._callback)

    def __getattr__(self, name):  # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self._loader, name)


def _with_callback(fullname, callback):
    """The spec of ``fullname`` (found by the other finders), its loader wrapped."""
    spec = importlib.util.find_spec(fullname)
    if spec is not None and spec.loader is not None:
        spec.loader = _CallbackLoader(spec.loader, callback)
    return spec


class _WhenSettled(importlib.abc.MetaPathFinder):
    """Waits for ``waiting_for`` to finish importing, then hooks the next import.

    The callback never runs inside find_spec itself: the import being looked
    up would then be created twice if the callback imported it too.
    """

    def __init__(self, waiting_for, callback):
        self.waiting_for = waiting_for
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        self.waiting_for = _initializing(self.waiting_for)
        if self.waiting_for:
            return None
        sys.meta_path.remove(self)
        spec = _with_callback(fullname, self.callback)
        if spec is None or spec.loader is None:
            sys.meta_path.insert(0, self)
        return spec


def _run_when_settled(callback):
    busy = _initializing([name for name in list(sys.modules) if name.startswith("torch")])
    if not busy:
        _run(callback)
    else:
        sys.meta_path.insert(0, _WhenSettled(busy, callback))


class _OneShotFinder(importlib.abc.MetaPathFinder):
    def __init__(self, module_name, callback):
        self.module_name = module_name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module_name:
            return None
        sys.meta_path.remove(self)
        return _with_callback(fullname, self.callback)


def call_after_import(module_name: str, callback) -> None:
    """``callback()`` once ``module_name`` is imported and no torch module is mid-import."""
    if module_name in sys.modules:
        _run_when_settled(callback)
        return
    sys.meta_path.insert(0, _OneShotFinder(module_name, callback))
