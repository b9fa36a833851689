#!/usr/bin/env bash
# fg-stale-acc.sh: full-graph test accuracy, exact vs skip-broadcast, over
# seeds (issue 16 item 5: within 0.5 points of exact on products-hard).
# Every run is `strata train --mode fullgraph` with the same model and
# partition; the table gives per mode the mean test accuracy (best
# validation epoch), its difference to exact in points, and the share of
# broadcast and of all bytes (broadcast + gradient) avoided.
#
#   STRATA=/tmp/strata DATA=/tmp/products-hard DEVICES=cuda:0,cuda:1,cuda:2,cuda:3 \
#     EPOCHS=100 scripts/fg-stale-acc.sh
#
# Variables: STRATA (strata binary; default .gpu/bin/strata, else strata),
# DATA (dataset directory; made with `strata gen --preset products-hard
# [--scale $SCALE]` when missing), DEVICES (cpu:4), EPOCHS (100), SEEDS
# ("1 2 3"), HIDDEN (256), LAYERS (3), MODES (names from the list below,
# default all), PART (a partition file for DEVICES' count: made once with
# `strata partition` when missing, so the runs share it), OUT (where the
# reports go, /tmp/fg-stale-acc), EXTRA (more train flags for every run),
# STALE_FLAGS (more flags for the modes with --staleness, e.g. the bounds).
# Modes: exact; stale (--staleness, the embedding drift); params
# (--staleness --staleness-drift params); halo (--exchange halo: exact,
# each device receives only the rows it reads); stale-halo (--staleness
# --exchange halo). The table also says whether a mode's per-epoch losses
# equal exact's bit for bit (then so do its accuracies).
set -euo pipefail
strata=${STRATA:-}
if [ -z "$strata" ]; then
  strata=.gpu/bin/strata
  [ -x "$strata" ] || strata=strata
fi
data=${DATA:-/tmp/products-hard} devices=${DEVICES:-cpu:4} epochs=${EPOCHS:-100}
out=${OUT:-/tmp/fg-stale-acc}
mkdir -p "$out"
if [ ! -f "$data/manifest.json" ]; then
  "$strata" gen "$data" --preset products-hard ${SCALE:+--scale "$SCALE"} --quiet
fi
ndev=$(($(tr -cd ',' <<<"$devices" | wc -c) + 1))
[[ $devices == cpu:* ]] && ndev=${devices#cpu:}
part=${PART:-$out/part-$ndev}
if [ ! -f "$part/partition.bin" ]; then
  "$strata" partition "$data" "$part" -k "$ndev" --quiet >/dev/null
fi
declare -A flags=([exact]="" [stale]="--staleness" [params]="--staleness --staleness-drift params"
  [halo]="--exchange halo" [stale-halo]="--staleness --exchange halo")
modes=${MODES:-exact stale params}
for m in $modes; do
  sf=
  [[ ${flags[$m]} != *--staleness* ]] || sf=${STALE_FLAGS:-}
  for s in ${SEEDS:-1 2 3}; do
    # shellcheck disable=SC2086 # flags are words
    "$strata" train --dataset "$data" --model sage --layers "${LAYERS:-3}" --hidden "${HIDDEN:-256}" \
      --mode fullgraph --devices "$devices" --partition-file "$part/partition.bin" --epochs "$epochs" \
      --eval-every 5 --seed "$s" --quiet --report "$out/$m-$s.json" ${flags[$m]} ${EXTRA:-} $sf >"$out/$m-$s.log" 2>&1 ||
      { tail -3 "$out/$m-$s.log"; exit 1; }
  done
done
# shellcheck disable=SC2086 # one argument a mode
SEEDS_LIST="${SEEDS:-1 2 3}" python3 - "$out" $modes <<'EOF'
import json, os, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
seeds = os.environ["SEEDS_LIST"].split()
rows = {}
for m in modes:
    rs = [json.load(open(f"{out}/{m}-{s}.json")) for s in seeds]
    acc = [r["test_accuracy"] for r in rs]
    c = [r["comm"] for r in rs]
    bc = sum(x["bytes_avoided"] for x in c) / max(1, sum(x["bytes_sent"] + x["bytes_avoided"] for x in c))
    allb = sum(x["bytes_sent"] + x["bytes_avoided"] + x["grad_bytes_sent"] + x["grad_bytes_avoided"] for x in c)
    av = sum(x["bytes_avoided"] + x["grad_bytes_avoided"] for x in c) / max(1, allb)
    sec = sum(r["mean_epoch_seconds"] for r in rs) / len(rs)
    losses = [[e["loss"] for e in r["epochs"]] for r in rs]
    rows[m] = (sum(acc) / len(acc), acc, bc, av, sec, losses, allb)
base = rows.get("exact")
# Bytes are against exact's total when there is one (halo sends fewer).
print(f"{'mode':10} {'test acc (mean)':>15} {'vs exact':>9} {'bcast avoided':>13} {'all avoided':>11} {'vs exact':>8} {'s/epoch':>8} {'losses':>7}  seeds")
for m, (a, acc, bc, av, sec, losses, allb) in rows.items():
    d = f"{100 * (a - base[0]):+.2f}" if base else "-"
    same = ("same" if losses == base[5] else "differ") if base else "-"
    vs = f"{100 * (1 - (1 - av) * allb / base[6]):7.1f}%" if base else "-"
    print(f"{m:10} {100 * a:15.2f} {d:>9} {100 * bc:12.1f}% {100 * av:10.1f}% {vs:>8} {sec:8.3f} {same:>7}  " + " ".join(f"{100 * x:.2f}" for x in acc))
# Seed noise: the spread of exact's accuracies, and each mode's difference
# to exact seed by seed (a seed fixes the initial weights). The headline
# is the test accuracy at the best validation epoch, which a small
# validation set makes noisy (one node of 170 is 0.6 points); "curve" is
# the mean difference of the test accuracies over every evaluated epoch
# of the second half, seed by seed, and "last" the last epoch's.
def curve(r):  # evaluated every 5 epochs (--eval-every 5)
    return {e["epoch"]: e["test_accuracy"] for e in r["epochs"] if e["epoch"] % 5 == 0}
if base and len(seeds) > 1:
    print(f"exact's spread over seeds: sd {100 * statistics.stdev(base[1]):.2f} points")
if base:
    ex = [json.load(open(f"{out}/exact-{s}.json")) for s in seeds]
    for m in rows:
        if m == "exact":
            continue
        ds, dl = [], []
        for s, e in zip(seeds, ex):
            r = json.load(open(f"{out}/{m}-{s}.json"))
            a, b = curve(r), curve(e)
            half = [k for k in a if k in b and k > len(e["epochs"]) // 2]
            ds.append(sum(a[k] - b[k] for k in half) / max(1, len(half)))
            dl.append(r["last_test_accuracy"] - e["last_test_accuracy"])
        print(f"{m}: per seed vs exact " + " ".join(f"{100 * (x - y):+.2f}" for x, y in zip(rows[m][1], base[1])) +
              "; curve " + " ".join(f"{100 * x:+.2f}" for x in ds) + f" (mean {100 * sum(ds) / len(ds):+.2f})" +
              "; last " + " ".join(f"{100 * x:+.2f}" for x in dl))
EOF
