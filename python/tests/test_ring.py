"""Worker mode's shared-memory ring: the same batches as the gRPC path,
zero-copy tensors, slot reuse, batches kept past their slot's reuse, a
stuck trainer, a killed server, and the header checks."""

import gc
import os
import random
import signal
import struct
import time
import zlib

import numpy as np
import pytest
import torch

import strata_pyg
from strata_pyg import StrataError, _ring
from conftest import gone

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm: worker mode uses gRPC")

KW = dict(num_neighbors=[5, 3], input_nodes="train", batch_size=40, shuffle=True, seed=3)


def fields(b):
    return (b.n_id.tolist(), b.edge_index.tolist(), b.input_id.tolist(), b.x.tolist(), b.y.tolist(),
            b.num_sampled_nodes, b.num_sampled_edges, b.batch_size)


def test_ring_equals_grpc(tiny):
    """The same seeds through the ring and through the socket: equal
    batches, dtypes included. list() keeps every batch, so each is moved
    out of the ring before its slot is reused."""
    with strata_pyg.NeighborLoader(tiny, num_workers=2, **KW) as shm, \
            strata_pyg.NeighborLoader(tiny, transport="grpc", num_workers=2, **KW) as grpc:
        assert shm.transport == "shm" and grpc.transport == "grpc"
        it = iter(shm)
        a = list(it)
        b = list(grpc)
    assert len(a) == len(b) == 16
    for x, y in zip(a, b):
        assert fields(x) == fields(y)
        assert x.n_id.dtype == x.edge_index.dtype == x.y.dtype == x.input_id.dtype == torch.int64
        assert x.x.dtype == torch.float32
    assert it.ring.detached == len(a)  # all kept by list()


def test_zero_copy_and_slot_reuse(tiny):
    """A training loop that drops each batch: tensors are views of the
    ring (no copy), the slots are reused in turn, and only the batch the
    loop variable holds at the end is moved out."""
    with strata_pyg.NeighborLoader(tiny, **KW) as L:
        it = iter(L)
        ptrs, n = [], 0
        for b in it:
            # n_id, edge_index and x in one slot, in that order.
            assert b.n_id.data_ptr() < b.edge_index.data_ptr() < b.x.data_ptr() < b.n_id.data_ptr() + it.ring.slot_bytes
            ptrs.append(b.n_id.data_ptr())
            n += 1
        ring = it.ring
        assert n == len(L) == 16
        assert 3 <= ring.slots < n
        # Slot k holds batches k, k + S, ...: the same address each time.
        assert len(set(ptrs)) == ring.slots
        assert all(ptrs[i] == ptrs[i % ring.slots] for i in range(n))
        assert ring.detached == 1
        last = b
    assert fields(last)[0] and last.n_id.data_ptr() == ptrs[-1]  # still readable after close


def test_kept_views_keep_their_values(tiny):
    """A view taken from an early batch (not the batch itself) survives
    the reuse of its slot."""
    with strata_pyg.NeighborLoader(tiny, transport="grpc", **KW) as L:
        ref = list(L)
    with strata_pyg.NeighborLoader(tiny, **KW) as L:
        kept = []
        for i, b in enumerate(L):
            kept.append((b.x[2:5], b.edge_index[1], b.n_id.numpy()[:7]))
        for (x, dst, ids), r in zip(kept, ref):
            assert x.tolist() == r.x[2:5].tolist() and dst.tolist() == r.edge_index[1].tolist()
            assert ids.tolist() == r.n_id[:7].tolist()


def test_pyg_data_worker_mode(strata_bin):
    """A PyG Data in worker mode: ids through the ring, x and y gathered
    locally; equal to the gRPC path."""
    g = torch.Generator().manual_seed(5)

    class Data:
        pass
    d = Data()
    d.num_nodes = 400
    d.edge_index = torch.randint(0, 400, (2, 3000), generator=g)
    d.x = torch.randn(400, 4, generator=g)
    d.y = torch.randint(0, 3, (400,), generator=g)
    kw = dict(num_neighbors=[4, 2], batch_size=30, shuffle=True, seed=1)
    with strata_pyg.NeighborLoader(d, **kw) as a, strata_pyg.NeighborLoader(d, transport="grpc", **kw) as b:
        assert a.transport == "shm"
        for p, q in zip(list(a), list(b)):
            assert fields(p) == fields(q)
            assert torch.equal(p.x, d.x[p.n_id])


