#!/usr/bin/env bash
# gpu-fg.sh: full-graph training (package fullgraph) on GPUs.
#
#   scripts/gpu-fg.sh build          # here: cuda and fullgraph test binaries and strata
#                                    # into .gpu/fg (carry .gpu/fg only); FG_PARTS=DIR copies
#                                    # partition files DIR/pK/partition.bin to .gpu/fg/parts/pK.bin
#   scripts/gpu-fg.sh test           # on the GPU host: CUDA conformance, gradient checks,
#                                    # SpMM and fused-kernel tests, fullgraph GPU tests
#                                    # (STRATA_CUDA_POISON=1)
#   scripts/gpu-fg.sh bench [DIR]    # on the GPU host: generate the products shape into DIR
#                                    # (default /tmp/products), then BenchmarkProductsSAGE
#   scripts/gpu-fg.sh all [DIR]      # test, then bench
#   scripts/gpu-fg.sh spmm [DIR]     # on the GPU host: SpMM kernels and variants on the products
#                                    # graph (BenchmarkSpMMVariants), node orders natural, by
#                                    # degree and by the partition file FG_ORDER (below)
#
# bench settings (environment): FG_BENCH, the sub-benchmarks (a -test.bench
# pattern, default 'ProductsSAGE/gpus=1$'); FG_EPOCHS, training epochs per
# configuration (default 5, the first untimed); FG_PROFILE=1 logs the
# device time per op of one more epoch on GPU 0; FG_EVAL_EVERY evaluates
# every N epochs; FG_LR sets the learning rate; FG_COMM picks the device communicators (auto, nccl,
# gpushm, host); FG_TF32=1 turns on TF32 tensor cores; FG_ORDER=K orders
# the nodes by the K-part partition file .gpu/fg/parts/pK.bin (K/P parts
# per device's block, see BenchmarkProductsSAGE); FG_TIMEOUT bounds
# the benchmark (seconds, default 300). Logs go to $LOGS, else $OUT, else
# .gpu/fg/logs; the summary lines come last.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=.gpu/fg

build() {
  mkdir -p "$dir"
  local ok=1
  echo "build tensor/backend/cuda fullgraph cmd/strata"
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$dir/cuda.test" ./tensor/backend/cuda || ok=0
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$dir/fullgraph.test" ./fullgraph || ok=0
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$dir/strata" ./cmd/strata || ok=0
  if [ -n "${FG_PARTS:-}" ]; then
    mkdir -p "$dir/parts"
    local k
    for k in 2 4 8; do
      [ -f "$FG_PARTS/p$k/partition.bin" ] && cp "$FG_PARTS/p$k/partition.bin" "$dir/parts/p$k.bin" && echo "partition file p$k"
    done
  fi
  du -sh "$dir" | sed 's/^/size /'
  [ $ok = 1 ]
}

setup() {
  export NCCL_NVLS_ENABLE=0
  export STRATA_KERNEL_CACHE=${STRATA_KERNEL_CACHE:-/tmp/strata-kcache}
  logs=${LOGS:-${OUT:-$root/$dir/logs}}
  mkdir -p "$logs"
}

# summarize prints a log's failures, skips and benchmark lines.
summarize() {
  grep -E -- '--- (FAIL|SKIP)|^\s+\S+_test.go:[0-9]+:|^Benchmark|panic:|^(ok|FAIL|PASS)$' "$1" | grep -v -- '--- PASS' | tail -${2:-40}
}

test_run() {
  setup
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>/dev/null
  local t0=$(date +%s)
  (cd tensor/backend/cuda && STRATA_CUDA_POISON=1 timeout 120 "$root/$dir/cuda.test" -test.v -test.timeout 110s \
    -test.run 'Conformance|GradCheck|SpMM|BiasAct|ReLUMaskScale|DropoutMatchesCPU|Profile|AgainstCPULarge|KernelsCompile') >"$logs/cuda.log" 2>&1
  echo "cuda tests rc=$? $(( $(date +%s) - t0 ))s"
  summarize "$logs/cuda.log" 20
  t0=$(date +%s)
  (cd fullgraph && STRATA_CUDA_POISON=1 timeout 90 "$root/$dir/fullgraph.test" -test.v -test.timeout 85s -test.run 'GPU') \
    >"$logs/fullgraph-gpu.log" 2>&1
  echo "fullgraph GPU tests rc=$? $(( $(date +%s) - t0 ))s"
  summarize "$logs/fullgraph-gpu.log" 20
}

