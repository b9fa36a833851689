"""Tensors on the wire: raw little-endian bytes, a dtype and a shape
(strata.v1.Tensor). Everything received is checked before use.

Batch messages are parsed without copying their tensors (parse_batch):
the tensors' bytes stay in the received message and the arrays view
them; only the small fields go through protobuf."""

import ctypes

import numpy as np

from ._pb import sampler_pb2 as pb

_DTYPES = {
    pb.DTYPE_INT32: np.dtype("<i4"),
    pb.DTYPE_INT64: np.dtype("<i8"),
    pb.DTYPE_FLOAT32: np.dtype("<f4"),
    # bfloat16 has no numpy type: its bits as int16 (torch views them as
    # torch.bfloat16; see to_torch).
    pb.DTYPE_BFLOAT16: np.dtype("<i2"),
}
_CODES = {v.str: k for k, v in _DTYPES.items() if k != pb.DTYPE_BFLOAT16}

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
        data = t.writable() if isinstance(t, RawTensor) else bytearray(data)
    return np.frombuffer(data, dtype=dt).reshape(shape)


def to_torch(t, field, writable=False):
    """decode as a torch tensor; bfloat16 features are widened to float32
    (what PyG models take)."""
    import torch
    if t.dtype == pb.DTYPE_BFLOAT16:
        # Widened into a new tensor: a view of the message does (no copy)
        # where it can be had, else a copy (torch wants writable memory).
        a = decode(t, field, writable=True)
        return torch.from_numpy(a).view(torch.bfloat16).float()
    return torch.from_numpy(decode(t, field, writable=writable))


def to_host(t, field, dtype=None, pin=False):
    """A new torch tensor of the wire tensor ``t``'s values, of ``dtype``
    (None: the wire's own; bfloat16 stays torch.bfloat16), in pinned
    memory when ``pin``. torch's copy_ does the copy and any widening on
    several threads with the GIL released. Pinned tensors come from
    torch's caching host allocator: a block goes back to its pool when
    the tensor is freed and the copies queued from it have run, so the
    blocks are reused batch after batch and their number is bounded by
    the batches alive at once."""
    import torch
    src = torch.from_numpy(decode(t, field, writable=True))
    if t.dtype == pb.DTYPE_BFLOAT16:
        src = src.view(torch.bfloat16)
    out = torch.empty(src.shape, dtype=dtype or src.dtype, pin_memory=pin)
    out.copy_(src)
    return out


class RawTensor:
    """A strata.v1.Tensor whose data is a span of a received message
    (``buf``, which nothing else references): decode views it in place."""

    __slots__ = ("dtype", "shape", "buf", "offset", "length")

    def __init__(self, dtype, shape, buf, offset, length):
        self.dtype, self.shape, self.buf, self.offset, self.length = dtype, shape, buf, offset, length

    @property
    def data(self):
        return memoryview(self.buf)[self.offset:self.offset + self.length]

    def writable(self):
        """A writable buffer over the data, without a copy. The message's
        bytes object was handed to the deserializer and is referenced only
        by the arrays made from it, so writing into it is private to the
        batch (a bytes object is never shared by gRPC)."""
        if self.length == 0:
            return bytearray()
        base = ctypes.cast(ctypes.c_char_p(self.buf), ctypes.c_void_p).value
        w = (ctypes.c_ubyte * self.length).from_address(base + self.offset)
        w._keep = self.buf  # the bytes live as long as the view
        return w


# Batch fields that are strata.v1.Tensor (parsed in place).
_TENSOR_FIELDS = {3: "n_id", 4: "edge_index", 8: "input_id", 9: "x", 10: "y", 13: "edge_label_index"}


def _varint(b, i, end):
    v = shift = 0
    while True:
        if i >= end or shift > 63:
            raise TensorError(f"message: truncated or overlong varint at byte {i}")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def _skip(b, i, end, wt):
    """The end of a field's value of wire type wt starting at i."""
    if wt == 0:
        return _varint(b, i, end)[1]
    if wt == 1:
        j = i + 8
    elif wt == 5:
        j = i + 4
    elif wt == 2:
        n, i = _varint(b, i, end)
        j = i + n
    else:
        raise TensorError(f"message: wire type {wt} at byte {i}")
    if j > end:
        raise TensorError(f"message: a field runs past the end ({j} > {end})")
    return j


def _tensor_at(b, i, end, field):
    """The RawTensor of a Tensor message at b[i:end]."""
    dtype, shape, off, length = 0, [], i, 0
    while i < end:
        key, i = _varint(b, i, end)
        f, wt = key >> 3, key & 7
        if f == 1 and wt == 0:
            dtype, i = _varint(b, i, end)
        elif f == 2 and wt == 2:  # packed shape
            n, i = _varint(b, i, end)
            e = i + n
            if e > end:
                raise TensorError(f"{field}: shape runs past the message")
            while i < e:
                d, i = _varint(b, i, e)
                shape.append(d - (1 << 64) if d >= 1 << 63 else d)
        elif f == 2 and wt == 0:  # unpacked shape
            d, i = _varint(b, i, end)
            shape.append(d - (1 << 64) if d >= 1 << 63 else d)
        elif f == 3 and wt == 2:
            length, i = _varint(b, i, end)
            off = i
            i += length
            if i > end:
                raise TensorError(f"{field}: data runs past the message")
        else:
            i = _skip(b, i, end, wt)
    return RawTensor(dtype, shape, b, off, length)


class WireBatch:
    """A strata.v1.Batch parsed by parse_batch: its tensor fields are
    RawTensors, the rest the protobuf message ``m``."""

    def __init__(self, m, tensors):
        self._m = m
        self._t = tensors

    def __getattr__(self, name):
        t = self.__dict__.get("_t")
        if t is not None and name in t:
            return t[name]
        return getattr(self.__dict__["_m"], name)

    def HasField(self, name):  # noqa: N802 - protobuf's name
        return name in self._t or self._m.HasField(name)


def parse_batch(b):
    """A received Batch message (bytes): the tensors of its top-level
    tensor fields in place, the other fields through protobuf. Checked as
    protobuf would (every field within the message); decode checks each
    tensor's dtype and size."""
    if not isinstance(b, bytes):
        b = bytes(b)
    end = len(b)
    i, rest, tensors = 0, [], {}
    while i < end:
        start = i
        key, i = _varint(b, i, end)
        f, wt = key >> 3, key & 7
        if f == 0:
            raise TensorError(f"message: field number 0 at byte {start}")
        name = _TENSOR_FIELDS.get(f)
        if name is not None and wt == 2:
            n, i = _varint(b, i, end)
            if i + n > end:
                raise TensorError(f"{name}: runs past the message ({i + n} > {end})")
            tensors[name] = _tensor_at(b, i, i + n, name)
            i += n
        else:
            i = _skip(b, i, end, wt)
            rest.append(b[start:i])
    try:
        m = pb.Batch.FromString(b"".join(rest))
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, by implementation
        raise TensorError(f"message: {e}") from None
    return WireBatch(m, tensors)


def encode(a, field="tensor"):
    """Returns a strata.v1.Tensor holding the numpy array ``a``
    (int32, int64 or float32; converted to little-endian)."""
    a = np.ascontiguousarray(a)
    dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    code = _CODES.get(np.dtype(dt).str)
    if code is None:
        raise TensorError(f"{field}: dtype {a.dtype} is not int32, int64 or float32")
    return pb.Tensor(dtype=code, shape=list(a.shape), data=a.astype(dt.newbyteorder("<"), copy=False).tobytes())
