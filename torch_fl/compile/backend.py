"""``torch.compile(model, backend="flagos")``: inductor, with its mode/options semantics."""


def flagos(graph_module, example_inputs, mode=None, options=None):
    """Compile with inductor; ``mode`` and ``options`` mean what they mean for ``backend="inductor"``."""
    from . import _inductor_adapter as adapter
    from . import register
    from .workers import ensure_workers_see_flagos

    register()
    ensure_workers_see_flagos()
    adapter.maybe_warm_pool()
    compiler = adapter.inductor_compiler(mode, options)
    return compiler(graph_module, example_inputs)