bench_run() {
  setup
  local data=${1:-/tmp/products}
  gen_data "$data" || return 1
  export STRATA_BENCH_DATASET=$data STRATA_BENCH_EPOCHS=${FG_EPOCHS:-5}
  [ -d "$root/$dir/parts" ] && export STRATA_BENCH_PARTS=$root/$dir/parts
  [ -n "${FG_PROFILE:-}" ] && export STRATA_BENCH_PROFILE=1
  [ -n "${FG_EVAL_EVERY:-}" ] && export STRATA_BENCH_EVAL_EVERY=$FG_EVAL_EVERY
  [ -n "${FG_COMM:-}" ] && export STRATA_BENCH_COMM=$FG_COMM
  [ -n "${FG_LR:-}" ] && export STRATA_BENCH_LR=$FG_LR
  [ -n "${FG_TF32:-}" ] && export STRATA_CUDA_TF32=1
  [ -n "${FG_ORDER:-}" ] && export STRATA_BENCH_ORDER=$root/$dir/parts/p$FG_ORDER.bin
  local t0=$(date +%s)
  (cd fullgraph && timeout "${FG_TIMEOUT:-300}" "$root/$dir/fullgraph.test" -test.run '^$' -test.v -test.benchtime 1x \
    -test.bench "${FG_BENCH:-ProductsSAGE/gpus=1\$}" -test.timeout "$(( ${FG_TIMEOUT:-300} - 5 ))s") >"$logs/bench.log" 2>&1
  echo "bench rc=$? $(( $(date +%s) - t0 ))s (epochs $STRATA_BENCH_EPOCHS)"
  grep -E -- '^\s+bench_test.go:[0-9]+:|^\s{4,}\S' "$logs/bench.log" | grep -v -- '--- ' | head -80
  grep -E -- '^Benchmark|--- FAIL|panic:|^FAIL' "$logs/bench.log"
}

gen_data() {
  local data=$1
  if [ ! -f "$data/manifest.json" ]; then
    local t0=$(date +%s)
    "$dir/strata" gen "$data" --preset products --quiet >"$logs/gen.log" 2>&1 || { tail "$logs/gen.log"; return 1; }
    echo "gen products: $(( $(date +%s) - t0 ))s"
  fi
}

spmm_run() {
  setup
  local data=${1:-/tmp/products}
  gen_data "$data" || return 1
  export STRATA_BENCH_DATASET=$data
  [ -n "${FG_ORDER:-}" ] && export STRATA_BENCH_ORDER=$root/$dir/parts/p$FG_ORDER.bin
  local t0=$(date +%s)
  (cd tensor/backend/cuda && timeout "${FG_TIMEOUT:-240}" "$root/$dir/cuda.test" -test.run '^$' -test.v -test.benchtime 1x \
    -test.bench SpMMVariants -test.timeout "$(( ${FG_TIMEOUT:-240} - 5 ))s") >"$logs/spmm.log" 2>&1
  echo "spmm variants rc=$? $(( $(date +%s) - t0 ))s"
  grep -E -- 'spmmx_test.go|--- FAIL|panic:' "$logs/spmm.log" | sed 's/^ *spmmx_test.go:[0-9]*: //'
}

case "${1:-}" in
build) build ;;
test) test_run ;;
bench) shift; bench_run "$@" ;;
all) shift; test_run; bench_run "$@" ;;
spmm) shift; spmm_run "$@" ;;
*) sed -n '2,28p' "$0"; exit 2 ;;
esac
