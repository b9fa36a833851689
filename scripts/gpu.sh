#!/usr/bin/env bash
# gpu.sh: build GPU test binaries here, run them on a GPU host.
#
#   scripts/gpu.sh build              # here: CGO_ENABLED=0 test binaries + strata into .gpu/
#   scripts/gpu.sh run [FLAGS...]     # on the GPU host: run them all, print a table last
#
# run passes FLAGS to every test binary (e.g. -test.run 'Conformance'
# -test.bench . -test.benchtime 20x). Logs go to $OUT (when set, as on the
# lent device machine) or .gpu/logs. The device machine: call `run` with
# carry [".gpu"] and command `scripts/gpu.sh run`.
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
for p in sample/gpusample feature; do
  [ -d "$p" ] && ls "$p"/*_test.go >/dev/null 2>&1 && pkgs+=("$p")
done

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
  du -sh "$gpu" | sed 's/^/size /'
  [ $ok = 1 ]
}

run() {
  export NCCL_NVLS_ENABLE=0
  export STRATA_KERNEL_CACHE=${STRATA_KERNEL_CACHE:-$root/$gpu/kcache}
  local logs=${OUT:-$root/$gpu/logs}
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

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 build | run [test flags]" >&2; exit 2 ;;
esac
