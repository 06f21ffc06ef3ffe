"""inductor's Triton scheduling for flagos graphs."""

from ._inductor_adapter import triton_scheduling_base
from .workers import ensure_workers_see_flagos

# Imported only by register(), so asking for inductor's base class here keeps `import torch_fl` cheap.
TritonScheduling = triton_scheduling_base()


class FlagosScheduling(TritonScheduling):  # type: ignore[misc, valid-type]  # a base known at run time
    """TritonScheduling that first makes sure the compile workers can see flagos."""

    def __init__(self, scheduler=None):
        ensure_workers_see_flagos()
        super().__init__(scheduler)
