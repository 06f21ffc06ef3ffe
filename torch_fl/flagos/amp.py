"""What torch.autocast asks a PrivateUse1 device module for.

The casts themselves are the AutocastPrivateUse1 kernels (csrc/aten/autocast.cpp): cuda's op lists
and policies.
"""

import torch


def get_amp_supported_dtype() -> list:
    # Both compute devices run float16 and bfloat16 kernels (the CPU emulates some in float32).
    return [torch.float16, torch.bfloat16]