def test_stuck_trainer(tiny):
    """A trainer that holds its batches past release_timeout: the server
    gives up on the stream and the loader raises one StrataError naming
    it and the cause."""
    L = strata_pyg.NeighborLoader(tiny, release_timeout=1, **KW)
    try:
        it = iter(L)
        held = [next(it), next(it)]  # kept: their slots cannot be reused
        time.sleep(2.5)
        with pytest.raises(StrataError) as e:
            for b in it:
                held.append(b)
        assert e.value.code == "DEADLINE_EXCEEDED" and "did not release ring slot" in str(e.value)
        assert f"pid {L._server.proc.pid}" in str(e.value)
        # The batches handed out stay valid.
        assert held[0].n_id.numel() > 0 and held[0].x.shape[0] == held[0].n_id.numel()
        # The loader still works: a new epoch, a new stream.
        assert len(list(L)) == 16
    finally:
        L.close()


def test_killed_server_in_ring_mode(tiny):
    L = strata_pyg.NeighborLoader(tiny, num_neighbors=[10, 10], batch_size=8, timeout=30)
    assert L.transport == "shm"
    it = iter(L)
    first = next(it)
    pid, d = L._server.proc.pid, L._server.dir
    os.kill(pid, signal.SIGKILL)
    t = time.monotonic()
    with pytest.raises(StrataError) as e:
        for _ in it:
            pass
    assert time.monotonic() - t < 30
    assert e.value.code == "EXITED" and f"pid {pid}" in str(e.value) and "-9" in str(e.value)
    assert first.n_id.tolist()  # a batch handed out before stays readable
    L.close()
    assert gone(pid, timeout=1) and not os.path.exists(d)


def test_close_mid_epoch_and_child_gone(tiny):
    L = strata_pyg.NeighborLoader(tiny, **KW)
    pid, d = L._server.proc.pid, L._server.dir
    it = iter(L)
    b = next(it)
    L.close()  # the epoch is abandoned with a batch in hand
    it.close()
    assert b.x.shape[0] == b.n_id.numel() and it.ring.detached == 1
    assert gone(pid, timeout=5) and not os.path.exists(d)
    del b, it
    gc.collect()


def _slot_header(entries, seq, used):
    """A slot header as the Go writer lays it out (shmring.WriteSlotHeader)."""
    h = bytearray(_ring.SLOT_HEADER_BYTES)
    h[:8] = _ring.SLOT_MAGIC
    struct.pack_into("<IIQQ", h, 8, _ring.VERSION, len(entries), seq, used)
    for i, (name, code, shape, off, nb) in enumerate(entries):
        o = 40 + i * 72
        h[o:o + len(name)] = name.encode()
        struct.pack_into("<II4qQQ", h, o + 16, code, len(shape), *(list(shape) + [0] * (4 - len(shape))), off, nb)
    crc = zlib.crc32(bytes(h[40:40 + 72 * len(entries)]), zlib.crc32(bytes(h[:36])))
    struct.pack_into("<I", h, 36, crc)
    return h


def test_slot_header_checks():
    entries = [("n_id", 2, (5,), 1024, 40), ("edge_index", 2, (2, 7), 1088, 112), ("x", 3, (5, 3), 1216, 60)]
    h = _slot_header(entries, 9, 1280)
    got = _ring.parse_slot_header(bytes(h), 8192, 9)
    assert [(n, s, o, b) for n, _, s, o, b in got] == [(n, s, o, b) for n, _, s, o, b in entries]
    for bad, why in [
        (_slot_header(entries, 8, 1280), "holds batch 8"),
        (_slot_header(entries, 9, 100), "bytes used"),
        (_slot_header([("n_id", 2, (5,), 1024, 41)], 9, 1280), "needs 40"),
        (_slot_header([("n_id", 2, (5,), 1000, 40)], 9, 1280), "misaligned"),
        (_slot_header([("n_id", 2, (5,), 1024, 40), ("x", 3, (2,), 1040, 8)], 9, 1280), "overlapping"),
        (_slot_header([("n_id", 2, (500,), 1024, 4000)], 9, 1280), "past"),
        (_slot_header([("n_id", 9, (5,), 1024, 40)], 9, 1280), "unknown dtype"),
        (_slot_header([("n_id", 2, (5,), 1024, 40), ("n_id", 2, (5,), 1088, 40)], 9, 1280), "repeats"),
        (_slot_header([("n_id", 2, (-5,), 1024, 40)], 9, 1280), "shape"),
        (bytes(8) + bytes(h[8:]), "magic"),
    ]:
        with pytest.raises(_ring.RingError, match=why):
            _ring.parse_slot_header(bytes(bad), 8192, 9, "slot 2")
    flipped = bytearray(h)
    flipped[40 + 72 + 30] ^= 1
    with pytest.raises(_ring.RingError, match="checksum"):
        _ring.parse_slot_header(bytes(flipped), 8192, 9)


