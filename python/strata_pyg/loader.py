"""strata_pyg.NeighborLoader: PyG's NeighborLoader, with the sampling done
by a Strata server (a child process in worker mode, remote ones in
server-client mode)."""

import os
import queue
import re
import sys
import threading
import time
import warnings

import numpy as np
import torch

from . import _rpc
from ._pb import sampler_pb2 as pb
from ._ring import Ring, RingError
from ._rpc import Connection
from ._server import LocalServer, _scratch_root, acquire_graph_server, release_server
from ._tensor import TensorError, decode, encode, parse_batch, to_host, to_torch
from .errors import StrataError

try:  # batches are PyG Data objects when PyG is installed
    from torch_geometric.data import Data as _PyGData
    from torch_geometric.data import HeteroData as _PyGHeteroData
except Exception:  # noqa: BLE001 - any import failure means: no PyG
    _PyGData = _PyGHeteroData = None

# Sample streams to a single server given by address (streams=None).
DEFAULT_STREAMS = 4

_SPLITS = {"train": pb.SPLIT_TRAIN, "val": pb.SPLIT_VAL, "valid": pb.SPLIT_VAL, "test": pb.SPLIT_TEST}

# DataLoader arguments accepted as PyG passes them on, and what they do here.
_LOADER_ARGS = {"batch_size", "shuffle", "drop_last", "num_workers", "persistent_workers", "pin_memory",
                "prefetch_factor", "timeout", "generator"}
# Arguments refused unless left at these defaults (sampler, transform or
# worker hooks that would run inside PyG's own pipeline).
_REFUSED = {
    "sampler": None, "batch_sampler": None, "collate_fn": None, "worker_init_fn": None,
    "multiprocessing_context": None, "pin_memory_device": "", "in_order": True,
}


class Batch:
    """A sampled batch when torch_geometric is not installed: the attributes
    of PyG's Data that NeighborLoader sets (x, y, edge_index, n_id,
    batch_size, num_sampled_nodes, num_sampled_edges, input_id, and the
    other node attributes of the input Data)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def keys(self):
        return list(self.__dict__)

    @property
    def num_nodes(self):
        if "num_nodes" in self.__dict__:
            return self.__dict__["num_nodes"]
        return int(self.n_id.numel())

    def to(self, device, non_blocking=False):
        for k, v in self.__dict__.items():
            if torch.is_tensor(v):
                self.__dict__[k] = v.to(device, non_blocking=non_blocking)
        return self

    def __repr__(self):
        parts = []
        for k, v in self.__dict__.items():
            parts.append(f"{k}={list(v.shape)}" if torch.is_tensor(v) else f"{k}={v}")
        return f"Batch({', '.join(parts)})"


class HeteroBatch:
    """A typed batch when torch_geometric is not installed: PyG's
    HeteroData layout as plain objects. ``batch[node_type]`` holds ``n_id``
    (type-local IDs), ``num_sampled_nodes`` and ``x``, ``y`` where served
    (and ``batch_size``, ``input_id`` on the input type);
    ``batch[(src, rel, dst)]`` holds ``edge_index`` and
    ``num_sampled_edges``. ``x_dict``, ``edge_index_dict`` and the
    ``*_dict`` of any attribute collect them as PyG's do."""

    def __init__(self, node_types, edge_types):
        self._stores = {k: Batch() for k in list(node_types) + list(edge_types)}
        self.node_types = list(node_types)
        self.edge_types = list(edge_types)

    def __getitem__(self, key):
        if isinstance(key, list):
            key = tuple(key)
        return self._stores[key]

    def __contains__(self, key):
        return key in self._stores

    def __getattr__(self, name):
        if name.endswith("_dict") and not name.startswith("_"):
            attr = name[:-len("_dict")]
            return {k: getattr(v, attr) for k, v in self._stores.items() if attr in v.__dict__}
        raise AttributeError(name)

    def to(self, device, non_blocking=False):
        for v in self._stores.values():
            v.to(device, non_blocking=non_blocking)
        return self

    def __repr__(self):
        return "HeteroBatch(" + ", ".join(f"{k}: {v!r}" for k, v in self._stores.items()) + ")"


def _edge_type_key(key):
    """An edge type as PyG writes it: a (src, rel, dst) tuple, or the
    string "src__rel__dst"."""
    if isinstance(key, str):
        parts = key.split("__")
        return tuple(parts) if len(parts) == 3 else None
    if isinstance(key, (tuple, list)) and len(key) == 3 and all(isinstance(x, str) for x in key):
        return tuple(key)
    return None


def _is_address(s):
    return s.startswith(("unix:", "grpc://")) or re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d+", s) is not None


def _is_graph(data):
    return hasattr(data, "edge_index") and torch.is_tensor(getattr(data, "edge_index"))


def _node_attrs(data, num_nodes):
    """Node-level tensors of a PyG Data (or a look-alike): what PyG indexes
    by n_id in every batch."""
    out = {}
    if hasattr(data, "is_node_attr") and hasattr(data, "keys"):
        keys = data.keys() if callable(data.keys) else data.keys
        for k in keys:
            v = data[k]
            if k != "edge_index" and torch.is_tensor(v) and data.is_node_attr(k):
                out[k] = v
        return out
    for k, v in vars(data).items():
        if k != "edge_index" and torch.is_tensor(v) and v.dim() > 0 and v.size(0) == num_nodes:
            out[k] = v
    return out


def _edge_attrs(data, num_edges):
    if hasattr(data, "is_edge_attr") and hasattr(data, "keys"):
        keys = data.keys() if callable(data.keys) else data.keys
        return [k for k in keys if k != "edge_index" and torch.is_tensor(data[k]) and data.is_edge_attr(k)]
    return [k for k, v in vars(data).items()
            if k not in ("edge_index",) and torch.is_tensor(v) and v.dim() > 0 and v.size(0) == num_edges
            and k.startswith("edge")]


def _num_nodes_of(data):
    n = getattr(data, "num_nodes", None)
    if n is None:
        x = getattr(data, "x", None)
        n = x.size(0) if torch.is_tensor(x) else int(data.edge_index.max()) + 1 if data.edge_index.numel() else 0
    return int(n)


def _node_ids(nodes, n, what):
    """Distinct node IDs in [0, n) from IDs or a boolean mask, as int64 numpy."""
    t = nodes if torch.is_tensor(nodes) else torch.as_tensor(np.asarray(nodes))
    t = t.detach().cpu()
    if t.dtype == torch.bool:
        if t.dim() != 1 or t.numel() != n:
            raise ValueError(f"{what}: a mask of shape {list(t.shape)} for {n} nodes")
        t = t.nonzero().view(-1)
    if t.is_floating_point() or t.dim() != 1:
        raise ValueError(f"{what}: want node IDs (1-D integers) or a mask, got {t.dtype} {list(t.shape)}")
    t = t.to(torch.int64)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
        raise ValueError(f"{what}: IDs must lie in [0, {n})")
    if torch.unique(t).numel() != t.numel():
        raise ValueError(f"{what}: node IDs repeat (each seed once)")
    return t.numpy()


