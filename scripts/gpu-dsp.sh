#!/usr/bin/env bash
# gpu-dsp.sh: DSP on GPUs (dsp/gpurun): build here, test and benchmark on a
# GPU host in one call.
#
#   scripts/gpu-dsp.sh build          # here: strata and the dsp/gpurun test binary into
#                                     # .gpu/dsp/ (built from a snapshot of HEAD, so other
#                                     # people's uncommitted work cannot break it; set
#                                     # DSP_BUILD_TREE=1 to build the working tree)
#   scripts/gpu-dsp.sh shake          # on the GPU host: GPU tests, then 2-epoch products runs
#                                     # on 1, 2 and 4 GPUs
#   scripts/gpu-dsp.sh bench          # on the GPU host: the benchmark set (1/2/4 GPUs,
#                                     # pipeline on/off, cache layouts, single-GPU trainer)
#   scripts/gpu-dsp.sh final          # on the GPU host: the 4-GPU partitioned-cache runs
#                                     # (pipeline on/off, 64 MiB cache, all UVA), 1 GPU off
#   scripts/gpu-dsp.sh loader         # on the GPU host: the device-routed loader's set:
#                                     # 1/2/4 GPUs partitioned (pipeline on; off on 1 and 4),
#                                     # replicated on 4, 64 MiB vs all UVA on 4, csp vs full
#                                     # on 4, then the GPU tests
#   scripts/gpu-dsp.sh speed          # on the GPU host: 1/2/4-GPU epochs with the defaults, the
#                                     # same with a synchronous gradient all-reduce
#                                     # (STRATA_NCCL_ASYNC=0) and with default-priority stage
#                                     # streams (STRATA_DSP_STAGE_PRIORITY=0), pipeline off,
#                                     # then the NCCL and gpurun GPU tests
#   scripts/gpu-dsp.sh confirm        # on the GPU host: 1/2/4 GPUs, pipeline on and off, then
#                                     # the NCCL and gpurun GPU tests
#   scripts/gpu-dsp.sh repeat         # on the GPU host: 4-GPU and 1-GPU runs, $DSP_REPEAT times
#   scripts/gpu-dsp.sh hard           # on the GPU host: products-hard test accuracy, 1 vs 4 GPUs
#                                     # ($DSP_HARD_EPOCHS epochs, seeds $DSP_HARD_SEEDS)
#   scripts/gpu-dsp.sh two            # on the GPU host: 2-GPU diagnostics (csp vs whole-graph
#                                     # sampler, replicated cache, no coordinator, pipeline off)
#   scripts/gpu-dsp.sh four           # on the GPU host: 4 vs 1 GPU pairs with the defaults,
#                                     # partitioned cache, pipeline off, 2 GPUs, multilevel
#                                     # partition, sampler and gpurun GPU tests
#   scripts/gpu-dsp.sh custom         # on the GPU host: one products run, $DSP_NAME on $DSP_DEVICES
#                                     # with $DSP_FLAGS (and $DSP_PARTITION)
#   scripts/gpu-dsp.sh samplers       # on the GPU host: gpusample and gpucsp GPU tests
#   scripts/gpu-dsp.sh papers         # on the GPU host: a graph bigger than the cache budget:
#                                     # papers-m shape (11.1M nodes, 333M edges, ~8 GB,
#                                     # generated into $DSP_PAPERS, default /tmp/papers-m),
#                                     # $DSP_CACHE per GPU (default 1GiB) vs every feature
#                                     # through UVA, on 4 GPUs and on 1
#
# The device machine: `run` with carry [".gpu/dsp"] and command
# `scripts/gpu-dsp.sh bench` on nvidia-h200-x4. Logs and reports go to
# /tmp/dsplogs; $OUT (when set) gets summary.txt and dsp-logs.tgz. The
# products shape is generated into $DSP_DATA (default /tmp/products).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=.gpu/dsp

