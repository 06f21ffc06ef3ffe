"""``torch.compile(model, backend="flagos")``: inductor, with its mode/options semantics."""

import torch


def flagos(graph_module, example_inputs, mode=None, options=None):
    """Compile with inductor; ``mode`` and ``options`` mean what they mean for ``backend="inductor"``."""
    from torch._inductor.async_compile import maybe_warm_pool

    from . import register
    from .workers import ensure_workers_see_flagos

    register()
    ensure_workers_see_flagos()
    maybe_warm_pool()
    compiler = torch._TorchCompileInductorWrapper(mode, options, None)
    return compiler(graph_module, example_inputs)
