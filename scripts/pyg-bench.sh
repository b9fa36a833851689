#!/usr/bin/env bash
# GraphSAGE (3 x 256, fanouts 15,10,5, batch 1024) with PyG on the products
# shape, fed by strata_pyg (worker mode and server-client over loopback)
# and by PyG's own NeighborLoader where pyg-lib or torch-sparse exists.
# For a GPU host with PyTorch and PyG but no Go: build strata here
# (CGO_ENABLED=0 go build -o strata ./cmd/strata) and carry it along.
#
#   STRATA_BIN=$PWD/strata scripts/pyg-bench.sh [DATASET_DIR] [bench_sage.py flags...]
#
# DATASET_DIR (default /tmp/products-hard) is generated with
# `strata gen DIR --preset products-hard` when missing. PYTHON picks the
# interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${STRATA_BIN:=$(command -v strata || true)}"
if [ -z "$STRATA_BIN" ] || [ ! -x "$STRATA_BIN" ]; then
  echo "pyg-bench: set STRATA_BIN to a strata binary (CGO_ENABLED=0 go build -o strata ./cmd/strata)" >&2
  exit 2
fi
export STRATA_BIN
data=${1:-/tmp/products-hard}
shift || true
if [ ! -f "$data/manifest.json" ]; then
  "$STRATA_BIN" gen "$data" --preset products-hard
fi
exec "${PYTHON:-python3}" python/bench/bench_sage.py --dataset "$data" --strata-bin "$STRATA_BIN" "$@"
