"""LinkNeighborLoader (edge-seeded batches with server-drawn negatives)
and typed graphs (HeteroData batches): equal to the Go references
(pygref --link, --typed) for the same seeds, in worker and server-client
modes."""

import subprocess

import numpy as np
import pytest
import torch

import strata_pyg
from conftest import reference
from test_batches import random_graph


@pytest.fixture(scope="session")
def hetero(strata_bin, tmp_path_factory):
    """The generated typed "hetero" dataset: papers, authors, fields."""
    d = str(tmp_path_factory.mktemp("data") / "hetero")
    subprocess.run([strata_bin, "--quiet", "gen", d, "--preset", "hetero"], check=True, stdout=subprocess.DEVNULL)
    return d


def tiny_edges(tiny, tmp_path, step=5):
    """Every step-th edge of tiny, and a file of them for pygref."""
    d = strata_pyg.load_dataset(tiny)
    ei = d.edge_index[:, ::step].contiguous()
    path = str(tmp_path / "edges.txt")
    with open(path, "w") as f:
        f.write("\n".join(f"{u} {v}" for u, v in ei.t().tolist()))
    return d, ei, path


def check_link(b, r, ei, exclude=False, edges=None):
    assert b.n_id.tolist() == r["n_id"]
    assert b.edge_index[0].tolist() == r["src"] and b.edge_index[1].tolist() == r["dst"]
    assert b.num_sampled_nodes == r["num_sampled_nodes"] and b.num_sampled_edges == r["num_sampled_edges"]
    assert b.input_id.tolist() == r["input_id"]
    assert b.edge_label_index.tolist() == r["edge_label_index"]
    assert not hasattr(b, "batch_size") or "batch_size" not in b.keys()
    P = b.input_id.numel()
    glob = b.n_id[b.edge_label_index]
    # The relabelled positives are the edges input_id names.
    assert torch.equal(glob[:, :P], ei[:, b.input_id])
    # The seeds: the distinct endpoints, ascending, first in n_id.
    ends = torch.unique(glob)
    assert torch.equal(b.n_id[:ends.numel()], ends)
    assert b.num_sampled_nodes[0] == ends.numel()
    if exclude:
        for u, v in glob[:, P:].t().tolist():
            assert u != v and (u, v) not in edges