class NeighborLoader:
    r"""PyG's ``torch_geometric.loader.NeighborLoader``, sampled by Strata.

    ``data`` is one of

    * a PyG ``Data`` (``edge_index`` plus node attributes such as ``x`` and
      ``y``, on the CPU or a GPU): worker mode. The loader starts a
      ``strata serve`` child over the graph (its edges written once, as
      ``edge_index.npy``, to a private memory-backed directory that the
      server imports and that is deleted once it is loaded), and gathers the
      node attributes of each batch itself, on the device they live on,
      exactly as PyG does (``x[n_id]``, ``y[n_id]``, ...). With
      ``servers=[...]`` it samples on those servers instead (they must
      serve the same graph) and still gathers locally.
    * a Strata dataset directory or built-in name (``"cora"``): worker mode
      on that dataset; features and labels come from the server.
    * a server address (``"host:port"``, ``"unix:/path"``) or a list of
      them: server-client mode; the batches of an epoch are shared
      round-robin over the servers (batch ``i`` from server ``i % S``),
      features and labels come from them.

    PyG's arguments keep their meaning: ``num_neighbors`` (per hop, the
    seeds' hop first; -1 = all), ``input_nodes`` (None for all nodes, a
    tensor of node IDs, a boolean mask, or for a dataset ``"train"``,
    ``"val"``, ``"test"``), ``replace``, ``batch_size``, ``shuffle``,
    ``drop_last``, ``transform``; ``num_workers`` is the number of batches
    the server samples at once, ``prefetch_factor`` times it (at least 2)
    the batches kept ready; ``persistent_workers`` and ``filter_per_worker``
    are accepted (the server persists anyway); ``pin_memory`` pins the
    batches when CUDA is there (with a CUDA ``device=`` the shared-memory
    ring's slots are pinned anyway, so that their copies to the GPU run
    asynchronously); ``timeout`` (seconds, 0 for the default of
    ``request_timeout``) bounds the wait for one batch; ``generator`` gives
    the shuffle seed. Values PyG supports and Strata does not
    (``disjoint=True``, temporal sampling, ``weight_attr``, other
    ``subgraph_type``\ s, edge attributes, a HeteroData held in memory,
    custom samplers) raise ValueError.

    A typed dataset (directory, or servers serving one) yields
    ``HeteroData`` batches (``HeteroBatch`` without PyG):
    ``input_nodes`` is a node type or ``(node type, nodes)`` and
    ``num_neighbors`` a list or a dict per edge type (docs/pytorch.md).

    Worker mode takes the batches through a shared-memory ring in
    /dev/shm (``transport="shm"``, the default there; ``"grpc"`` sends
    them over the child's socket instead): the tensors of a batch (n_id,
    edge_index, input_id, and x, y from a dataset) are views of a ring
    slot, valid as long as they are referenced: a batch kept past the next
    iteration is moved out of the ring first (see docs/pytorch.md).
    Server-client mode takes them through the same ring too
    (``transport="relay"``, the default where /dev/shm exists): the loader
    starts a ``strata relay`` child that receives the servers' batches
    over gRPC (in Go, several streams at once) and writes them into the
    ring; ``"grpc"`` receives them in Python instead. Typed batches
    always travel over gRPC.

    Strata's own keyword arguments: ``seed`` (shuffle and sampling seed;
    default: drawn from torch's generator, or 0 with several ranks, which
    must agree), ``rank`` and ``world_size`` (default: torch.distributed's
    when initialized, else 0 and 1: every rank gets the same number of
    batches, see ``set_epoch``), ``servers``, ``secret`` and ``tls`` (a
    dict of ``cert``, ``key``, ``ca`` PEM files and ``name``) for remote
    servers (the secret defaults to $STRATA_SERVE_SECRET), ``strata_bin``
    (default $STRATA_BIN, else ``strata`` on PATH), ``sampler_device``
    (``"cpu"``, ``"cuda:0"``, ``"auto"``: where the child server samples),
    ``request_timeout`` (seconds) and ``start_timeout`` (for the child to
    come up), ``transport`` (``"auto"``, ``"shm"``, ``"grpc"``, ``"relay"``),
    ``ring_bytes`` (the ring's size at most; default the server's 2 GiB)
    and ``release_timeout`` (seconds the server waits for the trainer to
    release a slot; default one hour), ``routing`` (``None``: by partition
    when every server owns a part of one, else ``"round_robin"``;
    ``"partition"`` sends each seed to the server that owns it),
    ``device`` (deliver every tensor of the batch on this device, as
    GraphLearn-for-PyTorch's ``device``; with a CUDA device the ring
    carries the IDs as int32, widened on the GPU, and a gRPC batch is
    copied into pinned memory as it came (int32 IDs, bfloat16 features),
    uploaded without blocking and widened on the GPU), ``feature_dtype``
    (``"bfloat16"``: features from a server travel in half the bytes,
    rounded, and arrive as float32), ``streams`` (server-client,
    round-robin: streams per server in flight, 1 to 16, sharing
    ``num_workers`` and the prefetch depth; default 4 for a single server
    given by address, without transport="shm", else 1),
    ``reader_thread`` (False: the ring's messages are read on the
    trainer's thread instead of a reader thread; the server still
    prefetches into the slots).
    ``loader.stats()`` says where the last epoch's time went.

    Every failure of a server (it died, timed out, refused the request,
    speaks another protocol version, or a batch was over its message
    limit) raises one ``StrataError`` naming the server and the cause.
    """

    def __init__(self, data, num_neighbors, input_nodes=None, input_time=None, replace=False,
                 subgraph_type="directional", disjoint=False, temporal_strategy="uniform", time_attr=None,
                 weight_attr=None, transform=None, transform_sampler_output=None, is_sorted=False,
                 filter_per_worker=None, neighbor_sampler=None, directed=True, *,
                 seed=None, rank=None, world_size=None, servers=None, secret=None, tls=None, strata_bin=None,
                 sampler_device="cpu", request_timeout=120.0, start_timeout=300.0, transport="auto",
                 ring_bytes=None, release_timeout=None, routing=None, feature_dtype=None, streams=None, device=None,
                 reader_thread=True, **kwargs):
        self._server = None
        self._conns = []
        self._shared = False
        self._check_args(num_neighbors, input_time, subgraph_type, disjoint, temporal_strategy, time_attr,
                         weight_attr, transform_sampler_output, neighbor_sampler, directed, kwargs)
        self.num_neighbors = {k: [int(f) for f in v] for k, v in num_neighbors.items()} \
            if isinstance(num_neighbors, dict) else [int(f) for f in num_neighbors]
        self.replace = bool(replace)
        self.transform = transform
        self.batch_size = int(kwargs.get("batch_size", 1))
        self.shuffle = bool(kwargs.get("shuffle", False))
        self.drop_last = bool(kwargs.get("drop_last", False))
        nw = int(kwargs.get("num_workers", 0) or 0)
        if nw < 0:
            raise ValueError(f"num_workers={nw}: want >= 0")
        self.workers = max(1, nw)
        pf = kwargs.get("prefetch_factor")
        self.prefetch = max(2, int(pf if pf is not None else 2) * self.workers)
        self.pin_memory = bool(kwargs.get("pin_memory", False)) and torch.cuda.is_available()
        t = kwargs.get("timeout", 0) or 0
        if t < 0:
            raise ValueError(f"timeout={t}: want >= 0")
        self.timeout = float(t) if t > 0 else float(request_timeout)
        if self.batch_size <= 0:
            raise ValueError(f"batch_size={self.batch_size}: want > 0")

        self.rank, self.world_size = self._ddp(rank, world_size)
        if seed is None:
            g = kwargs.get("generator")
            if g is not None:
                seed = int(g.initial_seed())
            elif self.world_size > 1:
                seed = 0  # every rank must shuffle alike
            else:
                seed = int(torch.randint(0, 2**62, (1,)).item())
        self.seed = int(seed) & (2**64 - 1)
        self._epoch = 0
        self._epoch_set = False

        if transport not in ("auto", "shm", "grpc", "relay"):
            raise ValueError(f"transport={transport!r}: want 'auto', 'shm', 'grpc' or 'relay'")
        if routing not in (None, "partition", "round_robin"):
            raise ValueError(f"routing={routing!r}: want None, 'partition' or 'round_robin'")
        if ring_bytes is not None and int(ring_bytes) <= 0:
            raise ValueError(f"ring_bytes={ring_bytes}: want > 0")
        if release_timeout is not None and not 0 < float(release_timeout) <= 86400:
            raise ValueError(f"release_timeout={release_timeout}: want seconds in (0, 86400]")
        dtypes = [(None, pb.DTYPE_UNSPECIFIED), ("float32", pb.DTYPE_FLOAT32), (torch.float32, pb.DTYPE_FLOAT32),
                  ("bfloat16", pb.DTYPE_BFLOAT16), (torch.bfloat16, pb.DTYPE_BFLOAT16)]
        fd = next((c for k, c in dtypes if k is feature_dtype or (isinstance(feature_dtype, str) and k == feature_dtype)), -1)
        if fd < 0:
            raise ValueError(f"feature_dtype={feature_dtype!r}: want None, 'float32' or 'bfloat16'")
        self.feature_dtype = fd
        if streams is not None and (isinstance(streams, bool) or not isinstance(streams, int) or not 1 <= streams <= 16):
            raise ValueError(f"streams={streams!r}: want None or an int in [1, 16]")
        if streams is not None and streams > 1 and routing == "partition":
            raise ValueError("strata_pyg: streams > 1 is for round-robin routing (one stream per part)")
        self.streams = streams or 1
        self._auto_streams = streams is None and routing != "partition" and transport != "shm"
        try:
            self.device = torch.device(device) if device is not None else None
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device={device!r}: {e}") from None
        self._narrow_ids = None  # tests: int32 IDs from the ring whatever the device
        # How gRPC batches are copied out of the received message (_stage):
        # for a CUDA device=, into pinned memory in the wire's types (int32
        # IDs, bfloat16 features), copied to the GPU without blocking and
        # widened there; with pin_memory, into pinned memory, widened on the
        # host; None: views of the message (widened copies where needed).
        cuda = self.device is not None and self.device.type == "cuda" and torch.cuda.is_available()
        self._stage = (True, True) if cuda else (True, False) if self.pin_memory else None
        # A ring's slots are pinned for a CUDA device= too: a slot's
        # features then reach the GPU by an asynchronous copy instead of a
        # blocking one from pageable memory (server-client batches carry
        # every feature row: 1.59x -> 1.43x of worker mode on an H100).
        self._pin_ring = self.pin_memory or cuda
        self.reader_thread = bool(reader_thread)
        self.last_stats = None
        self.ring_bytes = int(ring_bytes or 0)
        self.release_timeout = float(release_timeout or 0)
        self.data = None
        self._local = {}
        if secret is None:
            secret = os.environ.get("STRATA_SERVE_SECRET") or None
        self._addrs = None  # the servers given by address (server-client mode)
        self.via_relay = False
        self._conn_args = dict(secret=secret, tls=tls, strata_bin=strata_bin, request_timeout=request_timeout,
                               start_timeout=start_timeout)
        try:
            self._connect(data, servers, secret, tls, strata_bin, sampler_device, request_timeout, start_timeout)
            if self.streams > 1 and self._server is not None:
                raise ValueError("strata_pyg: streams > 1 is for servers given by address (server-client mode), "
                                 "not the loader's own child server")
            self._choose(transport, routing)
            self._input(input_nodes)
            if self.feature_dtype == pb.DTYPE_BFLOAT16 and (self.typed or not self.with_features):
                raise ValueError("strata_pyg: feature_dtype='bfloat16' is for node features the server sends "
                                 "(a dataset or servers as data, homogeneous graphs); here "
                                 + ("the graph is typed" if self.typed else "the features are gathered locally"))
        except BaseException:
            self.close()
            raise

    # -- arguments ------------------------------------------------------

    @staticmethod
    def _check_args(num_neighbors, input_time, subgraph_type, disjoint, temporal_strategy, time_attr, weight_attr,
                    transform_sampler_output, neighbor_sampler, directed, kwargs):
        def refuse(what):
            raise ValueError(f"strata_pyg.NeighborLoader: {what} is not supported (Strata samples directional, "
                             "non-disjoint, uniform neighborhoods of homogeneous graphs; leave it at PyG's default)")
        if isinstance(num_neighbors, dict):
            lists = list(num_neighbors.values())
            if not lists:
                refuse(f"num_neighbors={num_neighbors!r} (want a list per edge type)")
        else:
            lists = [num_neighbors]
        for fl in lists:
            if isinstance(fl, (str, bytes)) or not hasattr(fl, "__len__") or len(fl) == 0:
                refuse(f"num_neighbors={num_neighbors!r} (want a non-empty list of ints, one per hop)")
            for f in fl:
                if int(f) != f or int(f) < -1 or (int(f) == 0 and not isinstance(num_neighbors, dict)):
                    raise ValueError(f"num_neighbors={num_neighbors!r}: each must be -1 (all) or > 0 "
                                     "(0, none, only per edge type)")
        if disjoint:
            refuse("disjoint=True")
        if str(getattr(subgraph_type, "value", subgraph_type)) != "directional":
            refuse(f"subgraph_type={subgraph_type!r}")
        if not directed:
            refuse("directed=False")
        if input_time is not None or time_attr is not None:
            refuse("temporal sampling (input_time, time_attr)")
        if temporal_strategy != "uniform":
            refuse(f"temporal_strategy={temporal_strategy!r}")
        if weight_attr is not None:
            refuse(f"weight_attr={weight_attr!r}")
        if transform_sampler_output is not None:
            refuse("transform_sampler_output")
        if neighbor_sampler is not None:
            refuse("neighbor_sampler")
        for k, v in kwargs.items():
            if k in _REFUSED:
                if v != _REFUSED[k]:
                    refuse(f"{k}={v!r}")
            elif k not in _LOADER_ARGS:
                raise TypeError(f"strata_pyg.NeighborLoader: unexpected argument {k!r}")

    @staticmethod
    def _ddp(rank, world_size):
        if rank is None and world_size is None:
            d = torch.distributed
            if d.is_available() and d.is_initialized():
                return d.get_rank(), d.get_world_size()
            return 0, 1
        rank = 0 if rank is None else int(rank)
        world_size = 1 if world_size is None else int(world_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank}, world_size={world_size}: want 0 <= rank < world_size")
        return rank, world_size

    def _connect(self, data, servers, secret, tls, strata_bin, device, request_timeout, start_timeout):
        if isinstance(servers, str):
            servers = [servers]
        if _PyGHeteroData is not None and isinstance(data, _PyGHeteroData) or hasattr(data, "edge_index_dict"):
            raise ValueError("strata_pyg: a HeteroData in memory is not supported: write it as a typed Strata "
                             "dataset (strata import of a typed layout, or strata gen --preset hetero) and pass "
                             "its directory or a server serving it")
        if _is_graph(data):
            if _PyGData is not None and hasattr(data, "is_homogeneous") and not data.is_homogeneous:
                raise ValueError("strata_pyg.NeighborLoader: heterogeneous graphs are not supported")
            if isinstance(self.num_neighbors, dict):
                raise ValueError(f"strata_pyg.NeighborLoader: num_neighbors as a dict is for typed graphs; "
                                 f"the Data is homogeneous (give a list)")
            self.data = data
            self.num_nodes = _num_nodes_of(data)
            ne = int(data.edge_index.size(1))
            ea = _edge_attrs(data, ne)
            if ea:
                raise ValueError(f"strata_pyg.NeighborLoader: edge attributes ({', '.join(ea)}) are not supported: "
                                 "batches carry no e_id to index them by")
            self._local = _node_attrs(data, self.num_nodes)
            if servers:
                self._addrs = [str(a) for a in servers]
                self._conns = [Connection(a, secret=secret, tls=tls, timeout=request_timeout)
                               for a in servers for _ in range(self.streams)]
            else:
                self._server = acquire_graph_server(data.edge_index, self.num_nodes, device=device,
                                                    strata_bin=strata_bin, start_timeout=start_timeout)
                self._shared = True
                self._conns = [self._server.conn]
            self.with_features = self.with_labels = False
        else:
            addrs = None
            if isinstance(data, (list, tuple)):
                addrs = [str(a) for a in data]
            elif isinstance(data, (str, os.PathLike)):
                s = os.fspath(data)
                if not os.path.exists(s) and _is_address(s):
                    addrs = [s]
                else:
                    self._server = LocalServer(s, strata_bin=strata_bin, device=device, start_timeout=start_timeout)
                    self._conns = [self._server.conn]
            else:
                raise TypeError(f"strata_pyg.NeighborLoader: data must be a PyG Data, a dataset directory or name, or "
                                f"server addresses, not {type(data).__name__}")
            if addrs is not None:
                if servers:
                    raise ValueError("strata_pyg.NeighborLoader: servers= is for a PyG Data; pass the addresses as data")
                # streams > 1: each server's batches over several streams
                # (connections) in flight, as if it were several servers.
                # By default a single server gets DEFAULT_STREAMS: one
                # stream is one message in flight, bound by gRPC's receive
                # in Python (a copy of each message, the GIL held).
                if self._auto_streams and len(addrs) == 1:
                    self.streams = DEFAULT_STREAMS
                self._addrs = addrs
                self._conns = [Connection(a, secret=secret, tls=tls, timeout=request_timeout)
                               for a in addrs for _ in range(self.streams)]
        infos = [self._server.info] if self._server is not None and self._conns == [self._server.conn] else \
            [c.info() for c in self._conns]
        self.info = infos[0]
        self._infos = infos
        for c, i in zip(self._conns, infos):
            if (i.num_nodes, i.num_edges) != (self.info.num_nodes, self.info.num_edges):
                raise StrataError(c.address, "MISMATCH", f"serves {i.num_nodes} nodes and {i.num_edges} edges, "
                                  f"{self._conns[0].address} {self.info.num_nodes} and {self.info.num_edges}")
        if self.data is not None:
            if self.info.num_nodes != self.num_nodes:
                raise StrataError(self._conns[0].address, "MISMATCH",
                                  f"serves {self.info.num_nodes} nodes, the Data has {self.num_nodes}")
        else:
            self.num_nodes = int(self.info.num_nodes)
            self.with_features = self.info.feat_dim > 0
            self.with_labels = self.info.num_classes > 0
        self.typed = len(self.info.node_types) > 0
        if self.typed:
            for c, i in zip(self._conns, infos):
                if "typed" not in i.capabilities:
                    raise StrataError(c.address, "VERSION", "the server lists node types but does not serve typed "
                                      "batches: update it")
            for c, i in zip(self._conns, infos):
                if [(t.name, t.num_nodes) for t in i.node_types] != [(t.name, t.num_nodes) for t in self.info.node_types]:
                    raise StrataError(c.address, "MISMATCH", f"serves other node types than {self._conns[0].address}")
            self.node_types = [t.name for t in self.info.node_types]
            self.edge_types = [(self.node_types[e.src], e.rel, self.node_types[e.dst]) for e in self.info.edge_types]
            self.with_features = any(t.feat_dim > 0 for t in self.info.node_types)
            self.with_labels = any(t.labeled for t in self.info.node_types)
        elif isinstance(self.num_neighbors, dict):
            raise ValueError(f"strata_pyg.NeighborLoader: num_neighbors as a dict is for typed graphs; "
                             f"{self._conns[0].address} serves a homogeneous one (give a list)")

    def _choose(self, transport, routing):
        """Picks the transport and the routing; servers given by address go
        through a local relay into a ring (transport "relay", the default
        where /dev/shm is) or straight to the loader over gRPC ("grpc")."""
        relay = False
        if transport in ("auto", "relay") and self._server is None and self._addrs:
            why = "typed batches travel over gRPC (a ring slot holds at most 8 tensors)" if self.typed else \
                "no shared-memory directory (/dev/shm) here" if not sys.platform.startswith("linux") or \
                _scratch_root() is None else None
            if transport == "relay" and why is not None:
                raise ValueError(f"strata_pyg.NeighborLoader: transport='relay': {why} (use 'auto' or 'grpc')")
            relay = why is None
        elif transport == "relay":
            raise ValueError("strata_pyg.NeighborLoader: transport='relay' is for servers given by address "
                             "(server-client mode), not the loader's own child server")
        self._choose_direct("grpc" if relay else transport, routing)
        if relay:
            self._start_relay()

    def _start_relay(self):
        """Starts the loader's `strata relay` child over the servers (their
        streams and routing as chosen) and reads its ring instead of the
        servers' connections."""
        a = self._conn_args
        args = ["--streams", str(self.streams), "--routing", self.routing,
                "--timeout", f"{max(1.0, float(a['request_timeout'])):g}s"]
        tls = a["tls"]
        if tls:
            args += ["--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"]), "--tls-ca", str(tls["ca"])]
            if tls.get("name"):
                args += ["--tls-name", str(tls["name"])]
        env = {"STRATA_UPSTREAM_SECRET": a["secret"] or ""}
        relay = LocalServer(None, strata_bin=a["strata_bin"], start_timeout=a["start_timeout"], relay=list(self._addrs),
                            args=args, env=env)
        for c in self._conns:
            c.close()
        self._conns = [relay.conn]
        self._server, self._shared = relay, False
        self.via_relay = True
        self.transport = "shm"

    def _choose_direct(self, transport, routing):
        """Picks the transport (the ring for the loader's own child, or any
        single server that offers it when asked) and the routing."""
        own = self._server is not None and self._conns == [self._server.conn]
        shm_ok = len(self._conns) == 1 and self._infos[0].shm
        if self.typed:
            # Typed batches travel over gRPC (a ring slot holds at most 8
            # tensors), also from the loader's own child.
            if transport == "shm":
                raise ValueError("strata_pyg.NeighborLoader: transport='shm' does not carry typed batches "
                                 "(use 'auto' or 'grpc')")
            shm_ok = False
        if transport == "shm" and not shm_ok:
            raise ValueError(f"strata_pyg.NeighborLoader: transport='shm' needs one server on this host with a "
                             f"shared-memory ring ({self._conns[0].address} has none: strata serve --ring-dir)"
                             if len(self._conns) == 1 else
                             "strata_pyg.NeighborLoader: transport='shm' needs exactly one server")
        self.transport = "shm" if shm_ok and (transport == "shm" or (transport == "auto" and own)) else "grpc"
        parts = [i.partition if i.HasField("partition") else None for i in self._infos]
        if self.typed or self._link_mode():
            if routing == "partition":
                raise ValueError("strata_pyg: routing='partition' applies to node batches of homogeneous graphs")
            routing = "round_robin"
        if routing is None:
            routing = "partition" if len(parts) > 1 and all(p is not None for p in parts) and self.streams == 1 \
                else "round_robin"
        self.routing = routing
        self._parts = None
        if routing == "round_robin":
            return
        for c, p in zip(self._conns, parts):
            if p is None:
                raise StrataError(c.address, "MISMATCH", "owns no part of a partition (strata serve --part), "
                                  "so seeds cannot be routed to it: routing='round_robin'")
        ref, a0 = parts[0], self._conns[0].address
        for c, p in zip(self._conns, parts):
            if (p.num_parts, list(p.offsets), p.fingerprint) != (ref.num_parts, list(ref.offsets), ref.fingerprint):
                raise StrataError(c.address, "MISMATCH", f"serves part {p.part} of a partition into {p.num_parts} "
                                  f"(fingerprint {p.fingerprint or '?'}), {a0} one into {ref.num_parts} "
                                  f"({ref.fingerprint or '?'}): not the same partition")
        owners = {}
        for c, p in zip(self._conns, parts):
            if p.part in owners:
                raise StrataError(c.address, "MISMATCH", f"serves part {p.part}, as {owners[p.part]} does")
            owners[p.part] = c.address
        missing = sorted(set(range(ref.num_parts)) - set(owners))
        if missing:
            raise StrataError(a0, "MISMATCH", f"the servers own parts {sorted(owners)} of {ref.num_parts}: no server "
                              f"for part(s) {missing} (give one server per part, or routing='round_robin')")
        off = np.asarray(ref.offsets, dtype=np.int64)
        if len(off) != ref.num_parts + 1 or off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] != self.num_nodes:
            raise StrataError(a0, "BAD_REPLY", f"partition offsets {list(off)[:8]}... do not cover {self.num_nodes} nodes")
        self._parts = parts
        self._offsets = off

    def _link_mode(self):
        return False

    def _input(self, input_nodes):
        self._split = pb.SPLIT_UNSPECIFIED
        self._seeds = None
        self.input_type = None
        if self.typed:
            return self._typed_input(input_nodes)
        if isinstance(input_nodes, tuple):
            raise ValueError("strata_pyg.NeighborLoader: input_nodes as (node type, nodes) is for heterogeneous "
                             "graphs, which are not supported")
        if input_nodes is None:
            self._split = pb.SPLIT_ALL
            self.num_seeds = self.num_nodes
            return
        if isinstance(input_nodes, str):
            if self.data is not None:
                mask = getattr(self.data, f"{input_nodes}_mask", None)
                if mask is None:
                    raise ValueError(f"input_nodes={input_nodes!r}: the Data has no {input_nodes}_mask")
                input_nodes = mask
            else:
                if input_nodes not in _SPLITS:
                    raise ValueError(f"input_nodes={input_nodes!r}: want 'train', 'val' or 'test'")
                self._split = _SPLITS[input_nodes]
                self.num_seeds = {pb.SPLIT_TRAIN: self.info.num_train, pb.SPLIT_VAL: self.info.num_val,
                                  pb.SPLIT_TEST: self.info.num_test}[self._split]
                return
        self._seeds = _node_ids(input_nodes, self.num_nodes, "input_nodes")
        self.num_seeds = int(self._seeds.size)

    def _typed_input(self, input_nodes):
        """input_nodes of a typed graph: a node type, or (node type, nodes)
        with nodes None (all of the type), a split name of the labeled
        type, node IDs of the type or a mask; and the relation fanouts."""
        if isinstance(input_nodes, str):
            input_nodes = (input_nodes, None)
        if not (isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str)):
            raise ValueError(f"strata_pyg.NeighborLoader: the graph is typed (node types {self.node_types}): give "
                             f"input_nodes=(node type, nodes) or a node type, as PyG does for a HeteroData")
        t, nodes = input_nodes
        if t not in self.node_types:
            raise ValueError(f"input_nodes: {t!r} is no node type of the graph ({self.node_types})")
        self.input_type = t
        nt = self.info.node_types[self.node_types.index(t)]
        n = int(nt.num_nodes)
        if nodes is None:
            self._split, self.num_seeds = pb.SPLIT_ALL, n
        elif isinstance(nodes, str):
            if nodes not in _SPLITS:
                raise ValueError(f"input_nodes=({t!r}, {nodes!r}): want 'train', 'val' or 'test'")
            if not nt.labeled:
                raise ValueError(f"input_nodes=({t!r}, {nodes!r}): the splits are on the labeled node type "
                                 f"{[x.name for x in self.info.node_types if x.labeled]}")
            self._split = _SPLITS[nodes]
            self.num_seeds = {pb.SPLIT_TRAIN: self.info.num_train, pb.SPLIT_VAL: self.info.num_val,
                              pb.SPLIT_TEST: self.info.num_test}[self._split]
        else:
            self._seeds = _node_ids(nodes, n, f"input_nodes[{t!r}]")
            self.num_seeds = int(self._seeds.size)
        # num_neighbors: one list for every relation, or a dict per edge type
        # (missing edge types: none sampled).
        if isinstance(self.num_neighbors, dict):
            per = {}
            for k, v in self.num_neighbors.items():
                et = _edge_type_key(k)
                if et not in self.edge_types:
                    raise ValueError(f"num_neighbors: {k!r} is no edge type of the graph ({self.edge_types})")
                per[et] = v
            hops = {len(v) for v in per.values()}
            if len(hops) != 1:
                raise ValueError(f"num_neighbors: every edge type needs one fanout per hop (got {sorted(hops)} hops)")
            h = hops.pop()
            self._rel_fanouts = [per.get(et, [0] * h) for et in self.edge_types]
        else:
            self._rel_fanouts = [list(self.num_neighbors) for _ in self.edge_types]

    # -- epochs ---------------------------------------------------------

    def _num_batches(self, n):
        """Batches of this rank over n seeds (serve.NumBatches)."""
        bs, w = self.batch_size, self.world_size
        if n <= 0:
            return 0
        per = n // w if self.drop_last else -(-n // w)
        return per // bs if self.drop_last else -(-per // bs)

    def _owned_counts(self):
        """Partition routing: the seeds each server owns, in server order."""
        if self._seeds is not None:
            owner = np.searchsorted(self._offsets, self._seeds, side="right") - 1
            per_part = np.bincount(owner, minlength=len(self._offsets) - 1)
        elif self._split == pb.SPLIT_ALL:
            per_part = np.diff(self._offsets)
        else:
            field = {pb.SPLIT_TRAIN: "num_train", pb.SPLIT_VAL: "num_val", pb.SPLIT_TEST: "num_test"}[self._split]
            return [int(getattr(p, field)) for p in self._parts]
        return [int(per_part[p.part]) for p in self._parts]

    def _plan(self):
        """Which server yields each batch of an epoch: a list of (server,
        its batch index, its batch count). Round-robin: batch i from server
        i % S (indices are the epoch's); by partition: each server's own
        batches, interleaved a batch per server in turn."""
        S = len(self._conns)
        if self._parts is None:
            n = self._num_batches(self.num_seeds)
            return [(i % S, i, n) for i in range(n)]
        counts = [self._num_batches(c) for c in self._owned_counts()]
        # Through a relay, all of them from its one stream, in this order.
        return [(0 if self.via_relay else k, r, nb) for r in range(max(counts, default=0))
                for k, nb in enumerate(counts) if r < nb]

    def __len__(self):
        if self._parts is None:
            return self._num_batches(self.num_seeds)
        return sum(self._num_batches(c) for c in self._owned_counts())

    def stats(self):
        """Where the time of the last (or current) epoch went, as a dict:
        sums over its batches (see _STAT_KEYS in loader.py) and their
        per-batch means in milliseconds (``*_ms``); None before the first
        epoch. For breakdowns such as bench_sage.py --breakdown."""
        st = self.last_stats
        if st is None:
            return None
        out = dict(st)
        n = max(st["batches"], 1)
        for k, v in st.items():
            if k.endswith("_s"):
                out[k[:-2] + "_ms"] = 1000.0 * v / n
        out["ready_mean"] = st["ready"] / n
        out["wire_mib_per_batch"] = st["wire_bytes"] / n / 2**20
        return out

    def set_epoch(self, epoch):
        """Fixes the epoch of the next iteration (as DistributedSampler's
        set_epoch); without it every iteration starts the next epoch."""
        self._epoch = int(epoch)
        self._epoch_set = True

    def __iter__(self):
        if not self._conns:
            raise RuntimeError("strata_pyg.NeighborLoader: closed")
        epoch = self._epoch
        if not self._epoch_set:
            self._epoch += 1
        self._epoch_set = False
        return _EpochIter(self, epoch)

    def _request(self, epoch, k):
        """The SampleRequest of server k for an epoch."""
        owned = self._parts is not None
        part, parts = (0, 1) if owned else (k, len(self._conns))
        # A server's streams share num_workers and the prefetch depth (the
        # batches it samples at once and keeps ready stay what was asked).
        workers = -(-self.workers // self.streams)
        prefetch = max(2, -(-self.prefetch // self.streams))
        r = pb.SampleRequest(batch_size=self.batch_size, fanouts=[] if self.typed else self.num_neighbors,
                             replace=self.replace,
                             shuffle=self.shuffle, seed=self.seed, epoch=epoch, drop_last=self.drop_last,
                             rank=self.rank, world_size=self.world_size, part=part, num_parts=parts,
                             with_features=self.with_features, with_labels=self.with_labels,
                             workers=workers, prefetch=prefetch, owned=owned,
                             feature_dtype=self.feature_dtype)
        if self.typed:
            r.input_type = self.input_type
            for k, f in enumerate(self._rel_fanouts):
                r.relation_fanouts.add(relation=k, fanouts=f)
        if self._seeds is not None:
            r.seeds.CopyFrom(encode(self._seeds, "seeds"))
        else:
            r.split = self._split
        return r

    def _finish(self, f):
        """Adds the loader's own fields to a decoded batch (node batches:
        nothing)."""

    def _describe(self, conn):
        """Why a connection failed, with the child server's fate if it died."""
        srv = self._server  # close() may drop it meanwhile (another thread)
        if srv is not None and conn is srv.conn:
            try:  # a killed server's socket may close before it is reaped
                srv.proc.wait(timeout=1.0)
            except Exception:  # noqa: BLE001 - still running: not why
                pass
            return srv.exited()
        return None

    def close(self):
        """Stops the child server (worker mode) and closes the connections."""
        if self._server is not None:
            if self._shared:
                release_server(self._server)
            else:
                self._server.close()
            self._server = None
        elif self._conns:
            for c in self._conns:
                c.close()
        self._conns = []

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        relay = getattr(self, "via_relay", False)
        servers = self._addrs if relay else [c.address for c in self._conns]
        transport = "relay" if relay else getattr(self, "transport", None)
        return f"strata_pyg.{type(self).__name__}(num_neighbors={self.num_neighbors}, batch_size={self.batch_size}, " \
               f"servers={servers}, transport={transport!r}, " \
               f"routing={getattr(self, 'routing', None)!r})"


_END = object()

# loader.stats(): the epoch's sums. wait_s: the trainer waiting for the
# next batch (in __next__, slot releases included); batch_s: making the
# batch object (gathering local node attributes, PyG's Data); ready:
# batches already decoded when the trainer asked (summed); on the reader
# thread: server_wait_s (waiting for the server's message), decode_s
# (parsing it, mapping the slot), wire_bytes; from the servers' timings:
# server_sample_s, server_encode_s, server_slot_wait_s (the server idle,
# waiting for the trainer to release a ring slot).
_STAT_KEYS = ("batches", "wait_s", "batch_s", "ready", "server_wait_s", "decode_s", "wire_bytes",
              "server_sample_s", "server_encode_s", "server_slot_wait_s")


def _typed_batch(L, f):
    """HeteroData (or HeteroBatch) of a decoded typed batch."""
    b = _PyGHeteroData() if _PyGHeteroData is not None else HeteroBatch(L.node_types, L.edge_types)
    for key, d in list(f["nodes"].items()) + list(f["edges"].items()):
        store = b[key]
        for k, v in d.items():
            setattr(store, k, v)
    b[L.input_type].batch_size = f["batch_size"]
    b[L.input_type].input_id = f["input_id"]
    return b


class _Control:
    """The request side of a SampleShm stream: the request, then the
    releases. grpc reads it on its own thread; a release made while CUDA
    may still be copying from the slots waits for that copy (an event)."""

    def __init__(self, first):
        self.q = queue.Queue()
        self.q.put((None, first))

    def __iter__(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            event, msg = item
            if event is not None:
                event.synchronize()
            yield msg

    def release(self, n, event=None):
        self.q.put((event, pb.ShmControl(released=n)))

    def close(self):
        self.q.put(None)


class _EpochIter:
    """One epoch: a reader thread per stream receives that stream's batches
    (its entries of the loader's plan, round-robin or by partition, in
    order), decodes each (or maps it in the ring) and keeps a share of
    ``prefetch`` of them ready in its queue; the trainer takes them in the
    plan's order. gRPC's flow control, or the ring's slots, hold the
    servers back beyond that. In ring mode the consumer releases slots (see
    _ring.py).

    A thread per stream, not one for all: gRPC's Python client asks a
    stream for its next message only when it is read, so one reader going
    round the streams had one message in flight at a time (the others
    stalled at their flow-control windows), and several streams were no
    faster than one."""

    def __init__(self, loader, epoch):
        L = self.loader = loader
        self.plan = L._plan()
        self.n = len(self.plan)
        self.i = 0
        self.ring = None
        self.ctl = None
        self.held = []  # (sequence, slot or None): batches handed out, not yet released
        self.released = 0
        self.noted = False
        self.closed = False
        if L.transport == "shm":
            # With a GPU to deliver the batches on, the IDs travel as int32
            # (half the bytes to write, map and copy) and are widened there.
            narrow = L.device is not None and L.device.type == "cuda" if L._narrow_ids is None else L._narrow_ids
            ring = pb.ShmRequest(ring_bytes=L.ring_bytes, release_timeout_ms=int(L.release_timeout * 1000),
                                 narrow_ids=narrow)
            req = L._request(epoch, 0)
            req.protocol_version = _rpc.PROTOCOL_VERSION
            self.ctl = _Control(pb.ShmControl(request=req, ring=ring))
            self.calls = [L._conns[0].sample_shm(self.ctl)]
        else:
            self.calls = [c.sample(L._request(epoch, k)) for k, c in enumerate(L._conns)]
        S = len(self.calls)
        self.conns = list(L._conns)  # kept: the loader may close (and drop its list) meanwhile
        per = L.prefetch if S == 1 else max(2, -(-L.prefetch // S))
        self.qs = [queue.Queue(maxsize=per) for _ in range(S)]
        # Where the epoch's time goes (loader.stats()): seconds summed
        # over its batches (by several readers: under stlock).
        self.stats = L.last_stats = dict.fromkeys(_STAT_KEYS, 0)
        self.stats["transport"] = "relay" if L.via_relay else L.transport
        self.stlock = threading.Lock()
        self.stop = threading.Event()
        # Ring batches are small messages the server has prefetched into
        # slots: reader_thread=False reads them on the trainer's thread
        # (no handoff through the GIL between two threads per batch).
        self.inline = L.transport == "shm" and not L.reader_thread
        self.deadline, self.timed_out = None, False
        self.conn = None  # inline: the connection of the batch being fetched
        if self.inline:
            self.threads = [threading.Thread(target=self._watch, name="strata_pyg-watch", daemon=True)]
        else:
            self.threads = [threading.Thread(target=self._read, args=(k,), name=f"strata_pyg-reader-{k}", daemon=True)
                            for k in range(S)]
        for t in self.threads:
            t.start()

    def _put(self, k, item):
        while not self.stop.is_set():
            try:
                self.qs[k].put(item, timeout=0.1)
                return
            except queue.Full:
                pass

    def _fetch(self, pos):
        """Receives, checks and decodes batch pos of the plan."""
        L = self.loader
        k, index, count = self.plan[pos]
        conn = self.conns[k]
        if self.inline:
            self.conn = conn
        t0 = time.perf_counter()
        try:
            m = next(self.calls[k])
        except StopIteration:
            raise StrataError(conn.address, "BAD_REPLY", f"the stream ended after {pos} of {self.n} batches") from None
        t1 = time.perf_counter()
        wire = 0
        if isinstance(m, bytes):
            wire = len(m)
            try:
                m = parse_batch(m)
            except TensorError as e:
                raise StrataError(conn.address, "BAD_REPLY", f"batch {pos}: {e}") from None
        if m.index != index or m.num_batches != count:
            raise StrataError(conn.address, "BAD_REPLY", f"got batch {m.index} of {m.num_batches}, "
                              f"expected {index} of {count} (is it another version of strata?)")
        d = self._decode(m, conn, pos)
        t2 = time.perf_counter()
        with self.stlock:
            st = self.stats
            st["server_wait_s"] += t1 - t0
            st["wire_bytes"] += wire
            st["decode_s"] += t2 - t1
            if m.HasField("timing"):
                st["server_sample_s"] += m.timing.sample_ns * 1e-9
                st["server_encode_s"] += m.timing.encode_ns * 1e-9
                st["server_slot_wait_s"] += m.timing.slot_wait_ns * 1e-9
        return d

    def _failure(self, e, pos):
        """The StrataError of an exception while fetching batch pos."""
        if isinstance(e, StrataError):
            return e
        L = self.loader
        conn = self.conns[self.plan[pos][0]] if self.conns and pos < self.n else None
        e = conn.error(e) if conn is not None and hasattr(e, "code") else \
            StrataError(conn.address if conn else "?", "BAD_REPLY", str(e))
        died = L._describe(conn)
        if died is not None:
            e = StrataError(died.server, "EXITED", f"{died.details}\n(the stream failed with {e.code}: {e.details})")
        return e

    def _read(self, k):
        """Reader of stream k: its batches of the plan, in order."""
        pos = 0
        try:
            for pos in range(self.n):
                if self.plan[pos][0] != k:
                    continue
                self._put(k, self._fetch(pos))
                if self.stop.is_set():
                    return
            self._put(k, _END)
        except Exception as e:  # noqa: BLE001 - handed to the consumer
            if self.stop.is_set():
                return
            self._put(k, self._failure(e, pos))

    def _watch(self):
        """reader_thread=False: cancels the streams when the trainer has
        waited for a batch longer than the timeout (next() on a gRPC
        stream takes none)."""
        while not self.stop.wait(0.2):
            d = self.deadline
            if d is not None and time.monotonic() > d:
                self.timed_out = True
                for c in self.calls:
                    c.cancel()
                return

    def _next_inline(self):
        """The next item, read by the trainer's own thread."""
        L = self.loader
        self.deadline = time.monotonic() + L.timeout
        try:
            return self._fetch(self.i)
        except Exception as e:  # noqa: BLE001 - returned as the consumer's error
            if self.timed_out and self.conn is not None:
                died = L._describe(self.conn)
                return died if died is not None else StrataError(
                    self.conn.address, "TIMEOUT", f"no batch {self.i} within {L.timeout:g} s (timeout / request_timeout)")
            return self._failure(e, self.i)
        finally:
            self.deadline = None

    def _decode(self, m, conn, seq):
        L = self.loader
        slot = None
        try:
            if m.note and not self.noted:
                self.noted = True
                warnings.warn(f"strata_pyg: server {conn.address}: {m.note}", RuntimeWarning, stacklevel=2)
            if len(m.nodes) or len(m.edges):
                return self._decode_typed(m), None
            if m.HasField("shm"):
                if m.shm.sequence != seq:
                    raise RingError(f"batch {m.index} is sequence {m.shm.sequence} of the stream, expected {seq}")
                if self.ring is None:
                    srv = L._server
                    own = srv is not None and conn is srv.conn
                    self.ring = Ring(m.shm, pin=L._pin_ring, unlink=own)
                t = self.ring.tensors(m.shm)
                slot = m.shm.slot
                need = ("n_id", "edge_index", "input_id") + (("x",) if L.with_features else ()) + \
                    (("y",) if L.with_labels else ()) + (("edge_label_index",) if L._link_mode() else ())
                missing = [k for k in need if k not in t]
                if missing:
                    raise RingError(f"slot {slot} lacks {', '.join(missing)}")
                ei = t["edge_index"]
                if ei.dim() != 2 or ei.size(0) != 2 or t["n_id"].dim() != 1 or t["input_id"].dim() != 1:
                    raise RingError(f"slot {slot}: n_id {list(t['n_id'].shape)}, edge_index {list(ei.shape)}")
                out = dict(edge_index=ei, n_id=t["n_id"], input_id=t["input_id"])
                for k in ("x", "y", "edge_label_index"):
                    if k in t:
                        out[k] = t[k]
                x = out.get("x")
                if x is not None and x.dtype == torch.bfloat16 and L.device is None:
                    # A relay's ring holds x as the server sent it: widened
                    # here, on the reader thread, as a gRPC batch is (on a
                    # device= GPU it is widened there instead).
                    out["x"] = x.float()
            elif L._stage is not None:
                out = self._staged(m, *L._stage)
            else:
                n_id = torch.from_numpy(decode(m.n_id, "n_id").astype(np.int64))
                ei = decode(m.edge_index, "edge_index")
                if ei.ndim != 2 or ei.shape[0] != 2:
                    raise TensorError(f"edge_index: shape {ei.shape}")
                out = dict(edge_index=torch.from_numpy(ei.astype(np.int64)), n_id=n_id,
                           input_id=torch.from_numpy(decode(m.input_id, "input_id", writable=True)))
                if m.HasField("x"):
                    out["x"] = to_torch(m.x, "x", writable=True)
                if m.HasField("y"):
                    out["y"] = torch.from_numpy(decode(m.y, "y").astype(np.int64))
                if m.HasField("edge_label_index"):
                    out["edge_label_index"] = torch.from_numpy(decode(m.edge_label_index, "edge_label_index").astype(np.int64))
            out.update(batch_size=int(m.batch_size), num_sampled_nodes=list(m.num_sampled_nodes),
                       num_sampled_edges=list(m.num_sampled_edges))
            if L._link_mode():
                eli = out.get("edge_label_index")
                if eli is None or eli.dim() != 2 or eli.size(0) != 2 or eli.size(1) < out["input_id"].numel():
                    raise TensorError(f"edge_label_index: {None if eli is None else list(eli.shape)} for "
                                      f"{out['input_id'].numel()} positives")
                if eli.numel() and (int(eli.min()) < 0 or int(eli.max()) >= out["n_id"].numel()):
                    raise TensorError("edge_label_index: local indices out of n_id")
        except (TensorError, RingError, OSError) as e:
            raise StrataError(conn.address, "BAD_REPLY", str(e)) from None
        return out, slot

    @staticmethod
    def _staged(m, pin, narrow):
        """A gRPC node batch copied out of its message into new tensors
        (pinned when pin): in the wire's types when narrow (widened on the
        device by _batch), else in PyG's (int64 IDs, float32 x)."""
        wide = None if narrow else torch.int64
        ei = decode(m.edge_index, "edge_index")
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise TensorError(f"edge_index: shape {ei.shape}")
        out = dict(n_id=to_host(m.n_id, "n_id", wide, pin), edge_index=to_host(m.edge_index, "edge_index", wide, pin),
                   input_id=to_host(m.input_id, "input_id", None, pin))
        if m.HasField("x"):
            out["x"] = to_host(m.x, "x", None if narrow else torch.float32, pin)
        if m.HasField("y"):
            out["y"] = to_host(m.y, "y", wide, pin)
        if m.HasField("edge_label_index"):
            out["edge_label_index"] = to_host(m.edge_label_index, "edge_label_index", wide, pin)
        return out

    def _decode_typed(self, m):
        """A typed batch: per node type and per edge type, checked."""
        L = self.loader
        if len(m.nodes) != len(L.node_types) or len(m.edges) != len(L.edge_types):
            raise TensorError(f"a typed batch of {len(m.nodes)} node types and {len(m.edges)} edge types, "
                              f"the graph has {len(L.node_types)} and {len(L.edge_types)}")
        nodes, edges = {}, {}
        for k, tn in enumerate(m.nodes):
            if tn.type != k:
                raise TensorError(f"node type {tn.type} at position {k}")
            name = L.node_types[k]
            n_id = decode(tn.n_id, f"{name}.n_id")
            if n_id.ndim != 1:
                raise TensorError(f"{name}.n_id: shape {n_id.shape}")
            d = dict(n_id=torch.from_numpy(n_id.astype(np.int64)), num_sampled_nodes=list(tn.num_sampled_nodes))
            if tn.HasField("x"):
                x = to_torch(tn.x, f"{name}.x", writable=True)
                if x.dim() != 2 or x.size(0) != n_id.shape[0]:
                    raise TensorError(f"{name}.x: shape {list(x.shape)} for {n_id.shape[0]} nodes")
                d["x"] = x
            if tn.HasField("y"):
                y = decode(tn.y, f"{name}.y")
                if y.shape != n_id.shape:
                    raise TensorError(f"{name}.y: shape {y.shape} for {n_id.shape[0]} nodes")
                d["y"] = torch.from_numpy(y.astype(np.int64))
            nodes[name] = d
        for k, te in enumerate(m.edges):
            if te.relation != k:
                raise TensorError(f"relation {te.relation} at position {k}")
            et = L.edge_types[k]
            ei = decode(te.edge_index, f"{et}.edge_index")
            if ei.ndim != 2 or ei.shape[0] != 2:
                raise TensorError(f"{et}.edge_index: shape {ei.shape}")
            ns, nd = nodes[et[0]]["n_id"].numel(), nodes[et[2]]["n_id"].numel()
            if ei.size and (ei.min() < 0 or ei[0].max(initial=-1) >= ns or ei[1].max(initial=-1) >= nd):
                raise TensorError(f"{et}.edge_index: local indices out of n_id")
            edges[et] = dict(edge_index=torch.from_numpy(ei.astype(np.int64)), num_sampled_edges=list(te.num_sampled_edges))
        input_id = torch.from_numpy(decode(m.input_id, "input_id", writable=True))
        if L.pin_memory:
            for d in list(nodes.values()) + list(edges.values()):
                for k, v in d.items():
                    if torch.is_tensor(v):
                        d[k] = v.pin_memory()
        return dict(_typed=True, nodes=nodes, edges=edges, batch_size=int(m.batch_size), input_id=input_id)

    def __iter__(self):
        return self

    def __len__(self):
        return self.n

    def _release(self, final=False):
        """Releases the ring slots of the batches handed out, in order: a
        batch nothing points into any more at once, one still referenced
        after the next batch was handed out (or at the end) after moving
        it out of the ring. The batch just handed out may be referenced by
        the loop variable while the next one is fetched: it waits."""
        if self.ctl is None:
            return
        n = self.released
        while self.held:
            seq, slot = self.held[0]
            if slot is not None and self.ring.in_use(slot):
                if not final and seq >= self.i - 1:
                    break
                self.ring.detach(slot)
            self.held.pop(0)
            n = seq + 1
        if n > self.released:
            self.released = n
            event = None
            if self.ring is not None and self.ring.pin:
                event = torch.cuda.Event()
                event.record()
            self.ctl.release(n, event)

    def __next__(self):
        if self.i >= self.n:
            self.close()
            raise StopIteration
        L = self.loader
        st = self.stats
        t0 = time.perf_counter()
        self._release()
        k = self.plan[self.i][0]
        with self.stlock:
            st["ready"] += sum(q.qsize() for q in self.qs)
        try:
            item = self._next_inline() if self.inline else self.qs[k].get(timeout=L.timeout)
        except queue.Empty:
            conn = self.conns[k]
            died = L._describe(conn)
            self.close()
            if died is not None:
                raise died from None
            raise StrataError(conn.address, "TIMEOUT", f"no batch {self.i} within {L.timeout:g} s "
                              "(timeout / request_timeout)") from None
        if isinstance(item, Exception):
            self.close()
            raise item
        if item is _END:
            self.close()
            raise StopIteration
        f, slot = item
        self.held.append((self.i, slot))
        self.i += 1
        t1 = time.perf_counter()
        st["wait_s"] += t1 - t0
        b = self._batch(f)
        st["batch_s"] += time.perf_counter() - t1
        st["batches"] += 1
        return b

    def _batch(self, f):
        L = self.loader
        if f.get("_typed"):
            b = _typed_batch(L, f)
            if L.device is not None:
                b = b.to(L.device, non_blocking=True)
            if L.transform is not None:
                b = L.transform(b)
            return b
        L._finish(f)
        if L.device is not None:
            # device=: everything on that device, the IDs widened there
            # (int32 from a ring that sent them narrow). The slot's views
            # are dropped here, so its release needs no copy out.
            # bfloat16 features (a pinned gRPC batch) are widened there too.
            for k, v in f.items():
                if torch.is_tensor(v):
                    v = v.to(L.device, non_blocking=True)
                    f[k] = v.long() if v.dtype == torch.int32 else v.float() if v.dtype == torch.bfloat16 else v
        else:
            for k in ("n_id", "edge_index", "edge_label_index", "y"):
                v = f.get(k)
                if v is not None and v.dtype == torch.int32:  # a ring of narrow IDs unasked: still PyG's dtypes
                    f[k] = v.long()
            if f.get("x") is not None and f["x"].dtype == torch.bfloat16:
                f["x"] = f["x"].float()
        if L.data is not None:
            # PyG's filter_data: every node attribute indexed by n_id, on
            # the device it lives on.
            idx = {}
            for k, v in L._local.items():
                d = v.device
                if d not in idx:
                    idx[d] = f["n_id"].to(d, non_blocking=True)
                f[k] = v[idx[d]]
                if L.device is not None:  # device=: gathered where it lives, delivered there
                    f[k] = f[k].to(L.device, non_blocking=True)
        if _PyGData is not None:
            b = _PyGData(**{k: f[k] for k in ("x", "edge_index", "y") if k in f})
            for k, v in f.items():
                if k not in ("x", "edge_index", "y"):
                    b[k] = v
        else:
            b = Batch(**f)
        if L.transform is not None:
            b = L.transform(b)
        return b

    def close(self):
        """Ends the epoch: stops the reader, releases every slot (moving
        the batches still referenced out of the ring), closes the streams
        and the ring. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        finished = self.i >= self.n
        if not finished:
            # Abandoned or failed: the reader may wait on a silent server.
            for c in self.calls:
                c.cancel()
        if self.ctl is not None:
            # Unblock the reader (it may wait on a full queue holding
            # batches in slots), then drop what it left there.
            for q in self.qs:
                while True:
                    try:
                        q.get_nowait()
                    except queue.Empty:
                        break
        for t in self.threads:
            if t.is_alive() and threading.current_thread() is not t:
                t.join(timeout=10)
        if self.ctl is not None:
            try:
                self._release(final=True)
            finally:
                self.ctl.close()
            if finished:
                # A finished epoch: the server ends the stream once it has
                # the last release (cancelling would count as an error).
                try:
                    self.calls[0].exception(timeout=5)
                except Exception:  # noqa: BLE001 - cancelled below anyway
                    pass
        for c in self.calls:
            c.cancel()
        if self.ring is not None:
            self.ring.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