def test_slot_header_fuzz():
    """Random corruptions of a valid header: a RingError, or tensors that
    lie within the slot; never another exception."""
    entries = [("n_id", 2, (5,), 1024, 40), ("edge_index", 2, (2, 7), 1088, 112), ("x", 3, (5, 3), 1216, 60)]
    base = _slot_header(entries, 3, 1280)
    rng = random.Random(0)
    accepted = 0
    for trial in range(3000):
        h = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            h[rng.randrange(0, 40 + 72 * 4)] = rng.randrange(256)
        if trial % 2:  # most checks sit behind the checksum: recompute it half the time
            count = struct.unpack_from("<I", h, 12)[0]
            if count <= 8:
                struct.pack_into("<I", h, 36, zlib.crc32(bytes(h[40:40 + 72 * count]), zlib.crc32(bytes(h[:36]))))
        try:
            got = _ring.parse_slot_header(bytes(h), 4096, 3)
        except _ring.RingError:
            continue
        accepted += 1
        end = 1024
        for name, dt, shape, off, nb in got:
            assert off >= end and off + nb <= 4096 and off % 64 == 0 and nb == int(np.prod(shape)) * dt.itemsize
            end = off + nb
    assert accepted < 3000


def test_ring_header_checks():
    h = bytearray(64)
    h[:8] = _ring.RING_MAGIC
    struct.pack_into("<IIQQ", h, 8, 1, 4, 8192, 77)
    struct.pack_into("<I", h, 32, zlib.crc32(bytes(h[:32])))
    assert _ring.parse_ring_header(bytes(h)) == (4, 8192, 77)
    for mutate, why in [(lambda b: struct.pack_into("<Q", b, 16, 5000), "slot size"),
                        (lambda b: struct.pack_into("<I", b, 12, 0), "slots"),
                        (lambda b: struct.pack_into("<I", b, 8, 2), "version")]:
        b = bytearray(h)
        mutate(b)
        struct.pack_into("<I", b, 32, zlib.crc32(bytes(b[:32])))
        with pytest.raises(_ring.RingError, match=why):
            _ring.parse_ring_header(bytes(b))
    b = bytearray(h)
    b[20] ^= 1
    with pytest.raises(_ring.RingError, match="checksum"):
        _ring.parse_ring_header(bytes(b))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_pinned_ring_on_gpu(tiny):
    """pin_memory=True registers the slots with CUDA: asynchronous copies
    to the GPU give the gRPC path's values."""
    with strata_pyg.NeighborLoader(tiny, pin_memory=True, **KW) as a, \
            strata_pyg.NeighborLoader(tiny, transport="grpc", **KW) as b:
        ref = list(b)
        it = iter(a)
        got = []
        for batch in it:
            assert it.ring.pin and batch.x.is_pinned()
            batch = batch.to("cuda", non_blocking=True)
            got.append((batch.x.cpu(), batch.n_id.cpu()))
        for (x, n_id), r in zip(got, ref):
            assert torch.equal(x, r.x) and torch.equal(n_id, r.n_id)


def test_shm_with_another_server(tiny, server, tmp_path):
    """transport="shm" with a server started by hand on this host with a
    ring directory: the ring file is the server's to remove, and an epoch
    that ends normally is no error in its metrics."""
    import socket
    import urllib.request
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        maddr = "127.0.0.1:%d" % sk.getsockname()[1]
    ring = tmp_path / "ring"
    ring.mkdir()
    s = server("--dataset", tiny, "--ring-dir", str(ring), "--metrics-listen", maddr)
    with strata_pyg.NeighborLoader(s.address, transport="shm", **KW) as L, \
            strata_pyg.NeighborLoader(s.address, transport="grpc", **KW) as G, \
            strata_pyg.NeighborLoader(s.address, **KW) as R:
        # auto: the server's own ring only for the loader's own child; a
        # server given by address goes through the loader's relay.
        assert L.transport == "shm" and G.transport == "grpc" and R.via_relay and not L.via_relay
        assert [fields(b) for b in L] == [fields(b) for b in G] == [fields(b) for b in R]
    text = urllib.request.urlopen(f"http://{maddr}/metrics", timeout=10).read().decode()
    assert "strata_serve_ring_bytes_total" in text and 'method="SampleShm"' not in text, text
    assert not list(ring.iterdir())
    with pytest.raises(ValueError, match="transport='shm' needs"):
        strata_pyg.NeighborLoader([s.address, s.address], num_neighbors=[2], transport="shm")
