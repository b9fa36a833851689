#!/usr/bin/env bash
# gpu-csp.sh: the device-side collective sampler (dsp/gpucsp) on GPUs.
#
#   scripts/gpu-csp.sh build     # here: CGO_ENABLED=0 test binaries into .gpu/csp/
#   scripts/gpu-csp.sh run       # on a host with 1-4 GPUs: gpusample's GPU tests
#                                # (the hop API's kernels share gs_sample's body),
#                                # gpucsp's tests (batches equal gpusample's on 1,
#                                # 2 and 4 GPUs, host waits per step; the protocol's
#                                # CPU tests too), then the products-shape epoch
#                                # benchmark (BENCH_TIME, default 3x: ms/epoch,
#                                # waits/step, wait-us/step, mallocs/step)
#
# On the lent device machine: `run` with carry [".gpu/csp"] and command
# `scripts/gpu-csp.sh run`; logs go to $OUT (else .gpu/csp/logs).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=.gpu/csp

build() {
  mkdir -p "$dir"
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$dir/gpucsp.test" ./dsp/gpucsp &&
    CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$dir/gpusample.test" ./sample/gpusample &&
    du -sh "$dir"
}

run() {
  export NCCL_NVLS_ENABLE=0
  export STRATA_KERNEL_CACHE=${STRATA_KERNEL_CACHE:-/tmp/strata-kcache}
  local logs=${OUT:-$root/$dir/logs}
  mkdir -p "$logs"
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"
  local t0=$(date +%s)
  (cd sample/gpusample && timeout 40 "$root/$dir/gpusample.test" -test.v -test.timeout 38s \
    -test.run 'TestMatchesCPUSampler|TestWeightedValidAndDeterministic') >"$logs/gpusample.log" 2>&1
  echo "gpusample tests rc=$? $(( $(date +%s) - t0 ))s"
  grep -E -- '^(--- |ok|FAIL|panic)' "$logs/gpusample.log" | head -20
  t0=$(date +%s)
  (cd dsp/gpucsp && timeout 60 "$root/$dir/gpucsp.test" -test.v -test.timeout 58s) >"$logs/gpucsp.log" 2>&1
  echo "gpucsp tests rc=$? $(( $(date +%s) - t0 ))s"
  grep -E -- '^(--- |ok|FAIL|panic)|plan_test|gpu_test' "$logs/gpucsp.log" | head -30
  t0=$(date +%s)
  (cd dsp/gpucsp && timeout 75 "$root/$dir/gpucsp.test" -test.run '^$' -test.bench EpochProducts \
    -test.benchtime "${BENCH_TIME:-3x}" -test.timeout 73s) >"$logs/bench.log" 2>&1
  echo "benchmark rc=$? $(( $(date +%s) - t0 ))s"
  grep -E -- 'Benchmark|ok|FAIL|panic' "$logs/bench.log" | head -20
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
