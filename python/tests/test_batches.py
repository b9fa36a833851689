"""Batches equal to the Go sampler's (pygref), and PyG's conventions."""

import numpy as np
import pytest
import torch

import strata_pyg
from conftest import reference


def same(batch, ref):
    assert batch.n_id.tolist() == ref["n_id"]
    assert batch.edge_index.dtype == torch.int64 and batch.n_id.dtype == torch.int64
    assert batch.edge_index[0].tolist() == ref["src"]
    assert batch.edge_index[1].tolist() == ref["dst"]
    assert batch.num_sampled_nodes == ref["num_sampled_nodes"]
    assert batch.num_sampled_edges == ref["num_sampled_edges"]
    assert batch.input_id.tolist() == ref["input_id"]
    assert batch.batch_size == len(ref["input_id"])


@pytest.mark.parametrize("kw", [
    dict(world=1, rank=0, shuffle=True, drop_last=False),
    dict(world=3, rank=2, shuffle=True, drop_last=True),
    dict(world=2, rank=0, shuffle=False, drop_last=False),
])
def test_worker_mode_equals_go_sampler(tiny, pygref_bin, kw):
    loader = strata_pyg.NeighborLoader(tiny, num_neighbors=[5, 3, 2], input_nodes="train", batch_size=64,
                                       shuffle=kw["shuffle"], drop_last=kw["drop_last"], seed=7,
                                       rank=kw["rank"], world_size=kw["world"], num_workers=2)
    try:
        loader.set_epoch(3)
        got = list(loader)
        ref = reference(pygref_bin, tiny, fanouts=[5, 3, 2], batch_size=64, split="train", shuffle=kw["shuffle"],
                        seed=7, epoch=3, rank=kw["rank"], world=kw["world"], drop_last=kw["drop_last"])
        assert len(got) == len(ref) == len(loader) > 0
        for b, r in zip(got, ref):
            same(b, r)
            # Features and labels of n_id come from the server: check them
            # against its Features lookup.
            f = loader._conns[0].features(b.n_id.numpy().astype(np.int32), features=True, labels=True)
            assert torch.equal(b.x, torch.from_numpy(strata_pyg._tensor.decode(f.x, "x").copy()))
            assert b.y.tolist() == strata_pyg._tensor.decode(f.y, "y").tolist()
            assert b.x.shape == (len(r["n_id"]), 16)
    finally:
        loader.close()


def test_explicit_seeds_and_epochs(tiny, pygref_bin):
    seeds = torch.tensor([5, 17, 3, 1999, 40, 41, 42, 0, 8, 9, 10])
    loader = strata_pyg.NeighborLoader(tiny, num_neighbors=[-1, 2], input_nodes=seeds, batch_size=4, shuffle=True,
                                       seed=123)
    with loader:
        e0, e1 = list(loader), list(loader)  # epochs 0 and 1
        for epoch, got in ((0, e0), (1, e1)):
            ref = reference(pygref_bin, tiny, fanouts=[-1, 2], batch_size=4, seeds=seeds.tolist(), shuffle=True,
                            seed=123, epoch=epoch)
            assert len(got) == len(ref) == 3
            for b, r in zip(got, ref):
                same(b, r)
                assert torch.equal(b.n_id[:b.batch_size], seeds[b.input_id])
        assert [b.input_id.tolist() for b in e0] != [b.input_id.tolist() for b in e1]


def random_graph(n=500, e=4000, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)

    class Data:  # what the loader needs of a PyG Data
        pass
    d = Data()
    d.edge_index = ei
    d.num_nodes = n
    d.x = torch.randn(n, 6, generator=g)
    d.y = torch.randint(0, 4, (n,), generator=g)
    d.train_mask = torch.rand(n, generator=g) < 0.3
    return d


