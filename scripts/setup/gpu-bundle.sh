#!/usr/bin/env bash
# Packs what scripts/setup/gpu-check.sh runs on a GPU machine into .gpu/bundle.tar.xz (ignored by
# git): the CUDA release binary with the developer benchmarks (`--features cuda,dev-bench`), the
# CUDA test binaries of benchctl-models (the kernels' and the parity fixtures' tests; built here
# with the same toolkit) and ../shared's FIBER fixture, stripped and compressed to fit the
# device tool's 64 MiB with the checkout. It builds in target/, beside `.ci/run`'s CUDA build,
# so that only what the features change is compiled again.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/setup/cuda-env.sh
target=target
cargo build --release -p benchctl --features cuda,dev-bench --locked --target-dir "$target"
gpu_tests=(cuda_kernels parity fiber siglip2 siglip2_naflex metaclip2 eva clip_t5 vqascore)
tests=$(cargo test --release -p benchctl-models --features cuda --locked --target-dir "$target" --no-run \
    "${gpu_tests[@]/#/--test=}" --message-format json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')
if [ "$(echo "$tests" | wc -w)" -ne ${#gpu_tests[@]} ]; then
    echo "gpu-bundle: the CUDA test binaries did not build (cargo test --release -p benchctl-models --features cuda --no-run shows why)" >&2
    exit 1
fi
staging=$(mktemp -d)
mkdir -p "$staging/tests" "$staging/shared/reference"
strip -o "$staging/benchctl" "$target/release/benchctl"
for test in $tests; do
    name=$(basename "$test" | sed 's/-[0-9a-f]*$//')
    strip -o "$staging/tests/$name" "$test"
done
cp -r ../shared/reference/fiber-tiny "$staging/shared/reference/"
mkdir -p .gpu
# One dictionary large enough to hold every binary: they share candle's PTX, stored once.
XZ_OPT="--lzma2=preset=6,dict=512MiB" tar -cJf .gpu/bundle.tar.xz -C "$staging" .
rm -rf "$staging"
ls -l .gpu/bundle.tar.xz