build() {
  mkdir -p "$dir/bin"
  local src=$root
  if [ "${DSP_BUILD_TREE:-0}" != 1 ]; then
    src=$(mktemp -d)
    git archive HEAD | tar -x -C "$src" || return 1
    echo "building HEAD $(git rev-parse --short HEAD)"
  fi
  local ok=1
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/$dir/bin/strata" ./cmd/strata) || ok=0
  (cd "$src" && CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$root/$dir/bin/gpurun.test" ./dsp/gpurun) || ok=0
  (cd "$src" && CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$root/$dir/bin/nccl.test" ./comm/nccl) || ok=0
  (cd "$src" && CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$root/$dir/bin/gpusample.test" ./sample/gpusample) || ok=0
  (cd "$src" && CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$root/$dir/bin/gpucsp.test" ./dsp/gpucsp) || ok=0
  [ "$src" != "$root" ] && rm -rf "$src"
  du -sh "$dir" | sed 's/^/size /'
  [ $ok = 1 ]
}

logs=${DSP_LOGS:-/tmp/dsplogs} # DSP_LOGS=$OUT/logs: logs come back even when the call is cut off

# since T0: seconds since T0 (date +%s.%N), one decimal.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
data=${DSP_DATA:-/tmp/products}

setup() {
  export NCCL_NVLS_ENABLE=0
  # Connect NCCL peers when communicators open, not inside the first
  # operation, and load kernels eagerly: no connection setup or lazy
  # module load while other devices wait in a collective.
  export NCCL_RUNTIME_CONNECT=${NCCL_RUNTIME_CONNECT:-0}
  export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
  export STRATA_KERNEL_CACHE=${STRATA_KERNEL_CACHE:-/tmp/strata-kcache}
  mkdir -p "$logs"
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
  nproc | sed 's/^/cpus /'
}

gen() {
  [ -f "$data/manifest.json" ] && return 0
  local t0=$(date +%s.%N)
  "$root/$dir/bin/strata" gen "$data" --preset products --quiet >"$logs/gen.log" 2>&1 || { tail "$logs/gen.log"; return 1; }
  echo "gen products: $(since $t0)s"
}

# products NAME DEVICES EPOCHS [FLAGS...]: one 3-layer GraphSAGE run on the
# products shape (hidden 256, batch 1024, fanouts 15,10,5), evaluated
# after the last epoch only; prints the lines that matter.
common=(--dataset "$data" --model sage --layers 3 --hidden 256 --batch-size 1024 --fanouts 15,10,5 --select last)
products() {
  local name=$1 devs=$2 epochs=$3
  shift 3
  local t0=$(date +%s.%N)
  # SIGQUIT on timeout: the Go runtime prints every goroutine's stack.
  timeout -s QUIT -k 10 "${DSP_RUN_TIMEOUT:-150}" "$root/$dir/bin/strata" train "${common[@]}" --devices "$devs" --epochs "$epochs" \
    --partition "${DSP_PARTITION:-range}" --eval-every 1000 --stall-timeout "${DSP_STALL:-45s}" --report "$logs/$name.json" "$@" >"$logs/$name.out" 2>"$logs/$name.log"
  local rc=$?
  local wall=$(since $t0)
  echo "== $name ($devs, $epochs epochs, $*): rc=$rc wall=${wall}s"
  grep -E '^epoch |train time' "$logs/$name.log" | sed 's/^/   /'
  grep -E 'accuracy|pipeline|epoch time' "$logs/$name.out" | sed 's/^/   /'
  if [ $rc != 0 ]; then
    grep -E -A30 '^failure:' "$logs/$name.log" | head -40 | sed 's/^/   ! /'
    grep -vE '^(goroutine |\s|$|created by)' "$logs/$name.log" | tail -4 | sed 's/^/   ! /'
  fi
  return $rc
}

# single: the single-GPU trainer (train.Run with gputrain) for the
# accuracy comparison.
single() {
  local epochs=$1
  local t0=$(date +%s.%N)
  timeout -s QUIT -k 10 "${DSP_RUN_TIMEOUT:-150}" "$root/$dir/bin/strata" train "${common[@]}" --device cuda:0 --epochs "$epochs" \
    --report "$logs/single.json" >"$logs/single.out" 2>"$logs/single.log"
  local rc=$?
  echo "== single-GPU trainer (cuda:0, $epochs epochs): rc=$rc wall=$(since $t0)s"
  grep -E 'accuracy|time' "$logs/single.out" | sed 's/^/   /'
  [ $rc = 0 ] || tail -5 "$logs/single.log" | sed 's/^/   ! /'
}

gputests() {
  local t0=$(date +%s.%N)
  (cd dsp/gpurun && timeout "${DSP_TEST_TIMEOUT:-200}" "$root/$dir/bin/gpurun.test" -test.run GPU -test.v -test.timeout 5m) >"$logs/gputests.log" 2>&1
  echo "== GPU tests: rc=$? wall=$(since $t0)s"
  grep -E -- '^--- |gpu_test.go|^(ok|FAIL|PASS)|panic' "$logs/gputests.log" | head -30 | sed 's/^/   /'
}

finish() {
  if [ -n "${OUT:-}" ]; then
    cp "$logs"/summary*.txt "$OUT/" 2>/dev/null
    tar -czf "$OUT/dsp-logs.tgz" -C "$logs" . 2>/dev/null
  fi
}

shake() {
  setup
  {
    gputests
    gen
    products s1 cuda:0 2
    products s2 cuda:0,1 2
    products s4 cuda:0,1,2,3 2
  } 2>&1 | tee "$logs/summary.txt"
  finish
}

# bench: the benchmark set; when the 4-GPU run fails, variants that
# narrow the failure down instead of the rest.
bench() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    [ "${DSP_TESTS:-1}" = 1 ] && gputests
    gen
    if products d4 cuda:0,1,2,3 "$e"; then
      products d1 cuda:0 "$e"
      products d2 cuda:0,1 "$e"
      products d4-off cuda:0,1,2,3 "$e" --no-pipeline
      products d1-off cuda:0 "$e" --no-pipeline
      products d4-repl cuda:0,1,2,3 "$e" --cache-policy replicate --cache-group 1
      products d4-budget cuda:0,1,2,3 "$e" --cache 64MiB
      products d4-uva cuda:0,1,2,3 "$e" --cache 0
      products d4-shared cuda:0,1,2,3 "$e" --shared-stream
      products d4-acc cuda:0,1,2,3 "${DSP_ACC_EPOCHS:-5}" --eval-every 1
      single "${DSP_ACC_EPOCHS:-5}"
    else
      DSP_RUN_TIMEOUT=60 DSP_STALL=25s products x4-full-repl cuda:0,1,2,3 2 --gpu-sampler full --cache-policy replicate --cache-group 1
      DSP_RUN_TIMEOUT=60 DSP_STALL=25s products x4-full cuda:0,1,2,3 2 --gpu-sampler full
      DSP_RUN_TIMEOUT=60 DSP_STALL=25s products x4-csp-repl cuda:0,1,2,3 2 --cache-policy replicate --cache-group 1
      products d1 cuda:0 "$e"
      products d2 cuda:0,1 "$e"
    fi
  } 2>&1 | tee "$logs/summary.txt"
  finish
}

# final: the 4-GPU runs with the partitioned cache (whole-graph sampler),
# pipeline off, a limited cache and all features through UVA, plus the
# 1-GPU pipeline off and the 4-GPU collective sampler; stops at the first
# 4-GPU failure.
final() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    gen
    if products d4f cuda:0,1,2,3 "$e" --gpu-sampler full; then
      products d4f-off cuda:0,1,2,3 "$e" --gpu-sampler full --no-pipeline
      products d4f-budget cuda:0,1,2,3 "$e" --gpu-sampler full --cache 64MiB
      products d4f-uva cuda:0,1,2,3 "$e" --gpu-sampler full --cache 0
      products d1-off cuda:0 "$e" --no-pipeline
      products d4 cuda:0,1,2,3 "$e"
    else
      products d1-off cuda:0 "$e" --no-pipeline
    fi
  } 2>&1 | tee "$logs/summary.txt"
  finish
}

