#!/usr/bin/env python3
"""Check a model saved by `strata train --save` against PyTorch Geometric.

Builds the PyG model the saved weights belong to (torch_geometric.nn.models
GraphSAGE or GCN, or a ModuleList `convs` of GATConv for GAT, whose output
layer has its own head count), loads model.safetensors with
load_state_dict(strict=True), runs full-graph inference on the dataset the
model was trained on and compares the logits with `strata predict`'s:

    strata train --dataset cora --model sage --save /tmp/m-sage
    strata predict --model /tmp/m-sage --dataset cora --out /tmp/m-sage/logits.npy
    python3 scripts/pyg_check.py --model /tmp/m-sage \
        --dataset "$STRATA_DATASETS/cora" --logits /tmp/m-sage/logits.npy

--dataset is a Strata dataset directory (manifest.json + *.bin) or a
shared-datasets folder (meta.json + *.bin.gz; the built-in Cora is the
shared Cora exactly). It needs torch, torch_geometric and safetensors (no
pyg-lib or torch_sparse: full-graph message passing uses plain scatter).
--numpy runs the same math in NumPy instead of PyG (GCN's gcn_norm, SAGE's
mean, GAT's remove-then-add self-loops, as PyG 2.8 defines them), for a
machine without PyTorch. Exit status 0 when the largest absolute
difference is within --tol (default 1e-4), 1 otherwise.
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    """The tensors of a safetensors file as float32 NumPy arrays."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} has dtype {info['dtype']}, want F32")
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(info["shape"]).copy()
    return out


def read_dataset(path):
    """(num_nodes, features [N, F] float32, edge_index [2, E] int64) of a
    Strata dataset directory or a shared-datasets folder. edge_index holds
    (source, target) pairs: messages flow from row 0 to row 1, as Strata's
    in-adjacency reads them."""
    if os.path.exists(os.path.join(path, "manifest.json")):
        with open(os.path.join(path, "manifest.json")) as f:
            m = json.load(f)
        n, dim = m["num_nodes"], m["feat_dim"]
        indptr = np.fromfile(os.path.join(path, "indptr.bin"), dtype="<i8")
        indices = np.fromfile(os.path.join(path, "indices.bin"), dtype="<i4").astype(np.int64)
        # indptr/indices are the out-adjacency: row u lists the targets of u's edges.
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        x = np.fromfile(os.path.join(path, "features.bin"), dtype="<f4").reshape(n, dim)
        return n, x, np.stack([src, indices])
    with open(os.path.join(path, "meta.json")) as f:
        m = json.load(f)
    n, dim = m["num_nodes"], m["feat_dim"]

    def arr(name, dtype):
        with gzip.open(os.path.join(path, name + ".gz"), "rb") as f:
            return np.frombuffer(f.read(), dtype=dtype)

    e = arr("edges.bin", "<i4").reshape(-1, 2).astype(np.int64)
    x = arr("features.bin", "<f4").reshape(n, dim).copy()
    return n, x, np.ascontiguousarray(e.T)


def row_normalize(x):
    """Strata's RowNormalize: each row divided by its sum (float64), rows
    summing to zero unchanged."""
    s = x.astype(np.float64).sum(axis=1, keepdims=True)
    safe = np.where(s == 0, 1.0, s)
    return np.where(s == 0, x, (x.astype(np.float64) / safe)).astype(np.float32)


# ---------------------------------------------------------------- PyG


def pyg_logits(meta, weights_path, x, edge_index):
    import torch
    from safetensors.torch import load_file
    from torch_geometric.nn import GATConv
    from torch_geometric.nn.models import GCN, GraphSAGE

    arch, layers = meta["architecture"], meta["layers"]
    ind, hid, classes = meta["in_dim"], meta["hidden"], meta["classes"]
    if arch == "sage":
        model = GraphSAGE(ind, hid, layers, out_channels=classes)
        act = torch.relu
    elif arch == "gcn":
        model = GCN(ind, hid, layers, out_channels=classes)
        act = torch.relu
    else:
        heads, out_heads, slope = meta["heads"], meta["out_heads"], meta["negative_slope"]
        convs = torch.nn.ModuleList()
        width = ind
        for k in range(layers):
            if k < layers - 1:
                convs.append(GATConv(width, hid, heads=heads, concat=True, negative_slope=slope))
                width = heads * hid
            else:
                convs.append(GATConv(width, classes, heads=out_heads, concat=False, negative_slope=slope))

        class GAT(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.convs = convs

            def forward(self, h, ei):
                for k, conv in enumerate(self.convs):
                    h = conv(h, ei)
                    if k < len(self.convs) - 1:
                        h = torch.nn.functional.elu(h)
                return h

        model = GAT()
        act = None
    state = load_file(weights_path)
    model.load_state_dict(state, strict=True)  # every name and shape must match
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(x), torch.from_numpy(edge_index))
    return out.numpy()


