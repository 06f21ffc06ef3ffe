"""torch.autocast("flagos") inside torch.compile: the casts are traced into the graph."""

import torch
from torch._dynamo.utils import counters


def test_autocast_region_inside_a_compiled_function(compiled_on_workers, flagos_device):
    def f(a, b):
        with torch.autocast("flagos", dtype=torch.bfloat16):
            product = a @ b  # cast to bfloat16
            return product, torch.softmax(product, dim=-1)  # back to float32

    a = torch.randn(16, 32, device=flagos_device)
    b = torch.randn(32, 8, device=flagos_device)
    product, probabilities = torch.compile(f, fullgraph=True)(a, b)
    assert counters["stats"]["unique_graphs"] == 1
    assert (product.dtype, probabilities.dtype) == (torch.bfloat16, torch.float32)
    eager_product, eager_probabilities = f(a, b)
    torch.testing.assert_close(product.cpu(), eager_product.cpu())
    torch.testing.assert_close(probabilities.cpu(), eager_probabilities.cpu(), rtol=1e-2, atol=1e-2)