# loader: the measurements of the device-routed loader, most important
# first (every run is capped by DSP_RUN_TIMEOUT), then the GPU tests.
loader() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    gen
    products d4 cuda:0,1,2,3 "$e"
    products d1 cuda:0 "$e"
    products d4-off cuda:0,1,2,3 "$e" --no-pipeline
    products d4f-repl cuda:0,1,2,3 "$e" --gpu-sampler full --cache-policy replicate --cache-group 1
    products d2 cuda:0,1 "$e"
    products d1-off cuda:0 "$e" --no-pipeline
    products d4f cuda:0,1,2,3 "$e" --gpu-sampler full
    products d4-budget cuda:0,1,2,3 "$e" --cache 64MiB
    products d4-uva cuda:0,1,2,3 "$e" --cache 0
    [ "${DSP_TESTS:-1}" = 1 ] && gputests
  } 2>&1 | tee "$logs/summary.txt"
  finish
}

# speed: where the 4-GPU step's time goes, with A/B switches of the
# asynchronous gradient all-reduce and the stage streams' priority.
speed() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    gen
    products d4 cuda:0,1,2,3 "$e"
    products d4f cuda:0,1,2,3 "$e" --gpu-sampler full
    products d1 cuda:0 "$e"
    STRATA_NCCL_ASYNC=0 products d4-sync cuda:0,1,2,3 "$e"
    STRATA_NCCL_ASYNC=0 products d4f-sync cuda:0,1,2,3 "$e" --gpu-sampler full
    STRATA_DSP_STAGE_PRIORITY=0 products d4-noprio cuda:0,1,2,3 "$e"
    STRATA_DSP_STAGE_PRIORITY=0 products d1-noprio cuda:0 "$e"
    products d4-off cuda:0,1,2,3 "$e" --no-pipeline
    products d4f-off cuda:0,1,2,3 "$e" --gpu-sampler full --no-pipeline
    products d2 cuda:0,1 "$e"
    [ "${DSP_TESTS:-1}" = 1 ] && ncclasync && gputests
  } 2>&1 | tee "$logs/summary.txt"
  finish
}

