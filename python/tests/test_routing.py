"""Server-client mode over the servers of a partition: each seed goes to
the server of the part that owns it."""

import os

import numpy as np
import pytest
import torch

import strata_pyg
from strata_pyg import StrataError


def owners(off, ids):
    return np.searchsorted(off, ids.numpy(), side="right") - 1


@pytest.mark.parametrize("transport", ["relay", "grpc"])
def test_partition_routing(tiny_parts, server, transport):
    a = server("--dataset", tiny_parts, "--part", "0")
    b = server("--dataset", tiny_parts, "--part", "1")
    data = strata_pyg.load_dataset(os.path.join(tiny_parts, "dataset"))
    train = data.train_mask.nonzero().view(-1)
    kw = dict(num_neighbors=[3, 2], input_nodes="train", batch_size=50, shuffle=True, seed=2, num_workers=2,
              transport=transport)
    with strata_pyg.NeighborLoader([a.address, b.address], **kw) as L:
        assert L.routing == "partition" and L.via_relay == (transport == "relay")
        assert L.transport == ("shm" if L.via_relay else "grpc")
        off = L._offsets
        got = list(L)
        assert len(got) == len(L)
    counts = [int(((train >= off[p]) & (train < off[p + 1])).sum()) for p in range(2)]
    assert len(got) == sum(-(-c // 50) for c in counts)
    seen, parts = [], []
    for batch in got:
        seeds = batch.n_id[:batch.batch_size]
        own = set(owners(off, seeds).tolist())
        assert len(own) == 1, "a batch mixes the seeds of two parts"
        parts.append(own.pop())
        assert torch.equal(seeds, train[batch.input_id])
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
        seen += batch.input_id.tolist()
    assert sorted(seen) == list(range(len(train)))
    # One batch of each part in turn while both have batches left.
    k = 2 * min(-(-c // 50) for c in counts)
    assert parts[:k] == [0, 1] * (k // 2)

    # Seeds given as a tensor are counted and routed the same way.
    seeds = torch.tensor([5, 1990, 17, 3, 1500, 999, 1000, 42, 1200])
    with strata_pyg.NeighborLoader([b.address, a.address], num_neighbors=[2], input_nodes=seeds, batch_size=2,
                                   transport=transport) as L:
        got = list(L)
        assert len(got) == len(L) == 5  # part 0 owns some of them, part 1 the rest: ceil each by 2
    assert sorted(v for g in got for v in g.input_id.tolist()) == list(range(len(seeds)))
    for g in got:
        assert torch.equal(g.n_id[:g.batch_size], seeds[g.input_id])
        assert len(set(owners(off, g.n_id[:g.batch_size]).tolist())) == 1

    # Round-robin over the same servers (each holds the whole graph):
    # the batches of one server serving the whole epoch.
    kw = dict(num_neighbors=[2], input_nodes="val", batch_size=64, seed=1, transport=transport)
    with strata_pyg.NeighborLoader([a.address, b.address], routing="round_robin", **kw) as rr, \
            strata_pyg.NeighborLoader(a.address, **kw) as one:
        assert rr.routing == "round_robin"
        assert [x.n_id.tolist() for x in rr] == [x.n_id.tolist() for x in one]


def test_partition_mismatches(tiny_parts, tiny, server):
    a = server("--dataset", tiny_parts, "--part", "0")
    whole = server("--dataset", os.path.join(tiny_parts, "dataset"))
    for addrs, routing, why in [([a.address, a.address], None, "serves part 0, as"),
                                ([a.address], "partition", "no server for part(s) [1]"),
                                ([a.address, whole.address], "partition", "owns no part")]:
        with pytest.raises(StrataError) as e:
            strata_pyg.NeighborLoader(addrs, num_neighbors=[2], routing=routing)
        assert e.value.code == "MISMATCH" and why in str(e.value), str(e.value)
    # Without routing= a mixed set is round-robin.
    with strata_pyg.NeighborLoader([a.address, whole.address], num_neighbors=[2], batch_size=500) as L:
        assert L.routing == "round_robin" and len(list(L)) == 4
    with pytest.raises(ValueError, match="routing"):
        strata_pyg.NeighborLoader(a.address, num_neighbors=[2], routing="by-owner")
