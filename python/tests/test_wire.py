"""Batches over gRPC: parsed in place (no copies), bfloat16 features on the
wire, several streams per server, loader.stats(); the same batches
whatever the wire options."""

import random

import numpy as np
import pytest
import torch

import strata_pyg
from strata_pyg import _tensor
from strata_pyg._pb import sampler_pb2 as pb

# transport="grpc": these are the batches read in Python off the wire (the
# relay's, through a ring, are test_relay.py's).
KW = dict(num_neighbors=[4, 3], input_nodes="train", batch_size=40, shuffle=True, seed=5, num_workers=2,
          transport="grpc")
WKW = dict(KW, transport="auto")  # worker mode: the child's ring


def ids(b):
    return (b.n_id.tolist(), b.edge_index.tolist(), b.input_id.tolist(), b.y.tolist(), b.num_sampled_nodes,
            b.num_sampled_edges, b.batch_size)


def test_wire_options_give_equal_batches(tiny, server):
    s = server("--dataset", tiny)
    with strata_pyg.NeighborLoader(s.address, streams=1, **KW) as plain, \
            strata_pyg.NeighborLoader(s.address, streams=3, **KW) as three, \
            strata_pyg.NeighborLoader(s.address, **KW) as default, \
            strata_pyg.NeighborLoader(s.address, feature_dtype="bfloat16", **KW) as half:
        a, b, c, d = list(plain), list(three), list(half), list(default)
        sa, sb, sc = plain.stats(), three.stats(), half.stats()
        assert len(three._conns) == 3 and three.routing == "round_robin"
        # One server by address: four streams by default, which share
        # num_workers (2; at least one each) and the prefetch depth (4; at
        # least two each).
        assert len(default._conns) == 4 and len(plain._conns) == 1
        assert (default._request(0, 0).workers, default._request(0, 0).prefetch) == (1, 2)
        assert (three._request(0, 0).workers, three._request(0, 0).prefetch) == (1, 2)
        assert (plain._request(0, 0).workers, plain._request(0, 0).prefetch) == (2, 4)
    assert len(a) == len(b) == len(c) == len(d) == len(plain) > 5
    for p, q, r, t in zip(a, b, c, d):
        assert ids(p) == ids(q) == ids(r) == ids(t)
        assert torch.equal(p.x, q.x) and torch.equal(p.x, t.x)
        # bfloat16 on the wire: x rounded to nearest even, widened back.
        assert r.x.dtype == torch.float32 and torch.equal(r.x, p.x.to(torch.bfloat16).float())
        assert not torch.equal(r.x, p.x)  # the option took effect
        assert p.n_id.dtype == p.edge_index.dtype == p.y.dtype == p.input_id.dtype == torch.int64
    for st in (sa, sb, sc):
        assert st["batches"] == len(a) and st["transport"] == "grpc"
        assert st["server_sample_s"] > 0 and st["server_encode_s"] > 0 and st["server_slot_wait_s"] == 0
    x_bytes = sum(p.x.numel() for p in a) * 4
    assert sa["wire_bytes"] > x_bytes and sc["wire_bytes"] < sa["wire_bytes"] - x_bytes // 2 + x_bytes // 8


def test_batches_are_writable_and_private(tiny, server):
    """x is a view of the received message, writable; writing it changes
    only that batch."""
    s = server("--dataset", tiny)
    with strata_pyg.NeighborLoader(s.address, **KW) as L, strata_pyg.NeighborLoader(s.address, **KW) as M:
        first, again = list(L), list(M)  # both epoch 0: the same batches
    b = first[0]
    b.x[0, 0] = 1234.5
    b.input_id[0] = -7
    assert b.x[0, 0] == 1234.5 and b.input_id[0] == -7
    assert again[0].x[0, 0] != 1234.5 and torch.equal(again[1].x, first[1].x)


