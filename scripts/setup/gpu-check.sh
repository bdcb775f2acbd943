#!/usr/bin/env bash
# The GPU checks of docs/performance.md ("GPU"), in one run on a lent GPU machine, over a copy
# of the checkout, stage by stage in the order of what matters most (a device session is
# minutes long; each stage has its own time limit, so one that hangs does not take the rest):
#
#   kernels    benchctl's CUDA kernels against candle's operations (tests/cuda_kernels.rs)
#   attention  the fused attention beside PyTorch's SDPA, kernel against kernel, with each query
#              tile of the tensor-core kernel (64 and 128 queries a block; GPU_CHECK_ATTENTION
#              overrides the BENCHCTL_CUDA_KERNELS choices; scripts/bench/bench_attention_gpu.py)
#   profile    Nsight Compute: per-kernel times of a ViT-B/16 bf16 image forward (batch 128) with
#              each of GPU_CHECK_PROFILE's kernel choices (default `fused`; e.g. `fused candle`), and the attention
#              kernel's own sections on ViT-B/16's 197 tokens
#   profile-attention
#              Nsight Compute's sections for the attention kernel on L/14-336's 577 tokens (16 heads
#              of 64, 128 rows, bf16) with each of GPU_CHECK_PROFILE's kernel choices (default
#              `fused-64 fused-128`: the 64- and 128-query tiles)
#   tests      the parity fixtures on the GPU: transformers, open_clip and timm (parity, siglip2,
#              siglip2_naflex, metaclip2, eva: EVA02 and PE-Core), the official FIBER code (fiber),
#              transformers' and t2v_metrics' generative models (clip_t5, vqascore: Gemma 3,
#              PaliGemma, Qwen3-VL, Qwen2.5-VL); GPU_CHECK_TESTS names fewer
#   table      benchctl beside PyTorch, CLIP B/32, B/16, L/14 at batch 128 and 512 in every dtype
#              (scripts/bench/bench_gpu.py), products through cuBLASLt (the default);
#              `table-cublas` the same with BENCHCTL_CUDA_GEMM=cublas (GPU_CHECK_MODELS,
#              GPU_CHECK_DTYPES and GPU_CHECK_KERNELS narrow both, e.g. `b16,l14`, `bf16,f16`, `fused-128`)
#   e2e        the cold/warm/encoder-only end-to-end figure (bf16)
#   fiber      FIBER-base throughput
#   vqascore   local VQAScore beside transformers at full width, reduced depth (Qwen3-VL-2B's,
#              Qwen2.5-VL-3B's and gemma-3-4b-it's widths, 4 layers a tower); `vqascore-full`
#              Qwen3-VL-2B and gemma-3-4b-it at full depth; each with both sides' peak GPU memory
#
# Needs, made on a machine without a GPU (`scripts/setup/gpu-bundle.sh`): .gpu/bundle.tar.xz with the
# release binary, the CUDA test binaries and ../shared's FIBER fixture (and `scripts/setup/gpu-tree.sh
# trim` before the device call, for the checkout and the bundle to fit its 64 MiB). On the GPU machine the
# CUDA 13 libraries come from PyTorch's cu13 wheels. Output: $OUT/gpu.log (or ./gpu.log) and
# $OUT/profile*.log.
#
#   scripts/setup/gpu-check.sh [STAGE...]     (default: every stage but table-cublas and vqascore-full)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${OUT:-$root}
exec > >(tee -a "$out/gpu.log") 2>&1
[ -x .gpu/benchctl ] || tar -xJf .gpu/bundle.tar.xz -C .gpu || exit 1
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
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
step() {
    local limit=$1 started=$SECONDS
    shift
    echo "== $*"
    timeout "$limit" "$@"
    echo "== $? after $((SECONDS - started)) s: $*"
}
export BENCHCTL_TEST_DEVICE=cuda BENCHCTL_WORKSPACE=$root BENCHCTL_SHARED=$root/.gpu/shared
b16_config() {
    python3 -c 'import sys; sys.path.insert(0, "scripts/bench"); import bench_gpu
bench_gpu.clip_config(bench_gpu.SHAPES["b16"]).to_json_file(sys.argv[1], use_diff=False)' "$1"
}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(kernels attention tests table e2e profile fiber vqascore)
for stage in "${stages[@]}"; do
    case $stage in
    kernels) step 180 .gpu/tests/cuda_kernels --test-threads 2 ;;
    attention) step 180 python3 scripts/bench/bench_attention_gpu.py --benchctl .gpu/benchctl \
        --kernels "${GPU_CHECK_ATTENTION:-fused-64,fused-128}" ;;
    profile)
        b16_config /tmp/b16.json
        for kernels in ${GPU_CHECK_PROFILE:-fused}; do
            step 120 env BENCHCTL_CUDA_KERNELS=$kernels "$ncu" --metrics gpu__time_duration.sum --print-summary per-kernel \
                .gpu/benchctl bench --device cuda --config /tmp/b16.json --part image --batch 128 --dtype bf16 --iters 1 \
                >"$out/profile-$kernels.log" 2>&1
        done
        # The second shape (197 tokens, 12 heads of 64) of `bench --part attention`: 21 calls a shape.
        step 120 "$ncu" -k regex:attend_flash --launch-skip 21 --launch-count 1 --section SpeedOfLight \
            --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
            .gpu/benchctl bench --part attention --device cuda --dtype bf16 --batch 128 --iters 1 >"$out/profile.log" 2>&1
        ;;
    profile-attention)
        # The fourth shape of `bench --part attention` (577×16×64): 21 calls a shape at --iters 1.
        for kernels in ${GPU_CHECK_PROFILE:-fused-64 fused-128}; do
            step 120 env BENCHCTL_CUDA_KERNELS=$kernels "$ncu" --clock-control none -k regex:attend_flash --launch-skip 63 --launch-count 1 \
                --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
                --section ComputeWorkloadAnalysis --section LaunchStats .gpu/benchctl bench --part attention --device cuda \
                --dtype bf16 --batch 128 --iters 1 >"$out/profile-attention-$kernels.log" 2>&1
        done
        ;;
    tests)
        for test in ${GPU_CHECK_TESTS:-parity siglip2 siglip2_naflex metaclip2 eva fiber clip_t5 vqascore}; do
            step 180 .gpu/tests/$test --test-threads 2
        done
        ;;
    table | table-cublas)
        gemm=lt
        [ "$stage" = table-cublas ] && gemm=cublas
        step 420 env BENCHCTL_CUDA_GEMM=$gemm python3 scripts/bench/bench_gpu.py --benchctl .gpu/benchctl \
            --models "${GPU_CHECK_MODELS:-b32,b16,l14}" --batches 128,512 --dtypes "${GPU_CHECK_DTYPES:-f32,bf16,f16}" \
            --kernels "${GPU_CHECK_KERNELS:-fused}" --iters 3
        ;;
    e2e) step 120 .gpu/benchctl bench --device cuda --part e2e --batch 128 --dtype bf16 ;;
    fiber) step 120 python3 scripts/bench/bench_gpu.py --benchctl .gpu/benchctl --models fiber --batches 128 --iters 3 ;;
    vqascore | vqascore-full)
        depth=(--text-layers 4 --vision-layers 4)
        families=(qwen3vl qwen25vl gemma3)
        [ "$stage" = vqascore-full ] && depth=(--full-depth) && families=(qwen3vl gemma3)
        for family in ${GPU_CHECK_FAMILIES:-${families[@]}}; do
            step 300 python3 scripts/bench/bench_vqascore_torch.py --benchctl .gpu/benchctl --family "$family" \
                --device cuda --dtype bf16 "${depth[@]}" --items 16 --batch 16 --threads 16
        done
        ;;
    *) echo "gpu-check: unknown stage $stage" ;;
    esac
done
