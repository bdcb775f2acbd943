// benchctl's CUDA kernels: fused multi-head self-attention and the dense layers' epilogue.
// Compiled to PTX by build.rs (nvcc) when the `cuda` feature is on; launched from
// src/cuda.rs through candle's custom operations. Every kernel reads its input in the model's
// dtype (f32, f16 or bf16), computes in f32 and writes the model's dtype.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// What is added to the scaled logits of batch row `row`, head `h`, query `q`, key `k`: a
// per-head (heads, seq, seq) bias (Swin's relative positions) and a (groups, seq, seq) mask,
// row `row` taking group `row % groups` (a causal mask is one group; shifted windows several).
struct LogitTerms {
    const float* bias;
    const float* mask;
    int groups;
};

__device__ __forceinline__ float logit_terms(const LogitTerms& t, int row, int h, int q, int k, int seq) {
    float v = 0.f;
    if (t.bias) v += t.bias[((size_t)h * seq + q) * seq + k];
    if (t.mask) v += t.mask[((size_t)(row % t.groups) * seq + q) * seq + k];
    return v;
}

// ---------------------------------------------------------------------------------------
// Attention on the CUDA cores: one thread per query, keys and values staged through shared
// memory a tile at a time, softmax online (running maximum and sum, key by key). f32 runs here
// (its products are not rounded to tensor-core inputs), and any head width the tensor-core
// kernel does not take. Grid: (query tiles, heads, rows from `first_row`); block: SIMT_QUERIES
// threads.

constexpr int SIMT_QUERIES = 64;
constexpr int SIMT_KEYS = 32;

template <typename T, int D>
__device__ void attend_simt(const T* __restrict__ qkv, T* __restrict__ out, int seq, int width, LogitTerms terms,
                            float scale, int first_row) {
    __shared__ float keys[SIMT_KEYS][D];
    __shared__ float values[SIMT_KEYS][D];
    const int h = blockIdx.y, row = first_row + blockIdx.z;
    const int q = blockIdx.x * SIMT_QUERIES + threadIdx.x;
    const size_t stride = 3 * (size_t)width;
    const T* base = qkv + (size_t)row * seq * stride;
    const bool active = q < seq;

    float query[D], acc[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        query[d] = active ? to_float(base[(size_t)q * stride + h * D + d]) * scale : 0.f;
        acc[d] = 0.f;
    }
    float running_max = -INFINITY, running_sum = 0.f;
    for (int k0 = 0; k0 < seq; k0 += SIMT_KEYS) {
        const int n = min(SIMT_KEYS, seq - k0);
        __syncthreads();
        for (int i = threadIdx.x; i < n * D; i += blockDim.x) {
            const int j = i / D, d = i % D;
            const T* token = base + (size_t)(k0 + j) * stride + h * D + d;
            keys[j][d] = to_float(token[width]);
            values[j][d] = to_float(token[2 * width]);
        }
        __syncthreads();
        if (!active) continue;
        // One key at a time: the running maximum moves rarely after the first keys, so the
        // rescale of the accumulator is a branch seldom taken, and no logits are stored.
#pragma unroll 2
        for (int j = 0; j < n; ++j) {
            float s = 0.f;
#pragma unroll
            for (int d = 0; d < D; ++d) s = fmaf(query[d], keys[j][d], s);
            s += logit_terms(terms, row, h, q, k0 + j, seq);
            if (s == -INFINITY) continue;  // masked: weighs exactly 0
            if (s > running_max) {
                const float rescale = __expf(running_max - s);
                running_sum *= rescale;
#pragma unroll
                for (int d = 0; d < D; ++d) acc[d] *= rescale;
                running_max = s;
            }
            const float p = __expf(s - running_max);
            running_sum += p;
#pragma unroll
            for (int d = 0; d < D; ++d) acc[d] = fmaf(p, values[j][d], acc[d]);
        }
    }
    if (!active) return;
    const float inv = running_sum > 0.f ? 1.f / running_sum : 0.f;
    T* dst = out + ((size_t)row * seq + q) * width + h * D;
#pragma unroll
    for (int d = 0; d < D; ++d) dst[d] = from_float<T>(acc[d] * inv);
}

// ---------------------------------------------------------------------------------------
// Attention on the tensor cores (f16, bf16; head widths 32, 64, 128; sm_80 and newer), in one
// pass over the keys (flash attention's scheme): four warps per block, 16 queries each (64 per
// block, as on the CUDA cores: src/cuda.rs sizes the grid by it); per tile of 64 keys the
// logits stay in the warps' accumulator registers, the running maximum and sum are kept per
// query row, the output accumulators are rescaled when the maximum moves, and the weights go
// from the logits' registers straight into the next product's operand registers. Shared memory holds only the key and value tiles (rows
// padded by 16 bytes, so the tensor-core loads hit distinct banks).
//
// It relies on the register layout of sm_80+ wmma fragments (that of mma.m16n8k16): lane l
// holds, for element i of a 16×16 accumulator or row-major operand, row l/4 + 8·((i/2) mod 2)
// and column 2·(l mod 4) + (i mod 2) + 8·(i/4). The CUDA tests check the results against
// candle's composed attention, masks included.

