"""strata_pyg.LinkNeighborLoader: PyG's LinkNeighborLoader, with the edge
batches, their negatives and the neighborhoods of their endpoints made by
a Strata server."""

import math

import numpy as np
import torch

from ._pb import sampler_pb2 as pb
from ._tensor import encode
from .errors import StrataError
from .loader import NeighborLoader

# Request bytes around edge_label_index (the other fields are small).
_REQUEST_SLACK = 4096


def _neg_sampling(neg_sampling, neg_sampling_ratio):
    """(amount, exclude-unset) of PyG's neg_sampling / neg_sampling_ratio:
    only binary negatives without weights are served."""
    if neg_sampling is None and neg_sampling_ratio is not None:
        neg_sampling = {"mode": "binary", "amount": neg_sampling_ratio}
    if neg_sampling is None:
        return 0.0
    if isinstance(neg_sampling, str):
        neg_sampling = {"mode": neg_sampling}
    if isinstance(neg_sampling, dict):
        mode, amount, weight = neg_sampling.get("mode"), neg_sampling.get("amount", 1), neg_sampling.get("weight")
        extra = set(neg_sampling) - {"mode", "amount", "weight"}
        if extra:
            raise ValueError(f"strata_pyg.LinkNeighborLoader: neg_sampling has unknown keys {sorted(extra)}")
    else:  # torch_geometric.sampler.NegativeSampling
        mode, amount, weight = getattr(neg_sampling, "mode", None), getattr(neg_sampling, "amount", 1), \
            getattr(neg_sampling, "weight", None)
    mode = str(getattr(mode, "value", mode))
    if mode != "binary":
        raise ValueError(f"strata_pyg.LinkNeighborLoader: neg_sampling mode {mode!r} is not supported "
                         "(Strata draws 'binary' negatives; 'triplet' is not built)")
    if weight is not None:
        raise ValueError("strata_pyg.LinkNeighborLoader: neg_sampling with a weight is not supported "
                         "(negatives are drawn uniformly)")
    amount = float(amount)
    if not (amount > 0 and math.isfinite(amount) and amount <= 1024):
        raise ValueError(f"strata_pyg.LinkNeighborLoader: neg_sampling amount {amount}: want in (0, 1024]")
    return amount


