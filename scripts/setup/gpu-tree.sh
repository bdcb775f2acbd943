#!/usr/bin/env bash
# The device tool sends the checkout (tracked and unignored files) with at most 64 MiB in all,
# and the test fixtures alone are 75 MB. `trim` deletes the committed fixtures that
# scripts/setup/gpu-check.sh does not read (preprocessing fixtures, the demo models, and the copies
# of the CLIP tokenizer that gpu-check.sh copies back from fixtures/tokenizer/), so that the
# tree and .gpu/bundle.tar.xz fit; `restore` checks them out again from git. Run `trim` just
# before the device call and `restore` right after it.
#
#   scripts/setup/gpu-tree.sh trim|restore
set -euo pipefail
cd "$(dirname "$0")/../.."
fixtures=crates/benchctl-models/tests/fixtures
paths=(
    "$fixtures/preprocess" "$fixtures/preprocess-hf" "$fixtures/preprocess-jpeg" "$fixtures/preprocess-openclip"
    "$fixtures/clip-shapes" "$fixtures/clip-shapes-untrained"
    "$fixtures/clip-tiny-a/tokenizer.json" "$fixtures/clip-tiny-b/tokenizer.json" "$fixtures/openclip-tiny/tokenizer.json"
)
case "${1:-}" in
trim)
    if ! git diff --quiet --diff-filter=M -- "${paths[@]}"; then
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
    git checkout -- "${paths[@]}"
    ;;
*)
    echo "usage: scripts/setup/gpu-tree.sh trim|restore" >&2
    exit 2
    ;;
esac
