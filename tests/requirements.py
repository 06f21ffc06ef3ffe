"""What a test needs from the flagos device in this process, as skip markers.

The project's tests run on the host accelerator (CI) and on the cuda
accelerator (a GPU machine). A test of a host-only behaviour, or one that needs
two devices, says so here instead of failing where it cannot apply.
"""

import pytest
import torch

accelerator = torch.flagos.accelerator_name()

host_only = pytest.mark.skipif(
    accelerator != "host",
    reason=f"a behaviour of the host accelerator (this process runs '{accelerator}'); "
    "run with FLAGOS_ACCELERATOR=host to test it",
)

cuda_accelerator = pytest.mark.skipif(
    accelerator != "cuda",
    reason=f"a behaviour of the cuda accelerator (CUDA's own kernels); this process runs '{accelerator}'",
)

two_devices = pytest.mark.skipif(
    torch.flagos.device_count() < 2,
    reason=f"needs two flagos devices; this machine has {torch.flagos.device_count()}",
)
