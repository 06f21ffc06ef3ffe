"""backend="fdev": a torch.compile backend without inductor support for the device.

fdev's memory is host memory, so a graph is compiled for the host by inductor's C++ code
generator: the graph's fdev tensors become CPU tensors (copies in, copies out), the device
arguments of factory calls inside the graph become "cpu".
"""

import torch

DEVICE_TYPE = "fdev"


def _to_host(value):
    if isinstance(value, torch.device) and value.type == DEVICE_TYPE:
        return torch.device("cpu")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    return value


def _host_graph(graph_module):
    for node in graph_module.graph.nodes:
        node.args = _to_host(node.args)
        node.kwargs = _to_host(node.kwargs)
    graph_module.recompile()
    return graph_module


def _host_input(value):
    return value.cpu() if isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE else value


def compile_fdev(graph_module, example_inputs):
    from torch._inductor.compile_fx import compile_fx

    devices = [x.device for x in example_inputs if isinstance(x, torch.Tensor) and x.device.type == DEVICE_TYPE]
    device = devices[0] if devices else torch.device(DEVICE_TYPE, 0)
    compiled = compile_fx(_host_graph(graph_module), [_host_input(x) for x in example_inputs])

    def run(*args):
        outputs = compiled(*[_host_input(a) for a in args])
        if isinstance(outputs, torch.Tensor):
            return outputs.to(device)
        return type(outputs)(o.to(device) if isinstance(o, torch.Tensor) else o for o in outputs)

    return run


def register():
    from torch._dynamo import register_backend

    register_backend(compile_fdev, name=DEVICE_TYPE)