@pytest.mark.parametrize("mode", ["worker", "server", "server-grpc"])
def test_link_equals_go_sampler(tiny, pygref_bin, server, tmp_path, mode):
    """server: through the loader's relay into its ring; server-grpc: the
    servers' messages read in Python."""
    d, ei, path = tiny_edges(tiny, tmp_path)
    data = tiny if mode == "worker" else server("--dataset", tiny).address
    known = set(map(tuple, d.edge_index.t().tolist()))
    for amount, exclude in ((2.0, True), (0.5, False)):
        with strata_pyg.LinkNeighborLoader(data, num_neighbors=[4, 2], edge_label_index=ei, batch_size=64,
                                           shuffle=True, neg_sampling=dict(mode="binary", amount=amount),
                                           neg_exclude=exclude, seed=11, num_workers=2,
                                           transport="grpc" if mode == "server-grpc" else "auto") as L:
            assert L.via_relay == (mode == "server")
            assert L.transport == ("shm" if (mode == "worker" and L._infos[0].shm) or L.via_relay else "grpc")
            L.set_epoch(2)
            got = list(L)
        ref = reference(pygref_bin, tiny, link=True, edges=path, neg_amount=amount, neg_exclude=exclude,
                        fanouts=[4, 2], batch_size=64, shuffle=True, seed=11, epoch=2)
        assert len(got) == len(ref) == len(L) == -(-ei.size(1) // 64)
        for b, r in zip(got, ref):
            check_link(b, r, ei, exclude, known)
            P = b.input_id.numel()
            N = b.edge_label_index.size(1) - P
            assert N == int(np.ceil(amount * P))
            assert b.edge_label.tolist() == [1.0] * P + [0.0] * N
            assert b.x.shape == (b.n_id.numel(), 16) and b.y.shape == (b.n_id.numel(),)
        assert sorted(i for b in got for i in b.input_id.tolist()) == list(range(ei.size(1)))


def test_link_from_a_data(strata_bin):
    d = random_graph(seed=5)
    lab = torch.randint(0, 2, (d.edge_index.size(1),))
    with strata_pyg.LinkNeighborLoader(d, num_neighbors=[3], batch_size=100, edge_label=lab,
                                       neg_sampling_ratio=1.0, seed=2) as L:
        assert len(L) == 40
        seen = []
        for b in L:
            P = b.input_id.numel()
            seen += b.input_id.tolist()
            # edge_label: the given labels (shifted up: they hold zeros), then 0.
            assert b.edge_label.tolist() == (lab[b.input_id] + 1).tolist() + [0] * P
            assert torch.equal(b.n_id[b.edge_label_index[:, :P]], d.edge_index[:, b.input_id])
            assert torch.equal(b.x, d.x[b.n_id]) and torch.equal(b.y, d.y[b.n_id])
        assert sorted(seen) == list(range(4000))
    # No negatives, no labels: no edge_label (as PyG).
    with strata_pyg.LinkNeighborLoader(d, num_neighbors=[2], batch_size=1000, edge_label_index=d.edge_index[:, :10]) as L:
        (b,) = list(L)
        assert "edge_label" not in b.keys() and b.edge_label_index.shape == (2, 10)


def test_link_refusals(strata_bin, tiny):
    d = random_graph()
    for kw, says in ((dict(neg_sampling=dict(mode="triplet", amount=1)), "triplet"),
                     (dict(neg_sampling="binary", disjoint=True), "disjoint"),
                     (dict(edge_label_time=torch.zeros(4000)), "edge_label_time"),
                     (dict(neg_sampling=dict(mode="binary", amount=1, weight=torch.ones(500))), "weight"),
                     (dict(neg_sampling_ratio=-1), "amount"),
                     (dict(num_neighbors={("a", "b", "c"): [2]}), "typed"),
                     (dict(edge_label_index=("paper", torch.zeros(2, 3, dtype=torch.long))), "typed"),
                     (dict(edge_label_index=torch.tensor([[0, 1], [2, 500]])), "edge_label_index"),
                     (dict(edge_label=torch.ones(3)), "edge_label")):
        args = dict(num_neighbors=[2], batch_size=4)
        args.update(kw)
        with pytest.raises(ValueError, match=says):
            strata_pyg.LinkNeighborLoader(d, **args)


def typed_ref(pygref_bin, hetero, **kw):
    return reference(pygref_bin, hetero, **kw)


@pytest.mark.parametrize("mode", ["worker", "server"])
def test_typed_equals_go_sampler(hetero, pygref_bin, server, mode):
    data = hetero if mode == "worker" else server("--dataset", hetero).address
    nn = {("author", "writes", "paper"): [3, 2], "paper__has_topic__field": [2, 0],
          ("field", "rev_has_topic", "paper"): [2, 2]}  # paper->author left out: none
    with strata_pyg.NeighborLoader(data, num_neighbors=nn, input_nodes=("paper", "train"), batch_size=128,
                                   shuffle=True, seed=5, num_workers=2) as L:
        assert L.transport == "grpc" and L.node_types == ["paper", "author", "field"]
        rels = ["/".join(map(str, nn.get(et, nn.get("__".join(et), [0, 0])))) for et in L.edge_types]
        got = list(L)
    ref = typed_ref(pygref_bin, hetero, typed="paper", rel_fanouts="/".join(
        ",".join(r.split("/")) for r in rels), split="train", batch_size=128, shuffle=True, seed=5, epoch=0)
    assert len(got) == len(ref) == len(L) == 10  # 1,279 training papers
    dims = {"paper": 16, "author": 32, "field": 32}
    for b, r in zip(got, ref):
        assert b["paper"].batch_size == r["batch_size"] and b["paper"].input_id.tolist() == r["input_id"]
        for k, nt in enumerate(L.node_types):
            st = b[nt]
            assert st.n_id.tolist() == r["nodes"][k]["n_id"]
            assert st.num_sampled_nodes == r["nodes"][k]["num_sampled_nodes"]
            assert st.x.shape == (st.n_id.numel(), dims[nt]) and st.x.dtype == torch.float32
            assert hasattr(st, "y") == (nt == "paper")
        assert b["paper"].y.shape == (b["paper"].n_id.numel(),)
        for k, et in enumerate(L.edge_types):
            e = b[et]
            assert e.edge_index[0].tolist() == r["edges"][k]["src"] and e.edge_index[1].tolist() == r["edges"][k]["dst"]
            assert e.num_sampled_edges == r["edges"][k]["num_sampled_edges"]
            if e.edge_index.numel():
                assert int(e.edge_index[0].max()) < b[et[0]].n_id.numel()
                assert int(e.edge_index[1].max()) < b[et[2]].n_id.numel()
        assert b[("paper", "rev_writes", "author")].edge_index.numel() == 0
        assert set(b.x_dict) == {"paper", "author", "field"} and len(b.edge_index_dict) == 4


def test_typed_seeds_and_refusals(hetero, pygref_bin):
    seeds = torch.tensor([7, 3, 1999, 0, 12])
    with strata_pyg.NeighborLoader(hetero, num_neighbors=[2, 1], input_nodes=("author", seeds), batch_size=2,
                                   seed=1) as L:
        got = list(L)
        ref = typed_ref(pygref_bin, hetero, typed="author", fanouts=[2, 1], seeds=seeds.tolist(), batch_size=2, seed=1,
                        epoch=0)
        assert len(got) == len(ref) == 3
        for b, r in zip(got, ref):
            assert b["author"].n_id[:b["author"].batch_size].tolist() == seeds[b["author"].input_id].tolist()
            assert [b[t].n_id.tolist() for t in L.node_types] == [n["n_id"] for n in r["nodes"]]
        with pytest.raises(ValueError, match="input_nodes=\\(node type, nodes\\)"):
            L._typed_input(torch.arange(3))
    for kw, says in ((dict(input_nodes=("venue", None)), "no node type"),
                     (dict(input_nodes=("author", "train")), "labeled node type"),
                     (dict(input_nodes="paper", num_neighbors={("a", "b", "c"): [1]}), "no edge type"),
                     (dict(input_nodes="paper", num_neighbors={"author__writes__paper": [1], "paper__has_topic__field": [1, 1]}), "one fanout per hop"),
                     (dict(input_nodes="paper", transport="shm"), "typed batches")):
        args = dict(num_neighbors=[2], batch_size=4)
        args.update(kw)
        with pytest.raises(ValueError, match=says):
            strata_pyg.NeighborLoader(hetero, **args)