# confirm: the headline runs (1/2/4 GPUs, pipeline on and off), then the
# NCCL and gpurun GPU tests.
confirm() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    gen
    products d4 cuda:0,1,2,3 "$e"
    products d1 cuda:0 "$e"
    products d4f cuda:0,1,2,3 "$e" --gpu-sampler full
    products d4-off cuda:0,1,2,3 "$e" --no-pipeline
    products d1-off cuda:0 "$e" --no-pipeline
    products d4f-off cuda:0,1,2,3 "$e" --gpu-sampler full --no-pipeline
    products d2 cuda:0,1 "$e"
    [ "${DSP_TESTS:-1}" = 1 ] && ncclasync && gputests
  } 2>&1 | tee "$logs/summary.txt"
  finish
}

# repeat: d4 and d1 again, $DSP_REPEAT times, alternating (the speed-up's
# spread across runs).
repeat() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    gen
    for i in $(seq "${DSP_REPEAT:-2}"); do
      products d4-r$i cuda:0,1,2,3 "$e"
      products d1-r$i cuda:0 "$e"
    done
    [ -n "${DSP_REPEAT_OFF:-}" ] && products d4-off cuda:0,1,2,3 "$e" --no-pipeline
    [ -n "${DSP_REPEAT_TESTS:-}" ] && ncclasync && gputests
  } 2>&1 | tee "$logs/summary-repeat.txt"
  finish
}

# two: on two GPUs, where the step's time goes: the default (auto cache
# policy) against one GPU, the partitioned cache, a topology split
# between device and host memory ($DSP_TOPO per GPU); unless
# $DSP_TWO_SHORT, the whole-graph sampler, the coordinator off, the
# pipeline off.
two() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    gen
    products t2 cuda:0,1 "$e"
    products t1 cuda:0 "$e"
    products t2-part cuda:0,1 "$e" --cache-policy partition
    products t2-topo cuda:0,1 "$e" --topology-cache "${DSP_TOPO:-128MiB}"
    if [ -z "${DSP_TWO_SHORT:-}" ]; then
      products t2f cuda:0,1 "$e" --gpu-sampler full
      products t2-nocoord cuda:0,1 "$e" --no-coordinator
      products t2-off cuda:0,1 "$e" --no-pipeline
    fi
  } 2>&1 | tee "$logs/summary-two.txt"
  finish
}

# samplers: the GPU sampling tests (gpusample, gpucsp on the visible GPUs:
# whole-graph, collective and split-topology batches against the
# references; $DSP_SAMPLER_TESTS selects others).
samplers() {
  local t0=$(date +%s.%N) rc
  {
    (cd sample/gpusample && timeout 200 "$root/$dir/bin/gpusample.test" -test.run "${DSP_GPUSAMPLE_TESTS:-MatchesCPU|Weighted|BadInput}" -test.v -test.timeout 3m)
    rc=$?
    (cd dsp/gpucsp && timeout 300 "$root/$dir/bin/gpucsp.test" -test.run "${DSP_SAMPLER_TESTS:-MatchesSingleGPU|BadSeeds}" -test.v -test.timeout 5m)
    rc=$((rc + $?))
  } >"$logs/samplertests.log" 2>&1
  echo "== sampler GPU tests: rc=$rc wall=$(since $t0)s"
  grep -E -- '^--- |_test.go|^(ok|FAIL|PASS)|panic' "$logs/samplertests.log" | head -30 | sed 's/^/   /'
}

