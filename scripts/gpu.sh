#!/usr/bin/env bash
# gpu.sh: every GPU test and benchmark, in named sets. The binaries are
# built here (no GPU, no cgo) into .gpu/bin and run on a GPU host. Several
# sets run in one call, in the order given:
#
#   scripts/gpu.sh build test dsp-speed   # here: the binaries of those sets
#   scripts/gpu.sh test dsp-speed         # on the GPU host, .gpu carried
#
# On the lent device machine: `run` with carry [".gpu"] (or
# [".gpu/all.tar.xz"] after `pack`), a kind with as many GPUs as the sets
# use, and command `scripts/gpu.sh SET...`.
#
# Run here (first on the line):
#   build [SET...]  the binaries of the SETs named after it (of every set when none) into
#                   .gpu/bin, emptied first. Built from a snapshot of HEAD; .gpu/bin/build.txt
#                   names the commit and every set prints it. GPU_BUILD_TREE=1 builds the
#                   working tree instead (recorded as COMMIT+dirty when it differs from HEAD).
#                   Copies CiteSeer into .gpu/datasets for the parity test; FG_PARTS=DIR copies
#                   the partitions DIR/pK/partition.bin (K = 2, 4, 8) to .gpu/parts/pK.bin.
#   base REV        the base build of the ab set: strata and fullgraph.test of git REV (e.g.
#                   main~3 or a commit) into .gpu/base, named in .gpu/base/build.txt
#   pack [SET...]   build, then pack .gpu into .gpu/all.tar.xz (every set: about 30 MB), for
#                   when .gpu is over the 64 MiB a call carries: carry [".gpu/all.tar.xz"]; the
#                   GPU host unpacks it when .gpu/bin holds another build.
#
# Run on the GPU host (a run that needs more GPUs than are visible is skipped):
#   test          every CUDA/NCCL test package built (test_pkgs below: back-end conformance,
#                 cudalib, nvrtc, gpusample, feature, gputrain with the accuracy parity,
#                 fullgraph, dsp/cache, dsp/csp, dsp/engine, infer, internal/cudadsp, link, serve, internal/nccl, comm/nccl,
#                 comm/gpushm, comm/world);
#                 a table last
#   parity        accuracy: CPU vs cuda:0 (gputrain: GCN and GAT on Cora and CiteSeer, sampled
#                 SAGE), the DSP engine on 4 GPUs vs the single-GPU trainer on products
#                 (evaluated every epoch), products-hard on 4 GPUs vs 1 over seeds
#   single-gpu    the single-GPU trainer on products: GPU sampling epoch, BenchmarkTrainEpochGPU
#                 (per-op profile), feature gathers, `strata train --device cuda:0`, 2 epochs
#   kernels       tensor/backend/cuda benchmarks (GEMM, SpMM, gathers, launch cost), then the
#                 SpMM variants on the products graph (BenchmarkSpMMVariants)
#   sampling      sampler epochs on products (dsp/csp): collective sampling on 1, 2, 4 GPUs
#                 against gpusample over the whole graph, layer-wise epochs, random walks
#   fullgraph     full-graph GraphSAGE on products on 1, 2, 4 GPUs (BenchmarkProductsSAGE)
#   comm          all-reduce bus bandwidth on 2 GPUs: gpushm, NCCL and auto, P2P off and on,
#                 4 KiB-256 MiB, gpushm tuning variants; then around the gradient size
#   dp-step       data-parallel SAGE step on 2 GPUs, NCCL vs gpushm (train/dpbench)
#   dsp-speed     the headline set: products on 1, 2 and 4 GPUs with the defaults ($DSP_REPEAT
#                 4-vs-1 pairs), partitioned cache, pipeline off, multilevel partition;
#                 speed-ups last
#   dsp-variants  each switch of the DSP engine against the defaults, on $DSP_GPUS GPUs:
#                 whole-graph sampler, cache policies and budgets, pre-sampled hotness, split
#                 topology, pipeline off, synchronous all-reduce, stream priorities, no
#                 coordinator, shared stream, sampler workers, hidden 64, evaluation every
#                 epoch (and BenchmarkEvalFullGPU, run "evalbench"); ratios last
#   dsp-papers    papers-m (11.1M nodes, 5.3 GiB of features): 1 GiB cache per GPU vs every
#                 row through UVA on 4 GPUs, the cache on 1; time to the first epoch
#   dsp-run       one products run: $DSP_NAME on $DSP_DEVICES with $DSP_FLAGS
#   dsp-setup     issue 15's start-to-first-batch run: `strata train --devices cuda:0,..,K-1
#                 --partition range --eval sampled` on the papers shape (generated once into
#                 $DSP_SETUP_DATA, 71 GB; about as long to write), stopped at its first batch;
#                 prints the setup's phases (the "first batch" line)
#   world         issue 16's job over processes and "machines" on 4 GPUs, products, 3-layer SAGE
#                 256, batch 1024, fanouts 15,10,5, --partition multilevel: w1x4, 1 process with
#                 cuda:0,1,2,3; w4x1, `strata launch -n 4`, a process per GPU; w2x2, 2 machines x
#                 2 GPUs: two `strata launch --nnodes 2 --node-rank r` on 127.0.0.1, GPUs 0,1 and
#                 2,3 (CUDA_VISIBLE_DEVICES), each its own NCCL_HOSTID and STRATA_HOST_ID (NCCL's
#                 network transport between them), the whole dataset; w2x2-dirs, the same with a
#                 directory per machine (`strata partition --machines 2` into $WORLD_PARTS, made
#                 once, each process loading only its machine's rows); full-graph (3-layer SAGE
#                 256) on the 2 machines with NCCL_P2P_DISABLE=1, exact (fg2x2) and skip-broadcast
#                 (fg2x2-stale, --staleness; fg2x2-params, --staleness --staleness-drift params
#                 $WORLD_FG_STALE_FLAGS), halo exchange (fg2x2-halo, --exchange halo; fg2x2-stale-halo,
#                 with --staleness; WORLD_FG_MACHINES=0/1: 2 machines x 1 GPU); a table last: seconds per epoch, network bytes per
#                 epoch, test accuracy, broadcast bytes avoided. Each run stopped with SIGQUIT at
#                 its limit; the set stays within WORLD_BUDGET
#   papers-gen    issue 15's judged figures, part 1 (no GPU used): `strata gen --preset papers`
#                 into $PAPERS_DATA (111M nodes, 3.2B stored edges, 71 GB), timed; skipped when
#                 a dataset is there (a warm machine keeps /tmp between calls). The data does not
#                 fit a 1-GPU machine's 64 GiB disk: run the three papers sets on a 4-GPU kind
#   papers-4      part 2, 4 GPUs: `strata train --dataset $PAPERS_DATA --devices cuda:0,1,2,3
#                 --partition range --epochs 10 --eval full --eval-every 1 --save
#                 /tmp/papers-model-4` (layer-wise full-neighbor evaluation after every epoch);
#                 prints the first-batch line with the setup's phases, each epoch's training
#                 and evaluation time with the seconds since the start, the totals; then
#                 `strata embed` and `strata predict` of all 111M nodes on the 4 GPUs, timed
#                 (their .npy outputs, 28 and 76 GB, deleted after)
#   papers-1      part 3, the same on cuda:0 alone, 3 epochs (--save /tmp/papers-model-1); the
#                 features through UVA (--cache 0) when GPU 0 has under 100 GiB (H100), all on
#                 the GPU on an H200
#   papers-infer  all-node inference without training first: a stand-in model of the same
#                 architecture (PAPERS_MODEL, one epoch on the CPU of `gen --preset papers
#                 --nodes 50000`: same features and classes; inference costs what a trained
#                 model's does) embeds every node of $PAPERS_DATA at layer $PAPERS_INFER_LAYER
#                 (2) on cuda:0..$PAPERS_INFER_GPUS-1 (4) with STRATA_INFER_PROFILE=1 (each
#                 layer's host phases, each GPU's largest ops), timed; the output deleted after
#   papers-stall  the bf16 stall at the papers shape (docs/training.md, known issue): `train
#                 --precision bf16` on $PAPERS_STALL_GPUS (4) GPUs, one run per flag set of
#                 $PAPERS_STALL_VARIANTS ("none": no extra flag; e.g. "none --no-pipeline");
#                 a run with no epoch $PAPERS_STALL_WAIT (60) s after its first batch gets its
#                 threads' native stacks (scripts/procstacks.py: system call, wait channel and a stack scan; cuda-gdb too with PAPERS_STALL_GDB=1) and nvidia-smi, then
#                 SIGQUIT (Go's goroutines)
#   hetero-link   issue 18's GPU figures. Link prediction: the products model (train_run's:
#                 3-layer GraphSAGE 256, fanouts 15,10,5) on the products shape at $LINK_SCALE
#                 (generated into /tmp/products-s$LINK_SCALE; /tmp/products at 1), one epoch of
#                 `train --task link` (batch $LINK_BATCH positive edges) on cuda:0 and on
#                 cuda:0,1,2,3 (reported as not built when the build's link runner refuses
#                 --devices), against one node-classification epoch of the same model on the
#                 same graph; epoch seconds from each run's report. Typed sampling:
#                 BenchmarkHeteroSample on `gen --preset hetero --nodes $HETERO_NODES` (papers;
#                 2M: 4M nodes), the CPU and GPU typed samplers against the homogeneous ones
#                 on the graph with types erased, sampled edges/s; then one typed training
#                 epoch (`--model hsage --device cuda:0`, sampling on the GPU) and the same on
#                 4 GPUs (`--devices cuda:0,1,2,3`: collective typed sampling, NCCL), side by side
#   hetero-link LINK_SCALE (0.1; an epoch of the full shape is ~53k batches of 1024),
#             LINK_BATCH (4096), LINK_LR (0.001: at link's default 0.01 this model's encoder
#             collapses on the products shape, every pair scored the same), LINK_TIMEOUT (240 s a run, then SIGQUIT), HETERO_NODES
#             (2000000), HETERO_DATA (/tmp/hetero-$HETERO_NODES), BENCH_BATCHES (100 a
#             benchmark iteration), BENCH_TIME (3x), HETERO_TIMEOUT (300).
#   pinned-ab     the pinned cuBLASLt products against STRATA_CUBLAS_PINNED=0 (cuBLAS's
#                 per-shape choice), the same binary alternating: products sampled epochs
#                 on $AB_GPUS (1 4) GPUs in $PINNED_PRECISIONS (fp32 bf16), $DSP_REPEAT (2)
#                 rounds; means and unpinned/pinned ratios last
#   ab            a speed claim: the current build against the base build (.gpu/base, see
#                 base) in the same call: products sampled epochs on $AB_GPUS (1 2 4) GPUs,
#                 base and new alternating, $AB_REPEAT (2) rounds, then BenchmarkProductsSAGE
#                 (full-graph, 1/2/4 GPUs) of each; new/base ratios last
#   quick         one 10-minute call: test, then a short run of each area the GPUs allow
#                 (single-gpu, fullgraph, sampling, comm, dp-step, dsp-speed)
#   all           test parity single-gpu kernels sampling fullgraph comm dp-step dsp-speed
#                 dsp-variants dsp-papers (more than one call's 10 minutes)
#
# Environment (defaults in parentheses):
#   all       LOGS (/tmp/gpulogs when $OUT is set, else .gpu/logs; DSP_LOGS is read too):
#             summary.txt, one folder per set; after every set summary.txt and gpu-logs.tgz
#             are copied to $OUT. GPU_DATA (/tmp/products; DSP_DATA is read too): the
#             products shape, generated when absent. STRATA_KERNEL_CACHE (/tmp/strata-kcache).
#   GPU_BIN   the folder of the binaries the sets run (.gpu/bin): another build carried beside
#             it (e.g. .gpu/base/bin) runs the same set for an old-against-new comparison.
#   test      GPU_TEST_PKGS, a regexp of the package directories to build and run (all);
#             GPU_TEST_FLAGS, added to every test binary's flags (e.g. -test.run 'Sibling',
#             -test.bench . -test.benchtime 20x); GPU_TEST_TIMEOUT, seconds per package (the
#             table's); STRATA_PARITY_SEEDS.
#   dsp-*     DSP_EPOCHS (3), DSP_RUN_TIMEOUT (150 s per run, then SIGQUIT: Go prints every
#             goroutine), DSP_STALL (45s, --stall-timeout), DSP_PARTITION (range),
#             DSP_ONLY (a regexp: only the runs whose names match), DSP_REPEAT (3 pairs),
#             DSP_GPUS (variants: the visible GPUs, at most 4), DSP_TOPO (128MiB),
#             DSP_WORKERS ("2 3"), DSP_PAPERS (/tmp/papers-m), DSP_CACHE (1GiB),
#             DSP_NAME, DSP_DEVICES (a count or cuda:0,1), DSP_FLAGS (dsp-run); dsp-setup:
#             DSP_SETUP_DATA (/tmp/papers), DSP_SETUP_PRESET (papers), DSP_GPUS (4), DSP_FLAGS,
#             DSP_RUN_TIMEOUT (300 s to the first batch).
#   world     WORLD_PARTS ($GPU_DATA-m2), WORLD_EPOCHS (3), WORLD_FG_EPOCHS (10), WORLD_PARTITION (multilevel), WORLD_SEED (7), WORLD_FG_FLAGS (more flags for every full-graph run, e.g. --dropout 0),
#             WORLD_FG_STALE_FLAGS (more flags for fg2x2-params and fg2x2-stale-halo),
#             WORLD_ONLY (a regexp of run names), WORLD_RUN_TIMEOUT (100 s a run, then SIGQUIT),
#             WORLD_BUDGET (540 s from the set's start: a run gets what is left of it, and is
#             skipped and reported failed under 30 s), DSP_STALL; WORLD_CPU=1 runs the set on CPU
#             devices (cpu:N for N GPUs), to try it without GPUs (with a fake nvidia-smi listing
#             4 GPUs and GPU_DATA a small dataset, e.g. `strata gen --preset tiny`).
#   papers-*  PAPERS_DATA (/tmp/papers), PAPERS_PRESET (papers), PAPERS_GEN_TIMEOUT (560 s),
#             PAPERS_EPOCHS (papers-4 10, papers-1 3), PAPERS_MODEL (the products model, DSP's papers
#             setting: --model sage --layers 3 --hidden 256 --batch-size 1024 --fanouts 15,10,5;
#             the CLI's defaults are batch 32, 2 x 64), PAPERS_FLAGS (added to both trainings),
#             PAPERS_1_FLAGS (papers-1: --cache 0 under 100 GiB, else none), PAPERS_STEPS
#             ("train embed predict"; evaluate too if named; the inference steps use the model
#             of an earlier call when train is left out), PAPERS_BUDGET (570 s from the
#             call's start: a step gets what is left of it, and is skipped, naming the call
#             to run next, under 30 s), PAPERS_TRAIN_TIMEOUT (450 s), PAPERS_INFER_TIMEOUT
#             (200 s a step); a step past its limit gets SIGQUIT (Go prints every goroutine)
#             and is reported failed. On a 600 s call the training and the inference may not
#             both fit: PAPERS_STEPS=train, then PAPERS_STEPS="embed predict" on the next.
#             papers-infer: PAPERS_INFER_LAYER, PAPERS_INFER_GPUS, PAPERS_INFER_TIMEOUT (300 s
#             here), PAPERS_INFER_OUT (/tmp/papers-out; /dev/shm/... writes at memory speed),
#             PAPERS_INFER_SAMPLE (a .npy file: every 1000th output row saved there); papers-stall: PAPERS_STALL_GPUS, PAPERS_STALL_VARIANTS, PAPERS_STALL_WAIT,
#             PAPERS_STALL_TIMEOUT (200 s a run), PAPERS_STALL_LTLOG (cuBLASLt's log level, e.g. 5:
#             the last 200 lines of each log file kept), PAPERS_STALL_GDB.
#   parity    DSP_ACC_EPOCHS (5), DSP_HARD (/tmp/products-hard), DSP_HARD_EPOCHS (10),
#             DSP_HARD_SEEDS ("1 2"), DSP_HARD_PRECISIONS ("fp32"; e.g. "fp32 bf16": runs
#             h4-bf16-sSEED, h1-bf16-sSEED beside h4-sSEED, h1-sSEED, a mean per precision).
#   single-gpu BENCH_EPOCH (SampleEpochDevice|TrainEpochGPU), BENCH_TIME (3x),
#             STRATA_BENCH_PROFILE (hostblocks-syncloss,pipelined-epochloss), BENCH_NO_GATHER,
#             BENCH_NO_TRAIN.
#   sampling  SAMPLING_BENCH (EpochProducts|WalkProducts), BENCH_TIME (3x), SAMPLING_TIMEOUT (360).
#   kernels   KERNEL_BENCH (.), KERNEL_BENCH_TIME (20x), KERNEL_TIMEOUT (300); the variants
#             take FG_ORDER and FG_TIMEOUT (240).
#   fullgraph FG_BENCH (ProductsSAGE; e.g. 'ProductsSAGE/gpus=1$'), FG_EPOCHS (5, the first
#             untimed), FG_PROFILE=1 (device time per op of one more epoch on GPU 0),
#             FG_EVAL_EVERY, FG_LR, FG_COMM (auto, nccl, gpushm, host), FG_PRECISION
#             (fp32, tf32, bf16; FG_TF32=1 is tf32),
#             FG_ORDER=K (node order of .gpu/parts/pK.bin), FG_TIMEOUT (300).
#   comm      COMM_SWEEPS ("wide gradient"), COMM_MAX_BYTES (256 MiB), COMM_VARIANTS (gpushm
#             settings, comma-separated within one variant), DP_SWEEP_MAX (13241280),
#             DP_SWEEP_VARIANTS (STRATA_GPUSHM_DEVICE_MAX=-1), NCCL_SOCKET_IFNAME (lo).
#   dp-step   STRATA_DP_STEPS, STRATA_DP_BENCH_VARIANTS, STRATA_DP_BENCH_P2P_ON, DP_TIMEOUT (200).
#   comm and dp-step first run the gpushm suites on 2 GPUs (once a call; DP_TEST_TIMEOUT):
#   when they fail, the rest of the call runs with gpushm's device path off.
#
# The old scripts' modes (before commit "scripts: one gpu.sh"; each build's scripts stay in
# git, e.g. `git show f5674f2:scripts/gpu-dsp.sh`) and what does their work now:
#   gpu.sh build                   build
#   gpu.sh run [FLAGS]             GPU_TEST_FLAGS="FLAGS" test
#   gpu.sh bench [DIR]             GPU_DATA=DIR single-gpu
#   gpu.sh build-comm, build-dp    build comm dp-step
#   gpu.sh comm                    GPU_TEST_PKGS=nccl test; comm (COMM_SWEEPS=wide)
#   gpu.sh dpstep [DIR]            dp-step
#   gpu.sh dpall [DIR]             dp-step comm with COMM_SWEEPS=gradient
#   gpu.sh pack, all [DIR]         pack, quick
#   gpu-fg.sh build                FG_PARTS=DIR build fullgraph kernels
#   gpu-fg.sh test                 GPU_TEST_PKGS='backend/cuda|fullgraph' test
#   gpu-fg.sh bench [DIR], all     fullgraph (FG_BENCH's default was 'ProductsSAGE/gpus=1$'), test fullgraph
#   gpu-fg.sh spmm                 kernels (KERNEL_BENCH=XXX: the variants alone)
#   gpu-csp.sh build, run          build test sampling; GPU_TEST_PKGS='gpusample|dsp/csp' test,
#                                  SAMPLING_BENCH='^BenchmarkEpochProducts$' sampling
#   gpu-dsp.sh build               build dsp-speed dsp-variants parity (and the sets below)
#   gpu-dsp.sh samplers            GPU_TEST_PKGS='gpusample|dsp/csp' test (DSP_GPUSAMPLE_TESTS and
#                                  DSP_SAMPLER_TESTS: GPU_TEST_FLAGS='-test.run PATTERN')
#   gpu-dsp.sh four, repeat        dsp-speed test; DSP_ONLY='-r[0-9]' dsp-speed
#   gpu-dsp.sh shake               test; DSP_EPOCHS=2 DSP_REPEAT=1 DSP_ONLY='^(d[14]-r1|d2)$' dsp-speed
#   gpu-dsp.sh confirm             dsp-speed, DSP_ONLY='full|off' dsp-variants, test
#   gpu-dsp.sh bench, loader       dsp-speed dsp-variants parity (DSP_ONLY picks the runs)
#   gpu-dsp.sh final               DSP_ONLY='full|off|budget|uva' dsp-variants
#   gpu-dsp.sh speed               DSP_ONLY='full|sync|noprio|off' dsp-variants, DSP_GPUS=1 likewise
#   gpu-dsp.sh two, workers        DSP_GPUS=2 dsp-variants (DSP_ONLY='part|topo|full$|nocoord|off',
#                                  or '-w[0-9]|h64'); the 1-GPU runs: DSP_GPUS=1
#   gpu-dsp.sh extras              DSP_ONLY='presample|budget|eval' dsp-variants, sampling
#   gpu-dsp.sh hard, papers        parity (DSP_ONLY='^h' for products-hard alone), dsp-papers
#   gpu-dsp.sh custom              dsp-run
#   gpu-dsp.sh bench's fallback (variants of a failed 4-GPU run): DSP_ONLY=... dsp-variants
#   DSP_TESTS=0                    leave test off the line
#   Renamed knobs: DSP_LOGS, DSP_DATA, DSP_BUILD_TREE are still read (LOGS, GPU_DATA,
#   GPU_BUILD_TREE); DSP_TEST_TIMEOUT is GPU_TEST_TIMEOUT; the old run's DIR argument is GPU_DATA.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/${0##*/}
cd "$(dirname "$self")/.." || exit 2
root=$(pwd)
gpu=$root/.gpu
bin=${GPU_BIN:-$gpu/bin}
data=${GPU_DATA:-${DSP_DATA:-/tmp/products}}

