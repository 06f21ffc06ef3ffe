"""Convolutions compile on flagos (the convolution stride bug).

inductor's layout optimization feeds channels_last tensors to convolutions;
if the flagos kernel's strides differ from what its fake tensor predicted,
the compiled graph fails its stride assertions. Forward and gradients are
compared with eager.
"""

import pytest
import torch


def _conv_net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=2),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )


@pytest.mark.parametrize("layout_optimization", [True, False], ids=["channels_last", "contiguous"])
def test_conv_net_forward_and_backward(compiled_on_workers, assert_compiles_like_eager, layout_optimization):
    torch.manual_seed(0)
    patches = {"force_layout_optimization": layout_optimization, "layout_optimization": layout_optimization}
    assert_compiles_like_eager(_conv_net(), torch.randn(2, 3, 16, 16), grads=True, config_patches=patches)


def test_channels_last_input_conv(compiled_on_workers, assert_compiles_like_eager):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3)
    x = torch.randn(2, 4, 10, 10).to(memory_format=torch.channels_last)
    assert_compiles_like_eager(conv, x, grads=True)
