#!/usr/bin/env bash
# gpu.sh: build GPU test binaries here, run them on a GPU host.
#
#   scripts/gpu.sh build              # here: CGO_ENABLED=0 test binaries + strata into .gpu/
#   scripts/gpu.sh run [FLAGS...]     # on the GPU host: run them all, print a table last
#   scripts/gpu.sh bench [DIR]        # on the GPU host: products-shape benchmarks and
#                                     # an end-to-end `strata train` (generates DIR first)
#   scripts/gpu.sh build-comm         # here: the communication test binaries and
#                                     # strata-commbench into .gpu/comm/
#   scripts/gpu.sh comm               # on a host with 2+ GPUs: NCCL and GPU shared-memory
#                                     # conformance/fault tests on 2 GPUs, then bus-bandwidth
#                                     # sweeps with NCCL_P2P_DISABLE=1 and with P2P on
#   scripts/gpu.sh build-dp           # here: the data-parallel step benchmark, strata, the
#                                     # gpushm tests and strata-commbench into .gpu/dp/
#                                     # (carry .gpu/dp only)
#   scripts/gpu.sh dpstep [DIR]       # on a host with 2+ GPUs: generate the products shape
#                                     # into DIR, time a data-parallel SAGE step with NCCL
#                                     # and gpushm variants (NCCL_P2P_DISABLE=1) and NCCL
#                                     # with P2P on
#   scripts/gpu.sh dpall [DIR]        # on a host with 2+ GPUs: the gpushm tests on 2 GPUs,
#                                     # dpstep, and an all-reduce sweep around the gradient
#                                     # size (gpushm device path / host pipeline vs NCCL)
#   scripts/gpu.sh pack               # here: build everything (this script's sets and those
#                                     # of gpu-fg.sh, gpu-dsp.sh and gpu-csp.sh) and pack the
#                                     # binaries into .gpu/all.tar.xz (~30 MB)
#   scripts/gpu.sh all [DIR]          # on the GPU host (carry [".gpu/all.tar.xz"]): unpack,
#                                     # run every GPU test, then the benchmarks of every
#                                     # area that the visible GPUs allow; logs in $OUT/all-logs.tgz
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

# --- communication back ends on GPUs (carry .gpu/comm only) ---
commdir=$gpu/comm
comm_pkgs=(internal/nccl comm/nccl comm/gpushm)

build_comm() {
  mkdir -p "$commdir"
  local ok=1
  for p in "${comm_pkgs[@]}"; do
    echo "build $p"
    CGO_ENABLED=0 go test -c -ldflags=-s\ -w -o "$commdir/${p//\//_}.test" "./$p" || ok=0
  done
  echo "build strata-commbench"
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$commdir/strata-commbench" ./comm/commbench/cmd/strata-commbench || ok=0
  du -sh "$commdir" | sed 's/^/size /'
  [ $ok = 1 ]
}

