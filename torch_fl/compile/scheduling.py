"""inductor's Triton scheduling for flagos graphs."""

from torch._inductor.codegen.triton import TritonScheduling

from .workers import ensure_workers_see_flagos


class FlagosScheduling(TritonScheduling):
    """TritonScheduling that first makes sure the compile workers can see flagos."""

    def __init__(self, scheduler=None):
        ensure_workers_see_flagos()
        super().__init__(scheduler)
