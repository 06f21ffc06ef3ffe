"""Convolutions compile on flagos with inductor's layout optimization off.

The convolution stride bug (inductor's layout optimization feeds channels_last tensors to
convolutions; a kernel whose strides differ from what its fake tensor predicted fails the
compiled graph's stride assertions) is checked on flagos by the conformance suite
(`make conformance`): conformance/test_layouts.py compiles its conv net with layout
optimization forced on, and a conv on a channels_last input, forward and gradients against
eager. Here: the same conv net with layout optimization off (contiguous activations), which
the suite does not compile, on a fresh cache with the worker pool up and proven.
"""

import torch

from tests.helpers import import_conformance

conv_net = import_conformance("test_layouts")._conv_net  # the suite's conv net, one definition


def test_conv_net_forward_and_backward_without_layout_optimization(compiled_on_workers, assert_compiles_like_eager):
    torch.manual_seed(0)
    patches = {"force_layout_optimization": False, "layout_optimization": False}
    assert_compiles_like_eager(conv_net(), torch.randn(2, 3, 16, 16), grads=True, config_patches=patches)
