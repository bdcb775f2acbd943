#!/usr/bin/env bash
# The device tool sends the checkout (tracked and unignored files) and the carried .gpu bundle
# with at most 64 MiB in all; the test fixtures alone are 75 MB and the bundle 22 MiB, so one
# call cannot carry every parity fixture. `trim` deletes the committed files no GPU check reads
# (preprocessing fixtures, the demo models, the suites' and the runner's fixtures but the
# VQAScore test's images, the copies of the CLIP tokenizer that scripts/setup/gpu-check.sh copies
# back from fixtures/tokenizer/) and, by default, the `parity` test's four CLIP fixtures (23 MiB:
# run the other test binaries, GPU_CHECK_TESTS without `parity`); `trim parity` keeps those and
# deletes the other families' fixtures instead (run `GPU_CHECK_TESTS=parity`). `restore` checks
# everything out again from git. Run `trim` just before the device call and `restore` right
# after it.
#
#   scripts/setup/gpu-tree.sh trim [parity] | restore
set -euo pipefail
cd "$(dirname "$0")/../.."
fixtures=crates/benchctl-models/tests/fixtures
unread=(
    "$fixtures/preprocess" "$fixtures/preprocess-hf" "$fixtures/preprocess-jpeg" "$fixtures/preprocess-openclip"
    "$fixtures/clip-shapes" "$fixtures/clip-shapes-untrained" "$fixtures/dense" "$fixtures/ftfy"
    "$fixtures/clip-tiny-a/tokenizer.json" "$fixtures/clip-tiny-b/tokenizer.json" "$fixtures/openclip-tiny/tokenizer.json"
    crates/benchctl-suites/tests/fixtures crates/benchctl/tests/fixtures/full-releases
    crates/benchctl/tests/fixtures/vqa-modes
)
parity=("$fixtures/clip-tiny-a" "$fixtures/clip-tiny-b" "$fixtures/openclip-tiny" "$fixtures/dfn-tiny")
families=(
    "$fixtures/eva02-tiny" "$fixtures/pe-core-tiny" "$fixtures/siglip2-tiny" "$fixtures/siglip2-naflex-tiny"
    "$fixtures/metaclip2-tiny" "$fixtures/metaclip2-mt5-tiny" "$fixtures/clip-flant5-tiny" "$fixtures/gemma3-tiny"
    "$fixtures/paligemma-tiny" "$fixtures/qwen3vl-tiny" "$fixtures/qwen25vl-tiny" "$fixtures/fiber-micro"
)
case "${1:-}" in
trim)
    case "${2:-}" in
    "") paths=("${unread[@]}" "${parity[@]}") ;;
    parity) paths=("${unread[@]}" "${families[@]}") ;;
    *)
        echo "usage: scripts/setup/gpu-tree.sh trim [parity] | restore" >&2
        exit 2
        ;;
    esac
    if ! git diff --quiet -- "${paths[@]}" || [ -n "$(git ls-files -o --exclude-standard -- "${paths[@]}")" ]; then
        echo "gpu-tree: uncommitted changes under the fixtures to trim; commit them first" >&2
        exit 1
    fi
    rm -rf "${paths[@]}"
    # (Deleted files are still listed by git ls-files: du skips them.)
    size=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1 || true)
    bundle=$(du -cb .gpu 2>/dev/null | tail -1 | cut -f1 || true)
    echo "gpu-tree: the checkout sends $((size / 1048576)) MiB, .gpu $((bundle / 1048576)) MiB (64 MiB in all)"
    ;;
restore)
    git checkout -- "${unread[@]}" "${parity[@]}" "${families[@]}"
    ;;
*)
    echo "usage: scripts/setup/gpu-tree.sh trim [parity] | restore" >&2
    exit 2
    ;;
esac