class LinkNeighborLoader(NeighborLoader):
    r"""PyG's ``torch_geometric.loader.LinkNeighborLoader``, sampled by
    Strata: each batch takes ``batch_size`` edges of ``edge_label_index``
    (``input_id`` gives their positions there), draws its negatives on the
    server (``neg_sampling=dict(mode='binary', amount=R)`` or
    ``neg_sampling_ratio=R``: ``ceil(R * batch)`` node pairs, both
    endpoints uniform, reproducible from ``seed``, epoch and batch), and
    samples the neighborhoods of the distinct endpoints of both, which are
    the first nodes of ``n_id`` in ascending order. The batch carries PyG's
    ``edge_label_index`` (the positives, then the negatives, as local
    indices into ``n_id``), ``edge_label`` (``edge_label[input_id]``, plus
    one when it has zeros, then zeros for the negatives; ones and zeros
    without ``edge_label``; unset without either), ``n_id``,
    ``edge_index``, ``input_id``, ``num_sampled_nodes``,
    ``num_sampled_edges`` and the node attributes (``x``, ...). There is
    no ``e_id``.

    ``data`` is what NeighborLoader takes (a PyG ``Data``, a dataset
    directory or name, server addresses), and worker mode and
    server-client mode work as there. ``edge_label_index`` defaults to
    the Data's ``edge_index`` (it goes to the server in the request, so it
    must fit the server's request limit, 64 MiB by default: 4 million
    edges), and for a dataset to every stored edge of its graph.
    ``neg_exclude=True`` (Strata's) redraws negatives that are edges of
    the graph, of ``edge_label_index`` or self-pairs (up to 20 times).
    PyG's ``edge_label_time``, ``disjoint=True``, ``'triplet'`` negatives,
    weighted negatives and typed edge types raise ValueError. Routing is
    round-robin.
    """

    def __init__(self, data, num_neighbors, edge_label_index=None, edge_label=None, edge_label_time=None,
                 replace=False, subgraph_type="directional", disjoint=False, temporal_strategy="uniform",
                 neg_sampling=None, neg_sampling_ratio=None, time_attr=None, weight_attr=None, transform=None,
                 transform_sampler_output=None, is_sorted=False, filter_per_worker=None, neighbor_sampler=None,
                 directed=True, *, neg_exclude=False, **kwargs):
        if edge_label_time is not None:
            raise ValueError("strata_pyg.LinkNeighborLoader: edge_label_time (temporal sampling) is not supported")
        if isinstance(num_neighbors, dict):
            raise ValueError("strata_pyg.LinkNeighborLoader: num_neighbors as a dict is for typed graphs, "
                             "whose links are not served (give a list)")
        if isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2 and \
                not torch.is_tensor(edge_label_index[0]) and not isinstance(edge_label_index[0], (int, np.integer)):
            raise ValueError("strata_pyg.LinkNeighborLoader: edge_label_index as (edge type, edges) is for typed "
                             "graphs, whose links are not served")
        self.neg_amount = _neg_sampling(neg_sampling, neg_sampling_ratio)
        self.neg_exclude = bool(neg_exclude)
        self._eli_arg, self._label_arg = edge_label_index, edge_label
        super().__init__(data, num_neighbors, replace=replace, subgraph_type=subgraph_type, disjoint=disjoint,
                         temporal_strategy=temporal_strategy, time_attr=time_attr, weight_attr=weight_attr,
                         transform=transform, transform_sampler_output=transform_sampler_output, is_sorted=is_sorted,
                         filter_per_worker=filter_per_worker, neighbor_sampler=neighbor_sampler, directed=directed,
                         **kwargs)

    def _link_mode(self):
        return True

    def _input(self, input_nodes):
        """The edges of the epoch (edge_label_index) and their labels."""
        if self.typed:
            raise ValueError(f"strata_pyg.LinkNeighborLoader: {self._conns[0].address} serves a typed graph, whose "
                             "links are not served")
        for c, i in zip(self._conns, self._infos):
            if "link" not in i.capabilities:
                raise StrataError(c.address, "VERSION", "the server does not serve link batches (a strata serve "
                                  "older than strata_pyg's LinkNeighborLoader): update it")
        self._split = pb.SPLIT_UNSPECIFIED
        self._seeds = None
        eli = self._eli_arg
        if eli is None and self.data is not None:
            eli = self.data.edge_index
        if eli is None:
            self._edges = None
            self.num_seeds = int(self.info.num_edges)
        else:
            t = eli if torch.is_tensor(eli) else torch.as_tensor(np.asarray(eli))
            t = t.detach().cpu()
            if t.dim() != 2 or t.size(0) != 2 or t.is_floating_point() or t.dtype == torch.bool:
                raise ValueError(f"edge_label_index: want integer node IDs of shape [2, M], got {t.dtype} {list(t.shape)}")
            t = t.to(torch.int64)
            if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.num_nodes):
                raise ValueError(f"edge_label_index: IDs must lie in [0, {self.num_nodes})")
            self._edges = t.numpy()
            self.num_seeds = int(t.size(1))
            limit = min(int(c_info.max_recv_bytes) for c_info in self._infos) - _REQUEST_SLACK
            if 8 * self._edges.size > limit:
                raise ValueError(f"edge_label_index: {self.num_seeds} edges are {8 * self._edges.size} bytes, over the "
                                 f"server's request limit of {limit + _REQUEST_SLACK} (strata serve --max-request-mb); "
                                 "give a subset, or serve the graph as a dataset and leave edge_label_index unset")
        self._label = None
        self._label_shift = False
        if self._label_arg is not None:
            lab = self._label_arg if torch.is_tensor(self._label_arg) else torch.as_tensor(np.asarray(self._label_arg))
            if lab.dim() == 0 or lab.size(0) != self.num_seeds:
                raise ValueError(f"edge_label: shape {list(lab.shape)} for {self.num_seeds} edges")
            self._label = lab
            # PyG: with binary negatives, 0 then means "negative", so the
            # given labels move up by one when they hold zeros.
            self._label_shift = self.neg_amount > 0 and lab.numel() > 0 and bool(lab.min() == 0)

    def _request(self, epoch, k):
        r = super()._request(epoch, k)
        r.ClearField("split")
        r.link.neg_amount = self.neg_amount
        r.link.neg_exclude = self.neg_exclude
        if self._edges is not None:
            r.link.edge_label_index.CopyFrom(encode(self._edges, "edge_label_index"))
        else:
            r.link.SetInParent()
        return r

    def _finish(self, f):
        """edge_label (PyG's), and no batch_size: a link batch has none."""
        pos = f["input_id"].numel()
        neg = f["edge_label_index"].size(1) - pos
        if self._label is not None:
            lab = self._label[f["input_id"].to(self._label.device)]
            if self._label_shift:
                lab = lab + 1
            if neg > 0:
                lab = torch.cat([lab, lab.new_zeros((neg,) + tuple(lab.shape[1:]))])
            f["edge_label"] = lab
        elif self.neg_amount > 0:
            f["edge_label"] = torch.cat([torch.ones(pos), torch.zeros(neg)])
        f.pop("batch_size", None)