# workers: several sampler workers per GPU (--sampler-workers): the
# sibling and worker GPU tests, then products on $DSP_WORKER_DEVICES
# (default 2 GPUs) with 1, 2 and 3 workers, with the partitioned cache,
# with a small model (hidden 64: the samplers' share of the step grows)
# and on one GPU.
workers() {
  setup
  local e=${DSP_EPOCHS:-3} d=${DSP_WORKER_DEVICES:-cuda:0,1}
  {
    DSP_GPUSAMPLE_TESTS=Sibling DSP_SAMPLER_TESTS=Sibling samplers
    [ "${DSP_TESTS:-1}" = 1 ] && gputests
    gen
    for w in 1 2 3; do products w-$w "$d" "$e" --sampler-workers $w; done
    for w in 1 2; do products wpart-$w "$d" "$e" --sampler-workers $w --cache-policy partition; done
    for w in 1 2; do products wh64-$w "$d" "$e" --sampler-workers $w --hidden 64; done
    for w in 1 2; do products w1gpu-$w cuda:0 "$e" --sampler-workers $w; done
  } 2>&1 | tee "$logs/summary-workers.txt"
  finish
}

# extras: the sibling sampler tests, the GPU pre-sampling tests, products
# with --hotness presample (pass on the GPUs) on 2 and 1 GPUs, with an
# evaluation after every epoch, and the layer-wise and random-walk
# sampler benchmarks (dsp/gpucsp) on the products shape.
extras() {
  setup
  local e=${DSP_EPOCHS:-3} t0 rc
  {
    DSP_GPUSAMPLE_TESTS=Sibling DSP_SAMPLER_TESTS=Sibling samplers
    t0=$(date +%s.%N)
    (cd dsp/gpurun && timeout 200 "$root/$dir/bin/gpurun.test" -test.run GPUPresample -test.v -test.timeout 3m) >"$logs/presampletests.log" 2>&1
    rc=$?
    echo "== GPU pre-sampling tests: rc=$rc wall=$(since $t0)s"
    grep -E -- '^--- |_test.go|^(ok|FAIL|PASS)|panic' "$logs/presampletests.log" | head -20 | sed 's/^/   /'
    gen
    products pre2 cuda:0,1 "$e" --hotness presample --cache 64MiB
    products pre1 cuda:0 "$e" --hotness presample --cache 64MiB
    products deg2 cuda:0,1 "$e" --cache 64MiB
    products ev2 cuda:0,1 "$e" --eval-every 1
    t0=$(date +%s.%N)
    (cd dsp/gpucsp && STRATA_BENCH_DATASET=$data timeout 240 "$root/$dir/bin/gpucsp.test" -test.run '^$' -test.bench 'LayerEpochProducts|WalkProducts' -test.benchtime 3x -test.timeout 4m) >"$logs/samplerbench.log" 2>&1
    echo "== layer-wise and walk benchmarks: rc=$? wall=$(since $t0)s"
    grep -E '^Benchmark|^(ok|FAIL|PASS)|panic' "$logs/samplerbench.log" | sed 's/^/   /'
  } 2>&1 | tee "$logs/summary-extras.txt"
  finish
}

# four: this session's headline set on 4 GPUs: the default (auto cache
# policy) against 1 GPU, $DSP_REPEAT pairs; the partitioned cache; the
# pipeline off; 2 GPUs; the multilevel partition; then the sampler and
# gpurun GPU tests (split-topology variants on 4 GPUs).
four() {
  setup
  local e=${DSP_EPOCHS:-3}
  {
    gen
    for i in $(seq "${DSP_REPEAT:-3}"); do
      products f4-r$i cuda:0,1,2,3 "$e"
      products f1-r$i cuda:0 "$e"
    done
    products f4-part cuda:0,1,2,3 "$e" --cache-policy partition
    products f4-off cuda:0,1,2,3 "$e" --no-pipeline
    products f2 cuda:0,1 "$e"
    DSP_PARTITION=multilevel products f4-ml cuda:0,1,2,3 "$e"
    [ "${DSP_TESTS:-1}" = 1 ] && samplers && gputests
  } 2>&1 | tee "$logs/summary-four.txt"
  finish
}

