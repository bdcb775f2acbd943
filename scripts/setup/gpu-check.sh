#!/usr/bin/env bash
# The GPU checks of docs/performance.md ("GPU"), in one run on a lent GPU machine, over a copy
# of the checkout: the CUDA tests (benchctl's kernels against candle's operations, the parity
# fixtures of transformers, open_clip and the official FIBER code), then benchctl beside
# PyTorch (scripts/bench/bench_gpu.py), then the cold/warm/encoder-only end-to-end figure.
#
# Needs, made on a machine without a GPU (`scripts/setup/gpu-bundle.sh`): .gpu/bundle.tar.xz with the
# release binary, the CUDA test binaries and ../shared's FIBER fixture (and `scripts/setup/gpu-tree.sh
# trim` before the device call, for the checkout and the bundle to fit its 64 MiB). On the GPU machine the
# CUDA 13 libraries come from PyTorch's cu13 wheels. Output: $OUT/gpu.log (or ./gpu.log).
#
#   scripts/setup/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
log=${OUT:-$root}/gpu.log
exec > >(tee "$log") 2>&1
tar -xJf .gpu/bundle.tar.xz -C .gpu || exit 1
# The fixtures' one CLIP tokenizer, copied back where the parity fixtures expect it (the bundle
# leaves the copies out to stay under the device tool's size limit).
for dir in clip-tiny-a clip-tiny-b openclip-tiny clip-shapes clip-shapes-untrained; do
    target=crates/benchctl-models/tests/fixtures/$dir
    [ -d "$target" ] && [ ! -e "$target/tokenizer.json" ] && cp crates/benchctl-models/tests/fixtures/tokenizer/tokenizer.json "$target/"
done
# The binaries were built in /work/main: the developer benchmarks read fixtures by that path.
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
torch_libs=$(python3 -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
export LD_LIBRARY_PATH="$torch_libs:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
step() {
    local started=$SECONDS
    echo "== $*"
    "$@"
    echo "== $? after $((SECONDS - started)) s: $*"
}
export BENCHCTL_TEST_DEVICE=cuda BENCHCTL_WORKSPACE=$root BENCHCTL_SHARED=$root/.gpu/shared
for test in .gpu/tests/*; do
    step "$test" --test-threads 2
done
step python3 scripts/bench/bench_gpu.py --benchctl .gpu/benchctl --models b32,b16,l14 --batches 128,512 --before 128
for dtype in bf16 f32; do
    step .gpu/benchctl bench --device cuda --part e2e --batch 128 --dtype "$dtype"
done
step python3 scripts/bench/bench_gpu.py --benchctl .gpu/benchctl --models fiber --batches 128 --before 128
# Opt in (GPU_CHECK_VQASCORE=1): local VQAScore beside transformers on random-weight models of
# full size, Qwen3-VL-2B first (the issue's target), then gemma-3-4b-it (each builds its
# checkpoint first: minutes, ~9 and ~17 GB of disk).
if [ "${GPU_CHECK_VQASCORE:-}" = 1 ]; then
    step python3 scripts/bench/bench_vqascore_torch.py --benchctl .gpu/benchctl --family qwen3vl --device cuda \
        --dtype bf16 --full-depth --items 16 --batch 16 --threads 16
    step python3 scripts/bench/bench_vqascore_torch.py --benchctl .gpu/benchctl --device cuda --dtype bf16 \
        --full-depth --items 16 --batch 16 --threads 16
fi