# ---------------------------------------------------------------- NumPy


def scatter_sum(values, index, n):
    out = np.zeros((n,) + values.shape[1:], dtype=np.float64)
    np.add.at(out, index, values)
    return out


def np_gcn(x, ei, n, w, b):
    src, dst = ei
    keep = src != dst  # add_remaining_self_loops: one loop per node, weight 1
    src = np.concatenate([src[keep], np.arange(n)])
    dst = np.concatenate([dst[keep], np.arange(n)])
    deg = scatter_sum(np.ones(len(dst)), dst, n)  # in-degree with the loop
    norm = deg[src] ** -0.5 * deg[dst] ** -0.5
    h = x.astype(np.float64) @ w.T.astype(np.float64)
    return scatter_sum(h[src] * norm[:, None], dst, n) + b


def np_sage(x, ei, n, wl, bl, wr):
    src, dst = ei
    x = x.astype(np.float64)
    deg = scatter_sum(np.ones(len(dst)), dst, n)
    mean = scatter_sum(x[src], dst, n) / np.maximum(deg, 1)[:, None]
    return mean @ wl.T + bl + x @ wr.T


def np_gat(x, ei, n, w, att_src, att_dst, b, heads, dim, concat, slope):
    src, dst = ei
    keep = src != dst  # remove_self_loops, then add_self_loops
    src = np.concatenate([src[keep], np.arange(n)])
    dst = np.concatenate([dst[keep], np.arange(n)])
    z = (x.astype(np.float64) @ w.T).reshape(n, heads, dim)
    a_s = (z * att_src.reshape(1, heads, dim)).sum(-1)
    a_d = (z * att_dst.reshape(1, heads, dim)).sum(-1)
    e = a_s[src] + a_d[dst]
    e = np.where(e > 0, e, slope * e)
    emax = np.full((n, heads), -np.inf)
    np.maximum.at(emax, dst, e)
    p = np.exp(e - emax[dst])
    alpha = p / scatter_sum(p, dst, n)[dst]
    out = scatter_sum(z[src] * alpha[:, :, None], dst, n)
    out = out.reshape(n, heads * dim) if concat else out.mean(axis=1)
    return out + b


def numpy_logits(meta, weights_path, x, ei):
    t = read_safetensors(weights_path)
    arch, layers, n = meta["architecture"], meta["layers"], x.shape[0]
    h = x
    for k in range(layers):
        c = f"convs.{k}."
        last = k == layers - 1
        if arch == "gcn":
            h = np_gcn(h, ei, n, t[c + "lin.weight"], t[c + "bias"])
        elif arch == "sage":
            h = np_sage(h, ei, n, t[c + "lin_l.weight"], t[c + "lin_l.bias"], t[c + "lin_r.weight"])
        else:
            heads = meta["out_heads"] if last else meta["heads"]
            dim = meta["classes"] if last else meta["hidden"]
            h = np_gat(h, ei, n, t[c + "lin.weight"], t[c + "att_src"], t[c + "att_dst"], t[c + "bias"],
                       heads, dim, not last, meta["negative_slope"])
        if not last:
            h = np.maximum(h, 0) if arch != "gat" else np.where(h > 0, h, np.expm1(np.minimum(h, 0)))
    return h.astype(np.float32)


def read_npy_logits(path):
    a = np.load(path)
    if a.dtype != np.float32 or a.ndim != 2:
        raise SystemExit(f"{path}: {a.dtype} {a.shape}, want float32 [nodes, classes]")
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model directory (model.json, model.safetensors)")
    ap.add_argument("--dataset", required=True, help="Strata dataset directory or shared-datasets folder")
    ap.add_argument("--logits", required=True, help="strata predict's .npy (every node)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--numpy", action="store_true", help="NumPy reference instead of PyG")
    args = ap.parse_args()
    with open(os.path.join(args.model, "model.json")) as f:
        meta = json.load(f)
    n, x, ei = read_dataset(args.dataset)
    if meta["features"]["row_normalized"]:
        x = row_normalize(x)
    weights = os.path.join(args.model, "model.safetensors")
    ours = read_npy_logits(args.logits)
    theirs = numpy_logits(meta, weights, x, ei) if args.numpy else pyg_logits(meta, weights, x, ei)
    if ours.shape != theirs.shape:
        raise SystemExit(f"strata's logits are {ours.shape}, the reference's {theirs.shape}")
    diff = float(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)).max())
    same = float((ours.argmax(1) == theirs.argmax(1)).mean())
    ref = "numpy" if args.numpy else "pyg"
    print(f"{meta['architecture']} ({meta['layers']} layers) on {args.dataset}: {ref} vs strata max |diff| {diff:.3g} "
          f"(tol {args.tol:g}), argmax agreement {same:.4f}, largest |logit| {float(np.abs(theirs).max()):.3g}")
    return 0 if diff <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
