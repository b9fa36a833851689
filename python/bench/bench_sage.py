#!/usr/bin/env python3
"""GraphSAGE (3 layers, hidden 256, fanouts 15,10,5, batch 1024) trained with
PyG on a Strata dataset, fed by strata_pyg's NeighborLoader in worker mode
(through the shared-memory ring, or the socket: worker-grpc) and in
server-client mode over loopback, and by PyG's own NeighborLoader
when pyg-lib or torch-sparse is installed. Prints the epoch times and the
test accuracy of every mode, then a JSON summary.

    strata gen /tmp/ph --preset products-hard          # the products shape
    STRATA_BIN=$PWD/strata python3 python/bench/bench_sage.py --dataset /tmp/ph --epochs 10

The model is PyG's GraphSAGE when torch_geometric is installed (a plain
PyTorch SAGE otherwise, for smoke tests without PyG). The script is the
same PyG training loop for every mode: only the loader line differs.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import strata_pyg  # noqa: E402


def model_for(in_dim, classes, hidden, layers):
    try:
        from torch_geometric.nn import GraphSAGE
        return GraphSAGE(in_dim, hidden, num_layers=layers, out_channels=classes, dropout=0.5), "torch_geometric.nn.GraphSAGE"
    except ImportError:
        return PlainSAGE(in_dim, hidden, classes, layers), "plain PyTorch SAGE (no torch_geometric)"


class PlainSAGE(torch.nn.Module):
    """Mean-aggregation GraphSAGE without PyG (lin_l(mean of neighbors) + lin_r(self))."""

    def __init__(self, in_dim, hidden, out, layers):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out]
        self.l = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.r = torch.nn.ModuleList(torch.nn.Linear(a, b, bias=False) for a, b in zip(dims, dims[1:]))

    def forward(self, x, edge_index):
        src, dst = edge_index
        for i, (l, r) in enumerate(zip(self.l, self.r)):
            agg = torch.zeros(x.size(0), x.size(1), device=x.device).index_add_(0, dst, x[src])
            deg = torch.zeros(x.size(0), device=x.device).index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
            x = l(agg / deg.clamp(min=1).unsqueeze(1)) + r(x)
            if i < len(self.l) - 1:
                x = F.dropout(F.relu(x), 0.5, self.training)
        return x


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(model, opt, loader, device, breakdown=None):
    """One epoch; with breakdown (a dict) also the time per phase, the
    device synchronized between phases (which costs a little overlap):
    loader (waiting for the next batch), h2d (batch.to(device)), model
    (forward, backward, step, the loss read back)."""
    model.train()
    sync(device)
    t = time.perf_counter()
    loss_sum, n = 0.0, 0
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        if breakdown is not None:
            sync(device)  # work the loader queued (GPU gathers) counts as the loader's
            t1 = time.perf_counter()
        batch = batch.to(device, non_blocking=True)
        if breakdown is not None:
            sync(device)
            t2 = time.perf_counter()
        x = batch.x if batch.x.dtype == torch.float32 else batch.x.float()
        opt.zero_grad()
        out = model(x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        opt.step()
        loss_sum += float(loss.detach()) * batch.batch_size
        n += batch.batch_size
        if breakdown is not None:
            t3 = time.perf_counter()
            breakdown["loader_s"] += t1 - t0
            breakdown["h2d_s"] += t2 - t1
            breakdown["model_s"] += t3 - t2
            breakdown["batches"] += 1
            breakdown["nodes"] += batch.num_nodes
            breakdown["edges"] += batch.edge_index.size(1)
    sync(device)
    return time.perf_counter() - t, loss_sum / max(n, 1)


def print_breakdown(name, epoch, bd, loader):
    """One line per epoch: per-batch milliseconds of the training loop's
    phases, and strata_pyg's own split of the loader's part."""
    n = max(bd["batches"], 1)
    line = (f"[{name}] epoch {epoch:2d} per batch: loader {1000 * bd['loader_s'] / n:.2f} ms, "
            f"h2d {1000 * bd['h2d_s'] / n:.2f} ms, model {1000 * bd['model_s'] / n:.2f} ms "
            f"({bd['nodes'] // n} nodes, {bd['edges'] // n} edges)")
    st = loader.stats() if hasattr(loader, "stats") else None
    if st:
        line += (f"\n[{name}]   strata_pyg ({st['transport']}): trainer wait {st['wait_ms']:.2f} ms (batch object "
                 f"{st['batch_ms']:.2f} ms, {st['ready_mean']:.1f} batches ready on average); reader: server wait "
                 f"{st['server_wait_ms']:.2f} ms, decode {st['decode_ms']:.2f} ms, {st['wire_mib_per_batch']:.2f} MiB "
                 f"on the wire; server: sample {st['server_sample_ms']:.2f} ms, encode {st['server_encode_ms']:.2f} ms, "
                 f"slot wait {st['server_slot_wait_ms']:.2f} ms")
    print(line, flush=True)
    out = {k: 1000 * v / n for k, v in bd.items() if k.endswith("_s")}
    if st:
        out["strata_pyg"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in st.items()}
    return out


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    for batch in loader:
        batch = batch.to(device, non_blocking=True)
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        y = batch.y[:batch.batch_size]
        correct += int((out.argmax(-1) == y).sum())
        total += y.numel()
    return correct / max(total, 1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args):
    """`strata serve` on a loopback port, as a separate server process."""
    ready = os.path.join(tempfile.mkdtemp(prefix="strata-bench-"), "ready")
    log = open(ready + ".log", "w")
    p = subprocess.Popen([strata_pyg.find_strata(args.strata_bin), "--quiet", "serve", "--dataset", args.dataset,
                          "--listen", f"127.0.0.1:{free_port()}", "--ready-file", ready,
                          "--device", args.server_device, "--max-message-mb", "2047"],
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    end = time.monotonic() + 600
    while not os.path.exists(ready):
        if p.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"strata serve did not start; see {ready}.log")
        time.sleep(0.1)
    with open(ready) as f:
        return p, f.read().strip()


def run_mode(name, make_loaders, data, args, device, results):
    torch.manual_seed(args.seed)
    model, kind = model_for(data.x.size(1), int(data.y.max()) + 1, args.hidden, len(args.fanouts))
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    t = time.perf_counter()
    try:
        train_loader, test_loader = make_loaders()
    except Exception as e:  # noqa: BLE001 - report and go on with the other modes
        print(f"[{name}] skipped: {type(e).__name__}: {e}", flush=True)
        results[name] = {"skipped": f"{type(e).__name__}: {e}"}
        return
    setup = time.perf_counter() - t
    print(f"[{name}] model {kind}; loader setup {setup:.1f}s; {len(train_loader)} batches per epoch", flush=True)
    times, losses, breakdowns = [], [], []
    for epoch in range(1, args.epochs + 1):
        bd = dict.fromkeys(("loader_s", "h2d_s", "model_s", "batches", "nodes", "edges"), 0) if args.breakdown else None
        dt, loss = train_epoch(model, opt, train_loader, device, bd)
        times.append(dt)
        losses.append(loss)
        print(f"[{name}] epoch {epoch:2d}  {dt:7.3f} s  loss {loss:.4f}", flush=True)
        if bd is not None:
            breakdowns.append(print_breakdown(name, epoch, bd, train_loader))
    t = time.perf_counter()
    acc = evaluate(model, test_loader, device) if not args.skip_eval else float("nan")
    ev = time.perf_counter() - t
    steady = times[1:] or times
    r = {"epoch_s": times, "mean_epoch_s_after_first": sum(steady) / len(steady), "loss": losses,
         "test_accuracy": acc, "eval_s": ev, "setup_s": setup, "batches": len(train_loader), "model": kind}
    if breakdowns:
        r["breakdown_ms_per_batch"] = breakdowns
    print(f"[{name}] mean epoch (after the first) {r['mean_epoch_s_after_first']:.3f} s; test accuracy {acc:.4f} "
          f"({ev:.1f} s)", flush=True)
    results[name] = r
    for L in (train_loader, test_loader):
        if hasattr(L, "close"):
            L.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="Strata dataset directory (strata gen DIR --preset products-hard)")
    ap.add_argument("--modes", default="worker,server,server-local-x,pyg",
                    help="comma list of worker (the shared-memory ring), worker-grpc (worker mode through the "
                         "socket), server (server-client through the loader's relay into a ring), server-grpc "
                         "(server-client received in Python), server-local-x, pyg")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu", help="training device")
    ap.add_argument("--sampler-device", default="cpu", help="where worker mode's child server samples (cpu, cuda:0)")
    ap.add_argument("--server-device", default="cpu", help="where the server of the server modes samples")
    ap.add_argument("--num-workers", type=int, default=4, help="batches sampled at once (Strata) / worker processes (PyG)")
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--eval-batch-size", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--strata-bin", default=None, help="strata binary (default $STRATA_BIN, else strata on PATH)")
    ap.add_argument("--json", default=None, help="also write the summary to this file")
    ap.add_argument("--breakdown", action="store_true",
                    help="per epoch, the per-batch time of the loader, the host-to-device copy and the model step "
                         "(the device synchronized between them), and strata_pyg's split of the loader's time "
                         "(trainer wait, server wait, decode, the server's sampling, encoding and ring-slot waits)")
    ap.add_argument("--pin-memory", action="store_true", help="strata_pyg loaders with pin_memory=True")
    ap.add_argument("--skip-eval", action="store_true", help="no test-set evaluation (timing runs)")
    ap.add_argument("--loader-device", action="store_true",
                    help="strata_pyg loaders with device=DEVICE: batches delivered on the training device (the ring's "
                         "IDs as int32, widened there)")
    ap.add_argument("--streams", type=int, default=None,
                    help="server mode: Sample streams in flight to the server (default the loader's: 4)")
    ap.add_argument("--no-reader-thread", action="store_true",
                    help="worker mode: the ring's messages read on the training thread (reader_thread=False)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval (seconds; Python's default 0.005): how long the training thread may "
                         "keep the GIL from the loader's reader thread")
    ap.add_argument("--feature-dtype", default=None, choices=["float32", "bfloat16"],
                    help="server mode: the features' type on the wire (bfloat16: half the bytes, widened to float32)")
    args = ap.parse_args()
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    device = torch.device(args.device)

    t = time.perf_counter()
    data = strata_pyg.load_dataset(args.dataset)
    print(f"dataset {args.dataset}: {data.num_nodes} nodes, {data.edge_index.size(1)} edges, "
          f"{data.x.size(1)} features; read in {time.perf_counter() - t:.1f}s; torch {torch.__version__}, "
          f"device {device}", flush=True)
    # As PyG scripts often do: features and labels on the GPU once.
    gdata = strata_pyg.loader._PyGData(x=data.x.to(device), y=data.y.to(device), edge_index=data.edge_index,
                                       num_nodes=data.num_nodes) if strata_pyg.loader._PyGData else \
        strata_pyg.Batch(x=data.x.to(device), y=data.y.to(device), edge_index=data.edge_index, num_nodes=data.num_nodes)
    train_idx = data.train_mask.nonzero().view(-1)
    test_idx = data.test_mask.nonzero().view(-1)
    common = dict(num_neighbors=args.fanouts, num_workers=args.num_workers)
    if args.pin_memory:
        common["pin_memory"] = True
    if args.loader_device:
        common["device"] = device
    results = {}
    server = None
    modes = args.modes.split(",")
    try:
        if any(m.startswith("server") for m in modes):
            server, addr = start_server(args)
            print(f"server-client: strata serve on {addr} (sampling on {args.server_device})", flush=True)
        for mode in modes:
            if mode in ("worker", "worker-grpc"):
                def make():
                    kw = dict(common, sampler_device=args.sampler_device, strata_bin=args.strata_bin,
                              transport="grpc" if mode == "worker-grpc" else "auto")
                    if args.no_reader_thread and mode == "worker":
                        kw["reader_thread"] = False
                    return (strata_pyg.NeighborLoader(gdata, input_nodes=train_idx, batch_size=args.batch_size,
                                                      shuffle=True, **kw),
                            strata_pyg.NeighborLoader(gdata, input_nodes=test_idx, batch_size=args.eval_batch_size, **kw))
            elif mode in ("server", "server-grpc"):
                def make():
                    kw = dict(common, feature_dtype=args.feature_dtype,
                              transport="grpc" if mode == "server-grpc" else "auto")
                    if args.streams is not None:
                        kw["streams"] = args.streams
                    return (strata_pyg.NeighborLoader(addr, input_nodes="train", batch_size=args.batch_size,
                                                      shuffle=True, **kw),
                            strata_pyg.NeighborLoader(addr, input_nodes="test", batch_size=args.eval_batch_size, **kw))
            elif mode == "server-local-x":
                def make():
                    return (strata_pyg.NeighborLoader(gdata, input_nodes=train_idx, batch_size=args.batch_size,
                                                      shuffle=True, servers=[addr], **common),
                            strata_pyg.NeighborLoader(gdata, input_nodes=test_idx, batch_size=args.eval_batch_size,
                                                      servers=[addr], **common))
            elif mode == "pyg":
                def make():
                    from torch_geometric.loader import NeighborLoader
                    kw = dict(num_neighbors=args.fanouts, num_workers=args.num_workers,
                              persistent_workers=args.num_workers > 0)
                    return (NeighborLoader(data, input_nodes=train_idx, batch_size=args.batch_size, shuffle=True, **kw),
                            NeighborLoader(data, input_nodes=test_idx, batch_size=args.eval_batch_size, **kw))
            else:
                raise SystemExit(f"unknown mode {mode!r}")
            run_mode(mode, make, data, args, device, results)
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)
    print("\nsummary (mean epoch after the first, test accuracy):")
    for k, r in results.items():
        if "skipped" in r:
            print(f"  {k:16s} skipped ({r['skipped']})")
        else:
            print(f"  {k:16s} {r['mean_epoch_s_after_first']:8.3f} s   {r['test_accuracy']:.4f}")
    w = results.get("worker", {}).get("mean_epoch_s_after_first")
    for other in ("worker-grpc", "server", "server-grpc", "server-local-x", "pyg"):
        o = results.get(other, {}).get("mean_epoch_s_after_first")
        if w and o:
            print(f"  {other} / worker epoch time: {o / w:.2f}x")
    s = json.dumps({"args": vars(args), "torch": torch.__version__, "results": results}, indent=1)
    print(s)
    if args.json:
        with open(args.json, "w") as f:
            f.write(s)


if __name__ == "__main__":
    main()
