"""Which Triton semantic the calling thread's flagos launch runs with.

lang_adapter sets it for the duration of a launch; what runs inside the launch reads it.
A leaf (it imports nothing of flagos_triton), so that translate can read it without
importing lang_adapter, which imports translate.
"""

import threading

# ``this_thread.semantic``: the semantic of this thread's launch; absent or None outside one.
this_thread = threading.local()


def current_semantic():
    sem = getattr(this_thread, "semantic", None)
    if sem is None:
        raise RuntimeError("not inside a flagos host launch")
    return sem
