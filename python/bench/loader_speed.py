#!/usr/bin/env python3
"""Loader-only epochs of strata_pyg (no model): how fast batches arrive in
worker mode through the shared-memory ring and through the socket, with
the features from the server (a dataset directory) or gathered from a
PyG Data in Python. Prints one JSON line per mode.

    strata gen /tmp/s200k --preset small --nodes 200000 --features 100
    STRATA_BIN=$PWD/strata python3 python/bench/loader_speed.py --dataset /tmp/s200k
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import strata_pyg  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="Strata dataset directory")
    ap.add_argument("--modes", default="shm,grpc,data-shm,data-grpc",
                    help="shm, grpc (features from the server), data-shm, data-grpc (a PyG Data, x gathered "
                         "locally), server (server-client: a separate strata serve on a loopback port, through the "
                         "loader's relay into a ring), server-grpc (the same, received in Python); grpc and "
                         "server may add -bf16 (features as bfloat16 on the wire)")
    ap.add_argument("--streams", type=int, default=None, help="server mode: Sample streams (default the loader's)")
    ap.add_argument("--step-ms", type=float, default=0.0,
                    help="a training step per batch, simulated: sleep this long (the GIL free, as while a GPU "
                         "computes)")
    ap.add_argument("--pin-memory", action="store_true", help="loaders with pin_memory=True (needs CUDA)")
    ap.add_argument("--device", default=None, help="loaders with device=DEVICE")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--strata-bin", default=None)
    args = ap.parse_args()
    data = None
    server = addr = None
    if any(m.startswith("server") for m in args.modes.split(",")):
        server, addr = start_server(args)
    try:
        run(args, addr)
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)


def start_server(args):
    """`strata serve` on a loopback port, as a separate server process."""
    d = tempfile.mkdtemp(prefix="strata-speed-")
    ready = os.path.join(d, "ready")
    log = open(ready + ".log", "w")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([strata_pyg.find_strata(args.strata_bin), "--quiet", "serve", "--dataset", args.dataset,
                          "--listen", f"127.0.0.1:{port}", "--ready-file", ready, "--max-message-mb", "2047"],
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    end = time.monotonic() + 600
    while not os.path.exists(ready):
        if p.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"strata serve did not start; see {ready}.log")
        time.sleep(0.1)
    with open(ready) as f:
        return p, f.read().strip()


def run(args, addr):
    data = None
    for mode in args.modes.split(","):
        kw = dict(num_neighbors=[int(f) for f in args.fanouts.split(",")], batch_size=args.batch_size, shuffle=True,
                  seed=1, num_workers=args.num_workers, strata_bin=args.strata_bin,
                  transport="shm" if "shm" in mode else "grpc")
        if args.pin_memory:
            kw["pin_memory"] = True
        if args.device:
            kw["device"] = args.device
        if mode.startswith("server"):
            kw.pop("strata_bin")
            kw.pop("transport")
            if args.streams is not None:
                kw["streams"] = args.streams
        for opt in mode.split("-")[2 if mode.startswith("data-") else 1:]:
            if opt == "bf16":
                kw["feature_dtype"] = "bfloat16"
            elif opt == "grpc" and mode.startswith("server"):
                kw["transport"] = "grpc"
            else:
                raise SystemExit(f"unknown mode {mode!r}")
        if mode.startswith("server"):
            L = strata_pyg.NeighborLoader(addr, input_nodes="train", **kw)
        elif mode.startswith("data"):
            data = data or strata_pyg.load_dataset(args.dataset)
            L = strata_pyg.NeighborLoader(data, input_nodes=data.train_mask, **kw)
        else:
            L = strata_pyg.NeighborLoader(args.dataset, input_nodes="train", **kw)
        times, stats = [], []
        for _ in range(args.epochs):
            t = time.perf_counter()
            n = nodes = xbytes = 0
            for b in L:
                n += 1
                nodes += b.n_id.numel()
                xbytes += b.x.numel() * b.x.element_size()
                float(b.x[:, 0].sum())  # touch the features
                if args.step_ms:
                    time.sleep(args.step_ms / 1000)
            times.append(time.perf_counter() - t)
            st = L.stats() if hasattr(L, "stats") else None
            if st:
                stats.append({k: round(st[k], 2) for k in ("wait_ms", "server_wait_ms", "decode_ms", "batch_ms",
                                                              "wire_mib_per_batch",
                                                              "server_sample_ms", "server_encode_ms",
                                                              "server_slot_wait_ms", "ready_mean")})
        x_mib = xbytes / n / 2**20
        L.close()
        transport = st.get("transport") if st else None
        print(json.dumps(dict(mode=mode, transport=transport, batches=n, nodes_per_batch=nodes // n, x_mib_per_batch=round(x_mib, 1),
                              epoch_s=[round(t, 2) for t in times], best_ms_per_batch=round(1000 * min(times) / n, 1),
                              load_average=round(os.getloadavg()[0], 1), torch=torch.__version__,
                              stats_best_epoch=stats[times.index(min(times))] if stats else None)), flush=True)


if __name__ == "__main__":
    main()
