# Common flows. `just --list` shows them.

# Run every test (what CI runs): release profile, every failure, skipped tests counted.
test *args:
    cargo xtask test {{args}}

# Put `benchctl` on PATH (~/.cargo/bin), from the release build.
install:
    cargo install --path crates/benchctl --locked

# The offline demo: the trained demo CLIP on the bundled compositional suite.
demo:
    cargo run --release -p benchctl -- eval --model-path crates/benchctl-models/tests/fixtures/clip-shapes --suite demo --results-dir target/demo-results

# Rebuild the bundled leaderboard: the demo models on the shapes suite (three score families:
# the trained CLIP, its untrained twin and a random-weight SigLIP compare embeddings, a
# random-weight FIBER's ITM head matches pairs, a random-weight Gemma 3 answers "Yes"),
# stored in results/ and rendered.
demo-leaderboard:
    for m in clip-shapes clip-shapes-untrained siglip-tiny fiber-micro gemma3-tiny; do cargo run --release -p benchctl -- eval --model-path crates/benchctl-models/tests/fixtures/$m --suite winoground --data-dir datasets/demo/shapes --no-cache; done
    cargo run --release -p benchctl -- leaderboard

# Evaluate a zoo model on a suite (data under datasets/<suite>).
eval model="clip-vit-b32" suite="winoground":
    cargo run --release -p benchctl -- eval --model {{model}} --suite {{suite}}

# Regenerate results/LEADERBOARD.md from the stored runs.
leaderboard:
    cargo run --release -p benchctl -- leaderboard

# Encoder throughput of full-size ViT-B/32 on random weights.
bench batch="32":
    cargo run --release -p benchctl -- bench --model clip-vit-b32 --batch {{batch}}

# Regenerate every fixture with its reference implementation (packages in
# scripts/requirements.txt; `repos`: a directory of the official checkouts some generators
# run, see scripts/fixtures/all.sh).
fixtures repos="":
    scripts/fixtures/all.sh {{repos}}

# Refresh the whole leaderboard from a run spec (models × suites × options), then render it.
refresh spec="run.toml":
    cargo run --release -p benchctl -- eval --config {{spec}}
    cargo run --release -p benchctl -- leaderboard

# Gate: compare the latest stored runs with a baseline set; exits 6 on a regression.
compare baseline="results/baselines":
    cargo run --release -p benchctl -- compare --baseline {{baseline}}

# Rewrite the committed regression baseline (the trained demo CLIP on the shapes suite, a
# random-weight SigLIP on the Winoground-layout demo). Only when a score change is intended:
# the regression-gate test compares against these files.
baselines:
    rm -rf results/baselines target/baseline-results
    cargo run -p benchctl -- eval --model-path crates/benchctl-models/tests/fixtures/clip-shapes --suite winoground --data-dir datasets/demo/shapes --results-dir target/baseline-results --no-cache
    cargo run -p benchctl -- eval --model-path crates/benchctl-models/tests/fixtures/siglip-tiny --suite winoground --data-dir datasets/demo/winoground --results-dir target/baseline-results --no-cache
    mkdir -p results/baselines && cp target/baseline-results/runs/*.json target/baseline-results/runs/*.scores.jsonl results/baselines/

# Evaluate one shard of a big suite (e.g. one per GPU or Slurm array task), then merge.
shard i n model="clip-vit-b32" suite="eqben":
    cargo run --release -p benchctl -- eval --model {{model}} --suite {{suite}} --shard {{i}}/{{n}} --results-dir results/shards/{{i}}

# benchctl and PyTorch (transformers) side by side on the same architecture, batch, threads
# and instruction-set tier (best, avx512 or avx2), with their ratio and share of the tier's
# fp32 peak, and RoCOCO-scale retrieval (needs the Python packages in scripts/requirements.txt).
# `avx2` builds benchctl without gemm's AVX-512 kernels, as an AVX2-only machine runs it.
# `model`: clip-vit-b32 or siglip2-base-patch16-224 (SigLIP 2 B/16, texts of 64 tokens).
bench-vs-torch tier="best" batch="32" threads="2" model="clip-vit-b32":
    #!/usr/bin/env bash
    set -euo pipefail
    if [ "{{tier}}" = avx2 ]; then
        cargo build --release -p benchctl --no-default-features --features dev-bench --target-dir target/tier-avx2
        bin=target/tier-avx2/release/benchctl
    else
        cargo build --release -p benchctl --features dev-bench
        bin=target/release/benchctl
    fi
    python3 scripts/bench/bench_torch.py --benchctl $bin --model {{model}} --tier {{tier}} --batch {{batch}} --threads {{threads}} --retrieval

# Decode + preprocess side by side: benchctl against Pillow and the model's transformers
# image processor (and open_clip's transform for OpenCLIP models) on the same files and
# threads (default: the generated photo set, kept in target/preprocess-images). `tier` forces
# benchctl's kernels down (BENCHCTL_CPU: generic, avx2, avx512) for the per-tier table.
bench-preprocess model="clip-vit-b32" threads="1" tier="":
    cargo build --release -p benchctl
    BENCHCTL_CPU={{tier}} python3 scripts/bench/bench_preprocess.py --model {{model}} --threads {{threads}}

# Mutation tests of every file parser with many more cases than CI runs (default 2,000).
fuzz cases="100000":
    BENCHCTL_FUZZ_CASES={{cases}} cargo test --release -p benchctl --test fuzz

# The CUDA build, made here without a GPU (scripts/setup/cuda-env.sh: CUDA 13.0 toolkit wheels under
# target/cuda-tools, unversioned library links, a link-only libcuda stub). For a GPU machine:
# there, LD_LIBRARY_PATH must reach the CUDA 13 libraries (docs/performance.md, "GPU").
cuda-build:
    #!/usr/bin/env bash
    set -euo pipefail
    source scripts/setup/cuda-env.sh
    cargo build --release -p benchctl --features cuda --locked --target-dir target/cuda-build
    ls -l target/cuda-build/release/benchctl

