#!/usr/bin/env bash
# pyg-check.sh: check saved models against PyTorch Geometric on a host
# that has torch, torch_geometric and safetensors (the GPU host), and
# strata's inference on GPUs against the CPU's.
#
#   scripts/pyg-check.sh prepare   # here: strata (CGO_ENABLED=0), Cora (the shared copy,
#                                  # equal to the built-in one), SAGE/GCN/GAT models
#                                  # trained with --save and their CPU logits, in .gpu/pyg
#   scripts/pyg-check.sh check     # there, with .gpu/pyg carried: for each model,
#                                  # scripts/pyg_check.py (PyG's logits vs strata's, max
#                                  # |diff| <= 1e-4), then, when GPUs are visible,
#                                  # strata predict on cuda:0 (and on every GPU with
#                                  # --devices) against the CPU logits (<= 1e-4)
#
# Typed models (rgcn, hsage) are prepared on the hetero preset and ogbn-mag's
# tiny sample (featureless authors with roots) and checked by
# scripts/pyg_check_typed.py (the PyG model docs/models.md builds,
# load_state_dict(strict=True), logits <= 1e-4 from strata predict's).
#
# Exit status: 0 when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpu/pyg
models=(sage gcn gat)
typed=(hsage rgcn)

prepare() {
  local data=${STRATA_DATASETS:-../shared/datasets}
  [ -d "$data/cora" ] || data=/work/shared/datasets
  rm -rf "$dir" && mkdir -p "$dir"
  CGO_ENABLED=0 go build -o "$dir/strata" ./cmd/strata
  cp -r "$data/cora" "$dir/cora"
  for m in "${models[@]}"; do
    local extra=()
    [ "$m" = gat ] && extra=(--heads 4 --out-heads 2 --epochs 50)
    [ "$m" = gcn ] && extra=(--layers 3 --epochs 100)
    "$dir/strata" --quiet train --dataset "$dir/cora" --model "$m" --save "$dir/$m" "${extra[@]}"
    "$dir/strata" --quiet predict --model "$dir/$m" --dataset "$dir/cora" --device cpu --out "$dir/$m/logits-cpu.npy"
  done
  "$dir/strata" --quiet gen "$dir/hetero" --preset hetero --nodes 3000
  "$dir/strata" --quiet import dataset/importer/testdata/ogbn-mag-tiny "$dir/mag"
  for d in hetero mag; do
    for m in "${typed[@]}"; do
      "$dir/strata" --quiet train --dataset "$dir/$d" --model "$m" --layers 3 --hidden 32 --epochs 3 --save "$dir/$d-$m"
      "$dir/strata" --quiet predict --model "$dir/$d-$m" --dataset "$dir/$d" --device cpu --out "$dir/$d-$m/logits-cpu.npy"
    done
  done
  echo "prepared $dir ($(du -sh "$dir" | cut -f1)): carry it and run 'scripts/pyg-check.sh check' there"
}

check() {
  local fail=0
  for m in "${models[@]}"; do
    python3 scripts/pyg_check.py --model "$dir/$m" --dataset "$dir/cora" --logits "$dir/$m/logits-cpu.npy" || fail=1
  done
  for d in hetero mag; do
    for m in "${typed[@]}"; do
      python3 scripts/pyg_check_typed.py --require --model "$dir/$d-$m" --dataset "$dir/$d" --logits "$dir/$d-$m/logits-cpu.npy" || fail=1
    done
  done
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    local n
    n=$(nvidia-smi -L | wc -l)
    local all=cuda:0
    for ((i = 1; i < n; i++)); do all+=",$i"; done
    for m in "${models[@]}"; do
      for devs in cuda:0 "$all"; do
        "$dir/strata" --quiet predict --model "$dir/$m" --dataset "$dir/cora" --devices "$devs" --out "$dir/$m/logits-gpu.npy"
        python3 - "$dir/$m/logits-cpu.npy" "$dir/$m/logits-gpu.npy" "$m on $devs" <<'EOF' || fail=1
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
d = float(np.abs(a.astype(np.float64) - b).max())
agree = float((a.argmax(1) == b.argmax(1)).mean())
print(f"{sys.argv[3]}: GPU vs CPU logits max |diff| {d:.3g}, argmax agreement {agree:.4f}")
sys.exit(0 if d <= 1e-4 else 1)
EOF
      done
      "$dir/strata" --quiet evaluate --model "$dir/$m" --dataset "$dir/cora" --devices "$all" || fail=1
    done
    for d in hetero mag; do
      for m in "${typed[@]}"; do
        "$dir/strata" --quiet predict --model "$dir/$d-$m" --dataset "$dir/$d" --device cuda:0 --out "$dir/$d-$m/logits-gpu.npy"
        python3 - "$dir/$d-$m/logits-cpu.npy" "$dir/$d-$m/logits-gpu.npy" "$d $m on cuda:0" <<'EOF' || fail=1
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
d = float(np.abs(a.astype(np.float64) - b).max())
print(f"{sys.argv[3]}: GPU vs CPU logits max |diff| {d:.3g}")
sys.exit(0 if d <= 1e-4 else 1)
EOF
      done
    done
  fi
  [ "$fail" = 0 ] && echo "all checks passed" || echo "SOME CHECKS FAILED"
  return "$fail"
}

case "${1:-}" in
  prepare) prepare ;;
  check) check ;;
  *) echo "usage: $0 prepare|check" >&2; exit 2 ;;
esac