def test_wire_option_refusals(tiny, server):
    s = server("--dataset", tiny)
    for bad in ("float16", torch.int32, "bf16", [1], 0):
        with pytest.raises(ValueError, match="feature_dtype"):
            strata_pyg.NeighborLoader(s.address, feature_dtype=bad, **KW)
    for bad in (0, 17, 1.5, True):
        with pytest.raises(ValueError, match="streams"):
            strata_pyg.NeighborLoader(s.address, streams=bad, **KW)
    with pytest.raises(ValueError, match="round-robin"):
        strata_pyg.NeighborLoader(s.address, streams=2, routing="partition", **KW)
    with pytest.raises(ValueError, match="device"):
        strata_pyg.NeighborLoader(s.address, device="gpu7", **KW)
    with pytest.raises(ValueError, match="server-client"):
        strata_pyg.NeighborLoader(tiny, streams=2, **KW)

    class Data:
        pass
    d = Data()
    d.edge_index, d.num_nodes, d.x = torch.tensor([[0, 1], [1, 0]]), 2, torch.zeros(2, 3)
    with pytest.raises(ValueError, match="bfloat16"):
        strata_pyg.NeighborLoader(d, num_neighbors=[2], batch_size=1, feature_dtype="bfloat16")


def _message():
    m = pb.Batch(index=2, num_batches=5, batch_size=3, num_sampled_nodes=[3, 4], num_sampled_edges=[6],
                 n_id=_tensor.encode(np.arange(7, dtype=np.int32)),
                 edge_index=_tensor.encode(np.arange(12, dtype=np.int32).reshape(2, 6) % 7),
                 input_id=_tensor.encode(np.arange(3, dtype=np.int64)),
                 x=_tensor.encode(np.arange(14, dtype=np.float32).reshape(7, 2)), note="n")
    m.timing.sample_ns = 11
    return m


def test_parse_batch_equals_protobuf():
    m = _message()
    w = _tensor.parse_batch(m.SerializeToString())
    assert (w.index, w.num_batches, w.batch_size, list(w.num_sampled_nodes), w.note, w.timing.sample_ns) == \
        (2, 5, 3, [3, 4], "n", 11)
    assert w.HasField("x") and w.HasField("n_id") and not w.HasField("y") and not w.HasField("shm")
    for f in ("n_id", "edge_index", "input_id", "x"):
        assert np.array_equal(_tensor.decode(getattr(w, f), f), _tensor.decode(getattr(m, f), f))
    x = _tensor.to_torch(w.x, "x", writable=True)
    x[0, 0] = 9
    assert _tensor.decode(w.x, "x")[0, 0] == 9  # a view: no copy
    # bfloat16 features are widened to float32.
    t = pb.Tensor(dtype=pb.DTYPE_BFLOAT16, shape=[2], data=np.array([0x3F80, 0xC000], dtype="<u2").tobytes())
    assert _tensor.to_torch(t, "x").tolist() == [1.0, -2.0]


def test_parse_batch_fuzz():
    """Random corruptions and truncations of a valid message: a
    TensorError, or fields whose tensors lie within the message; never
    another exception."""
    base = _message().SerializeToString()
    rng = random.Random(1)
    accepted = 0
    for trial in range(3000):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        if trial % 3 == 0:
            b = b[:rng.randrange(len(b))]
        try:
            w = _tensor.parse_batch(bytes(b))
            for f in ("n_id", "edge_index", "input_id", "x", "y"):
                if w.HasField(f):
                    t = getattr(w, f)
                    assert 0 <= t.offset and t.offset + t.length <= len(b)
                    try:
                        _tensor.decode(t, f)
                    except _tensor.TensorError:
                        pass
        except _tensor.TensorError:
            continue
        accepted += 1
    assert 0 < accepted < 3000


