"""Server-client mode, security, failures and the child's lifetime."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
import torch

import strata_pyg
from conftest import ROOT, gone, reference
from strata_pyg import StrataError


def ids(batches):
    return [(b.n_id.tolist(), b.edge_index.tolist(), b.input_id.tolist()) for b in batches]


def test_server_client_mode(tiny, pygref_bin, server):
    a = server("--dataset", tiny, env={"STRATA_SERVE_SECRET": "k1"})
    b = server("--dataset", tiny, env={"STRATA_SERVE_SECRET": "k1"})
    kw = dict(num_neighbors=[4, 4], input_nodes="val", batch_size=50, shuffle=True, seed=9, secret="k1")
    with strata_pyg.NeighborLoader(a.address, **kw) as one, strata_pyg.NeighborLoader([a.address, b.address], **kw) as two:
        x1, x2 = list(one), list(two)
    ref = reference(pygref_bin, tiny, fanouts=[4, 4], batch_size=50, split="val", shuffle=True, seed=9, epoch=0)
    assert len(x1) == len(ref) == 9
    assert ids(x1) == ids(x2) == [(r["n_id"], [r["src"], r["dst"]], r["input_id"]) for r in ref]
    assert all(torch.equal(p.x, q.x) and torch.equal(p.y, q.y) for p, q in zip(x1, x2))


def test_remote_sampling_local_features(strata_bin, tmp_path, server):
    """A PyG Data with servers=[...]: sampled remotely, gathered locally."""
    import numpy as np
    g = torch.Generator().manual_seed(1)
    n = 300
    ei = torch.randint(0, n, (2, 2000), generator=g)
    d = tmp_path / "g"
    d.mkdir()
    np.save(d / "edge_index.npy", ei.numpy())
    s = server("--dataset", str(d), "--num-nodes", str(n))

    class Data:
        pass
    data = Data()
    data.edge_index, data.num_nodes, data.x = ei, n, torch.randn(n, 3, generator=g)
    with strata_pyg.NeighborLoader(data, num_neighbors=[3], batch_size=64, servers=[s.address], seed=2) as remote, \
            strata_pyg.NeighborLoader(data, num_neighbors=[3], batch_size=64, seed=2) as local:
        r, l = list(remote), list(local)
    assert ids(r) == ids(l) and len(r) == 5
    assert all(torch.equal(b.x, data.x[b.n_id]) for b in r)


def test_secret_refused(tiny, server):
    s = server("--dataset", tiny, env={"STRATA_SERVE_SECRET": "right"})
    for secret in (None, "wrong"):
        with pytest.raises(StrataError) as e:
            strata_pyg.NeighborLoader(s.address, num_neighbors=[2], secret=secret)
        assert e.value.code == "UNAUTHENTICATED" and s.address in str(e.value) and "secret" in str(e.value)


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d, name):
    """A CA and a client/server certificate for DNS name "strata"."""
    d.mkdir()
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-keyout", "ca.key", "-out", "ca.pem", "-subj", f"/CN={name}-ca", cwd=d)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "node.key",
            "-out", "node.csr", "-subj", "/CN=strata", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=DNS:strata\nextendedKeyUsage=serverAuth,clientAuth\n")
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "ext.cnf", "-out", "node.pem", cwd=d)
    return {"cert": str(d / "node.pem"), "key": str(d / "node.key"), "ca": str(d / "ca.pem")}


def test_mutual_tls(tiny, server, tmp_path):
    if subprocess.run(["openssl", "version"], capture_output=True).returncode != 0:
        pytest.skip("no openssl")
    mine, other = make_pki(tmp_path / "a", "a"), make_pki(tmp_path / "b", "b")
    s = server("--dataset", tiny, "--tls-cert", mine["cert"], "--tls-key", mine["key"], "--tls-ca", mine["ca"])
    with strata_pyg.NeighborLoader(s.address, num_neighbors=[2], batch_size=500, tls=mine) as L:
        assert len(list(L)) == 4
    for tls in (None, other):
        with pytest.raises(StrataError) as e:
            strata_pyg.NeighborLoader(s.address, num_neighbors=[2], tls=tls, request_timeout=10)
        assert e.value.code == "UNAVAILABLE" and s.address in str(e.value)


def test_killed_server(tiny):
    loader = strata_pyg.NeighborLoader(tiny, num_neighbors=[10, 10], batch_size=8, timeout=30)
    it = iter(loader)
    next(it)
    pid = loader._server.proc.pid
    os.kill(pid, signal.SIGKILL)
    t = time.monotonic()
    with pytest.raises(StrataError) as e:
        for _ in it:
            pass
    assert time.monotonic() - t < 30
    assert e.value.code == "EXITED" and f"pid {pid}" in str(e.value) and "-9" in str(e.value)
    loader.close()


def test_timeout(tiny):
    loader = strata_pyg.NeighborLoader(tiny, num_neighbors=[10, 10], batch_size=8, timeout=1)
    try:
        pid = loader._server.proc.pid
        os.kill(pid, signal.SIGSTOP)  # alive, silent
        end = time.monotonic() + 10
        while open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "T":
            assert time.monotonic() < end
            time.sleep(0.01)
        with pytest.raises(StrataError) as e:
            next(iter(loader))
        assert e.value.code == "TIMEOUT" and f"pid {pid}" in str(e.value)
    finally:
        os.kill(pid, signal.SIGCONT)
        loader.close()
    assert gone(pid)


def test_version_mismatch(tiny, server, monkeypatch):
    s = server("--dataset", tiny)
    monkeypatch.setattr(strata_pyg._rpc, "PROTOCOL_VERSION", 2)
    with pytest.raises(StrataError) as e:
        strata_pyg.NeighborLoader(s.address, num_neighbors=[2])
    assert e.value.code == "FAILED_PRECONDITION" and "protocol 2" in str(e.value) and s.address in str(e.value)


def test_oversize_batch(tiny, server):
    s = server("--dataset", "cora", "--max-message-mb", "1")
    # Every node with its 1,433 features: 15 MB.
    with strata_pyg.NeighborLoader(s.address, num_neighbors=[-1], batch_size=2708) as L:
        with pytest.raises(StrataError) as e:
            list(L)
    assert e.value.code == "RESOURCE_EXHAUSTED" and "over this server's limit" in str(e.value)


def metric(addr, name):
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def test_flow_control(server):
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        maddr = "127.0.0.1:%d" % sk.getsockname()[1]
    s = server("--dataset", "cora", "--metrics-listen", maddr)
    # 2,708 batches of one seed with the 1,433 features of its ~100-node
    # neighborhood: ~0.6 MB each, so the client's buffers hold few.
    L = strata_pyg.NeighborLoader(s.address, num_neighbors=[10, 10], batch_size=1, prefetch_factor=2, transport="grpc")
    it = iter(L)
    next(it)  # then stop reading
    end = time.monotonic() + 30
    S = len(L._conns)  # the loader's streams (4 by default), each blocked alike
    assert S == 4
    while metric(maddr, "strata_serve_blocked_streams") != S:
        assert time.monotonic() < end, "the stream never blocked on its client"
        time.sleep(0.02)
    produced = metric(maddr, "strata_serve_batch_seconds_count")
    sent = metric(maddr, "strata_serve_batches_total")
    # Each stream's queue holds its share of the prefetch batches (at
    # least 2); what it sent sits in gRPC's windows and the loader's own
    # prefetch queues.
    assert produced - sent <= 2 * S
    # gRPC sizes its windows from the measured bandwidth-delay product
    # (334 batches once here, under 300 before), so the bound is a quarter
    # of the epoch: a server without flow control samples all of it.
    assert produced < len(L) // 4, f"{produced} of {len(L)} batches sampled for a client that stopped reading"
    # Reading resumes the stream, in order.
    for i, b in zip(range(1, 200), it):
        assert b.input_id.tolist() == [i]
    L.close()


def test_child_gone_after_close(tiny):
    L = strata_pyg.NeighborLoader(tiny, num_neighbors=[2])
    pid, d = L._server.proc.pid, L._server.dir
    L.close()
    assert gone(pid, timeout=1) and not os.path.exists(d)
    # Dropped without close: the finalizer stops it.
    L = strata_pyg.NeighborLoader(tiny, num_neighbors=[2])
    pid = L._server.proc.pid
    del L
    import gc
    gc.collect()
    assert gone(pid)


def test_child_gone_when_trainer_is_killed(tiny, strata_bin):
    """SIGKILL the Python process: nobody runs close(), yet the server exits."""
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.join(ROOT, 'python')!r})
        import strata_pyg
        L = strata_pyg.NeighborLoader({tiny!r}, num_neighbors=[2])
        print(L._server.proc.pid, L._server.dir, flush=True)
        import time; time.sleep(600)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, STRATA_BIN=strata_bin))
    pid, d = p.stdout.readline().split()
    p.kill()
    p.wait()
    assert gone(int(pid)), f"strata serve {pid} outlived its killed parent"
    if d.startswith("/dev/shm/"):  # its ring directory: the server removes it (empty) on its way out
        assert not os.path.exists(d)
