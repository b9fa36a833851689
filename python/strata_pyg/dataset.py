"""Reading a Strata dataset directory (docs/dataset-format.md) into a PyG
Data, for scripts that want the same graph in PyTorch (the benchmark)."""

import json
import os

import numpy as np
import torch

_DT = {"int64": "<i8", "int32": "<i4", "float32": "<f4"}


def load_dataset(path):
    """Returns a PyG ``Data`` (or, without PyG, an object with the same
    attributes) with ``edge_index`` ([2, E] int64, row 0 the sources),
    ``x``, ``y`` (int64, -1 unlabeled), ``train_mask``, ``val_mask``,
    ``test_mask`` and ``num_nodes`` of the Strata dataset directory
    ``path``. The manifest's sizes are checked against the files; the
    checksums are not (``strata info DIR`` verifies them)."""
    with open(os.path.join(path, "manifest.json")) as f:
        m = json.load(f)
    if m.get("magic") != "STRATA-DS" or m.get("version") != 1:
        raise ValueError(f"{path}: not a Strata dataset of version 1 (magic {m.get('magic')!r}, "
                         f"version {m.get('version')!r})")
    n = int(m["num_nodes"])
    arrays = {}
    for a in m["arrays"]:
        name, dt = a["name"], _DT.get(a["dtype"])
        if dt is None or not name.isidentifier():
            raise ValueError(f"{path}: array {name!r} of dtype {a['dtype']!r}")
        file = os.path.join(path, name + ".bin")
        count = int(np.prod(a["shape"])) if a["shape"] else 1
        if os.path.getsize(file) != count * np.dtype(dt).itemsize:
            raise ValueError(f"{file}: {os.path.getsize(file)} bytes, the manifest says shape {a['shape']} of {a['dtype']}")
        arrays[name] = np.fromfile(file, dtype=dt).reshape(a["shape"])
    indptr, indices = arrays["indptr"], arrays["indices"]
    if indptr.shape != (n + 1,) or indptr[0] != 0 or indptr[-1] != indices.size or np.any(np.diff(indptr) < 0):
        raise ValueError(f"{path}: indptr is not the offsets of {indices.size} edges over {n} nodes")
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"{path}: indices out of [0, {n})")
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    attrs = {"edge_index": torch.from_numpy(np.stack([src, indices.astype(np.int64)])), "num_nodes": n}
    if "features" in arrays:
        attrs["x"] = torch.from_numpy(arrays["features"])
    if "labels" in arrays:
        attrs["y"] = torch.from_numpy(arrays["labels"].astype(np.int64))
    for split in ("train", "val", "test"):
        if split in arrays:
            ids = arrays[split]
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise ValueError(f"{path}: {split} IDs out of [0, {n})")
            mask = torch.zeros(n, dtype=torch.bool)
            mask[torch.from_numpy(ids.astype(np.int64))] = True
            attrs[f"{split}_mask"] = mask
    try:
        from torch_geometric.data import Data
        return Data(**attrs)
    except ImportError:
        from .loader import Batch
        return Batch(**attrs)
