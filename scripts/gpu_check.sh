#!/usr/bin/env bash
# Every GPU check of issue 13 item 4, on a machine with CUDA; results under outputs/gpu/.
#
#   make gpu-check              # or: bash scripts/gpu_check.sh   (PY=python3 bash scripts/gpu_check.sh)
#
# (a) the loss benchmark on CUDA, ours against the published codes included (absolute ms beside
#     B18 Tables 3-4, which were timed on a Titan Xp), the noised losses also with
#     loss.compile=true (a Triton kernel; one compilation per k): outputs/gpu/bench/losses.{json,md}
# (b) a training step of DenseNet 40-40 at batch 64 for every loss in conf/loss under
#     torch.cuda.set_sync_debug_mode("error"):               outputs/gpu/sync_check.{json,md}
# (c) G22 Fig. 3 on a GPU: g22_time on 45,000 random CIFAR-shaped images, DenseNet 40-40,
#     batch 64, K = 5 and 10, B = 3 (G22's setting), one epoch per run, then its table:
#     outputs/gpu/sweeps/g22_time/<time>/ and outputs/gpu/tables/g22_time.md
# (d) several small jobs per GPU (issue 38): 4 two-epoch DenseNet 40-12 runs on 10,000 random
#     CIFAR-shaped images at batch 64, one at a time and 4 at once (hydra.launcher.n_jobs=4, each
#     job in its own slot: topk.job_share):                outputs/gpu/share.{json,md}
# (e) JPEG batches decoded on the GPU (nvJPEG) against the CPU workers (issue 38): make bench-data
#     on 1,000 JPEGs of 512x512, every core but one as decoding workers, --decode-on cuda:
#                                                           outputs/gpu/data.{json,md}
# (f) the noised losses' k-th largest paths (kthvalue, candidates, every column, and the compiled
#     rounds) forced in turn at the papers' settings: which one a GPU should take:
#                                                           outputs/gpu/noised_paths.{json,md}
# The README's "Measured on a GPU" section is where these numbers go, with the device name.
# STEPS="share decode" runs only those steps (any of: losses sync g22 share decode paths); NO_INSTALL=1
# skips the pip installs (a machine whose Python already has the package's dependencies, with
# PYTHONPATH=<this checkout>).
#
# It first installs the package (pip install -e .) and, if it can, the published codes
# (.[peers]). A GPU machine without internet must have the wheels of Hydra and the other
# dependencies at hand (e.g. PIP_FIND_LINKS=/path/to/wheels PIP_NO_INDEX=1); if pip would replace
# the machine's PyTorch, install with --no-deps and add the missing dependencies by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${PY:-}" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
OUT=${OUT:-outputs/gpu}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "No CUDA device (or no PyTorch) for $PY: the GPU checks need a machine with a GPU and were not run."
    exit 1
fi

STEPS=" ${STEPS:-losses sync g22 share decode paths} "
wanted() { [[ "$STEPS" == *" $1 "* ]]; }
if [ -z "${NO_INSTALL:-}" ]; then
    "$PY" -m pip install --quiet -e .
    "$PY" -m pip install --quiet -e '.[peers]' \
        || echo "The published codes (pytopk, difftopk) could not be installed; the benchmark runs without them."
fi
mkdir -p "$OUT"
"$PY" -c 'import torch; print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")' \
    | tee "$OUT/device.txt"

if wanted losses; then
    echo "== (a) loss benchmark on CUDA"
    "$PY" scripts/bench_losses.py --device cuda --out "$OUT/bench"
fi
if wanted sync; then
    echo "== (b) host-device synchronisations: DenseNet 40-40, batch 64, every loss"
    "$PY" scripts/gpu_sync_check.py --device cuda --model densenet40_40 --batch-size 64 --out "$OUT"
fi

if wanted g22; then
    echo "== (c) G22 Fig. 3: epoch time, DenseNet 40-40 on 45,000 random CIFAR-shaped images"
    SWEEP="$OUT/sweeps/g22_time/$(date +%Y-%m-%d_%H-%M-%S)"
    # The command line wins over the experiment's sweep (k: 1,2,5,10,20, n_samples: 1,3,10); the
    # losses stay ce, smooth_svm, noised_bal: 2 K x 3 losses = 6 one-epoch runs.
    "$PY" train.py -m +experiment=g22_time model=densenet40_40 dataset.train_size=45000 \
        trainer.device=cuda trainer.num_threads=null k=5,10 n_samples=3 "hydra.sweep.dir=$SWEEP"
    "$PY" scripts/make_tables.py g22_time --sweep-dir "$SWEEP" --out "$OUT/tables"
fi
if wanted share; then
    echo "== (d) several small jobs per GPU: DenseNet 40-12, 4 runs, one at a time and 4 at once"
    "$PY" scripts/bench_share.py --jobs 1 4 --runs 4 --epochs 2 --train-size 10000 --device auto --out "$OUT"
fi
if wanted decode; then
    echo "== (e) JPEG batches decoded on the GPU against CPU decoding workers"
    WORKERS=$(( $("$PY" -c 'import os; print(len(os.sched_getaffinity(0)))') - 1 ))
    "$PY" scripts/bench_data.py --cifar-images 5000 --jpeg-classes 10 --jpeg-per-class 100 --jpeg-size 512 \
        --jpeg-batch-size 128 --workers "$WORKERS" --epochs 2 --decode-on cuda --out "$OUT"
fi
if wanted paths; then
    echo "== (f) the noised losses' k-th largest paths forced in turn on CUDA"
    "$PY" scripts/bench_noised_paths.py --device cuda --compile --out "$OUT"
fi
echo "Done: $OUT/bench/losses.md, $OUT/sync_check.md, $OUT/tables/g22_time.md, $OUT/share.md, $OUT/data.md, $OUT/noised_paths.md"
