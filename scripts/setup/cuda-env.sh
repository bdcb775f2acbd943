# Source this file to build benchctl with `--features cuda` on a machine with no CUDA toolkit
# and no GPU: `source scripts/setup/cuda-env.sh && cargo build --release -p benchctl --features cuda`.
#
# It installs (once) the CUDA 13.0 toolkit wheels from PyPI under target/cuda-tools, gives the
# versioned libraries the unversioned names the linker looks for, generates a link-only
# `libcuda.so` stub (the driver ships the real one; the wheels do not), and exports what
# candle's and cudarc's build scripts read. Nothing here is needed to *run* the binary: on a
# GPU machine it loads the driver's libcuda.so.1 and the toolkit's libraries through
# LD_LIBRARY_PATH (docs/performance.md, "GPU").
#
# Why 13.0 and not the newest toolkit: candle compiles its kernels to PTX, and a driver JIT-
# compiles only PTX of an ISA version it knows. 13.0's PTX (ISA 9.0) loads on every CUDA 13
# driver (580 and newer); 13.2's (ISA 9.2) is refused by a 580 driver.

cuda_toolkit_version=13.0.2
cuda_tools="$PWD/target/cuda-tools"
cuda_root="$cuda_tools/nvidia/cu13"

if [ ! -x "$cuda_root/bin/nvcc" ] || [ ! -e "$cuda_tools/.toolkit-$cuda_toolkit_version" ]; then
    rm -rf "$cuda_tools"
    python3 -m pip install --quiet --target "$cuda_tools" \
        "cuda-toolkit[nvcc,crt,nvvm,cccl,cudart,cublas,curand,nvrtc]==$cuda_toolkit_version" || return 1
    touch "$cuda_tools/.toolkit-$cuda_toolkit_version"
fi

# The linker asks for libcublas.so; the wheels ship libcublas.so.13 only.
for lib in cudart cublas cublasLt curand nvrtc; do
    for versioned in "$cuda_root/lib/lib$lib.so."[0-9]*; do
        [ -e "$versioned" ] && ln -sf "${versioned##*/}" "$cuda_root/lib/lib$lib.so"
        break
    done
done

# A link-only libcuda.so with SONAME libcuda.so.1 that defines every driver function cudarc
# declares (read from cudarc's own bindings, so a cudarc update needs no edit here). At run
# time the dynamic loader finds the driver's real libcuda.so.1 instead.
if [ ! -e "$cuda_root/lib/stubs/libcuda.so" ]; then
    cudarc_dir=$(cargo metadata --format-version 1 --locked --all-features 2>/dev/null |
        sed -n 's#.*"manifest_path":"\([^"]*/cudarc-[0-9.]*\)/Cargo.toml".*#\1#p')
    if [ -z "$cudarc_dir" ]; then
        echo "cuda-env: cudarc's sources not found (run \`cargo fetch\` first)" >&2
        return 1
    fi
    mkdir -p "$cuda_root/lib/stubs"
    grep -oE '^\s+fn cu[A-Za-z0-9_]+\(' "$cudarc_dir/src/driver/sys/mod.rs" | sed -E 's/^\s+fn //; s/\($//' |
        sort -u | sed 's/.*/int &(void) { return 999; }/' >"$cuda_root/lib/stubs/cuda_stub.c"
    cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cuda_root/lib/stubs/libcuda.so" "$cuda_root/lib/stubs/cuda_stub.c" ||
        return 1
fi

export PATH="$cuda_root/bin:$PATH"
export CUDA_ROOT="$cuda_root" CUDA_HOME="$cuda_root" CUDA_PATH="$cuda_root"
# H100 and H200 (sm_90); set it before sourcing for another GPU.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export CUDARC_CUDA_VERSION=13000
# The wheels keep CCCL's headers (cub, thrust, cuda/std) one folder down.
export NVCC_APPEND_FLAGS="-I$cuda_root/include/cccl"
