# Common flows. `just --list` shows them.

# Run every test (what CI runs).
test:
    cargo test --workspace --locked

# The offline demo: the fixture model on the bundled demo suite.
demo:
    cargo run --release -p benchctl -- eval --model-path crates/benchctl-models/tests/fixtures/clip-tiny-a --suite winoground --data-dir datasets/demo/winoground --results-dir target/demo-results

# Evaluate a zoo model on a suite (data under datasets/<suite>).
eval model="clip-vit-b32" suite="winoground":
    cargo run --release -p benchctl -- eval --model {{model}} --suite {{suite}}

# Regenerate results/LEADERBOARD.md from the stored runs.
leaderboard:
    cargo run --release -p benchctl -- leaderboard

# Encoder throughput of full-size ViT-B/32 on random weights.
bench batch="32":
    cargo run --release -p benchctl -- bench --model clip-vit-b32 --batch {{batch}}

# Regenerate the parity fixtures (needs the Python packages in scripts/requirements.txt).
fixtures:
    python3 scripts/gen_fixtures.py