ncclasync() {
  local t0=$(date +%s.%N)
  (cd comm/nccl && timeout 120 "$root/$dir/bin/nccl.test" -test.run 'GPUAsync|TwoGPUs' -test.v -test.timeout 3m) >"$logs/nccltests.log" 2>&1
  local rc=$?
  echo "== NCCL async tests: rc=$rc wall=$(since $t0)s"
  grep -E -- '^--- |^(ok|FAIL|PASS)|panic' "$logs/nccltests.log" | head -20 | sed 's/^/   /'
  return 0
}

# hard: test accuracy on the products-hard preset (products' shape, labels
# that do not saturate), 1 vs 4 GPUs, $DSP_HARD_EPOCHS epochs, 2 seeds.
hard() {
  setup
  local e=${DSP_HARD_EPOCHS:-10}
  {
    local keep=$data
    data=${DSP_HARD:-/tmp/products-hard}
    if [ ! -f "$data/manifest.json" ]; then
      local t0=$(date +%s.%N)
      "$root/$dir/bin/strata" gen "$data" --preset products-hard --quiet >"$logs/gen-hard.log" 2>&1 || { tail "$logs/gen-hard.log"; return 1; }
      echo "gen products-hard: $(since $t0)s"
    fi
    common[1]=$data
    for seed in ${DSP_HARD_SEEDS:-1 2}; do
      products h4-s$seed cuda:0,1,2,3 "$e" --seed $seed
      products h1-s$seed cuda:0 "$e" --seed $seed
    done
    common[1]=$keep
    data=$keep
  } 2>&1 | tee "$logs/summary-hard.txt"
  finish
}

# papers: the scaled papers shape with features only partly cached.
papers() {
  setup
  local e=${DSP_EPOCHS:-3} cache=${DSP_CACHE:-1GiB}
  {
    data=${DSP_PAPERS:-/tmp/papers-m}
    if [ ! -f "$data/manifest.json" ]; then
      local t0=$(date +%s.%N)
      "$root/$dir/bin/strata" gen "$data" --preset papers-m --quiet >"$logs/gen-papers.log" 2>&1 || { tail "$logs/gen-papers.log"; return 1; }
      echo "gen papers-m: $(since $t0)s"
    fi
    common[1]=$data
    # The whole-graph evaluation of 11.1M nodes does not fit on one GPU:
    # evaluate by sampled mini-batches.
    products p4-cache cuda:0,1,2,3 "$e" --cache "$cache" --eval sampled
    products p4-uva cuda:0,1,2,3 "$e" --cache 0 --eval sampled
    products p1-cache cuda:0 "$e" --cache "$cache" --eval sampled
  } 2>&1 | tee "$logs/summary-papers.txt"
  finish
}

# Several modes run in order: scripts/gpu-dsp.sh speed hard papers.
[ $# -gt 0 ] || set -- usage
for mode in "$@"; do
  case "$mode" in
    build) build || exit 1 ;;
    shake) shake ;;
    bench) bench ;;
    final) final ;;
    loader) loader ;;
    papers) papers ;;
    speed) speed ;;
    hard) hard ;;
    confirm) confirm ;;
    repeat) repeat ;;
    two) two ;;
    four) four ;;
    workers) workers ;;
    extras) extras ;;
    custom) setup; { gen && products "${DSP_NAME:-custom}" "${DSP_DEVICES:-cuda:0,1}" "${DSP_EPOCHS:-3}" ${DSP_FLAGS:-}; } 2>&1 | tee -a "$logs/summary-custom.txt"; finish ;;
    samplers) setup; samplers 2>&1 | tee "$logs/summary-samplers.txt"; finish ;;
    *) echo "usage: $0 build | shake | bench | final | loader | papers | speed | hard | confirm | repeat | two | four | workers | extras | samplers | custom (several run in order)" >&2; exit 2 ;;
  esac
done
