"""Server-client mode through the loader's relay (a `strata relay` child
that receives the servers' batches in Go and writes them into a
shared-memory ring): the same batches as the gRPC path, its failures, its
lifetime, its flow control."""

import os
import signal
import time

import pytest
import torch

import strata_pyg
from conftest import gone
from strata_pyg import StrataError
from test_servers import metric

KW = dict(num_neighbors=[4, 3], input_nodes="train", batch_size=40, shuffle=True, seed=5, num_workers=2)


def fields(b):
    return (b.n_id.tolist(), b.edge_index.tolist(), b.input_id.tolist(), b.y.tolist(), b.num_sampled_nodes,
            b.num_sampled_edges, b.batch_size)


def test_relay_equals_grpc(tiny, server):
    a = server("--dataset", tiny, env={"STRATA_SERVE_SECRET": "k2"})
    b = server("--dataset", tiny, env={"STRATA_SERVE_SECRET": "k2"})
    kw = dict(KW, secret="k2")
    for data, opts in [(a.address, {}), (a.address, dict(feature_dtype="bfloat16")),
                       ([a.address, b.address], {}), (a.address, dict(streams=3))]:
        with strata_pyg.NeighborLoader(data, **kw, **opts) as R, \
                strata_pyg.NeighborLoader(data, transport="grpc", **kw, **opts) as G:
            assert R.via_relay and not G.via_relay and R.transport == "shm"
            assert "transport='relay'" in repr(R) and a.address in repr(R) and "strata relay" in R._server.name
            r, g = list(R), list(G)
            assert R.stats()["transport"] == "relay" and G.stats()["transport"] == "grpc"
            assert R.stats()["wire_bytes"] == 0 and R.stats()["server_encode_s"] > 0
        assert len(r) == len(g) == len(R) > 5, opts
        for p, q in zip(r, g):
            assert fields(p) == fields(q), opts
            assert torch.equal(p.x, q.x) and p.x.dtype == torch.float32
            assert p.n_id.dtype == p.edge_index.dtype == p.y.dtype == torch.int64


def test_relay_refusals(tiny, server):
    with pytest.raises(ValueError, match="transport='relay' is for servers given by address"):
        strata_pyg.NeighborLoader(tiny, num_neighbors=[2], transport="relay")
    s = server("--dataset", tiny, env={"STRATA_SERVE_SECRET": "right"})
    # The relay's upstream secret is the loader's: a wrong one is the
    # server's refusal, named.
    with pytest.raises(StrataError) as e:
        strata_pyg.NeighborLoader(s.address, num_neighbors=[2], secret="wrong", transport="relay")
    assert e.value.code == "UNAUTHENTICATED" and s.address in str(e.value)


def test_relay_gone_after_close(tiny, server):
    s = server("--dataset", tiny)
    L = strata_pyg.NeighborLoader(s.address, **KW)
    next(iter(L))
    pid, d = L._server.proc.pid, L._server.dir
    L.close()
    assert gone(pid, timeout=5) and not os.path.exists(d)
    L = strata_pyg.NeighborLoader(s.address, **KW)
    pid = L._server.proc.pid
    del L
    import gc
    gc.collect()
    assert gone(pid)


def test_relay_killed_server(server):
    """A remote server killed mid-epoch: one StrataError naming it."""
    s = server("--dataset", "cora")
    L = strata_pyg.NeighborLoader(s.address, num_neighbors=[10, 10], batch_size=1, timeout=30)
    it = iter(L)
    next(it)
    s.proc.kill()
    t = time.monotonic()
    with pytest.raises(StrataError) as e:
        for _ in it:
            pass
    assert time.monotonic() - t < 30
    assert e.value.code == "UNAVAILABLE" and f"server {s.address}" in str(e.value), str(e.value)
    pid = L._server.proc.pid
    L.close()
    assert gone(pid, timeout=5)


def test_relay_flow_control(server):
    """A trainer that stops reading stops the relay (its ring's slots are
    all held), then the remote server (its streams block on the relay's
    windows), a few batches ahead at most; reading resumes in order."""
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        maddr = "127.0.0.1:%d" % sk.getsockname()[1]
    s = server("--dataset", "cora", "--metrics-listen", maddr)
    L = strata_pyg.NeighborLoader(s.address, num_neighbors=[10, 10], batch_size=1, prefetch_factor=2)
    assert L.via_relay and L.streams == 4
    it = iter(L)
    next(it)
    # Sampling stops: every stream of the server blocked, the count of
    # sampled batches still. They sit in the server's queues, the relay's
    # 8 MiB windows (4 streams), its hand and the ring's slots.
    end, prev = time.monotonic() + 30, -1
    while True:
        produced = metric(maddr, "strata_serve_batch_seconds_count")
        if produced == prev and metric(maddr, "strata_serve_blocked_streams") == 4:
            break
        assert time.monotonic() < end, "the server's streams never stopped for the relay"
        prev = produced
        time.sleep(0.5)
    assert produced < 1000, f"{produced} of 2708 batches sampled for a client that stopped reading"
    for i, b in zip(range(1, 200), it):
        assert b.input_id.tolist() == [i]
    L.close()


def test_relay_gone_when_trainer_is_killed(tiny, server, strata_bin):
    """SIGKILL the trainer: nobody runs close(), yet the relay exits and
    removes its ring directory."""
    import subprocess
    import sys
    import textwrap
    from conftest import ROOT
    s = server("--dataset", tiny)
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.join(ROOT, 'python')!r})
        import strata_pyg
        L = strata_pyg.NeighborLoader({s.address!r}, num_neighbors=[2])
        assert L.via_relay
        next(iter(L))
        print(L._server.proc.pid, L._server.dir, flush=True)
        import time; time.sleep(600)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, STRATA_BIN=strata_bin))
    pid, d = p.stdout.readline().split()
    p.kill()
    p.wait()
    assert gone(int(pid)), f"strata relay {pid} outlived its killed parent"
    end = time.monotonic() + 10
    while os.path.exists(d):  # removed once the relay is down
        assert time.monotonic() < end, f"{d} left behind"
        time.sleep(0.05)
