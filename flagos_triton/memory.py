"""Loads and stores through raw host pointers, vectorised with numpy.

Triton's interpreter loads and stores element by element in C++
(``triton._C.libtriton.interpreter.load/store``). When the active addresses
of an access are aligned to the element size, this module does the same
access as one numpy gather/scatter over a view of the address range they
span (the view touches only the addressed elements). It returns ``None`` /
``False`` when it cannot, and the caller falls back to Triton's C++ path.
Masked-off lanes are never read or written, as on a GPU.
"""

from __future__ import annotations

import numpy as np


class _Span:
    """A numpy-visible window [address, address + nbytes) of host memory."""

    def __init__(self, address: int, nbytes: int):
        self.__array_interface__ = {
            "data": (address, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }


def _window(ptrs: np.ndarray, mask: np.ndarray, itemsize: int):
    """(typed view base, element indices, selection) or None."""
    flat_ptrs = ptrs.reshape(-1)
    flat_mask = mask.reshape(-1)
    if flat_mask.all():
        active = flat_ptrs
        selection = None
    else:
        selection = np.flatnonzero(flat_mask)
        active = flat_ptrs[selection]
    if active.size == 0:
        return "empty"
    lo = int(active.min())
    hi = int(active.max())
    if lo == 0:
        return None  # a null pointer: let the C++ path report it
    offsets = (active - np.uint64(lo)).view(np.int64)  # < 2**63: a span inside the address space
    if itemsize > 1:
        if itemsize & (itemsize - 1) or (offsets & (itemsize - 1)).any():
            return None
        offsets = offsets >> (itemsize.bit_length() - 1)
    return lo, hi + itemsize - lo, offsets, selection


def gather(ptrs, mask, other, dtype):
    dtype = np.dtype(dtype)
    window = _window(ptrs, mask, dtype.itemsize)
    if window is None:
        return None
    out = np.array(other, dtype=dtype, copy=True)
    if window == "empty":
        return out
    lo, nbytes, index, selection = window
    values = np.asarray(_Span(lo, nbytes)).view(dtype)[index]
    flat = out.reshape(-1)
    if selection is None:
        flat[:] = values
    else:
        flat[selection] = values
    return out


def scatter(ptrs, values, mask) -> bool:
    dtype = values.dtype
    window = _window(ptrs, mask, dtype.itemsize)
    if window is None:
        return False
    if window == "empty":
        return True
    lo, nbytes, index, selection = window
    flat = np.ascontiguousarray(values).reshape(-1)
    target = np.asarray(_Span(lo, nbytes)).view(dtype)
    target[index] = flat if selection is None else flat[selection]
    return True
