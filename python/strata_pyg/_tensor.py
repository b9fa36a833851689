"""Tensors on the wire: raw little-endian bytes, a dtype and a shape
(strata.v1.Tensor). Everything received is checked before use."""

import numpy as np

from ._pb import sampler_pb2 as pb

_DTYPES = {
    pb.DTYPE_INT32: np.dtype("<i4"),
    pb.DTYPE_INT64: np.dtype("<i8"),
    pb.DTYPE_FLOAT32: np.dtype("<f4"),
}
_CODES = {v.str: k for k, v in _DTYPES.items()}

MAX_RANK = 8


class TensorError(ValueError):
    """A wire tensor whose dtype, shape and size do not agree."""


def decode(t, field, writable=False):
    """Returns the numpy array of the strata.v1.Tensor ``t`` (a read-only
    view of its bytes unless ``writable``), after checking that the dtype is
    known and the data holds exactly the elements the shape says."""
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise TensorError(f"{field}: unknown dtype {t.dtype}")
    shape = tuple(int(d) for d in t.shape)
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise TensorError(f"{field}: bad shape {shape}")
    n = 1
    for d in shape:
        n *= d
    data = t.data
    if len(data) != n * dt.itemsize:
        raise TensorError(f"{field}: {len(data)} bytes for shape {shape} of {dt}")
    if writable:
        data = bytearray(data)
    return np.frombuffer(data, dtype=dt).reshape(shape)


def encode(a, field="tensor"):
    """Returns a strata.v1.Tensor holding the numpy array ``a``
    (int32, int64 or float32; converted to little-endian)."""
    a = np.ascontiguousarray(a)
    dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    code = _CODES.get(np.dtype(dt).str)
    if code is None:
        raise TensorError(f"{field}: dtype {a.dtype} is not int32, int64 or float32")
    return pb.Tensor(dtype=code, shape=list(a.shape), data=a.astype(dt.newbyteorder("<"), copy=False).tobytes())