host_sets=(ab pinned-ab world hetero-link test parity single-gpu kernels sampling fullgraph comm dp-step dsp-speed dsp-variants dsp-papers dsp-run dsp-setup papers-gen papers-4 papers-1 papers-infer papers-stall quick all)
all_sets=(test parity single-gpu kernels sampling fullgraph comm dp-step dsp-speed dsp-variants dsp-papers)
quick_sets=(test single-gpu fullgraph sampling comm dp-step dsp-speed)

# The test packages: directory, -test.run pattern, time limit in seconds,
# environment settings.
test_pkgs=(
  "internal/cudalib . 60"
  "internal/nvrtc . 60"
  "tensor/backend/cuda . 300 STRATA_CUDA_POISON=1"
  "sample/gpusample . 200"
  "feature . 120"
  "train/gputrain . 300"
  "fullgraph GPU 120 STRATA_CUDA_POISON=1"
  "dsp/cache . 120"
  "dsp/csp . 300"
  "dsp/engine GPU 300"
  "infer GPU 200"
  "internal/cudadsp . 60"
  "link GPU 200"
  "serve GPU 120"
  "internal/cudacomm . 60"
  "internal/nccl GPU|OneRank|TwoGPUs 30"
  "comm/nccl GPU|OneRank|TwoGPUs 60"
  "comm/gpushm GPU|OneRank|TwoGPUs 100"
  "comm/world GPU 60"
  "link/multi GPU 200"
  "cmd/strata GPU 200"
)

usage() {
  [ $# -gt 0 ] && echo "gpu.sh: $*" >&2
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$self" >&2
  exit 2
}

known() { printf '%s\n' "${host_sets[@]}" | grep -qx -- "$1"; }

# needs SET: the binaries SET runs, one a line: strata, strata-commbench, or
# a package directory (its test binary).
needs() {
  local s
  case $1 in
    test)
      echo strata
      for s in "${test_pkgs[@]}"; do [[ ${s%% *} =~ ${GPU_TEST_PKGS:-.} ]] && echo "${s%% *}"; done
      ;;
    parity) printf '%s\n' strata train/gputrain ;;
    single-gpu) printf '%s\n' strata sample/gpusample feature ;;
    kernels) printf '%s\n' strata tensor/backend/cuda ;;
    sampling) printf '%s\n' strata dsp/csp ;;
    fullgraph) printf '%s\n' strata fullgraph ;;
    comm) printf '%s\n' strata-commbench comm/gpushm ;;
    dp-step) printf '%s\n' strata train/dpbench comm/gpushm ;;
    dsp-variants) printf '%s\n' strata dsp/engine ;;
    dsp-speed | dsp-papers | dsp-run | dsp-setup | papers-* | world) printf '%s\n' strata ;;
    ab) printf '%s\n' strata fullgraph ;;
    pinned-ab) printf '%s\n' strata ;;
    hetero-link) printf '%s\n' strata sample/gpusample ;;
    quick) for s in "${quick_sets[@]}"; do needs "$s"; done ;;
    all) for s in "${all_sets[@]}"; do needs "$s"; done ;;
  esac
}