@pytest.mark.skipif(not __import__("os").path.isdir("/dev/shm"), reason="no /dev/shm")
def test_narrow_ring_ids_and_device(tiny):
    """int32 IDs in the ring slots (what device='cuda' asks for), widened
    by the loader: the batches of the int64 ring."""
    with strata_pyg.NeighborLoader(tiny, **WKW) as wide, strata_pyg.NeighborLoader(tiny, device="cpu", **WKW) as narrow:
        narrow._narrow_ids = True
        assert wide.transport == narrow.transport == "shm"
        a = list(wide)
        it = iter(narrow)
        b = list(it)
        assert narrow.stats()["server_encode_s"] > 0
    assert len(a) == len(b) > 5
    for p, q in zip(a, b):
        assert ids(p) == ids(q) and torch.equal(p.x, q.x)
        assert q.n_id.dtype == q.edge_index.dtype == q.y.dtype == torch.int64
    # On the CPU, x stays a view of its slot (kept by list(): moved out),
    # while the IDs were widened into copies.
    assert it.ring.detached == len(b)


@pytest.mark.skipif(not __import__("os").path.isdir("/dev/shm"), reason="no /dev/shm")
def test_ring_without_reader_thread(tiny):
    """reader_thread=False: the trainer's thread reads the ring's
    messages; the same batches, kept ones moved out of the ring."""
    with strata_pyg.NeighborLoader(tiny, **WKW) as a, strata_pyg.NeighborLoader(tiny, reader_thread=False, **WKW) as b:
        x = list(a)
        it = iter(b)
        y = list(it)
        assert it.inline and [t.name for t in it.threads] == ["strata_pyg-watch"]
        assert b.stats()["batches"] == len(y) and b.stats()["server_sample_s"] > 0
    assert len(x) == len(y) > 5
    for p, q in zip(x, y):
        assert ids(p) == ids(q) and torch.equal(p.x, q.x)
    assert it.ring.detached == len(y)


@pytest.mark.skipif(not __import__("os").path.isdir("/dev/shm"), reason="no /dev/shm")
def test_ring_without_reader_thread_failures(tiny):
    """A silent server: TIMEOUT after the timeout; a killed one: EXITED."""
    import os
    import signal
    import time
    from conftest import gone
    L = strata_pyg.NeighborLoader(tiny, num_neighbors=[10, 10], batch_size=8, timeout=1, reader_thread=False)
    pid = L._server.proc.pid
    try:
        os.kill(pid, signal.SIGSTOP)
        end = time.monotonic() + 10
        while open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "T":
            assert time.monotonic() < end
            time.sleep(0.01)
        t = time.monotonic()
        with pytest.raises(strata_pyg.StrataError) as e:
            next(iter(L))
        assert e.value.code == "TIMEOUT" and f"pid {pid}" in str(e.value) and time.monotonic() - t < 10
    finally:
        os.kill(pid, signal.SIGCONT)
        L.close()
    assert gone(pid)
    L = strata_pyg.NeighborLoader(tiny, num_neighbors=[10, 10], batch_size=8, timeout=30, reader_thread=False)
    it = iter(L)
    next(it)
    pid = L._server.proc.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(strata_pyg.StrataError) as e:
        for _ in it:
            pass
    assert e.value.code == "EXITED" and f"pid {pid}" in str(e.value)
    L.close()


def test_link_batches_over_the_wire_options(tiny, server):
    """Link batches (edge_label_index in the message) parsed in place, with
    bfloat16 features and two streams: the plain ones, x rounded."""
    s = server("--dataset", tiny)
    kw = dict(num_neighbors=[3, 2], batch_size=200, shuffle=True, seed=4, neg_sampling_ratio=1.0)
    with strata_pyg.LinkNeighborLoader(s.address, **kw) as a, \
            strata_pyg.LinkNeighborLoader(s.address, feature_dtype="bfloat16", streams=2, **kw) as b:
        x, y = list(a), list(b)
    assert len(x) == len(y) > 3
    for p, q in zip(x, y):
        assert p.n_id.tolist() == q.n_id.tolist() and p.edge_index.tolist() == q.edge_index.tolist()
        assert p.edge_label_index.tolist() == q.edge_label_index.tolist() and torch.equal(p.edge_label, q.edge_label)
        assert p.edge_label_index.dtype == torch.int64
        assert torch.equal(q.x, p.x.to(torch.bfloat16).float())