constexpr int MMA_WARPS = 4;
constexpr int MMA_QUERIES = 16 * MMA_WARPS;
constexpr int FLASH_KEYS = 64;

template <typename T, int D>
__device__ void attend_flash(const T* __restrict__ qkv, T* __restrict__ out, int seq, int width, LogitTerms terms,
                             float scale, int first_row) {
#if __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    constexpr int LD = D + 8;
    constexpr int KT = FLASH_KEYS;
    static_assert(2 * KT >= MMA_QUERIES, "the query tile is staged where keys and values go");
    __shared__ __align__(32) T kv[2 * KT * LD];
    T* keys = kv;
    T* values = kv + KT * LD;

    const int h = blockIdx.y, row = first_row + blockIdx.z, q0 = blockIdx.x * MMA_QUERIES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t stride = 3 * (size_t)width;
    const T* base = qkv + (size_t)row * seq * stride;

    // Stage `rows` rows of one head's slice (D wide from column `col`) with row stride LD.
    auto stage = [&](T* dst, int first, int rows, int col) {
        constexpr int PER_CHUNK = 16 / sizeof(T);
        constexpr int CHUNKS = D / PER_CHUNK;
        for (int i = threadIdx.x; i < rows * CHUNKS; i += blockDim.x) {
            const int r = i / CHUNKS, c = i % CHUNKS;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (first + r < seq)
                v = *reinterpret_cast<const uint4*>(base + (size_t)(first + r) * stride + col + c * PER_CHUNK);
            *reinterpret_cast<uint4*>(dst + r * LD + c * PER_CHUNK) = v;
        }
    };

    stage(kv, q0, MMA_QUERIES, h * D);
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> query[D / 16];
#pragma unroll
    for (int c = 0; c < D / 16; ++c) wmma::load_matrix_sync(query[c], kv + warp * 16 * LD + c * 16, LD);

    const int group = lane / 4, pair = 2 * (lane % 4);
    // The two query rows this lane holds elements of, and their state.
    const int q_row[2] = {q0 + warp * 16 + group, q0 + warp * 16 + group + 8};
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};  // this lane's part; the row's four lanes are summed at the end

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.f);

    for (int k0 = 0; k0 < seq; k0 += KT) {
        __syncthreads();
        stage(keys, k0, KT, width + h * D);
        stage(values, k0, KT, 2 * width + h * D);
        __syncthreads();

        wmma::fragment<wmma::accumulator, 16, 16, 16, float> s[KT / 16];
#pragma unroll
        for (int n = 0; n < KT / 16; ++n) {
            wmma::fill_fragment(s[n], 0.f);
#pragma unroll
            for (int c = 0; c < D / 16; ++c) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> k;
                wmma::load_matrix_sync(k, keys + n * 16 * LD + c * 16, LD);
                wmma::mma_sync(s[n], query[c], k, s[n]);
            }
        }

        // Scale, add the terms, hide keys past the sequence; each row's tile maximum.
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < KT / 16; ++n) {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int which = (i >> 1) & 1;
                const int k = k0 + n * 16 + pair + (i & 1) + 8 * (i >> 2);
                const int q = q_row[which];
                float v = -INFINITY;
                if (k < seq && q < seq) v = s[n].x[i] * scale + logit_terms(terms, row, h, q, k, seq);
                s[n].x[i] = v;
                tile_max[which] = fmaxf(tile_max[which], v);
            }
        }
        float rescale[2], new_max[2];
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            tile_max[w] = fmaxf(tile_max[w], __shfl_xor_sync(0xffffffff, tile_max[w], 1));
            tile_max[w] = fmaxf(tile_max[w], __shfl_xor_sync(0xffffffff, tile_max[w], 2));
            new_max[w] = fmaxf(row_max[w], tile_max[w]);
            // A row with every key so far masked keeps its zeros (and −∞ maximum).
            rescale[w] = new_max[w] == -INFINITY ? 1.f : __expf(row_max[w] - new_max[w]);
            row_sum[w] *= rescale[w];
            row_max[w] = new_max[w];
        }
#pragma unroll
        for (int n = 0; n < D / 16; ++n)
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[n].x[i] *= rescale[(i >> 1) & 1];

        // The weights, as the next product's row-major operand (same register layout).
#pragma unroll
        for (int kk = 0; kk < KT / 16; ++kk) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int which = (i >> 1) & 1;
                const float e = new_max[which] == -INFINITY ? 0.f : __expf(s[kk].x[i] - new_max[which]);
                row_sum[which] += e;
                p.x[i] = from_float<T>(e);
            }
#pragma unroll
            for (int n = 0; n < D / 16; ++n) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> v;
                wmma::load_matrix_sync(v, values + kk * 16 * LD + n * 16, LD);
                wmma::mma_sync(acc[n], p, v, acc[n]);
            }
        }
    }

    float inv[2];
