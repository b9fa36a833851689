#!/usr/bin/env bash
# gpu.sh: build GPU test binaries here, run them on a GPU host.
#
#   scripts/gpu.sh build              # here: CGO_ENABLED=0 test binaries + strata into .gpu/
#   scripts/gpu.sh run [FLAGS...]     # on the GPU host: run them all, print a table last
#   scripts/gpu.sh bench [DIR]        # on the GPU host: products-shape benchmarks and
#                                     # an end-to-end `strata train` (generates DIR first)
#
# run passes FLAGS to every test binary (e.g. -test.run 'Conformance'
# -test.bench . -test.benchtime 20x). Logs go to $LOGS, else $OUT (when
# set, as on the lent device machine), else .gpu/logs. The device
# machine: call `run` with carry [".gpu"] and command `scripts/gpu.sh run`
# (only 8 files come back from $OUT: for run and bench together set
# LOGS=/tmp/logs and tar it into $OUT at the end).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
gpu=.gpu

# Packages whose tests use the GPU (directories relative to the root).
pkgs=(
  internal/cudalib
  internal/nvrtc
  tensor/backend/cuda
)
for p in sample/gpusample feature train/gputrain; do
  [ -d "$p" ] && ls "$p"/*_test.go >/dev/null 2>&1 && pkgs+=("$p")
done
[ -d fullgraph ] && pkgs+=(fullgraph) # BenchmarkProductsSAGE: full-graph SAGE on 1/2/4 GPUs (needs STRATA_BENCH_DATASET)

build() {
  mkdir -p "$gpu/bin"
  : >"$gpu/tests.txt"
  local ok=1
  for p in "${pkgs[@]}"; do
    local name=${p//\//_}
    echo "build $p"
    if CGO_ENABLED=0 go test -c -ldflags=-s\ -w -o "$gpu/bin/$name.test" "./$p"; then
      echo "$name $p" >>"$gpu/tests.txt"
    else
      ok=0
    fi
  done
  echo "build cmd/strata"
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$gpu/bin/strata" ./cmd/strata || ok=0
  # The shared datasets do not travel to the GPU host: copy what the GPU
  # tests read (CiteSeer for the accuracy parity test; Cora is built in).
  local shared=${STRATA_DATASETS:-$root/../shared/datasets}
  if [ -d "$shared/citeseer" ]; then
    mkdir -p "$gpu/datasets" && cp -r "$shared/citeseer" "$gpu/datasets/" && echo "copied citeseer"
  else
    echo "citeseer not found under $shared: the parity test will skip it"
  fi
  du -sh "$gpu" | sed 's/^/size /'
  [ $ok = 1 ]
}

env_setup() {
  export NCCL_NVLS_ENABLE=0
  export STRATA_KERNEL_CACHE=${STRATA_KERNEL_CACHE:-$root/$gpu/kcache}
  if [ -z "${STRATA_DATASETS:-}" ] && [ -d "$root/$gpu/datasets" ]; then
    export STRATA_DATASETS=$root/$gpu/datasets
  fi
}

run() {
  env_setup
  local logs=${LOGS:-${OUT:-$root/$gpu/logs}}
  mkdir -p "$logs"
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"
  if [ -x "$gpu/bin/strata" ]; then
    "$gpu/bin/strata" info 2>&1 | tee "$logs/strata-info.txt" | head -30
  fi
  local table=()
  while read -r name dir; do
    local bin=$root/$gpu/bin/$name.test
    [ -x "$bin" ] || continue
    local log=$logs/$name.log
    local t0=$(date +%s%N)
    (cd "$root/$dir" && "$bin" -test.v -test.timeout 9m "$@") >"$log" 2>&1
    local rc=$?
    local t1=$(date +%s%N)
    local pass fail skip
    pass=$(grep -c -- '--- PASS' "$log")
    fail=$(grep -c -- '--- FAIL' "$log")
    skip=$(grep -c -- '--- SKIP' "$log")
    # Show failures and benchmark lines in the output tail.
    grep -E -- '--- FAIL|^\s+\S+_test.go:[0-9]+:|^Benchmark|panic:|^FAIL|^ok' "$log" | grep -v -- '--- PASS' | tail -40
    table+=("$(printf '%-28s rc=%-3s pass=%-4s fail=%-3s skip=%-3s %6ss' "$dir" "$rc" "$pass" "$fail" "$skip" "$(( (t1 - t0) / 1000000000 ))")")
  done <"$gpu/tests.txt"
  echo
  echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  printf '%s\n' "${table[@]}"
}

# bench: the products-shape measurements of BENCHMARKS.md. Generates the
# dataset into DIR (default /tmp/products) when absent, then runs the
# sampling, epoch and gather benchmarks and `strata train` for 2 epochs
# (GPU sampler and feature store), logging to $LOGS, $OUT or .gpu/logs.
# BENCH_EPOCH and BENCH_TIME pick the epoch benchmarks and their count;
# BENCH_NO_GATHER and BENCH_NO_TRAIN skip those parts.
bench() {
  env_setup
  local dir=${1:-/tmp/products}
  local logs=${LOGS:-${OUT:-$root/$gpu/logs}}
  mkdir -p "$logs"
  export STRATA_BENCH_DATASET=$dir
  export STRATA_BENCH_PROFILE=${STRATA_BENCH_PROFILE:-hostblocks-syncloss,pipelined-epochloss}
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null
  if [ ! -f "$dir/manifest.json" ]; then
    local t0=$(date +%s)
    "$gpu/bin/strata" gen "$dir" --preset products --quiet >"$logs/gen.log" 2>&1 || { tail "$logs/gen.log"; return 1; }
    echo "gen products: $(( $(date +%s) - t0 ))s"
  fi
  (cd sample/gpusample && "$root/$gpu/bin/sample_gpusample.test" -test.run '^$' -test.v \
    -test.bench "${BENCH_EPOCH:-SampleEpochDevice|TrainEpochGPU}" -test.benchtime "${BENCH_TIME:-3x}" -test.timeout 9m) >"$logs/epoch.log" 2>&1
  if [ -z "${BENCH_NO_GATHER:-}" ]; then
    (cd feature && "$root/$gpu/bin/feature.test" -test.run '^$' -test.bench Gather -test.benchtime 20x -test.timeout 5m) >"$logs/gather.log" 2>&1
  fi
  if [ -z "${BENCH_NO_TRAIN:-}" ]; then
    local t0=$(date +%s%N)
    "$gpu/bin/strata" train --dataset "$dir" --model sage --layers 3 --hidden 256 --batch-size 1024 --fanouts 15,10,5 \
      --epochs 2 --device cuda:0 --report "$logs/train-report.json" >"$logs/train.log" 2>&1
    echo "strata train rc=$? $(( ($(date +%s%N) - t0) / 1000000 ))ms"
    tail -4 "$logs/train.log"
    grep -o '"seconds": [0-9.]*' "$logs/train-report.json" | head -4
  fi
  grep -E -- '^\s+\S+_test.go:[0-9]+:|^\s+(op|profile|[a-z_0-9 ]+ +[0-9]+ +[0-9.]+ +[0-9.]+%)' "$logs/epoch.log" | head -80
  grep -hE '^Benchmark|--- FAIL|panic:' "$logs/epoch.log" "$logs/gather.log" 2>/dev/null
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  bench) shift; bench "$@" ;;
  *) echo "usage: $0 build | run [test flags] | bench [DIR]" >&2; exit 2 ;;
esac