def _loader_with_stage(addr, stage, **kw):
    L = strata_pyg.NeighborLoader(addr, **kw)
    L._stage = stage  # the staging a CUDA device= (narrow) or pin_memory (wide) picks, here unpinned
    return L


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_staged_decode_gives_equal_batches(tiny, server, dtype):
    """The decode that copies a gRPC batch out of its message (what
    device="cuda" and pin_memory use, pinned there): in the wire's types,
    widened afterwards, or widened while copying: the tensors of the
    in-place decode, in PyG's dtypes, over several streams (a reader
    thread each)."""
    s = server("--dataset", tiny)
    kw = dict(KW, feature_dtype=dtype, streams=2)
    with strata_pyg.NeighborLoader(s.address, **kw) as plain, \
            _loader_with_stage(s.address, (False, True), **kw) as narrow, \
            _loader_with_stage(s.address, (False, False), **kw) as wide:
        a, b, c = list(plain), list(narrow), list(wide)
        assert len(narrow.stats()) and narrow.stats()["batches"] == len(b)
    assert len(a) == len(b) == len(c) == len(plain) > 5
    for p, q, r in zip(a, b, c):
        assert ids(p) == ids(q) == ids(r)
        for t in (q, r):
            assert torch.equal(t.x, p.x) and torch.equal(t.input_id, p.input_id)
            assert t.x.dtype == torch.float32
            assert t.n_id.dtype == t.edge_index.dtype == t.y.dtype == t.input_id.dtype == torch.int64


def test_to_host_matches_decode():
    """_tensor.to_host: the values of decode, in the wire's type or
    converted, bfloat16 as torch.bfloat16; bad tensors refused alike."""
    ids = np.array([5, -1, 2**31 - 1, 0], dtype=np.int32)
    t = _tensor.encode(ids)
    assert _tensor.to_host(t, "n_id").dtype == torch.int32
    assert _tensor.to_host(t, "n_id").tolist() == ids.tolist()
    assert _tensor.to_host(t, "n_id", torch.int64).dtype == torch.int64
    assert _tensor.to_host(t, "n_id", torch.int64).tolist() == ids.tolist()
    x = torch.tensor([[1.0, -2.5, 3.0e-3], [65504.0, 1e-20, 7.0]])
    h = x.to(torch.bfloat16)
    wire = pb.Tensor(dtype=pb.DTYPE_BFLOAT16, shape=[2, 3], data=h.view(torch.int16).numpy().tobytes())
    assert torch.equal(_tensor.to_host(wire, "x"), h)
    assert torch.equal(_tensor.to_host(wire, "x", torch.float32), h.float())
    empty = _tensor.encode(np.zeros((2, 0), dtype=np.int32))
    assert list(_tensor.to_host(empty, "edge_index", torch.int64).shape) == [2, 0]
    with pytest.raises(_tensor.TensorError, match="x"):
        _tensor.to_host(pb.Tensor(dtype=pb.DTYPE_BFLOAT16, shape=[2, 3], data=b"\0" * 10), "x")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pinned_and_device_decode(tiny, server):
    """CUDA: pin_memory stages a gRPC batch in pinned memory (widened on
    the host), device="cuda" uploads bfloat16 and int32 and widens on the
    GPU; both equal the plain batch."""
    s = server("--dataset", tiny)
    kw = dict(KW, feature_dtype="bfloat16", streams=2)
    with strata_pyg.NeighborLoader(s.address, **kw) as plain, \
            strata_pyg.NeighborLoader(s.address, pin_memory=True, **kw) as pinned, \
            strata_pyg.NeighborLoader(s.address, device="cuda", **kw) as dev:
        assert pinned._stage == (True, False) and dev._stage == (True, True)
        a, b, c = list(plain), list(pinned), list(dev)
    assert len(a) == len(b) == len(c) > 5
    for p, q, r in zip(a, b, c):
        assert q.x.is_pinned() and q.n_id.is_pinned() and q.x.dtype == torch.float32
        assert r.x.is_cuda and r.x.dtype == torch.float32 and r.n_id.dtype == torch.int64
        assert ids(p) == ids(q) == ids(r)
        assert torch.equal(q.x, p.x) and torch.equal(r.x.cpu(), p.x)