# comm: tests on 2 GPUs (one process per GPU), then all-reduce bus
# bandwidth 4 KiB..256 MiB: NCCL and gpushm with NCCL_P2P_DISABLE=1,
# NCCL and auto with P2P on; NVLink multicast always off. Logs and JSON
# go to $LOGS, $OUT or .gpu/logs; a table comes last.
comm_run() {
  env_setup
  export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  local logs=${LOGS:-${OUT:-$root/$gpu/logs}}
  mkdir -p "$logs"
  local bin=$root/$commdir
  nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader 2>/dev/null
  nvidia-smi topo -m 2>/dev/null | head -8
  local table=()
  # Worst case (every step at its limit) stays under 5 minutes; a normal run takes about one.
  local limits=(30 60 45)
  local i=0
  for p in "${comm_pkgs[@]}"; do
    local name=${p//\//_} log=$logs/${p//\//_}.log t0=$(date +%s) lim=${limits[$i]}
    i=$((i + 1))
    (cd "$root/$p" && timeout "$lim" "$bin/$name.test" -test.v -test.timeout "$((lim - 5))s" -test.run 'GPU|OneRank|TwoGPUs') >"$log" 2>&1
    local rc=$?
    grep -E -- '--- (FAIL|SKIP)|panic:|conformance ok|faults ok|FAIL|NCCL [0-9]' "$log" | head -20
    table+=("$(printf '%-16s rc=%-3s pass=%-3s fail=%-3s skip=%-3s %4ss' "$p" "$rc" "$(grep -c -- '--- PASS' "$log")" \
      "$(grep -c -- '--- FAIL' "$log")" "$(grep -c -- '--- SKIP' "$log")" "$(( $(date +%s) - t0 ))")")
  done
  local sweep=(-procs 2 -min 4096 -max ${COMM_MAX_BYTES:-268435456} -factor 4 -budget 2147483648)
  NCCL_P2P_DISABLE=1 timeout 60 "$bin/strata-commbench" "${sweep[@]}" -backends gpushm,nccl,gpu-auto \
    -json "$logs/bw-p2p-off.json" >"$logs/bw-p2p-off.txt" 2>&1; echo "sweep P2P off rc=$?"
  timeout 40 "$bin/strata-commbench" "${sweep[@]}" -backends nccl,gpu-auto \
    -json "$logs/bw-p2p-on.json" >"$logs/bw-p2p-on.txt" 2>&1; echo "sweep P2P on rc=$?"
  # gpushm tuning variants (comma-separated environment settings each),
  # 16 MiB and up, P2P off.
  local v k=0
  for v in ${COMM_VARIANTS-STRATA_GPUSHM_CHUNK_BYTES=8388608,STRATA_GPUSHM_WORKERS=12 STRATA_GPUSHM_CHUNKS=8}; do
    k=$((k + 1))
    env NCCL_P2P_DISABLE=1 ${v//,/ } timeout 25 "$bin/strata-commbench" -procs 2 -min 16777216 -max ${COMM_MAX_BYTES:-268435456} \
      -factor 4 -budget 2147483648 -backends gpushm -json "$logs/bw-var-$k.json" >"$logs/bw-var-$k.txt" 2>&1
    echo "gpushm $v: $(grep -E 'MiB' "$logs/bw-var-$k.txt" | tr -s ' ' | tr '\n' ';')"
  done
  tail -n 3 "$logs/bw-p2p-off.txt" "$logs/bw-p2p-on.txt" | grep -i -E "fail|error" | head -5
  echo
  echo "== comm summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) x$(nvidia-smi -L 2>/dev/null | wc -l))"
  printf '%s\n' "${table[@]}"
  python3 - "$logs/bw-p2p-off.json" "$logs/bw-p2p-on.json" <<'PY' || cat "$logs/bw-p2p-off.txt" "$logs/bw-p2p-on.txt"
import json, sys
def load(p):
    try:
        return {s["backend"]: s for s in json.load(open(p))["series"]}
    except Exception as e:
        print("cannot read", p, e); return {}
off, on = load(sys.argv[1]), load(sys.argv[2])
def bw(ss, b, i):
    p = ss.get(b, {}).get("points") or []
    return p[i]["bus_gb_per_s"] if i < len(p) else float("nan")
pts = (off.get("gpushm") or off.get("nccl") or on.get("nccl") or {}).get("points") or []
print("all_reduce bus bandwidth, GB/s (2 ranks, float32)")
print("%9s %12s %12s %8s %12s" % ("size", "gpushm off", "nccl off", "ratio", "nccl P2P on"))
for i, p in enumerate(pts):
    b = p["bytes"]; g, n, o = bw(off, "gpushm", i), bw(off, "nccl", i), bw(on, "nccl", i)
    size = "%d MiB" % (b >> 20) if b >= 1 << 20 else "%d KiB" % (b >> 10)
    print("%9s %12.2f %12.2f %7.0f%% %12.2f" % (size, g, n, 100 * g / n if n == n and n > 0 else float("nan"), o))
for name, ss in (("P2P off", off), ("P2P on", on)):
    a = ss.get("gpu-auto", {})
    print("auto with %s: %s (%s)" % (name, a.get("chosen", "?"), a.get("reason", a.get("error", "?"))[:160]))
    for b, s in ss.items():
        if s.get("error"):
            print("%s %s failed: %s" % (name, b, s["error"].splitlines()[0][:200]))
PY
}

# --- data-parallel training step on 2 GPUs (carry .gpu/dp only) ---
dpdir=$gpu/dp

build_dp() {
  mkdir -p "$dpdir"
  local ok=1
  echo "build train/dpbench"
  CGO_ENABLED=0 go test -c -ldflags=-s\ -w -o "$dpdir/dpbench.test" ./train/dpbench || ok=0
  echo "build comm/gpushm tests"
  CGO_ENABLED=0 go test -c -ldflags=-s\ -w -o "$dpdir/comm_gpushm.test" ./comm/gpushm || ok=0
  echo "build cmd/strata, strata-commbench"
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$dpdir/strata" ./cmd/strata || ok=0
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$dpdir/strata-commbench" ./comm/commbench/cmd/strata-commbench || ok=0
  du -sh "$dpdir" | sed 's/^/size /'
  [ $ok = 1 ]
}

# gen_products DIR: the products shape, generated when absent.
gen_products() {
  local dir=$1 logs=$2
  if [ ! -f "$dir/manifest.json" ]; then
    local t0=$(date +%s)
    "$root/$dpdir/strata" gen "$dir" --preset products --quiet >"$logs/gen.log" 2>&1 || { tail "$logs/gen.log"; return 1; }
    echo "gen products: $(( $(date +%s) - t0 ))s"
  fi
}

# dpstep: BenchmarkDataParallelStep (3-layer SAGE, hidden 256, batch 1024
# per GPU, fanouts 15,10,5, Adam; $STRATA_DP_STEPS timed steps; the
# variants of train/dpbench's benchVariantsOff, or
# $STRATA_DP_BENCH_VARIANTS) on the products shape in DIR (default
# /tmp/products, generated when absent).
dpstep() {
  env_setup
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  local dir=${1:-/tmp/products}
  local logs=${LOGS:-${OUT:-$root/$gpu/logs}}
  mkdir -p "$logs"
  nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null
  gen_products "$dir" "$logs" || return 1
  (cd train/dpbench && STRATA_BENCH_DATASET=$dir timeout "${DP_TIMEOUT:-200}" "$root/$dpdir/dpbench.test" -test.run '^$' \
    -test.bench DataParallelStep -test.benchtime 1x -test.v -test.timeout 5m) >"$logs/dpstep.log" 2>&1
  echo "dpstep rc=$?"
  grep -E -- '^verdict|_ms/step|--- FAIL|panic:|^FAIL' "$logs/dpstep.log" | head -20
  grep -E -- '_test.go:[0-9]+:' "$logs/dpstep.log" | sed -E 's/ losses [^;]*;/;/; s/phases \(us\) //' | cut -c1-400 | head -40
}

# dpall: the gpushm conformance and fault suites on 2 GPUs (when they
# fail, the rest runs with the device path off), dpstep, and all-reduce
# sweeps from the gradient size (827,580 bytes) by factors of 4 up to
# $DP_SWEEP_MAX with NCCL_P2P_DISABLE=1: gpushm (defaults) and NCCL, then
# gpushm with each of $DP_SWEEP_VARIANTS (default: the host pipeline).
dpall() {
  env_setup
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  local dir=${1:-/tmp/products}
  local logs=${LOGS:-${OUT:-$root/$gpu/logs}}
  mkdir -p "$logs"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
  gen_products "$dir" "$logs" >"$logs/gen.txt" 2>&1 &
  local gen=$! t0=$(date +%s)
  (cd comm/gpushm && timeout "${DP_TEST_TIMEOUT:-100}" "$root/$dpdir/comm_gpushm.test" -test.v -test.timeout 95s \
    -test.run 'TwoGPUs') >"$logs/gpushm-tests.log" 2>&1
  local rc=$?
  echo "gpushm tests rc=$rc pass=$(grep -c -- '--- PASS' "$logs/gpushm-tests.log") fail=$(grep -c -- '--- FAIL' "$logs/gpushm-tests.log") $(( $(date +%s) - t0 ))s"
  grep -E -- 'conformance ok|faults ok|--- FAIL|panic:|2 GPUs' "$logs/gpushm-tests.log" | cut -c1-300 | head -20
  if [ $rc != 0 ]; then
    grep -E -- '_test.go:[0-9]+:|error|Error' "$logs/gpushm-tests.log" | cut -c1-400 | head -20
    export STRATA_GPUSHM_DEVICE_MAX=-1
    echo "the device path failed its tests: it is off for the rest of this run"
  fi
  wait $gen; cat "$logs/gen.txt"
  dpstep "$dir"
  local sweep=(-procs 2 -min 827580 -max "${DP_SWEEP_MAX:-13241280}" -factor 4 -budget 268435456)
  NCCL_P2P_DISABLE=1 timeout 60 "$root/$dpdir/strata-commbench" "${sweep[@]}" -backends gpushm,nccl \
    -json "$logs/bw-off.json" >"$logs/bw-off.txt" 2>&1; echo "sweep gpushm,nccl P2P off rc=$?"
  # gpushm variants (comma-separated environment settings each), P2P off.
  local v k=0
  for v in ${DP_SWEEP_VARIANTS-STRATA_GPUSHM_DEVICE_MAX=-1}; do
    k=$((k + 1))
    env NCCL_P2P_DISABLE=1 ${v//,/ } timeout 40 "$root/$dpdir/strata-commbench" "${sweep[@]}" -backends gpushm \
      -json "$logs/bw-var-$k.json" >"$logs/bw-var-$k.txt" 2>&1
    echo "gpushm $v: rc=$? $(grep -E 'MiB|KiB' "$logs/bw-var-$k.txt" | tr -s ' ' | tr '\n' ';')"
  done
  grep -vE '^\s*$' "$logs/bw-off.txt" | grep -iE 'MiB|KiB|GB|fail|error' | cut -c1-200 | head -30
}

# --- everything in one call ---

# pack: every binary set into one compressed file, since the sets
# together are larger than what one call may carry uncompressed.
pack() {
  build && build_dp && scripts/gpu-fg.sh build && scripts/gpu-dsp.sh build && scripts/gpu-csp.sh build || return 1
  local files=(tests.txt strata) f
  files=(bin/strata $(awk '{print "bin/" $1 ".test"}' "$gpu/tests.txt") tests.txt)
  files+=($(cd "$gpu" && find datasets fg dsp csp dp -type f -o -type l 2>/dev/null | grep -v -e /logs/ -e '^fg/parts/' | sort))
  [ -n "${FG_PARTS:-}" ] && files+=($(cd "$gpu" && ls fg/parts/*.bin 2>/dev/null))
  # Identical binaries (strata in every set, test binaries built twice)
  # travel once: later copies become links to the first.
  declare -A first=()
  for f in "${files[@]}"; do
    [ -f "$gpu/$f" ] && [ ! -L "$gpu/$f" ] || continue
    local sum
    sum=$(sha256sum "$gpu/$f" | cut -d' ' -f1)
    if [ -n "${first[$sum]:-}" ]; then
      ln -sf "$(realpath --relative-to="$(dirname "$gpu/$f")" "$gpu/${first[$sum]}")" "$gpu/$f"
    else
      first[$sum]=$f
    fi
  done
  tar -C "$gpu" -cf - "${files[@]}" | xz -T0 -6 >"$gpu/all.tar.xz" || return 1
  ls -l "$gpu/all.tar.xz" | awk '{printf "packed %s: %.1f MB\n", $NF, $5/1e6}'
}

# all: unpack, run every GPU test, then the benchmarks the visible GPUs
# allow (products shape generated into DIR). Each part logs into its own
# folder under /tmp/gpulogs, packed into $OUT/all-logs.tgz at the end.
all() {
  local dir=${1:-/tmp/products} logs=/tmp/gpulogs
  tar -xJf "$gpu/all.tar.xz" -C "$gpu" || return 1
  mkdir -p "$logs"/{tests,bench,fg,dsp,dp,csp}
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  echo "== $n GPUs"
  local t0=$(date +%s)
  echo "== GPU tests"; LOGS=$logs/tests run 2>&1 | tail -12
  echo "== full-graph tests"; LOGS=$logs/fg scripts/gpu-fg.sh test 2>&1 | tail -8
  echo "== sampled training, 1 GPU"; LOGS=$logs/bench BENCH_TIME=2x bench "$dir" 2>&1 | tail -8
  local gpus='1'
  [ "$n" -ge 2 ] && gpus='(1|2)'
  [ "$n" -ge 4 ] && gpus='(1|2|4)'
  echo "== full-graph SAGE, products, gpus=$gpus"
  LOGS=$logs/fg FG_BENCH="ProductsSAGE/gpus=$gpus\$" scripts/gpu-fg.sh bench "$dir" 2>&1 | tail -12
  echo "== collective sampling"; OUT=$logs/csp scripts/gpu-csp.sh run 2>&1 | tail -12
  if [ "$n" -ge 2 ]; then
    echo "== data-parallel step, gpushm vs NCCL"
    LOGS=$logs/dp DP_SWEEP_MAX=827580 DP_SWEEP_VARIANTS= dpall "$dir" 2>&1 | grep -E 'rc=|verdict|_ms/step' | cut -c1-300
  fi
  if [ "$n" -ge 4 ]; then
    echo "== DSP on 1, 2, 4 GPUs, NCCL asynchronous and DSP GPU tests"
    DSP_DATA=$dir DSP_LOGS=$logs/dsp scripts/gpu-dsp.sh confirm 2>&1 | grep -E '^== |epoch time|^   --- ' 
  fi
  echo "== all done in $(( $(date +%s) - t0 ))s"
  [ -n "${OUT:-}" ] && tar -czf "$OUT/all-logs.tgz" -C /tmp gpulogs
  return 0
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  bench) shift; bench "$@" ;;
  build-comm) build_comm ;;
  comm) comm_run ;;
  build-dp) build_dp ;;
  dpstep) shift; dpstep "$@" ;;
  dpall) shift; dpall "$@" ;;
  pack) pack ;;
  all) shift; all "$@" ;;
  *) echo "usage: $0 build | run [test flags] | bench [DIR] | build-comm | comm | build-dp | dpstep [DIR] | dpall [DIR] | pack | all [DIR]" >&2; exit 2 ;;
esac