# artifact WORD: the file in .gpu/bin that a word of `needs` names.
artifact() {
  case $1 in
    strata | strata-commbench) echo "$1" ;;
    *) echo "${1//\//_}.test" ;;
  esac
}

# min_gpus SET: the GPUs below which SET is skipped.
min_gpus() {
  case $1 in
    test | quick | all | papers-gen) echo 0 ;;
    comm | dp-step) echo 2 ;;
    papers-4) echo 4 ;;
    papers-stall) echo 2 ;;
    # 2 machines x 1 GPU (WORLD_FG_MACHINES=0/1) needs only 2.
    world) if [ "${WORLD_FG_MACHINES:-}" = 0/1 ]; then echo 2; else echo 4; fi ;;
    *) echo 1 ;;
  esac
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
indent() { sed 's/^/   /'; }
build_id() { head -1 "$bin/build.txt" 2>/dev/null || echo "unknown build"; }
mib() { du -sm "$@" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }

# ---------------------------------------------------------------- here

build() {
  local sets=("$@") s w f src=$root stamp words bad=()
  [ $# -gt 0 ] || sets=(all)
  for s in "${sets[@]}"; do known "$s" || usage "build: no set '$s'"; done
  mapfile -t words < <(for s in "${sets[@]}"; do needs "$s"; done | sort -u)
  stamp=$(git rev-parse --short HEAD) || return 1
  local dirty
  dirty=$(git status --porcelain --untracked-files=no)
  if [ "${GPU_BUILD_TREE:-${DSP_BUILD_TREE:-0}}" = 1 ]; then
    [ -z "$dirty" ] || stamp+=+dirty
    echo "building the working tree ($stamp)"
  else
    src=$(mktemp -d) || return 1
    git archive HEAD | tar -x -C "$src" || { rm -rf "$src"; return 1; }
    echo "building HEAD $stamp"
    [ -z "$dirty" ] || echo "note: the uncommitted changes are not in this build (GPU_BUILD_TREE=1 builds them)"
  fi
  rm -rf "$bin" "$gpu/all.tar.xz" "$gpu/datasets"
  mkdir -p "$bin"
  for w in "${words[@]}"; do
    echo "build $w"
    local how=(test -c) pkg=./$w
    case $w in
      strata) how=(build) pkg=./cmd/strata ;;
      strata-commbench) how=(build) pkg=./comm/commbench/cmd/strata-commbench ;;
    esac
    (cd "$src" && CGO_ENABLED=0 go "${how[@]}" -trimpath -ldflags='-s -w' -o "$bin/$(artifact "$w")" "$pkg") || bad+=("$w")
  done
  [ "$src" = "$root" ] || rm -rf "$src"
  printf '%s\n' "$stamp" "built $(date -u '+%F %H:%M') UTC with $(go env GOVERSION)" "sets: ${sets[*]}" >"$bin/build.txt"
  copy_inputs "${words[@]}"
  local size
  size=$(mib "$gpu")
  echo "size of .gpu: $size MiB"
  [ "$size" -lt 64 ] || [ -n "${packing:-}" ] ||
    echo "over the 64 MiB a call carries: \`scripts/gpu.sh pack ${sets[*]}\`, then carry [\".gpu/all.tar.xz\"]"
  for f in "$gpu"/*; do
    case ${f##*/} in bin | datasets | parts | logs | all.tar.xz) ;; *) echo "note: .gpu also holds ${f##*/} (carried with .gpu)" ;; esac
  done
  [ ${#bad[@]} = 0 ] || { echo "FAILED to build: ${bad[*]}"; return 1; }
}

# base REV: strata and the fullgraph benchmark of git REV into .gpu/base.
base() {
  [ $# = 1 ] || usage "base: give one git revision"
  local rev src
  rev=$(git rev-parse --short "$1^{commit}") || return 1
  src=$(mktemp -d) || return 1
  git archive "$rev" | tar -x -C "$src" || { rm -rf "$src"; return 1; }
  rm -rf "$gpu/base"
  mkdir -p "$gpu/base"
  echo "building base $rev"
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$gpu/base/strata" ./cmd/strata &&
    CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$gpu/base/fullgraph.test" ./fullgraph) || { rm -rf "$src"; return 1; }
  rm -rf "$src"
  printf '%s\n' "$rev" "built $(date -u '+%F %H:%M') UTC with $(go env GOVERSION)" >"$gpu/base/build.txt"
  echo "size of .gpu: $(mib "$gpu") MiB"
}

# copy_inputs WORD...: what the tests read but do not find on the GPU host:
# CiteSeer for the parity test (Cora is built in), partitions from $FG_PARTS.
copy_inputs() {
  local shared=${STRATA_DATASETS:-$root/../shared/datasets} k
  if printf '%s\n' "$@" | grep -qx train/gputrain; then
    if [ -d "$shared/citeseer" ]; then
      mkdir -p "$gpu/datasets" && cp -r "$shared/citeseer" "$gpu/datasets/" && echo "copied citeseer"
    else
      echo "citeseer not found under $shared: the parity test will skip it"
    fi
  fi
  [ -n "${FG_PARTS:-}" ] || return 0
  rm -rf "$gpu/parts" && mkdir -p "$gpu/parts"
  for k in 2 4 8; do
    [ -f "$FG_PARTS/p$k/partition.bin" ] && cp "$FG_PARTS/p$k/partition.bin" "$gpu/parts/p$k.bin" && echo "partition file p$k"
  done
  return 0
}

pack() {
  packing=1 build "$@" || return 1
  local files=(bin/build.txt)
  # build.txt first: the GPU host reads it without unpacking the rest.
  mapfile -t -O 1 files < <(cd "$gpu" && find bin datasets parts -type f ! -path bin/build.txt 2>/dev/null | sort)
  tar -C "$gpu" -cf - "${files[@]}" | xz -T0 -6 >"$gpu/all.tar.xz" || return 1
  echo "packed .gpu/all.tar.xz: $(mib "$gpu/all.tar.xz") MiB; carry [\".gpu/all.tar.xz\"]"
}

# ----------------------------------------------------------- GPU host

# unpack: .gpu/all.tar.xz into .gpu when .gpu/bin holds another build
# (a warm machine keeps the .gpu/bin of earlier calls).
unpack() {
  local a=$gpu/all.tar.xz want
  [ -f "$a" ] || return 0
  want=$(tar -xJOf "$a" --occurrence=1 bin/build.txt 2>/dev/null)
  [ -n "$want" ] && [ "$want" = "$(cat "$bin/build.txt" 2>/dev/null)" ] && return 0
  rm -rf "$bin" "$gpu/datasets" "$gpu/parts"
  tar -xJf "$a" -C "$gpu" && echo "unpacked all.tar.xz: build $(build_id)"
}

env_setup() {
  export NCCL_NVLS_ENABLE=0 # NVLink multicast off (the device machines' KINDS.md)
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  # Connect NCCL peers when communicators open, not inside the first
  # operation, and load kernels eagerly: no connection setup or lazy
  # module load while other devices wait in a collective.
  export NCCL_RUNTIME_CONNECT=${NCCL_RUNTIME_CONNECT:-0}
  export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
  export STRATA_KERNEL_CACHE=${STRATA_KERNEL_CACHE:-/tmp/strata-kcache}
  if [ -z "${STRATA_DATASETS:-}" ] && [ -d "$gpu/datasets" ]; then
    export STRATA_DATASETS=$gpu/datasets
  fi
  ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
}

header() {
  echo "== $(date -u '+%F %H:%M') UTC, build $(build_id), sets: $*"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
  [ "$ngpus" -lt 2 ] || nvidia-smi topo -m 2>/dev/null | head -8
  echo "cpus $(nproc)"
  [ -x "$bin/strata" ] && "$bin/strata" info >"$logs/strata-info.txt" 2>&1 && head -30 "$logs/strata-info.txt"
  return 0
}

# save_logs: the call's summary.txt and gpu-logs.tgz into $OUT (at most 8
# files come back from there), after every set: a call cut off at its
# limit still returns the sets it finished.
save_logs() {
  [ -n "${OUT:-}" ] || return 0
  case $logs in "$OUT" | "$OUT"/*) return 0 ;; esac
  cp "$logs/summary.txt" "$OUT/" 2>/dev/null
  tar -czf "$OUT/gpu-logs.tgz" -C "$logs" . 2>/dev/null
  return 0
}

# check RC WHAT: marks the set failed unless RC is 0.
check() {
  [ "$1" = 0 ] && return 0
  setfail=1
  echo "   ! $2 failed (rc=$1)"
  return 1
}

# run_set SET: SET's function with its own log folder, unless its
# binaries are missing or it needs more GPUs than are visible.
run_set() {
  local set=$1 w missing=() t0
  case $set in quick | all) "set_$set"; return ;; esac
  echo
  echo "=== $set (build $(build_id), $ngpus GPUs, $(date -u '+%F %H:%M') UTC)"
  for w in $(needs "$set"); do
    # test runs the packages that were built (GPU_TEST_PKGS at build time).
    [[ $set == test && $w != strata ]] && continue
    [ -x "$bin/$(artifact "$w")" ] || missing+=("$(artifact "$w")")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "   skipped: .gpu/bin lacks ${missing[*]} (scripts/gpu.sh build $set)"
    return 1
  fi
  if [ "$ngpus" -lt "$(min_gpus "$set")" ]; then
    echo "   skipped: needs $(min_gpus "$set") GPUs, $ngpus visible"
    return 0
  fi
  setlogs=$logs/$set setfail=0 ran=() rows=() t0=$(now)
  mkdir -p "$setlogs"
  "set_${set//-/_}"
  echo "=== $set: $([ $setfail = 0 ] && echo ok || echo FAILED), $(since "$t0")s"
  save_logs
  return $setfail
}

run_sets() {
  local s rc=0
  for s; do run_set "$s" || rc=1; done
  return $rc
}

host() {
  call_start=$(now) # the papers sets' PAPERS_BUDGET counts from here
  logs=${LOGS:-${DSP_LOGS:-}}
  if [ -z "$logs" ]; then
    if [ -n "${OUT:-}" ]; then logs=/tmp/gpulogs; else logs=$gpu/logs; fi
    rm -rf "$logs" # a warm machine keeps earlier calls' logs
  fi
  mkdir -p "$logs"
  declare -gA tested=() epoch=() acc=() first=()
  {
    unpack || exit 1
    env_setup
    header "$@"
    local failed=() s
    for s; do run_set "$s" || failed+=("$s"); done
    echo
    echo "== done: $*; ${#failed[@]} with failures${failed[*]:+: ${failed[*]}}"
    [ ${#failed[@]} = 0 ]
  } 2>&1 | tee "$logs/summary.txt"
  local rc=${PIPESTATUS[0]}
  save_logs
  return "$rc"
}

# ------------------------------------------------------------- runners

# gotest NAME DIR LIMIT ARGS...: DIR's test binary with ARGS, run in DIR
# (its testdata), killed after LIMIT seconds; output in $setlogs/NAME.log.
gotest() {
  local name=$1 dir=$2 lim=$3
  shift 3
  (cd "$root/$dir" && timeout -k 10 "$lim" "$bin/$(artifact "$dir")" -test.timeout "$((lim - 5))s" "$@") >"$setlogs/$name.log" 2>&1
}

# benchlines LOG...: the benchmark results and failures of test logs.
benchlines() { grep -hE -- '^Benchmark|--- FAIL|panic:|^FAIL' "$@" | indent; }

# test_pkg DIR PATTERN LIMIT [ENV=VALUE...]: DIR's tests matching PATTERN
# (then $GPU_TEST_FLAGS), failures and skips, and a row of the table.
test_pkg() {
  local dir=$1 pat=$2 lim=${GPU_TEST_TIMEOUT:-$3} name=${1//\//_} t0 rc row
  shift 3
  if [ ! -x "$bin/$name.test" ]; then
    rows+=("$(printf '%-22s not in this build' "$dir")")
    echo "   ${rows[-1]}"
    return 0
  fi
  [ $# = 0 ] || local -x "$@"
  t0=$(now)
  # shellcheck disable=SC2086 # GPU_TEST_FLAGS is a list of flags
  gotest "$name" "$dir" "$lim" -test.v -test.run "$pat" ${GPU_TEST_FLAGS:-}
  rc=$?
  tested[$dir]=$rc
  local log=$setlogs/$name.log
  grep -E -- '--- (FAIL|SKIP)|^\s+\S+_test.go:[0-9]+:|^Benchmark|panic:|^FAIL' "$log" | tail -30 | indent
  row=$(printf '%-22s rc=%-3s pass=%-4s fail=%-3s skip=%-3s %6ss' "$dir" "$rc" "$(grep -c -- '--- PASS' "$log")" \
    "$(grep -c -- '--- FAIL' "$log")" "$(grep -c -- '--- SKIP' "$log")" "$(since "$t0")")
  rows+=("$row")
  echo "   $row"
  check "$rc" "$dir tests"
}

# test_row DIR: DIR's row of test_pkgs, through test_pkg.
test_row() {
  local row dir pat lim envs
  for row in "${test_pkgs[@]}"; do
    read -r dir pat lim envs <<<"$row"
    # shellcheck disable=SC2086 # envs is a list of settings
    [ "$dir" = "$1" ] && test_pkg "$dir" "$pat" "$lim" $envs
  done
}

# gpushm_suite: the gpushm suites on 2 GPUs, once a call; when they fail,
# the rest of the call runs with gpushm's device path off.
gpushm_suite() {
  [ -n "${tested[comm/gpushm]:-}" ] || GPU_TEST_TIMEOUT=${DP_TEST_TIMEOUT:-${GPU_TEST_TIMEOUT:-}} test_row comm/gpushm
  if [ "${tested[comm/gpushm]}" != 0 ] && [ "${STRATA_GPUSHM_DEVICE_MAX:-}" != -1 ]; then
    export STRATA_GPUSHM_DEVICE_MAX=-1
    echo "   gpushm's device path failed its tests: it is off for the rest of this call"
  fi
}

# gen_data PRESET DIR: `strata gen` into DIR unless it holds a dataset.
gen_data() {
  [ -f "$2/manifest.json" ] && return 0
  local t0
  t0=$(now)
  if ! "$bin/strata" gen "$2" --preset "$1" --quiet >"$setlogs/gen-$1.log" 2>&1; then
    tail -5 "$setlogs/gen-$1.log" | indent
    check 1 "gen $1"
    return 1
  fi
  echo "   gen $1 into $2: $(since "$t0")s"
}

# stamp LOG TIMES: copies its input to LOG, and the lines that start with
# "epoch " to TIMES after the seconds since stamp started.
stamp() {
  local t0=${EPOCHREALTIME/[.,]/} line t
  : >"$2"
  while IFS= read -r line; do
    printf '%s\n' "$line"
    if [[ $line == "epoch "* ]]; then
      t=$((${EPOCHREALTIME/[.,]/} - t0))
      printf '%d.%d %s\n' $((t / 1000000)) $((t % 1000000 / 100000)) "$line" >>"$2"
    fi
  done >"$1"
}

# train_run NAME ARGS...: `strata train` on $ds with the products model
# (3-layer GraphSAGE-mean 256, batch 1024 per device, fanouts 15,10,5,
# evaluated after the last epoch) and ARGS, stopped after
# $DSP_RUN_TIMEOUT seconds with SIGQUIT (Go prints every goroutine).
# Prints its epochs and results; records its epoch time, test accuracy
# and the seconds from its start to the end of its first epoch.
train_run() {
  local name=$1 out=$setlogs/$1 t0 rc
  shift
  t0=$(now)
  timeout -s QUIT -k 10 "${DSP_RUN_TIMEOUT:-150}" "$bin/strata" train --dataset "$ds" --model sage --layers 3 --hidden 256 \
    --batch-size 1024 --fanouts 15,10,5 --select last --report "$out.json" "$@" 2>&1 >"$out.out" | stamp "$out.log" "$out.times"
  rc=${PIPESTATUS[0]}
  train_result "$name" "$rc" "$t0" "$*"
}

# train_result NAME RC T0 WHAT: records and prints a run's results from
# $setlogs/NAME.{out,log,times} (train_run's files); RC is its exit status.
train_result() {
  local name=$1 rc=$2 t0=$3 out=$setlogs/$1
  ran+=("$name")
  epoch[$name]=$(awk '$1 == "epoch" && $2 == "time" { sub(/s$/, "", $3); print $3 }' "$out.out")
  # shellcheck disable=SC2034 # read through mean's reference
  acc[$name]=$(awk '$1 == "test" && $2 == "accuracy" { print $3 }' "$out.out")
  first[$name]=$(awk 'NR == 1 { print $1 }' "$out.times")
  echo "== $name ($4): rc=$rc wall=$(since "$t0")s, first epoch done at ${first[$name]:-?}s"
  grep -E '^epoch |train time' "$out.log" | indent
  grep -E 'accuracy|pipeline|epoch time|^time' "$out.out" | indent
  if [ "$rc" != 0 ]; then
    grep -E -A30 '^failure:' "$out.log" | head -40 | sed 's/^/   ! /'
    grep -vE '^(goroutine |\s|$|created by)' "$out.log" | tail -4 | sed 's/^/   ! /'
  fi
  check "$rc" "$name"
}

# wants NAME...: whether $DSP_ONLY selects one of the runs NAME...
wants() {
  local n
  for n; do [[ $n =~ ${DSP_ONLY:-.} ]] && return 0; done
  return 1
}

# dsp_run NAME GPUS EPOCHS [FLAGS...]: a DSP engine run (--devices) on
# GPUS, a count or a list such as cuda:2,3; skipped when NAME does not
# match $DSP_ONLY or fewer GPUs are visible.
dsp_run() {
  local name=$1 devs=$2 e=$3 k i
  shift 3
  wants "$name" || return 0
  if [[ $devs != cuda:* ]]; then
    k=$devs devs=cuda:0
    for ((i = 1; i < k; i++)); do devs+=,$i; done
  fi
  k=$(($(tr -cd , <<<"$devs" | wc -c) + 1))
  if [ "$k" -gt "$ngpus" ]; then
    echo "== $name: skipped, needs $k GPUs ($ngpus visible)"
    return 0
  fi
  train_run "$name" --devices "$devs" --epochs "$e" --partition "${DSP_PARTITION:-range}" --eval-every 1000 \
    --stall-timeout "${DSP_STALL:-45s}" "$@"
}

# single_run NAME EPOCHS: the single-GPU trainer (train.Run with gputrain).
single_run() {
  wants "$1" || return 0
  train_run "$1" --device cuda:0 --epochs "$2"
}

# mean MAP GLOB: the mean of MAP's values (epoch, acc, first) for the runs
# whose names match GLOB, or n/a.
mean() {
  local -n m=$1
  local k v=()
  for k in "${!m[@]}"; do
    # shellcheck disable=SC2053 # GLOB is a pattern
    [[ $k == $2 && -n ${m[$k]} ]] && v+=("${m[$k]}")
  done
  [ ${#v[@]} -gt 0 ] || { echo n/a; return; }
  printf '%s\n' "${v[@]}" | awk '{ s += $1 } END { printf "%.4f", s / NR }'
}

# ratio A B: the mean epoch time of the runs matching A over B's.
ratio() {
  local a b
  a=$(mean epoch "$1") b=$(mean epoch "$2")
  if [ "$a" = n/a ] || [ "$b" = n/a ]; then echo n/a; return; fi
  awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", a / b }'
}

# -------------------------------------------------------------- the sets

set_test() {
  local row dir rest
  for row in "${test_pkgs[@]}"; do
    read -r dir rest <<<"$row"
    [[ $dir =~ ${GPU_TEST_PKGS:-.} ]] && test_row "$dir"
  done
  local gpu_name
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  echo "   -- summary${gpu_name:+, $gpu_name}"
  printf '   %s\n' "${rows[@]}"
}

set_parity() {
  local ds=$data e=${DSP_ACC_EPOCHS:-5} he=${DSP_HARD_EPOCHS:-10} seed prec sfx hard=() line=
  for seed in ${DSP_HARD_SEEDS:-1 2}; do
    for prec in ${DSP_HARD_PRECISIONS:-fp32}; do
      sfx=${prec/#fp32/} sfx=${sfx:+-$sfx}
      hard+=("h4$sfx-s$seed" "h1$sfx-s$seed")
    done
  done
  wants gputrain && test_pkg train/gputrain 'AccuracyParity|SampledMatchesCPU' 300
  if wants acc4 acc1; then
    gen_data products "$ds" || return
    dsp_run acc4 4 "$e" --eval-every 1
    single_run acc1 "$e"
  fi
  ds=${DSP_HARD:-/tmp/products-hard}
  if wants "${hard[@]}"; then
    gen_data products-hard "$ds" || return
    for seed in ${DSP_HARD_SEEDS:-1 2}; do
      for prec in ${DSP_HARD_PRECISIONS:-fp32}; do
        sfx=${prec/#fp32/} sfx=${sfx:+-$sfx}
        dsp_run "h4$sfx-s$seed" 4 "$he" --seed "$seed" --precision "$prec"
        dsp_run "h1$sfx-s$seed" 1 "$he" --seed "$seed" --precision "$prec"
      done
    done
  fi
  for prec in ${DSP_HARD_PRECISIONS:-fp32}; do
    sfx=${prec/#fp32/} sfx=${sfx:+-$sfx}
    line+=" $prec: 4 GPUs $(mean acc "h4$sfx-s*"), 1 GPU $(mean acc "h1$sfx-s*");"
  done
  echo "   -- test accuracy: products, $e epochs: 4 GPUs $(mean acc acc4), single-GPU trainer $(mean acc acc1);" \
    "products-hard, $he epochs, seeds ${DSP_HARD_SEEDS:-1 2}:$line"
}

set_single_gpu() {
  gen_data products "$data" || return
  local -x STRATA_BENCH_DATASET=$data STRATA_BENCH_PROFILE=${STRATA_BENCH_PROFILE:-hostblocks-syncloss,pipelined-epochloss}
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | indent
  gotest epoch sample/gpusample 540 -test.run '^$' -test.v -test.bench "${BENCH_EPOCH:-SampleEpochDevice|TrainEpochGPU}" \
    -test.benchtime "${BENCH_TIME:-3x}"
  check $? "epoch benchmarks"
  grep -E -- '^\s+\S+_test.go:[0-9]+:|^\s+(op|profile|[a-z_0-9 ]+ +[0-9]+ +[0-9.]+ +[0-9.]+%)' "$setlogs/epoch.log" | head -80
  benchlines "$setlogs/epoch.log"
  if [ -z "${BENCH_NO_GATHER:-}" ]; then
    gotest gather feature 300 -test.run '^$' -test.bench Gather -test.benchtime 20x
    check $? "gather benchmarks"
    benchlines "$setlogs/gather.log"
  fi
  if [ -z "${BENCH_NO_TRAIN:-}" ]; then
    local ds=$data
    single_run train 2
  fi
}

set_kernels() {
  # STRATA_BENCH_DATASET empty: BenchmarkSpMMVariants skips here.
  STRATA_BENCH_DATASET='' gotest kernels tensor/backend/cuda "${KERNEL_TIMEOUT:-300}" -test.run '^$' -test.bench "${KERNEL_BENCH:-.}" \
    -test.benchtime "${KERNEL_BENCH_TIME:-20x}"
  check $? "kernel benchmarks"
  benchlines "$setlogs/kernels.log"
  gen_data products "$data" || return
  local -x STRATA_BENCH_DATASET=$data
  [ -z "${FG_ORDER:-}" ] || local -x STRATA_BENCH_ORDER=$gpu/parts/p$FG_ORDER.bin
  gotest spmm tensor/backend/cuda "${FG_TIMEOUT:-240}" -test.run '^$' -test.v -test.benchtime 1x -test.bench SpMMVariants
  check $? "SpMM variants"
  grep -E -- 'spmmx_test.go|--- FAIL|panic:' "$setlogs/spmm.log" | sed 's/^ *spmmx_test.go:[0-9]*: //' | indent
}

# epoch_secs REPORT: the seconds of the report's first epoch.
epoch_secs() { grep -o '"seconds": *[0-9.e+-]*' "$1" 2>/dev/null | head -1 | awk '{ printf "%.2f", $2 }'; }

# hetero-link: link prediction epochs on 1 and 4 GPUs against the node
# classification epoch; typed sampling throughput, CPU vs GPU vs erased.
set_hetero_link() {
  local scale=${LINK_SCALE:-0.1} ds
  ds=$data
  [ "$scale" = 1 ] || ds=/tmp/products-s$scale
  if [ ! -f "$ds/manifest.json" ]; then
    local t0
    t0=$(now)
    if ! "$bin/strata" gen "$ds" --preset products --scale "$scale" --quiet >"$setlogs/gen-link.log" 2>&1; then
      tail -5 "$setlogs/gen-link.log" | indent
      check 1 "gen products --scale $scale"
      return
    fi
    echo "   gen products --scale $scale into $ds: $(since "$t0")s"
  fi
  local -x DSP_RUN_TIMEOUT=${LINK_TIMEOUT:-240}
  local nc link1 link4=n/a
  train_run nc-1 --device cuda:0 --epochs 1 --eval sampled
  nc=$(epoch_secs "$setlogs/nc-1.json")
  train_run link-1 --task link --device cuda:0 --epochs 1 --batch-size "${LINK_BATCH:-4096}" --lr "${LINK_LR:-0.001}"
  link1=$(epoch_secs "$setlogs/link-1.json")
  if [ "$ngpus" -ge 4 ]; then
    # Not train_run: a build whose link runner refuses --devices is
    # reported, not failed.
    timeout -s QUIT -k 10 "$DSP_RUN_TIMEOUT" "$bin/strata" train --dataset "$ds" --model sage --layers 3 --hidden 256 \
      --fanouts 15,10,5 --select last --task link --devices cuda:0,1,2,3 --epochs 1 --batch-size "${LINK_BATCH:-4096}" --lr "${LINK_LR:-0.001}" \
      --report "$setlogs/link-4.json" >"$setlogs/link-4.out" 2>"$setlogs/link-4.log"
    local rc=$?
    if [ $rc = 2 ] && grep -q 'devices' "$setlogs/link-4.log"; then
      echo "== link-4: not built: $(grep -m1 'devices' "$setlogs/link-4.log")"
      link4="not built"
    else
      grep -E '^epoch ' "$setlogs/link-4.log" | indent
      check "$rc" "link-4" && link4=$(epoch_secs "$setlogs/link-4.json")
    fi
  else
    echo "== link-4: skipped, needs 4 GPUs ($ngpus visible)"
  fi
  echo "   epoch seconds on $ds: node classification 1 GPU $nc; link 1 GPU $link1, 4 GPUs $link4"

  local hn=${HETERO_NODES:-2000000} hd
  hd=${HETERO_DATA:-/tmp/hetero-$hn}
  if [ ! -f "$hd/manifest.json" ]; then
    local t0
    t0=$(now)
    if ! "$bin/strata" gen "$hd" --preset hetero --nodes "$hn" --quiet >"$setlogs/gen-hetero.log" 2>&1; then
      tail -5 "$setlogs/gen-hetero.log" | indent
      check 1 "gen hetero --nodes $hn"
      return
    fi
    echo "   gen hetero --nodes $hn into $hd: $(since "$t0")s"
  fi
  STRATA_BENCH_HETERO=$hd STRATA_BENCH_BATCHES=${BENCH_BATCHES:-100} gotest hetero-sample sample/gpusample "${HETERO_TIMEOUT:-300}" \
    -test.run '^$' -test.v -test.bench HeteroSample -test.benchtime "${BENCH_TIME:-3x}"
  check $? "BenchmarkHeteroSample"
  grep -E -- '^\s+hetero_bench_test.go:[0-9]+:' "$setlogs/hetero-sample.log" | indent
  benchlines "$setlogs/hetero-sample.log"
  local -x DSP_RUN_TIMEOUT=${LINK_TIMEOUT:-240}
  timeout -s QUIT -k 10 "$DSP_RUN_TIMEOUT" "$bin/strata" train --dataset "$hd" --model hsage --device cuda:0 --epochs 1 \
    --add-reverse --batch-size 1024 --report "$setlogs/hsage-1.json" >"$setlogs/hsage-1.out" 2>"$setlogs/hsage-1.log"
  check $? "hsage epoch on cuda:0" || tail -5 "$setlogs/hsage-1.log" | indent
  grep -E '^epoch |sampl' "$setlogs/hsage-1.log" "$setlogs/hsage-1.out" | indent
  local hsage4=n/a
  if [ "$ngpus" -ge 4 ]; then
    # The same flags on 4 GPUs (collective typed sampling, NCCL); a build
    # whose typed runner refuses --devices is reported, not failed.
    timeout -s QUIT -k 10 "$DSP_RUN_TIMEOUT" "$bin/strata" train --dataset "$hd" --model hsage --devices cuda:0,1,2,3 --epochs 1 \
      --add-reverse --batch-size 1024 --report "$setlogs/hsage-4.json" >"$setlogs/hsage-4.out" 2>"$setlogs/hsage-4.log"
    local rc=$?
    if [ $rc = 2 ] && grep -q 'devices' "$setlogs/hsage-4.log"; then
      echo "== hsage-4: not built: $(grep -m1 'devices' "$setlogs/hsage-4.log")"
      hsage4="not built"
    else
      grep -E '^epoch |^communication|sampl' "$setlogs/hsage-4.log" "$setlogs/hsage-4.out" | indent
      check "$rc" "hsage epoch on cuda:0,1,2,3" && hsage4=$(epoch_secs "$setlogs/hsage-4.json")s
      [ "$rc" = 0 ] || tail -5 "$setlogs/hsage-4.log" | indent
    fi
  else
    echo "== hsage-4: skipped, needs 4 GPUs ($ngpus visible)"
  fi
  echo "   hsage epoch (GPU typed sampling, batch 1024 per device): cuda:0 $(epoch_secs "$setlogs/hsage-1.json")s, cuda:0,1,2,3 $hsage4"
}

set_sampling() {
  gen_data products "$data" || return
  STRATA_BENCH_DATASET=$data gotest sampling dsp/csp "${SAMPLING_TIMEOUT:-360}" -test.run '^$' -test.v \
    -test.bench "${SAMPLING_BENCH:-EpochProducts|WalkProducts}" -test.benchtime "${BENCH_TIME:-3x}"
  check $? "sampler benchmarks"
  benchlines "$setlogs/sampling.log"
}

set_fullgraph() {
  gen_data products "$data" || return
  local lim=${FG_TIMEOUT:-300}
  local -x STRATA_BENCH_DATASET=$data STRATA_BENCH_EPOCHS=${FG_EPOCHS:-5}
  [ ! -d "$gpu/parts" ] || local -x STRATA_BENCH_PARTS=$gpu/parts
  [ -z "${FG_PROFILE:-}" ] || local -x STRATA_BENCH_PROFILE=1
  [ -z "${FG_EVAL_EVERY:-}" ] || local -x STRATA_BENCH_EVAL_EVERY=$FG_EVAL_EVERY
  [ -z "${FG_COMM:-}" ] || local -x STRATA_BENCH_COMM=$FG_COMM
  [ -z "${FG_LR:-}" ] || local -x STRATA_BENCH_LR=$FG_LR
  [ -z "${FG_TF32:-}" ] || local -x STRATA_TEST_PRECISION=tf32
  [ -z "${FG_PRECISION:-}" ] || local -x STRATA_TEST_PRECISION=$FG_PRECISION
  [ -z "${FG_ORDER:-}" ] || local -x STRATA_BENCH_ORDER=$gpu/parts/p$FG_ORDER.bin
  gotest fullgraph fullgraph "$lim" -test.run '^$' -test.v -test.benchtime 1x -test.bench "${FG_BENCH:-ProductsSAGE}"
  check $? "BenchmarkProductsSAGE (epochs $STRATA_BENCH_EPOCHS)"
  grep -E -- '^\s+bench_test.go:[0-9]+:|^\s{4,}\S' "$setlogs/fullgraph.log" | grep -v -- '--- ' | head -80
  benchlines "$setlogs/fullgraph.log"
}

# commbench NAME LIMIT ARGS...: strata-commbench ARGS, text and JSON in
# $setlogs/NAME.*.
commbench() {
  local name=$1 lim=$2
  shift 2
  timeout "$lim" "$bin/strata-commbench" "$@" -json "$setlogs/$name.json" >"$setlogs/$name.txt" 2>&1
}

# gpushm_variants PREFIX "V..." LIMIT ARGS...: commbench with P2P off once
# per variant, a variant being comma-separated environment settings.
gpushm_variants() {
  local prefix=$1 list=$2 lim=$3 v k=0
  shift 3
  for v in $list; do
    k=$((k + 1))
    # shellcheck disable=SC2086 # a variant is a list of settings
    (export NCCL_P2P_DISABLE=1 ${v//,/ } && commbench "$prefix-$k" "$lim" "$@")
    check $? "gpushm $v"
    echo "   gpushm $v: $(grep -E 'MiB|KiB' "$setlogs/$prefix-$k.txt" | tr -s ' ' | tr '\n' ';')"
  done
}

set_comm() {
  gpushm_suite
  local sweep
  if [[ " ${COMM_SWEEPS:-wide gradient} " == *" wide "* ]]; then
    sweep=(-procs 2 -min 4096 -max "${COMM_MAX_BYTES:-268435456}" -factor 4 -budget 2147483648)
    NCCL_P2P_DISABLE=1 commbench bw-p2p-off 60 "${sweep[@]}" -backends gpushm,nccl,gpu-auto
    check $? "sweep, P2P off"
    commbench bw-p2p-on 40 "${sweep[@]}" -backends nccl,gpu-auto
    check $? "sweep, P2P on"
    gpushm_variants bw-var "${COMM_VARIANTS-STRATA_GPUSHM_CHUNK_BYTES=8388608,STRATA_GPUSHM_WORKERS=12 STRATA_GPUSHM_CHUNKS=8}" 25 \
      -procs 2 -min 16777216 -max "${COMM_MAX_BYTES:-268435456}" -factor 4 -budget 2147483648 -backends gpushm
    wide_table "$setlogs/bw-p2p-off.json" "$setlogs/bw-p2p-on.json" || cat "$setlogs/bw-p2p-off.txt" "$setlogs/bw-p2p-on.txt"
  fi
  if [[ " ${COMM_SWEEPS:-wide gradient} " == *" gradient "* ]]; then
    # From the gradient of the 3-layer SAGE 256 (827,580 bytes) by factors of 4.
    sweep=(-procs 2 -min 827580 -max "${DP_SWEEP_MAX:-13241280}" -factor 4 -budget 268435456)
    NCCL_P2P_DISABLE=1 commbench grad-p2p-off 60 "${sweep[@]}" -backends gpushm,nccl
    check $? "gradient-size sweep, P2P off"
    gpushm_variants grad-var "${DP_SWEEP_VARIANTS-STRATA_GPUSHM_DEVICE_MAX=-1}" 40 "${sweep[@]}" -backends gpushm
    grep -vE '^\s*$' "$setlogs/grad-p2p-off.txt" | grep -iE 'MiB|KiB|GB|fail|error' | cut -c1-200 | head -30 | indent
  fi
}

# wide_table OFF.json ON.json: gpushm against NCCL per size, P2P off and on.
wide_table() {
  python3 - "$@" <<'PY'
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

# dp-step: BenchmarkDataParallelStep (3-layer SAGE 256, batch 1024 per
# GPU, fanouts 15,10,5, Adam; $STRATA_DP_STEPS timed steps; train/dpbench's
# variants or $STRATA_DP_BENCH_VARIANTS).
set_dp_step() {
  gpushm_suite
  gen_data products "$data" || return
  STRATA_BENCH_DATASET=$data gotest dpstep train/dpbench "${DP_TIMEOUT:-200}" -test.run '^$' -test.bench DataParallelStep \
    -test.benchtime 1x -test.v
  check $? "data-parallel step"
  grep -E -- '^verdict|_ms/step|--- FAIL|panic:|^FAIL' "$setlogs/dpstep.log" | head -20 | indent
  grep -E -- '_test.go:[0-9]+:' "$setlogs/dpstep.log" | sed -E 's/ losses [^;]*;/;/; s/phases \(us\) //' | cut -c1-400 | head -40
}

set_dsp_speed() {
  local ds=$data e=${DSP_EPOCHS:-3} i pairs=()
  gen_data products "$ds" || return
  for i in $(seq "${DSP_REPEAT:-3}"); do
    dsp_run "d4-r$i" 4 "$e"
    dsp_run "d1-r$i" 1 "$e"
    pairs+=("$(ratio "d1-r$i" "d4-r$i")")
  done
  dsp_run d4-part 4 "$e" --cache-policy partition
  dsp_run d4-off 4 "$e" --no-pipeline
  dsp_run d2 2 "$e"
  DSP_PARTITION=multilevel dsp_run d4-ml 4 "$e"
  echo "   -- s/epoch: 1 GPU $(mean epoch 'd1-r*'), 2 GPUs $(mean epoch d2), 4 GPUs $(mean epoch 'd4-r*')," \
    "multilevel $(mean epoch d4-ml), partitioned cache $(mean epoch d4-part), pipeline off $(mean epoch d4-off)"
  echo "   speed-up 1->4 $(ratio 'd1-r*' 'd4-r*') (pairs: ${pairs[*]}), multilevel $(ratio 'd1-r*' d4-ml)," \
    "partitioned cache $(ratio 'd1-r*' d4-part); 1->2 $(ratio 'd1-r*' d2); pipeline on vs off, 4 GPUs $(ratio d4-off 'd4-r*')"
}

# pinned-ab: the pinned cuBLASLt products (docs/cuda.md) against cuBLAS's
# per-shape choice (STRATA_CUBLAS_PINNED=0), one binary, alternating.
set_pinned_ab() {
  local ds=$data e=${DSP_EPOCHS:-3} i k p prec
  gen_data products "$ds" || return
  for i in $(seq "${DSP_REPEAT:-2}"); do
    for k in ${AB_GPUS:-1 4}; do
      for prec in ${PINNED_PRECISIONS:-fp32 bf16}; do
        for p in 0 1; do
          STRATA_CUBLAS_PINNED=$p dsp_run "p$p-$prec-d$k-r$i" "$k" "$e" --precision "$prec"
        done
      done
    done
  done
  for k in ${AB_GPUS:-1 4}; do
    for prec in ${PINNED_PRECISIONS:-fp32 bf16}; do
      echo "   -- $prec, $k GPU(s): s/epoch pinned $(mean epoch "p1-$prec-d$k-r*"), unpinned $(mean epoch "p0-$prec-d$k-r*");" \
        "unpinned/pinned $(ratio "p0-$prec-d$k-r*" "p1-$prec-d$k-r*")"
    done
  done
}

set_dsp_variants() {
  local ds=$data e=${DSP_EPOCHS:-3} k=${DSP_GPUS:-$((ngpus < 4 ? ngpus : 4))} w name
  local p=v$k
  gen_data products "$ds" || return
  DSP_ONLY='' dsp_run "$p" "$k" "$e" # the defaults, which every other run is compared with
  dsp_run "$p-full" "$k" "$e" --gpu-sampler full
  dsp_run "$p-part" "$k" "$e" --cache-policy partition
  dsp_run "$p-repl" "$k" "$e" --cache-policy replicate --cache-group 1
  dsp_run "$p-full-repl" "$k" "$e" --gpu-sampler full --cache-policy replicate --cache-group 1
  dsp_run "$p-budget" "$k" "$e" --cache 64MiB
  dsp_run "$p-presample" "$k" "$e" --cache 64MiB --hotness presample
  dsp_run "$p-uva" "$k" "$e" --cache 0
  dsp_run "$p-topo" "$k" "$e" --topology-cache "${DSP_TOPO:-128MiB}"
  dsp_run "$p-off" "$k" "$e" --no-pipeline
  dsp_run "$p-full-off" "$k" "$e" --gpu-sampler full --no-pipeline
  dsp_run "$p-sync" "$k" "$e" --sync-collectives
  dsp_run "$p-noprio" "$k" "$e" --no-stage-priority
  dsp_run "$p-nocoord" "$k" "$e" --no-coordinator
  dsp_run "$p-shared" "$k" "$e" --shared-stream
  for w in ${DSP_WORKERS:-2 3}; do dsp_run "$p-w$w" "$k" "$e" --sampler-workers "$w"; done
  dsp_run "$p-h64" "$k" "$e" --hidden 64
  dsp_run "$p-eval" "$k" "$e" --eval-every 1
  if wants evalbench; then
    STRATA_BENCH_DATASET=$ds gotest evalbench dsp/engine 300 -test.run '^$' -test.bench EvalFullGPU -test.benchtime 3x
    check $? "BenchmarkEvalFullGPU"
    benchlines "$setlogs/evalbench.log"
  fi
  echo "   -- s/epoch against $p ($(mean epoch "$p") s; above 1x is slower):"
  for name in "${ran[@]}"; do
    [ "$name" = "$p" ] || printf '   %-16s %-8s %s\n' "$name" "${epoch[$name]:-n/a}" "$(ratio "$name" "$p")"
  done
}

set_dsp_papers() {
  local ds=${DSP_PAPERS:-/tmp/papers-m} e=${DSP_EPOCHS:-3} cache=${DSP_CACHE:-1GiB} name
  gen_data papers-m "$ds" || return
  # The whole-graph evaluation of 11.1M nodes does not fit one GPU:
  # evaluate by sampled mini-batches.
  dsp_run p4-cache 4 "$e" --cache "$cache" --eval sampled
  dsp_run p4-uva 4 "$e" --cache 0 --eval sampled
  dsp_run p1-cache 1 "$e" --cache "$cache" --eval sampled
  echo "   -- cache vs UVA on 4 GPUs $(ratio p4-uva p4-cache), 4 GPUs vs 1 $(ratio p1-cache p4-cache); first epoch done at:"
  for name in "${ran[@]}"; do echo "   $name ${first[$name]:-?}s"; done
}

set_dsp_run() {
  local ds=$data
  gen_data products "$ds" || return
  # shellcheck disable=SC2086 # DSP_FLAGS is a list of flags
  DSP_ONLY='' dsp_run "${DSP_NAME:-custom}" "${DSP_DEVICES:-cuda:0,1}" "${DSP_EPOCHS:-3}" ${DSP_FLAGS:-}
}

# dsp-setup: the time from the start of `strata train` to its first batch
# on the papers shape, and its phases; the run is interrupted once its
# first batch is logged (the evaluation after the epoch is not timed here).
set_dsp_setup() {
  local ds=${DSP_SETUP_DATA:-/tmp/papers} k=${DSP_GPUS:-4} devs=cuda:0 i t0 pid out=$setlogs/setup
  if [ "$k" -gt "$ngpus" ]; then
    echo "   skipped: needs $k GPUs ($ngpus visible)"
    return 0
  fi
  for ((i = 1; i < k; i++)); do devs+=,$i; done
  gen_data "${DSP_SETUP_PRESET:-papers}" "$ds" || return
  t0=$(now)
  : >"$out.log" # no earlier call's line
  # shellcheck disable=SC2086 # DSP_FLAGS is a list of flags
  "$bin/strata" train --dataset "$ds" --devices "$devs" --partition range --eval sampled --epochs 1 ${DSP_FLAGS:-} \
    >"$out.out" 2>"$out.log" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '^first batch ' "$out.log"; then
      kill -INT "$pid"
      break
    fi
    if awk -v s="$(since "$t0")" -v m="${DSP_RUN_TIMEOUT:-300}" 'BEGIN { exit !(s > m) }'; then
      kill -QUIT "$pid"
      check 1 "no first batch within ${DSP_RUN_TIMEOUT:-300}s"
      break
    fi
    sleep 0.5
  done
  wait "$pid"
  echo "   $devs on $ds ($(build_id)):"
  grep -E '^(memory|training|first batch|failure|strata:)' "$out.log" | cut -c1-600 | indent
  grep -q '^first batch ' "$out.log" || check 1 "first batch"
}

# ------------------------------------------------ world (issue 16)

# world_wants NAME: whether $WORLD_ONLY (a regexp) selects the run NAME.
world_wants() { [[ $1 =~ ${WORLD_ONLY:-.} ]]; }

# world_left: the seconds a world run may take: $WORLD_RUN_TIMEOUT or what
# is left of $WORLD_BUDGET since the set started, whichever is less.
world_left() {
  awk -v l="${WORLD_RUN_TIMEOUT:-100}" -v b="${WORLD_BUDGET:-540}" -v s="$(since "$world_t0")" \
    'BEGIN { r = b - s; if (l < r) r = l; printf "%d", r }'
}

# world_devs I,J,..: the --devices of GPUs I,J,.. (visible numbering), or
# as many CPU devices with WORLD_CPU=1 (a dry run without GPUs).
world_devs() {
  if [ "${WORLD_CPU:-0}" = 1 ]; then
    echo "cpu:$(($(tr -cd , <<<"$1" | wc -c) + 1))"
  else
    echo "cuda:$1"
  fi
}

# world_free_port: a free TCP port on loopback (the store of a 2-launch job).
world_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# world_run NAME KIND [FLAGS...]: one run of the world set, stopped with
# SIGQUIT past world_left's seconds (Go prints every goroutine). KIND:
#   one:D       one process with --devices D
#   procs:N     `strata launch -n N`, each process --devices cuda:$LOCAL_RANK
#   machines:A/B  two `strata launch --nnodes 2` on 127.0.0.1 and .2, one
#               process each with GPUs A (machine 0) and B (machine 1) through
#               CUDA_VISIBLE_DEVICES, their own NCCL_HOSTID and STRATA_HOST_ID;
#               FLAGS may hold @M, replaced by M (0 or 1) per machine.
# FLAGS follow the products model's (train_run's) unless they hold
# --mode fullgraph. Skipped, failed, under 30 s of the budget left.
world_run() {
  local name=$1 kind=$2 out=$setlogs/$1 lim t0 rc rc1 port m m1 a b args=() f fl
  shift 2
  lim=$(world_left)
  if [ "$lim" -lt 30 ]; then
    echo "== $name: skipped, ${lim}s left of WORLD_BUDGET (${WORLD_BUDGET:-540}s); run it alone: WORLD_ONLY='^$name\$'"
    check 1 "$name (no time left)"
    return 1
  fi
  args=(train --model sage --layers 3 --hidden 256 --seed "${WORLD_SEED:-7}")
  [[ " $* " == *" --machine-dir "* ]] || args+=(--dataset "$ds") # the directory replaces it
  [[ " $* " == *" fullgraph "* ]] || args+=(--batch-size 1024 --fanouts "15,10,5" --select last)
  t0=$(now)
  case $kind in
    one:*)
      timeout -s QUIT -k 10 "$lim" "$bin/strata" "${args[@]}" --report "$out.json" "$@" --devices "${kind#one:}" \
        2>&1 >"$out.out" | stamp "$out.log" "$out.times"
      rc=${PIPESTATUS[0]}
      ;;
    procs:*)
      # The ranks' stdout (process 0's results) and stderr apart; the
      # other processes print one line each.
      # shellcheck disable=SC2016 # $LOCAL_RANK and $@ are the rank shell's
      timeout -k 20 "$((lim + 15))" "$bin/strata" launch --no-prefix -n "${kind#procs:}" -- \
        sh -c 'exec timeout -s QUIT -k 10 '"$lim"' "$@" --devices '"$(world_devs '$LOCAL_RANK')" \
        sh "$bin/strata" "${args[@]}" --report "$out.json" "$@" 2>&1 >"$out.out" | stamp "$out.log" "$out.times"
      rc=${PIPESTATUS[0]}
      ;;
    machines:*)
      port=$(world_free_port) || { check 1 "$name: no free port"; return 1; }
      a=${kind#machines:} b=${a#*/} a=${a%/*}
      for m in 1 0; do
        fl=()
        for f; do fl+=("${f//@M/$m}"); done
        local gpus=$a
        [ "$m" = 1 ] && gpus=$b
        # Machine m: its own host (STRATA_HOST_ID, NCCL_HOSTID: NCCL's
        # network transport between the machines) and loopback address.
        local envs=(STRATA_HOST_ID="world-m$m" NCCL_HOSTID="world-m$m" STRATA_COMM_HOST="127.0.0.$((m + 1))")
        [ "${WORLD_CPU:-0}" = 1 ] || envs+=(CUDA_VISIBLE_DEVICES="$gpus")
        local devs
        devs=$(world_devs "$(seq -s, 0 $(($(tr -cd , <<<"$gpus" | wc -c))))")
        if [ "$m" = 1 ]; then
          env "${envs[@]}" timeout -k 20 "$((lim + 15))" "$bin/strata" launch --no-prefix -n 1 --nnodes 2 --node-rank 1 \
            --master-addr 127.0.0.1 --master-port "$port" -- timeout -s QUIT -k 10 "$lim" \
            "$bin/strata" "${args[@]}" --report "$out-m1.json" "${fl[@]}" --devices "$devs" >"$out-m1.log" 2>&1 &
          m1=$!
        else
          env "${envs[@]}" timeout -k 20 "$((lim + 15))" "$bin/strata" launch --no-prefix -n 1 --nnodes 2 --node-rank 0 \
            --master-addr 127.0.0.1 --master-port "$port" -- timeout -s QUIT -k 10 "$lim" \
            "$bin/strata" "${args[@]}" --report "$out.json" "${fl[@]}" --devices "$devs" 2>&1 >"$out.out" | stamp "$out.log" "$out.times"
          rc=${PIPESTATUS[0]}
        fi
      done
      wait "$m1"
      rc1=$?
      [ "$rc" != 0 ] || rc=$rc1
      if [ "$rc1" != 0 ]; then
        echo "   ! machine 1 (rc=$rc1), its last lines:"
        awk '/^SIGQUIT/ { exit } { print }' "$out-m1.log" | grep -vE '^\s*$' | tail -6 | cut -c1-300 | sed 's/^/   ! /'
      fi
      ;;
  esac
  train_result "$name" "$rc" "$t0" "$kind $* (limit ${lim}s)"
  world_row "$name" "$kind" "$out.json"
}

# world_row NAME KIND REPORT: the run's row of the final table, from its
# report: seconds per epoch (the sampled engine: the epochs after the
# first; full-graph: the mean), network bytes per epoch (the sampled
# engine: every machine's bytes between machines; full-graph: the
# broadcasts and gradients sent, every link, and the broadcast bytes
# avoided), test accuracy.
world_row() {
  local r
  r=$(python3 - "$3" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("%-9s %-11s %-8s %s" % ("n/a", "n/a", "n/a", "-")); sys.exit()
def mib(b): return "%.1fMiB" % (b / 2**20)
acc = "%.4f" % r["test_accuracy"] if isinstance(r.get("test_accuracy"), (int, float)) else "n/a"
if r.get("mode") == "full":
    ep = r.get("epoch_comm") or []
    n = max(len(ep), 1)
    sent = sum(e.get("bytes_sent", 0) + e.get("grad_bytes_sent", 0) for e in ep) / n
    avoided = sum(e.get("bytes_avoided", 0) + e.get("grad_bytes_avoided", 0) for e in ep) / n
    c = r.get("comm") or {}
    print("%-9.4f %-11s %-8s %s (%.1f%%)" % (r.get("mean_epoch_seconds", float("nan")), mib(sent), acc,
          mib(avoided), 100 * c.get("avoided_fraction", 0)))
else:
    n = max(len(r.get("epochs") or []), 1)
    w = r.get("world") or {}
    pm = w.get("per_machine")
    if pm:
        net = sum(m.get("bytes", {}).get("network", 0) for m in pm)
    else:
        # One machine: process 0's counters (no bytes between machines).
        s = (r.get("metrics") or {}).get("summary", {}).get("bytes", {})
        net = sum(v.get("network", 0) for v in s.values())
    print("%-9.4f %-11s %-8s -" % ((r.get("device_run") or {}).get("steady_epoch_seconds", float("nan")), mib(net / n), acc))
PY
  )
  rows+=("$(printf '%-12s %-18s %s' "$1" "$2" "$r")")
}

# world: issue 16's runs of one job over processes and machines on 4 GPUs
# (products, 3-layer SAGE 256, batch 1024, fanouts 15,10,5).
set_world() {
  local ds=$data e=${WORLD_EPOCHS:-3} fe=${WORLD_FG_EPOCHS:-10} part=${WORLD_PARTITION:-multilevel} row
  world_t0=$(now)
  gen_data products "$ds" || return
  local s=(--epochs "$e" --partition "$part" --eval-every 1000 --stall-timeout "${DSP_STALL:-45s}")
  world_wants w1x4 && world_run w1x4 "one:$(world_devs 0,1,2,3)" "${s[@]}"
  world_wants w4x1 && world_run w4x1 procs:4 "${s[@]}"
  world_wants w2x2 && world_run w2x2 machines:0,1/2,3 "${s[@]}"
  # (d): the same with a directory per machine (each loads only its rows).
  if world_wants w2x2-dirs; then
    local parts=${WORLD_PARTS:-$ds-m2} t0
    if [ ! -f "$parts/machine-1/machine.json" ]; then
      t0=$(now)
      if ! timeout -s QUIT -k 10 "$(world_left)" "$bin/strata" partition --machines 2 --devices-per-machine 2 \
        --seed "${WORLD_SEED:-7}" "$ds" "$parts" >"$setlogs/partition.log" 2>&1; then
        tail -5 "$setlogs/partition.log" | indent
        check 1 "partition --machines 2"
      else
        echo "   partition --machines 2 into $parts: $(since "$t0")s"
      fi
    fi
    [ -f "$parts/machine-1/machine.json" ] &&
      world_run w2x2-dirs machines:0,1/2,3 "${s[@]}" --machine-dir "$parts/machine-@M"
  fi
  local f=(--mode fullgraph --epochs "$fe" --partition "$part" --eval-every 1000)
  # shellcheck disable=SC2206 # WORLD_FG_FLAGS are words
  f+=(${WORLD_FG_FLAGS:-})
  # Full-graph between the 2 machines with NCCL's peer-to-peer path off:
  # exact, then skip-broadcast (Sancus's staleness).
  # WORLD_FG_MACHINES=0/1: 2 machines x 1 GPU.
  local fm=machines:${WORLD_FG_MACHINES:-0,1/2,3}
  world_wants fg2x2 && NCCL_P2P_DISABLE=1 world_run fg2x2 "$fm" "${f[@]}"
  world_wants fg2x2-stale && NCCL_P2P_DISABLE=1 world_run fg2x2-stale "$fm" "${f[@]}" --staleness
  # Halo exchange (exact: only the rows each device reads), alone and
  # with skip-broadcast.
  world_wants fg2x2-halo && NCCL_P2P_DISABLE=1 world_run fg2x2-halo "$fm" "${f[@]}" --exchange halo
  # shellcheck disable=SC2086 # WORLD_FG_STALE_FLAGS are words
  world_wants fg2x2-stale-halo && NCCL_P2P_DISABLE=1 world_run fg2x2-stale-halo "$fm" "${f[@]}" --staleness --exchange halo \
    ${WORLD_FG_STALE_FLAGS:-}
  # The variation bound on the parameters' change (no dropout noise floor).
  # shellcheck disable=SC2086 # WORLD_FG_STALE_FLAGS are words
  world_wants fg2x2-params && NCCL_P2P_DISABLE=1 world_run fg2x2-params "$fm" "${f[@]}" --staleness \
    --staleness-drift params ${WORLD_FG_STALE_FLAGS:-}
  echo "   -- world: $(build_id), $ds, $e epochs (full-graph $fe${WORLD_FG_FLAGS:+ $WORLD_FG_FLAGS}${WORLD_FG_STALE_FLAGS:+; stale: $WORLD_FG_STALE_FLAGS}), --partition $part"
  echo "   $(printf '%-12s %-18s %-9s %-11s %-8s %s' run kind s/epoch net/epoch test avoided/epoch)"
  for row in "${rows[@]}"; do echo "   $row"; done
  echo "   (net/epoch: bytes between machines, every machine's counters summed; full-graph rows: all broadcast and"
  echo "   gradient bytes sent, every link; avoided: the broadcast bytes skip-broadcast did not send)"
}

# ------------------------------------------------ papers (issue 15)

# papers_left LIMIT: the seconds a step may take, LIMIT or what is left of
# $PAPERS_BUDGET since the call started, whichever is less.
papers_left() {
  awk -v l="$1" -v b="${PAPERS_BUDGET:-570}" -v s="$(since "$call_start")" 'BEGIN { r = b - s; if (l < r) r = l; printf "%d", r }'
}

papers_model="--model sage --layers 3 --hidden 256 --batch-size 1024 --fanouts 15,10,5"

# papers_step STEP: whether $PAPERS_STEPS names STEP.
papers_step() { [[ " ${PAPERS_STEPS:-train embed predict} " == *" $1 "* ]]; }

# papers_timed NAME LIMIT CMD...: CMD with its stdout in $setlogs/NAME.out
# and stderr in NAME.log, stopped after LIMIT seconds with SIGQUIT; the
# exit status is CMD's (131 or 124 when stopped).
papers_timed() {
  local name=$1 lim=$2
  shift 2
  timeout -s QUIT -k 15 "$lim" "$@" >"$setlogs/$name.out" 2>"$setlogs/$name.log"
}

# papers_failed RC NAME LIMIT: the reason and the last lines of a step
# that failed (a goroutine dump when it ran past LIMIT).
papers_failed() {
  local rc=$1 name=$2 lim=$3 log=$setlogs/$2.log
  case $rc in
    124 | 131 | 137) echo "   ! $name: stopped at its limit of ${lim}s (SIGQUIT; the goroutines are in $name.log)" ;;
  esac
  grep -E -A30 '^failure:' "$log" | head -40 | sed 's/^/   ! /'
  # The last lines before Go's goroutine dump (which starts "SIGQUIT: quit").
  awk '/^SIGQUIT/ { exit } { print }' "$log" | grep -vE '^\s*$' | tail -6 | cut -c1-300 | sed 's/^/   ! /'
  check "$rc" "$name"
}

set_papers_gen() {
  local ds=${PAPERS_DATA:-/tmp/papers} preset=${PAPERS_PRESET:-papers} lim t0 rc
  if [ -f "$ds/manifest.json" ]; then
    echo "   $ds holds a dataset ($(mib "$ds") MiB): not generated again"
    return 0
  fi
  lim=$(papers_left "${PAPERS_GEN_TIMEOUT:-560}")
  echo "   gen --preset $preset into $ds (limit ${lim}s; $(df -h --output=avail "$(dirname "$ds")" | tail -1 | tr -d ' ') free there)"
  t0=$(now)
  # --overwrite: a run stopped earlier leaves a directory without a manifest.
  papers_timed gen "$lim" "$bin/strata" gen "$ds" --preset "$preset" --overwrite
  rc=$?
  if [ "$rc" != 0 ]; then
    papers_failed "$rc" gen "$lim"
    return 1
  fi
  echo "   gen $preset: $(since "$t0")s, $(mib "$ds") MiB"
  grep -vE '^\s*$' "$setlogs/gen.out" | head -8 | indent
}

# papers_run K EPOCHS FLAGS...: issue 15's run on cuda:0..K-1: train with
# the full-neighbor evaluation every epoch and --save, then embed and
# predict every node with the saved model (the steps of $PAPERS_STEPS).
papers_run() {
  local k=$1 e=$2 ds=${PAPERS_DATA:-/tmp/papers} devs=cuda:0 i lim t0 rc model out=/tmp/papers-out
  shift 2
  for ((i = 1; i < k; i++)); do devs+=,$i; done
  model=/tmp/papers-model-$k
  if [ ! -f "$ds/manifest.json" ]; then
    echo "   no dataset in $ds: run papers-gen first (the same warm machine keeps it)"
    check 1 "dataset"
    return 1
  fi
  if papers_step train; then
    lim=$(papers_left "${PAPERS_TRAIN_TIMEOUT:-450}")
    if [ "$lim" -lt 30 ]; then
      echo "   train: skipped, ${lim}s left of PAPERS_BUDGET (next call: PAPERS_STEPS=train scripts/gpu.sh $set)"
      check 1 "train (no time left)"
      return 1
    fi
    rm -rf "$model"
    echo "   train on $devs, $e epochs (limit ${lim}s): --partition range --eval full --eval-every 1 --save $model ${PAPERS_MODEL:-$papers_model} $*"
    t0=$(now)
    # shellcheck disable=SC2086 # PAPERS_FLAGS is a list of flags
    timeout -s QUIT -k 15 "$lim" "$bin/strata" train --dataset "$ds" --devices "$devs" --partition range --epochs "$e" \
      --eval full --eval-every 1 --save "$model" --report "$setlogs/train.json" ${PAPERS_MODEL:-$papers_model} "$@" ${PAPERS_FLAGS:-} \
      2>&1 >"$setlogs/train.out" | stamp "$setlogs/train.log" "$setlogs/train.times"
    rc=${PIPESTATUS[0]}
    echo "   train: rc=$rc, $(since "$t0")s from start to exit"
    grep -E '^(memory|training|config|pipeline|first batch|interrupted|strata:|inference layer|whole-graph evaluation)' "$setlogs/train.log" | cut -c1-700 | indent
    # Each epoch: seconds since the start, then the engine's line (train
    # time, accuracies, "(eval Ns)").
    indent <"$setlogs/train.times"
    grep -E 'accuracy|epoch time|^time|^model|pipeline' "$setlogs/train.out" | indent
    if [ "$rc" != 0 ]; then
      papers_failed "$rc" train "$lim"
      return 1
    fi
  fi
  if [ ! -f "$model/model.json" ]; then
    echo "   no model in $model (train first: PAPERS_STEPS=train)"
    check 1 "model"
    return 1
  fi
  local step args
  for step in embed predict evaluate; do
    papers_step "$step" || continue
    lim=$(papers_left "${PAPERS_INFER_TIMEOUT:-200}")
    if [ "$lim" -lt 30 ]; then
      echo "   $step: skipped, ${lim}s left of PAPERS_BUDGET (next call: PAPERS_STEPS=\"$step ...\" scripts/gpu.sh $set)"
      check 1 "$step (no time left)"
      continue
    fi
    rm -rf "$out" && mkdir -p "$out"
    args=(--model "$model" --dataset "$ds" --devices "$devs")
    case $step in
      embed | predict) args+=(--out "$out/$step.npy") ;;
      evaluate) args+=(--report "$setlogs/evaluate.json") ;;
    esac
    t0=$(now)
    papers_timed "$step" "$lim" "$bin/strata" "$step" "${args[@]}"
    rc=$?
    echo "   $step (every node; evaluate: the split nodes) on $devs: rc=$rc, $(since "$t0")s wall (limit ${lim}s; load, inference, write)"
    grep -vE '^\s*$' "$setlogs/$step.out" | cut -c1-300 | indent
    rm -rf "$out" # 28 GB (embed) and 76 GB (predict) of disk
    [ "$rc" = 0 ] || papers_failed "$rc" "$step" "$lim"
  done
}

set_papers_4() {
  # shellcheck disable=SC2086 # PAPERS_EPOCHS is a number
  papers_run 4 "${PAPERS_EPOCHS:-10}"
}

set_papers_1() {
  local mem flags
  mem=$(nvidia-smi -i 0 --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  if [ -n "${PAPERS_1_FLAGS+x}" ]; then
    flags=$PAPERS_1_FLAGS
  elif [ "${mem:-0}" -lt 102400 ]; then
    # 57 GB of features and 13 GB of topology do not fit an H100's 80 GB
    # with the model and the evaluation's chunks: features through UVA.
    flags="--cache 0"
  fi
  echo "   GPU 0: ${mem:-?} MiB; flags: ${flags:-none}"
  # shellcheck disable=SC2086 # flags is a list of flags
  papers_run 1 "${PAPERS_EPOCHS:-3}" ${flags:-}
}

set_papers_infer() {
  local ds=${PAPERS_DATA:-/tmp/papers} k=${PAPERS_INFER_GPUS:-4} layer=${PAPERS_INFER_LAYER:-2} devs=cuda:0 i lim t0 rc
  local small=/tmp/papers-standin model=/tmp/papers-model-standin out=${PAPERS_INFER_OUT:-/tmp/papers-out}
  for ((i = 1; i < k && i < ngpus; i++)); do devs+=,$i; done
  if [ ! -f "$ds/manifest.json" ]; then
    echo "   no dataset in $ds: run papers-gen first (the same warm machine keeps it)"
    check 1 "dataset"
    return 1
  fi
  if [ ! -f "$model/model.json" ]; then
    rm -rf "$small" "$model"
    # shellcheck disable=SC2086 # PAPERS_MODEL is a list of flags
    if ! "$bin/strata" gen "$small" --preset "${PAPERS_PRESET:-papers}" --nodes 50000 --quiet >"$setlogs/standin.log" 2>&1 ||
      ! "$bin/strata" train --dataset "$small" --device cpu --epochs 1 --save "$model" --quiet ${PAPERS_MODEL:-$papers_model} >>"$setlogs/standin.log" 2>&1; then
      tail -5 "$setlogs/standin.log" | indent
      check 1 "stand-in model"
      return 1
    fi
  fi
  lim=$(papers_left "${PAPERS_INFER_TIMEOUT:-300}")
  rm -rf "$out" && mkdir -p "$out"
  echo "   embed --layer $layer of every node on $devs with a stand-in model (limit ${lim}s), STRATA_INFER_PROFILE=1"
  t0=$(now)
  STRATA_INFER_PROFILE=1 papers_timed embed "$lim" "$bin/strata" embed --model "$model" --dataset "$ds" --devices "$devs" \
    --layer "$layer" --out "$out/embed.npy"
  rc=$?
  echo "   embed: rc=$rc, $(since "$t0")s wall (load, inference, write)"
  grep -hE '^(inference|wrote)' "$setlogs/embed.log" "$setlogs/embed.out" 2>/dev/null | cut -c1-700 | indent
  if [ "$rc" = 0 ] && [ -n "${PAPERS_INFER_SAMPLE:-}" ]; then
    # Every 1000th row kept, to compare two builds' outputs in one call.
    python3 -c 'import sys, numpy as np; a = np.load(sys.argv[1], mmap_mode="r"); np.save(sys.argv[2], np.array(a[::1000]))' \
      "$out/embed.npy" "$PAPERS_INFER_SAMPLE" && echo "   every 1000th row in $PAPERS_INFER_SAMPLE"
  fi
  rm -rf "$out"
  [ "$rc" = 0 ] || papers_failed "$rc" embed "$lim"
}

set_papers_stall() {
  local ds=${PAPERS_DATA:-/tmp/papers} k=${PAPERS_STALL_GPUS:-4} wait=${PAPERS_STALL_WAIT:-60} devs=cuda:0 i v name pid t0 first rc
  for ((i = 1; i < k && i < ngpus; i++)); do devs+=,$i; done
  if [ ! -f "$ds/manifest.json" ]; then
    echo "   no dataset in $ds: run papers-gen first"
    check 1 "dataset"
    return 1
  fi
  for v in ${PAPERS_STALL_VARIANTS:-none}; do
    name=stall${v//[^a-z0-9]/_}
    [ "$v" = none ] && v=
    echo "   bf16 train on $devs ${v:-(no extra flag)}"
    t0=$(now)
    # cuBLASLt's own log (PAPERS_STALL_LTLOG: its level, 5 traces every
    # call): its last lines per thread show the call each product stalled in.
    local ltenv=()
    [ -n "${PAPERS_STALL_LTLOG:-}" ] && rm -f /tmp/"$name".lt.* &&
      ltenv=(CUBLASLT_LOG_LEVEL="$PAPERS_STALL_LTLOG" CUBLASLT_LOG_FILE=/tmp/"$name".lt.%i)
    # shellcheck disable=SC2086 # PAPERS_MODEL and v are lists of flags
    env "${ltenv[@]}" "$bin/strata" train --dataset "$ds" --devices "$devs" --partition range --epochs 3 --eval sampled --precision bf16 \
      ${PAPERS_MODEL:-$papers_model} $v >"$setlogs/$name.out" 2>"$setlogs/$name.log" &
    pid=$!
    first=
    while kill -0 "$pid" 2>/dev/null && [ "$(since "$t0" | cut -d. -f1)" -lt "${PAPERS_STALL_TIMEOUT:-200}" ]; do
      sleep 2
      [ -z "$first" ] && grep -q '^first batch' "$setlogs/$name.log" && first=$(now)
      if [ -n "$first" ] && ! grep -q '^epoch ' "$setlogs/$name.log" && [ "$(since "$first" | cut -d. -f1)" -ge "$wait" ]; then
        echo "   no epoch ${wait}s after the first batch: native stacks and nvidia-smi"
        nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader | indent
        timeout 60 python3 scripts/procstacks.py "$pid" >"$setlogs/$name.stacks" 2>&1
        echo "   procstacks: rc=$?, $(grep -c ' thread(s) in ' "$setlogs/$name.stacks") pictures in $name.stacks"
        grep ' thread(s) in ' "$setlogs/$name.stacks" | sort -rn | head -8 | cut -c1-200 | indent
        if [ -n "${PAPERS_STALL_LTLOG:-}" ]; then
          for f in /tmp/"$name".lt.*; do
            [ -f "$f" ] && { echo "== $f ($(wc -c <"$f") bytes)"; tail -n 200 "$f"; }
          done >"$setlogs/$name.lt" 2>&1
          echo "   cuBLASLt log: $(grep -c '^== ' "$setlogs/$name.lt") files, their last 200 lines in $name.lt"
        fi
        if [ -n "${PAPERS_STALL_GDB:-}" ]; then # cuda-gdb's attach hung for 120 s at this shape (4 busy GPUs)
          timeout 120 cuda-gdb -p "$pid" -batch -ex 'thread apply all bt' >"$setlogs/$name.bt" 2>&1
          echo "   cuda-gdb: rc=$?, $(grep -c '^Thread ' "$setlogs/$name.bt") threads in $name.bt"
        fi
        break
      fi
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill -QUIT "$pid"
      sleep 10
      kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid"
    rc=$?
    echo "   rc=$rc, $(since "$t0")s; $(grep -c '^epoch ' "$setlogs/$name.log") epochs"
    grep -hE '^(first batch|epoch time)' "$setlogs/$name.log" "$setlogs/$name.out" | cut -c1-300 | indent
    [ "$rc" = 0 ] || tail -3 "$setlogs/$name.log" | cut -c1-300 | sed 's/^/   ! /'
    check "$rc" "$name"
  done
}

# ab: the current build against .gpu/base, alternating on the same GPUs.
set_ab() {
  local ds=$data e=${DSP_EPOCHS:-3} i k b new=$bin base=$gpu/base
  if [ ! -x "$base/strata" ] || [ ! -x "$base/fullgraph.test" ]; then
    echo "   skipped: no base build in .gpu/base (scripts/gpu.sh base REV)"
    return 1
  fi
  echo "   base $(head -1 "$base/build.txt"), new $(build_id)"
  gen_data products "$ds" || return
  for i in $(seq "${AB_REPEAT:-2}"); do
    for k in ${AB_GPUS:-1 2 4}; do
      for b in base new; do
        if [ $b = base ]; then bin=$base; else bin=$new; fi
        dsp_run "ab-$b-d$k-r$i" "$k" "$e"
      done
    done
  done
  for b in base new; do
    if [ $b = base ]; then bin=$base; else bin=$new; fi
    STRATA_BENCH_DATASET=$ds STRATA_BENCH_EPOCHS=${FG_EPOCHS:-5} gotest "fg-$b" fullgraph "${FG_TIMEOUT:-300}" \
      -test.run '^$' -test.v -test.benchtime 1x -test.bench "${FG_BENCH:-ProductsSAGE}"
    check $? "fullgraph $b"
    echo "   full-graph, $b:"
    benchlines "$setlogs/fg-$b.log"
  done
  bin=$new
  echo "   -- sampled s/epoch, base vs new (new/base):"
  for k in ${AB_GPUS:-1 2 4}; do
    echo "   $k GPUs: $(mean epoch "ab-base-d$k-*") vs $(mean epoch "ab-new-d$k-*") ($(ratio "ab-new-d$k-*" "ab-base-d$k-*"))"
  done
}

# quick: every area once, short enough for one call.
set_quick() {
  local -x BENCH_TIME=${BENCH_TIME:-2x} SAMPLING_BENCH=${SAMPLING_BENCH:-'^BenchmarkEpochProducts$'} \
    COMM_SWEEPS=${COMM_SWEEPS:-gradient} DP_SWEEP_MAX=${DP_SWEEP_MAX:-827580} DP_SWEEP_VARIANTS=${DP_SWEEP_VARIANTS-} \
    DSP_REPEAT=${DSP_REPEAT:-1}
  run_sets "${quick_sets[@]}"
}

set_all() { run_sets "${all_sets[@]}"; }

case ${1:-} in
  '' | -h | --help | help) usage ;;
  build) shift; build "$@" ;;
  pack) shift; pack "$@" ;;
  base) shift; base "$@" ;;
  *)
    for s; do known "$s" || usage "no set '$s' (build and pack come first on the line)"; done
    host "$@"
    ;;
esac