def test_pyg_data_conventions(strata_bin):
    d = random_graph()
    # The in-neighbors of every node, from edge_index (row 0 = source).
    nbrs = [set() for _ in range(d.num_nodes)]
    for s, t in d.edge_index.t().tolist():
        nbrs[t].add(s)
    fanouts = [4, 3]
    with strata_pyg.NeighborLoader(d, num_neighbors=fanouts, input_nodes=d.train_mask, batch_size=32,
                                   shuffle=True) as loader:
        train = d.train_mask.nonzero().view(-1)
        seen = []
        for b in loader:
            n_id, ei = b.n_id, b.edge_index
            assert torch.equal(n_id[:b.batch_size], train[b.input_id])
            seen += n_id[:b.batch_size].tolist()
            assert torch.equal(b.x, d.x[n_id]) and torch.equal(b.y, d.y[n_id]) and torch.equal(b.train_mask, d.train_mask[n_id])
            assert len(set(n_id.tolist())) == len(n_id) == sum(b.num_sampled_nodes)
            assert ei.size(1) == sum(b.num_sampled_edges)
            # Hop h: destinations are the nodes hop h-1 added, sources their
            # in-neighbors in the graph, all of them where there are few.
            lo, hi, e = 0, b.num_sampled_nodes[0], 0
            for h, ne in enumerate(b.num_sampled_edges):
                src, dst = ei[0, e:e + ne], ei[1, e:e + ne]
                assert bool(((dst >= lo) & (dst < hi)).all())
                for s, t in zip(n_id[src].tolist(), n_id[dst].tolist()):
                    assert s in nbrs[t]
                for local in range(lo, hi):
                    v = int(n_id[local])
                    assert int((dst == local).sum()) == min(len(nbrs[v]), fanouts[h])
                e += ne
                lo, hi = hi, hi + b.num_sampled_nodes[h + 1]
        assert sorted(seen) == train.tolist()


def test_data_ranks_cover_the_seeds(strata_bin):
    d = random_graph(seed=3)
    per_rank = []
    for r in range(3):
        with strata_pyg.NeighborLoader(d, num_neighbors=[2], batch_size=10, shuffle=True, rank=r, world_size=3) as L:
            bs = list(L)
            assert len(bs) == len(L)
            per_rank.append([v for b in bs for v in b.n_id[:b.batch_size].tolist()])
    assert len({len(p) for p in per_rank}) == 1  # equal counts per rank
    assert len(per_rank[0]) == 167  # ceil(500 / 3)
    assert set().union(*map(set, per_rank)) == set(range(500))


def test_unsupported_arguments(strata_bin, tiny):
    d = random_graph()
    for kw in (dict(disjoint=True), dict(subgraph_type="induced"), dict(weight_attr="w"), dict(time_attr="t"),
               dict(directed=False), dict(temporal_strategy="last"), dict(sampler=[1, 2]), dict(collate_fn=len),
               dict(worker_init_fn=print), dict(num_neighbors={("a", "b", "c"): [2]}), dict(num_neighbors=[0]),
               dict(input_nodes=("paper", torch.arange(3)))):
        args = dict(num_neighbors=[2], batch_size=4)
        args.update(kw)
        with pytest.raises(ValueError) as e:
            strata_pyg.NeighborLoader(d, **args)
        assert "strata_pyg" in str(e.value) or "num_neighbors" in str(e.value) or "input_nodes" in str(e.value)
    with pytest.raises(TypeError, match="unexpected argument 'bogus'"):
        strata_pyg.NeighborLoader(d, num_neighbors=[2], bogus=1)
    d.edge_attr = torch.zeros(d.edge_index.size(1), 3)
    with pytest.raises(ValueError, match="edge attributes"):
        strata_pyg.NeighborLoader(d, num_neighbors=[2])


def test_load_dataset_matches_the_server(tiny, pygref_bin):
    """A Strata dataset read into a Data, served from the Data (edges
    re-imported by the child server, x gathered locally): the same batches
    as the server over the dataset itself."""
    d = strata_pyg.load_dataset(tiny)
    assert d.num_nodes == 2000 and d.x.shape == (2000, 16) and d.edge_index.shape == (2, 18736)
    assert int(d.train_mask.sum()) == 608  # strata info: train [608]
    with strata_pyg.NeighborLoader(d, num_neighbors=[3, 3], input_nodes=d.train_mask, batch_size=100, seed=4) as L:
        got = list(L)
    ref = reference(pygref_bin, tiny, fanouts=[3, 3], batch_size=100, split="train", seed=4, epoch=0)
    assert len(got) == len(ref) == 7
    for b, r in zip(got, ref):
        same(b, r)
        assert torch.equal(b.x, d.x[b.n_id]) and torch.equal(b.y, d.y[b.n_id])


def test_transform_break_and_reuse(tiny):
    seen = []

    def transform(b):
        seen.append(b.batch_size)
        b.tag = "t"
        return b
    with strata_pyg.NeighborLoader(tiny, num_neighbors=[2], input_nodes="test", batch_size=100, drop_last=True,
                                   transform=transform, seed=1) as L:
        assert len(L) == 9  # 988 test nodes, drop_last
        for b in L:  # abandon the epoch after one batch
            assert b.tag == "t"
            break
        L.set_epoch(0)
        again = list(L)
        assert len(again) == 9 and all(b.batch_size == 100 for b in again)
        L.set_epoch(0)
        assert [b.input_id.tolist() for b in list(L)] == [b.input_id.tolist() for b in again]
    assert len(seen) == 1 + 9 + 9
