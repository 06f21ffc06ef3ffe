"""Fake (meta) strides agree with what the flagos kernels produce.

inductor plans buffers from fake tensors; a real kernel that returns other
strides than its fake counterpart makes compiled code reject the graph (the
known convolution stride bug). CrossRefFakeMode runs every op
both ways and fails on any mismatch.
"""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_utils import CrossRefFakeMode

from tests.requirements import cuda_accelerator

CL = {4: torch.channels_last, 5: torch.channels_last_3d}

CONVS = {
    "conv1d": (F.conv1d, (2, 4, 9), (6, 4, 3), {}),
    "conv2d": (F.conv2d, (2, 4, 9, 9), (6, 4, 3, 3), {"padding": 1}),
    "conv3d": (F.conv3d, (1, 4, 5, 5, 5), (6, 4, 3, 3, 3), {}),
    "grouped": (F.conv2d, (2, 4, 9, 9), (6, 2, 3, 3), {"groups": 2}),
    "depthwise": (F.conv2d, (2, 4, 9, 9), (4, 1, 3, 3), {"groups": 4, "stride": 2}),
    "transposed2d": (F.conv_transpose2d, (2, 4, 5, 5), (4, 6, 3, 3), {"stride": 2}),
    "transposed3d": (F.conv_transpose3d, (1, 4, 3, 3, 3), (4, 2, 2, 2, 2), {}),
}


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("name", sorted(CONVS))
def test_convolution_forward_and_backward_strides(name, channels_last):
    fn, x_shape, w_shape, kwargs = CONVS[name]
    x = torch.randn(x_shape, device="flagos")
    w = torch.randn(w_shape, device="flagos")
    if channels_last and x.dim() in CL:
        x = x.to(memory_format=CL[x.dim()])
        w = w.to(memory_format=CL[w.dim()])
    x.requires_grad_(True)
    w.requires_grad_(True)
    bias = torch.randn(w_shape[1] * kwargs.get("groups", 1) if "transposed" in name else w_shape[0], device="flagos")
    with CrossRefFakeMode():
        out = fn(x, w, bias, **kwargs)
        out.backward(torch.ones_like(out))


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last"])
def test_batch_norm_forward_and_backward_strides(training, layout):
    if layout == "transposed":
        x = torch.randn(2, 5, 6, device="flagos").transpose(1, 2)  # [B, C, L] laid out as [B, L, C]
    else:
        x = torch.randn(2, 6, 4, 4, device="flagos")
        if layout == "channels_last":
            x = x.to(memory_format=torch.channels_last)
    x.requires_grad_(True)
    weight = torch.randn(6, device="flagos", requires_grad=True)
    bias = torch.randn(6, device="flagos", requires_grad=True)
    mean, var = torch.zeros(6, device="flagos"), torch.ones(6, device="flagos")
    with CrossRefFakeMode():
        out = F.batch_norm(x, None if training else mean, None if training else var, weight, bias, training=training)
        out.backward(torch.ones_like(out))


@cuda_accelerator
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("name", ["conv2d", "conv3d", "grouped", "transposed2d"])
def test_convolution_output_is_laid_out_as_on_cuda(name, channels_last, dtype):
    # cuDNN keeps channels-last inputs channels-last; a flagos convolution that
    # predicted (and copied to) another layout paid a copy per call.
    fn, x_shape, w_shape, kwargs = CONVS[name]
    x, w = torch.randn(x_shape, dtype=dtype), torch.randn(w_shape, dtype=dtype)
    if channels_last:
        x, w = x.to(memory_format=CL[x.dim()]), w.to(memory_format=CL[w.dim()])
    on_cuda = fn(x.to("cuda"), w.to("cuda"), **kwargs)
    on_flagos = fn(x.to("flagos"), w.to("flagos"), **kwargs)
    assert on_flagos.stride() == on_cuda.stride()
    torch.testing.assert_close(on_flagos.cpu(), on_cuda.cpu())


# Ops whose meta kernels choose a layout by the device type's name (torch._meta_registrations'
# device_hint): "flagos" must get the compute device's prediction, on either accelerator.
BY_DEVICE_TYPE = {
    "fft.ifft[dim 0]": lambda x: torch.fft.ifft(x, dim=0),
    "fft.ifft[transposed]": lambda x: torch.fft.ifft(x.t()),
    "fft.ihfft[transposed]": lambda x: torch.fft.ihfft(x.t()),
    "fft.fftn[4 dims]": lambda x: torch.fft.fftn(x.reshape(2, 3, 2, 5)),
    "fft.rfft2": lambda x: torch.fft.rfft2(x.reshape(3, 4, 5)),
    "fft.irfftn[4 dims]": lambda x: torch.fft.irfftn(x.reshape(2, 3, 2, 5).to(torch.complex64)),
    "linalg.svd": lambda x: torch.linalg.svd(x[:, :6]),
    "linalg.eig": lambda x: torch.linalg.eig(x[:, :6]),
    "nonzero_static": lambda x: torch.nonzero_static(x > 0, size=7),
    "replication_pad2d[channels_last]": lambda x: F.pad(
        x.reshape(1, 3, 4, 5).contiguous(memory_format=torch.channels_last), (1, 2, 1, 2), mode="replicate"
    ),
}


@pytest.mark.parametrize("name", sorted(BY_DEVICE_TYPE))
def test_layouts_chosen_by_device_type_are_the_compute_devices(name):
    x = torch.randn(6, 10, device="flagos")
    with CrossRefFakeMode():
        BY_DEVICE_TYPE[name](x)


@cuda_accelerator
@pytest.mark.parametrize("op", ["ifft", "ihfft"])
def test_compiled_fft_of_a_transposed_input_matches_cuda(op):
    # cuFFT stages a transform over a transposed input its own way; the meta kernel's
    # MKL prediction failed inductor's stride assertion on the fallback's output.
    fn = getattr(torch.fft, op)
    x = torch.randn(10, 7)
    compiled = torch.compile(lambda x: fn(x.t()) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(x.to("flagos")).cpu(), (fn(x.to("cuda").t()) * 2).cpu())
