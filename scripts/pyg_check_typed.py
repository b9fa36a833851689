#!/usr/bin/env python3
"""Check a typed model (rgcn, hsage) saved by `strata train --save` against PyG.

Builds the PyG model docs/models.md describes from model.json alone (a
ModuleList `convs` of HeteroConv({edge_type: SAGEConv}) and a ModuleList
`roots` of ModuleDict({node_type: Linear})), loads model.safetensors with
load_state_dict(strict=True), runs it on the whole typed dataset and
compares the target type's logits with `strata predict`'s:

    strata gen /tmp/h --preset hetero --nodes 2000
    strata train --model hsage --dataset /tmp/h --save /tmp/m-hsage
    strata predict --model /tmp/m-hsage --dataset /tmp/h --out /tmp/m-hsage/logits.npy
    python3 scripts/pyg_check_typed.py --model /tmp/m-hsage --dataset /tmp/h \
        --logits /tmp/m-hsage/logits.npy

--dataset is a typed Strata dataset directory (format version 2). A model
trained with --add-reverse is refused here (build the reverse relations
with PyG's T.ToUndirected() yourself). It needs torch, torch_geometric and
safetensors; when torch_geometric is missing it says so and exits 0
(skipped) unless --require is given. --numpy runs the same math in NumPy
instead. Exit status 0 when the largest absolute difference is within
--tol (default 1e-4), 1 otherwise.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(info["shape"]).copy()
    return out


def read_typed(path):
    """x_dict {type: [N, F] float32, ones [N, 1] for a type without
    features} and edge_index_dict {(src, rel, dst): [2, E] int64} of a
    typed Strata dataset: row 0 the source IDs, row 1 the destinations."""
    with open(os.path.join(path, "manifest.json")) as f:
        m = json.load(f)
    if m.get("version") != 2:
        raise SystemExit(f"{path}: format version {m.get('version')}, want a typed dataset (version 2)")
    x, ei = {}, {}
    for t, nt in enumerate(m["node_types"]):
        n, dim = nt["num_nodes"], nt["feat_dim"]
        if dim > 0:
            x[nt["name"]] = np.fromfile(os.path.join(path, f"node{t}.features.bin"), dtype="<f4").reshape(n, dim)
        else:
            x[nt["name"]] = np.ones((n, 1), dtype=np.float32)
    counts = {nt["name"]: nt["num_nodes"] for nt in m["node_types"]}
    for r, et in enumerate(m["edge_types"]):
        indptr = np.fromfile(os.path.join(path, f"edge{r}.indptr.bin"), dtype="<i8")
        src = np.fromfile(os.path.join(path, f"edge{r}.indices.bin"), dtype="<i4").astype(np.int64)
        dst = np.repeat(np.arange(counts[et["dst"]], dtype=np.int64), np.diff(indptr))
        ei[(et["src"], et["rel"], et["dst"])] = np.stack([src, dst])
    return x, ei


def layout(meta):
    """Per layer: output width, the conv relations as tuples, the root types."""
    ty = meta["typed"]
    rels = {f"{r['src']}___{r['rel']}___{r['dst']}": (r["src"], r["rel"], r["dst"]) for r in ty["relations"]}
    out = []
    for k, layer in enumerate(ty["layers"]):
        width = meta["classes"] if k == meta["layers"] - 1 else meta["hidden"]
        out.append((width, [rels[c] for c in layer["convs"]], list(layer["roots"])))
    return out


# ---------------------------------------------------------------- PyG (the docs' snippet)


def build_pyg(meta):
    import torch
    from torch_geometric.nn import HeteroConv, Linear, SAGEConv
    from torch_geometric.nn.module_dict import ModuleDict

    class TypedModel(torch.nn.Module):
        def __init__(self, meta):
            super().__init__()
            ty = meta["typed"]
            rgcn = meta["architecture"] == "rgcn"
            rels = {f"{r['src']}___{r['rel']}___{r['dst']}": (r["src"], r["rel"], r["dst"]) for r in ty["relations"]}
            width = {t["name"]: max(t["in_dim"], 1) for t in ty["node_types"]}
            self.convs, self.roots, self.root_types = torch.nn.ModuleList(), torch.nn.ModuleList(), []
            for k, layer in enumerate(ty["layers"]):
                out = meta["classes"] if k == meta["layers"] - 1 else meta["hidden"]
                convs = {}
                for name in layer["convs"]:
                    s, _, d = rels[name]
                    if rgcn:  # W_r mean_j h_j: no root, no bias (the roots hold them)
                        convs[rels[name]] = SAGEConv((width[s], width[d]), out, root_weight=False, bias=False)
                    else:
                        convs[rels[name]] = SAGEConv((width[s], width[d]), out)
                self.convs.append(HeteroConv(convs, aggr="sum"))
                self.roots.append(ModuleDict({t: Linear(width[t], out) for t in layer["roots"]}))
                self.root_types.append(list(layer["roots"]))
                width = {t: out for t in width}

        def forward(self, x_dict, edge_index_dict):
            for k, conv in enumerate(self.convs):
                h = conv(x_dict, edge_index_dict)
                for t in self.root_types[k]:
                    r = self.roots[k][t](x_dict[t])
                    h[t] = h[t] + r if t in h else r
                if k < len(self.convs) - 1:
                    h = {t: v.relu() for t, v in h.items()}
                x_dict = h
            return x_dict

    return TypedModel(meta)


def pyg_logits(meta, weights_path, x, ei):
    import torch
    from safetensors.torch import load_file

    model = build_pyg(meta)
    model.load_state_dict(load_file(weights_path), strict=True)  # every name and shape must match
    model.eval()
    with torch.no_grad():
        out = model({t: torch.from_numpy(v) for t, v in x.items()}, {k: torch.from_numpy(v) for k, v in ei.items()})
    return out[meta["typed"]["target"]].numpy()


# ---------------------------------------------------------------- NumPy


def key(rel):
    return "<" + "___".join(rel).replace(".", "#") + ">"


def numpy_logits(meta, weights_path, x, ei):
    t = read_safetensors(weights_path)
    h = {k: v.astype(np.float64) for k, v in x.items()}
    lay = layout(meta)
    for k, (width, convs, roots) in enumerate(lay):
        out = {}
        for rel in convs:
            s, _, d = rel
            c = f"convs.{k}.convs.{key(rel)}."
            src, dst = ei[rel]
            n = h[d].shape[0]
            deg = np.zeros(n)
            np.add.at(deg, dst, 1)
            agg = np.zeros((n, h[s].shape[1]))
            np.add.at(agg, dst, h[s][src])
            y = (agg / np.maximum(deg, 1)[:, None]) @ t[c + "lin_l.weight"].T
            if c + "lin_l.bias" in t:
                y = y + t[c + "lin_l.bias"]
            if c + "lin_r.weight" in t:
                y = y + h[d] @ t[c + "lin_r.weight"].T
            out[d] = out.get(d, 0) + y
        for r in roots:
            c = f"roots.{k}.{r.replace('.', '#')}."
            out[r] = out.get(r, 0) + h[r] @ t[c + "weight"].T + t[c + "bias"]
        if k < len(lay) - 1:
            out = {ty: np.maximum(v, 0) for ty, v in out.items()}
        h = out
    return h[meta["typed"]["target"]].astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model directory (model.json, model.safetensors)")
    ap.add_argument("--dataset", required=True, help="typed Strata dataset directory")
    ap.add_argument("--logits", required=True, help="strata predict's .npy (every node of the target type)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--numpy", action="store_true", help="NumPy reference instead of PyG")
    ap.add_argument("--require", action="store_true", help="fail, not skip, without torch_geometric")
    args = ap.parse_args()
    with open(os.path.join(args.model, "model.json")) as f:
        meta = json.load(f)
    if "typed" not in meta:
        raise SystemExit(f"{args.model}: not a typed model (use scripts/pyg_check.py)")
    if meta["typed"]["add_reverse"]:
        raise SystemExit(f"{args.model}: trained with --add-reverse; this check feeds the stored relations only")
    if not args.numpy:
        try:
            import torch_geometric  # noqa: F401
        except ImportError:
            print("pyg_check_typed: torch_geometric is not installed: skipped")
            return 1 if args.require else 0
    x, ei = read_typed(args.dataset)
    weights = os.path.join(args.model, "model.safetensors")
    ours = np.load(args.logits)
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
