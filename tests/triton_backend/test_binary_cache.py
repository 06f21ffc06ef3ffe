"""A corrupt cached host binary is a cache miss with a warning, never a broken compile."""

import json

import pytest
import torch
import triton
import triton.language as tl

from flagos_triton import binary


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def _cached_binary(tmp_path):
    (path,) = (tmp_path / "triton-cache").rglob("*.flagosbin")
    return path


def _runs_correctly(kernel):
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty(100)
    kernel[(1, 1, 1)](x, out, 100, 128)
    torch.testing.assert_close(out, x * 3.0)


def _truncated(text):
    return text[: len(text) // 2]


def _without_entry(text):
    doc = json.loads(text)
    del doc["entry"]
    return json.dumps(doc)


def _wrong_format(text):
    return json.dumps({**json.loads(text), "version": 99})


@pytest.mark.parametrize("corrupt", [_truncated, _without_entry, _wrong_format, lambda text: ""])
def test_a_corrupt_cached_binary_is_compiled_again(compile_kernel, tmp_path, corrupt):
    _runs_correctly(compile_kernel(scale_kernel, SIG, {"BLOCK": 128}))
    cached = _cached_binary(tmp_path)
    cached.write_text(corrupt(cached.read_text()))

    with pytest.warns(UserWarning, match="corrupt cached kernel") as recorded:
        kernel = compile_kernel(scale_kernel, SIG, {"BLOCK": 128})
    assert str(cached) in str(recorded[0].message)  # names the bad file
    _runs_correctly(kernel)
    binary.load(_cached_binary(tmp_path).read_bytes())  # the entry was rewritten, valid

    # and later compiles hit the repaired entry without a warning
    with _no_warnings():
        _runs_correctly(compile_kernel(scale_kernel, SIG, {"BLOCK": 128}))


class _no_warnings:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'"text"', b"\xff\xfe", b'{"format": "flagos-host-kernel", "version": 1}'],
    ids=["empty", "cut", "list", "string", "not-utf8", "no-fields"],
)
def test_loading_garbage_is_a_binary_error(data):
    with pytest.raises(binary.BinaryError, match="corrupt flagos host binary"):
        binary.load(data)