#pragma unroll
    for (int w = 0; w < 2; ++w) {
        row_sum[w] += __shfl_xor_sync(0xffffffff, row_sum[w], 1);
        row_sum[w] += __shfl_xor_sync(0xffffffff, row_sum[w], 2);
        inv[w] = row_sum[w] > 0.f ? 1.f / row_sum[w] : 0.f;
    }
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int which = (i >> 1) & 1;
            const int q = q_row[which];
            if (q < seq)
                out[((size_t)row * seq + q) * width + h * D + n * 16 + pair + (i & 1) + 8 * (i >> 2)] =
                    from_float<T>(acc[n].x[i] * inv[which]);
        }
    }
#endif
}

#define ATTEND_FLASH(NAME, T, D)                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * MMA_WARPS)                                          \
        NAME(const T* qkv, T* out, int seq, int width, const float* bias, const float* mask, int groups, \
             float scale, int first_row) {                                                                \
        attend_flash<T, D>(qkv, out, seq, width, LogitTerms{bias, mask, groups}, scale, first_row);       \
    }

#define ATTEND_SIMT(NAME, T, D)                                                                           \
    extern "C" __global__ void __launch_bounds__(SIMT_QUERIES)                                            \
        NAME(const T* qkv, T* out, int seq, int width, const float* bias, const float* mask, int groups, \
             float scale, int first_row) {                                                                \
        attend_simt<T, D>(qkv, out, seq, width, LogitTerms{bias, mask, groups}, scale, first_row);        \
    }

#define ATTEND_SIMT_ALL(D)                            \
    ATTEND_SIMT(attend_simt_f32_##D, float, D)        \
    ATTEND_SIMT(attend_simt_f16_##D, __half, D)       \
    ATTEND_SIMT(attend_simt_bf16_##D, __nv_bfloat16, D)

ATTEND_SIMT_ALL(32)
ATTEND_SIMT_ALL(64)
ATTEND_SIMT_ALL(72)
ATTEND_SIMT_ALL(80)
ATTEND_SIMT_ALL(96)
ATTEND_SIMT_ALL(128)


ATTEND_FLASH(attend_flash_f16_32, __half, 32)
ATTEND_FLASH(attend_flash_bf16_32, __nv_bfloat16, 32)
ATTEND_FLASH(attend_flash_f16_64, __half, 64)
ATTEND_FLASH(attend_flash_bf16_64, __nv_bfloat16, 64)
ATTEND_FLASH(attend_flash_f16_128, __half, 128)
ATTEND_FLASH(attend_flash_bf16_128, __nv_bfloat16, 128)

// ---------------------------------------------------------------------------------------
// A dense layer's epilogue, in place on the product `y` (rows, n): y ← act(y + bias), or
// y ← y + bias + residual; a null bias adds nothing (cuBLASLt added it already). Computed in
// f32, rounded once. Activations: 0 none, 1 quick_gelu, 2 gelu (erf), 3 gelu (tanh).

__device__ __forceinline__ float activate(int activation, float x) {
    switch (activation) {
        case 1: return x / (1.f + __expf(-1.702f * x));
        case 2: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
        case 3: return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        default: return x;
    }
}

template <typename T>
__device__ __forceinline__ float epilogue_one(float y, const T* bias, const T* residual, size_t at, int c, int activation) {
    const float v = y + (bias ? to_float(bias[c]) : 0.f);
    return residual ? v + to_float(residual[at]) : activate(activation, v);
}

// Grid-stride over the product in runs of 8 values (16 bytes for f16/bf16) when the width and
// every pointer allow it (`vector`), one value at a time otherwise. A run never crosses a row.
template <typename T>
__device__ void epilogue(T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ residual, long long total,
                         int n, int activation, int vector) {
    constexpr int RUN = 8;
    const long long threads = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vector) {
        for (long long run = first; run < total / RUN; run += threads) {
            const long long at = run * RUN;
            const int c = (int)(at % n);
            T ys[RUN];
            *reinterpret_cast<uint4*>(ys) = *reinterpret_cast<const uint4*>(y + at);
            if (sizeof(T) == 4) *reinterpret_cast<uint4*>(ys + 4) = *reinterpret_cast<const uint4*>(y + at + 4);
#pragma unroll
            for (int j = 0; j < RUN; ++j) ys[j] = from_float<T>(epilogue_one(to_float(ys[j]), bias, residual, at + j, c + j, activation));
            *reinterpret_cast<uint4*>(y + at) = *reinterpret_cast<const uint4*>(ys);
            if (sizeof(T) == 4) *reinterpret_cast<uint4*>(y + at + 4) = *reinterpret_cast<const uint4*>(ys + 4);
        }
    } else {
        for (long long at = first; at < total; at += threads)
            y[at] = from_float<T>(epilogue_one(to_float(y[at]), bias, residual, at, (int)(at % n), activation));
    }
}

#define EPILOGUE(NAME, T)                                                                                  \
    extern "C" __global__ void NAME(T* y, const T* bias, const T* residual, long long total, int n, int activation, \
                                    int vector) {                                                                  \
        epilogue<T>(y, bias, residual, total, n, activation, vector);                                               \
    }

EPILOGUE(epilogue_f32, float)
EPILOGUE(epilogue_f16, __half)
EPILOGUE(epilogue_bf16, __nv_bfloat16)
