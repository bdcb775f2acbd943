// benchctl's CUDA kernels: fused multi-head self-attention and the dense layers' epilogue.
// Compiled to PTX by build.rs (nvcc) when the `cuda` feature is on; launched from
// src/cuda.rs through candle's custom operations. Every kernel reads its input in the model's
// dtype (f32, f16 or bf16), computes in f32 and writes the model's dtype.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
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
// Attention on the tensor cores (f16, bf16; head widths 32 to 128; sm_80 and newer), flash
// attention 2's scheme in one pass over the keys. Four warps per block, 16 queries each (64
// per block, as on the CUDA cores) or 32 (the wide kernels; src/cuda/attention.rs sizes the
// grid and, past 48 KB, the block's shared memory as `FlashTile` does). The key and
// value tiles are copied into shared memory asynchronously (`cp.async`), two tiles deep: the
// next tile is in flight while the warps compute on the current one. Per tile each warp:
// - takes q·kᵀ on the tensor cores (`mma.m16n8k16`, operands loaded with `ldmatrix`; the
//   query fragments stay in registers for the whole pass, or in shared memory for the wide
//   kernels of heads wider than 64);
// - scales the logits, adds the terms and hides keys past the sequence, in the accumulators'
//   registers, and updates each query row's running maximum and sum (the output accumulators
//   rescaled when the maximum moves);
// - hands the weights, rounded to the input type, straight from those registers to the
//   product with the values (`ldmatrix.trans` gives the values' operand).
// The output goes through shared memory, to be written in 16-byte runs. Tiles hold 64 keys
// (32 for heads wider than 80: two stages in 48 KB, and the wide kernels' accumulators in the
// registers); rows are padded by 16 bytes so that `ldmatrix`'s eight row addresses fall in
// distinct banks.
//
// Register layout of `mma.m16n8k16` (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4: the accumulator's c0, c1 are row g, columns 2t and 2t + 1,
// c2, c3 the same columns of row g + 8; operand A's four registers are rows g, g + 8, g,
// g + 8 at columns (2t, 2t + 1), (2t, 2t + 1), (2t + 8, 2t + 9), (2t + 8, 2t + 9); operand B's
// two are rows (2t, 2t + 1) and (2t + 8, 2t + 9) of column g. So two 8-key accumulator tiles
// of logits, packed in pairs, are the A operand of the 16 keys they cover.

constexpr int FLASH_WARPS = 4;
// Queries per block: 16 per fragment, FRAGS fragments per warp. Two fragments (128 queries)
// share every key and value fragment loaded from shared memory between twice the products,
// and every tile copied between twice the queries, for twice the registers.
template <int FRAGS> __host__ __device__ constexpr int flash_queries() { return 16 * FRAGS * FLASH_WARPS; }

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, asynchronously; zeros where `valid` is false.
__device__ __forceinline__ void copy_async_16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending> __device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p))
                 : "memory");
}
__device__ __forceinline__ void load_matrix_x4_transposed(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p))
                 : "memory");
}

// d += a·b for a 16×16 row-major A, a 16×8 column-major B and a 16×8 f32 accumulator.
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two values rounded to T in one 32-bit register, `low` in the lower half (the lower column).
template <typename T> __device__ __forceinline__ uint32_t pack_pair(float low, float high);
template <> __device__ __forceinline__ uint32_t pack_pair<__half>(float low, float high) {
    __half2 v = __floats2half2_rn(low, high);
    return *reinterpret_cast<uint32_t*>(&v);
}
template <> __device__ __forceinline__ uint32_t pack_pair<__nv_bfloat16>(float low, float high) {
    __nv_bfloat162 v = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// `TERMS`: a bias or mask is added to the logits. Without them (every tower but causal texts and
// Swin's windows) the softmax runs on the raw products in base 2, the scale folded into one
// multiply-add per weight, as flash attention 2 does; with them, on the scaled logits plus the
// terms in base e, so that a term of −∞ hides its key exactly.
//
// Head widths that are not a multiple of 16 (SigLIP so400m's 72) and those whose 16-byte runs do
// not divide the block's threads (72, 80, 96) are computed on the width rounded up to 16, the
// extra columns of every shared row held at zero (zero queries and keys add nothing to a
// logit); their copies take one run per thread in turn rather than fixed rows per pass.
template <int D, int FRAGS> struct FlashTile {
    static constexpr int DP = (D + 15) / 16 * 16;  // the width the products run on
    // The query fragments stay in registers for the whole pass unless they would take more
    // than 32 a thread (two fragments of heads wider than 64): those are read from shared
    // memory for every tile instead, as flash attention 2 does, leaving the registers to the
    // output accumulators.
    static constexpr bool QUERIES_IN_REGISTERS = FRAGS * DP / 4 <= 32;
    // Keys per tile: 64, but 32 for heads wider than 80 (two one-fragment stages within the 48 KB
    // of static shared memory; room in the registers for two fragments' accumulators).
    static constexpr int KEYS = DP > 80 ? 32 : 64;
    static constexpr int LD = DP + 8;        // a shared row, padded by 16 bytes
    static constexpr int STAGE = 2 * KEYS * LD;  // one tile's keys, then its values
    // Two stages, then the queries where they stay in shared memory (else they are staged
    // where the second tile goes, before the first tile is computed).
    static constexpr int ELEMENTS = 2 * STAGE + (QUERIES_IN_REGISTERS ? 0 : flash_queries<FRAGS>() * LD);
};
// Blocks needing more than this ask for it at launch (dynamic shared memory, see
// `flash_shared_bytes` in src/cuda/attention.rs, which sizes it as `FlashTile` does).
constexpr int STATIC_SHARED_BYTES = 48 * 1024;

template <typename T, int D, int FRAGS, bool TERMS>
__device__ void attend_flash_with(T* __restrict__ shared, const T* __restrict__ qkv, T* __restrict__ out, int seq,
                                  int width, LogitTerms terms, float scale, int first_row) {
#if __CUDA_ARCH__ >= 800
    using Tile = FlashTile<D, FRAGS>;
    constexpr int DP = Tile::DP;
    constexpr int KT = Tile::KEYS;
    constexpr int LD = Tile::LD;
    constexpr int STAGE = Tile::STAGE;
    constexpr bool IN_REGISTERS = Tile::QUERIES_IN_REGISTERS;
    constexpr int QUERIES = flash_queries<FRAGS>();
    constexpr int CHUNK = 16 / sizeof(T);   // values per 16-byte copy
    constexpr int CHUNKS = D / CHUNK;
    constexpr int THREADS = 32 * FLASH_WARPS;
    // Fixed rows per pass when the runs divide the threads; else one run per thread in turn.
    constexpr bool PASSES = THREADS % CHUNKS == 0;
    constexpr int ROWS_PER_PASS = PASSES ? THREADS / CHUNKS : 1;  // rows one pass of the copies covers
    static_assert(D % CHUNK == 0, "rows are copied in 16-byte runs");
    static_assert(!PASSES || (KT % ROWS_PER_PASS == 0 && QUERIES % ROWS_PER_PASS == 0),
                  "every copy pass covers whole rows");
    static_assert(!IN_REGISTERS || STAGE >= QUERIES * LD, "the queries are staged where the second tile goes");

    const int h = blockIdx.y, row = first_row + blockIdx.z, q0 = blockIdx.x * QUERIES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int warp_q0 = q0 + warp * 16 * FRAGS;  // this warp's first query
    const size_t stride = 3 * (size_t)width;
    const T* base = qkv + (size_t)row * seq * stride;

    // This thread's copies: 16 bytes at column `copy_col` of rows copy_row + p·ROWS_PER_PASS.
    // Rows past the sequence are zeros (a key of zeros is hidden below, a value of zeros weighs 0).
    const int copy_row = threadIdx.x / CHUNKS, copy_col = (threadIdx.x % CHUNKS) * CHUNK;
    const size_t pass_stride = (size_t)ROWS_PER_PASS * stride;
    auto copy_rows = [&](T* dst, int first, int rows, int col) {
        if constexpr (PASSES) {
            const T* src = base + (size_t)(first + copy_row) * stride + col + copy_col;
            T* to = dst + copy_row * LD + copy_col;
#pragma unroll
            for (int p = 0; p < rows / ROWS_PER_PASS; ++p) {
                const bool valid = first + copy_row + p * ROWS_PER_PASS < seq;
                copy_async_16(to + p * ROWS_PER_PASS * LD, valid ? src + p * pass_stride : base, valid);
            }
        } else {
            for (int i = threadIdx.x; i < rows * CHUNKS; i += THREADS) {
                const int r = i / CHUNKS, c = (i % CHUNKS) * CHUNK;
                const bool valid = first + r < seq;
                copy_async_16(dst + r * LD + c, valid ? base + (size_t)(first + r) * stride + col + c : base, valid);
            }
        }
    };
    if constexpr (DP > D) {
        // The columns past the head, in every row of both stages: zero for good (copies write
        // only the first D).
        for (int i = threadIdx.x; i < Tile::ELEMENTS / LD * (DP - D); i += THREADS)
            shared[(i / (DP - D)) * LD + D + i % (DP - D)] = from_float<T>(0.f);
    }
    auto copy_tile = [&](int tile, int stage) {
        T* dst = shared + stage * STAGE;
        copy_rows(dst, tile * KT, KT, width + h * D);
        copy_rows(dst + KT * LD, tile * KT, KT, 2 * width + h * D);
        copy_async_commit();
    };

    const int tiles = (seq + KT - 1) / KT;
    T* staged_queries = shared + (IN_REGISTERS ? STAGE : 2 * STAGE);
    copy_rows(staged_queries, q0, QUERIES, h * D);
    copy_async_commit();
    copy_tile(0, 0);
    copy_async_wait<1>();  // the queries
    __syncthreads();
    // Each fragment's rows as `ldmatrix` addresses them (lane l gives row l % 8 of matrix l / 8).
    const T* query_rows[FRAGS];
#pragma unroll
    for (int f = 0; f < FRAGS; ++f)
        query_rows[f] = staged_queries + ((warp * FRAGS + f) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD +
                        (lane >> 4) * 8;
    uint32_t query[FRAGS][IN_REGISTERS ? DP / 16 : 1][4];
    if constexpr (IN_REGISTERS) {
#pragma unroll
        for (int f = 0; f < FRAGS; ++f)
#pragma unroll
            for (int c = 0; c < DP / 16; ++c) load_matrix_x4(query[f][c], query_rows[f] + c * 16);
        __syncthreads();  // the second stage is free for the second tile
    }

    // Base 2 without terms: logits are products times `scale · log2 e`, applied with the shift.
    const float unit = TERMS ? 1.f : scale * 1.4426950408889634f;
    // Per fragment, rows g and g + 8: the running maximum (in the products' units without
    // terms) and this lane's part of the sum (the row's four lanes are summed at the end).
    float row_max[FRAGS][2], row_sum[FRAGS][2];
    float acc[FRAGS][DP / 8][4];
#pragma unroll
    for (int f = 0; f < FRAGS; ++f) {
        row_max[f][0] = row_max[f][1] = -INFINITY;
        row_sum[f][0] = row_sum[f][1] = 0.f;
#pragma unroll
        for (int n = 0; n < DP / 8; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[f][n][i] = 0.f;
    }

    // ldmatrix's row addresses: lane l gives row l % 8 of matrix l / 8.
    const int key_offset = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int value_offset = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;

    for (int tile = 0; tile < tiles; ++tile) {
        if (tile + 1 < tiles) {
            copy_tile(tile + 1, (tile + 1) & 1);
            copy_async_wait<1>();
        } else {
            copy_async_wait<0>();
        }
        __syncthreads();
        const T* keys = shared + (tile & 1) * STAGE;
        const T* values = keys + KT * LD;

        // Logits: per 16 keys, the four 8×8 matrices (keys 0–7 | 8–15) × (dims 0–7 | 8–15) of
        // each 16 dims give operand B of both 8-key tiles, for every fragment.
        float s[FRAGS][KT / 8][4];
#pragma unroll
        for (int f = 0; f < FRAGS; ++f)
#pragma unroll
            for (int n = 0; n < KT / 8; ++n)
#pragma unroll
                for (int i = 0; i < 4; ++i) s[f][n][i] = 0.f;
        if constexpr (IN_REGISTERS) {
#pragma unroll
            for (int j = 0; j < KT / 16; ++j) {
#pragma unroll
                for (int c = 0; c < DP / 16; ++c) {
                    uint32_t k[4];
                    load_matrix_x4(k, keys + j * 16 * LD + key_offset + c * 16);
#pragma unroll
                    for (int f = 0; f < FRAGS; ++f) {
                        mma_16816<T>(s[f][2 * j], query[f][c], k[0], k[1]);
                        mma_16816<T>(s[f][2 * j + 1], query[f][c], k[2], k[3]);
                    }
                }
            }
        } else {
            // Per 16 dims, each fragment's queries once, then every key of the tile.
#pragma unroll
            for (int c = 0; c < DP / 16; ++c) {
                uint32_t q[FRAGS][4];
#pragma unroll
                for (int f = 0; f < FRAGS; ++f) load_matrix_x4(q[f], query_rows[f] + c * 16);
#pragma unroll
                for (int j = 0; j < KT / 16; ++j) {
                    uint32_t k[4];
                    load_matrix_x4(k, keys + j * 16 * LD + key_offset + c * 16);
#pragma unroll
                    for (int f = 0; f < FRAGS; ++f) {
                        mma_16816<T>(s[f][2 * j], q[f], k[0], k[1]);
                        mma_16816<T>(s[f][2 * j + 1], q[f], k[2], k[3]);
                    }
                }
            }
        }

        // Hide keys past the sequence (only the last tile has any), scale and add the terms.
        const int k0 = tile * KT + 2 * t;
        if (TERMS || tile * KT + KT > seq) {
#pragma unroll
            for (int f = 0; f < FRAGS; ++f) {
#pragma unroll
                for (int n = 0; n < KT / 8; ++n) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int k = k0 + n * 8 + (i & 1);
                        const int q = warp_q0 + f * 16 + g + (i >> 1) * 8;
                        float v = -INFINITY;
                        if (k < seq) {
                            v = s[f][n][i];
                            if (TERMS) {
                                v *= scale;
                                if (q < seq) v += logit_terms(terms, row, h, q, k, seq);
                            }
                        }
                        s[f][n][i] = v;
                    }
                }
            }
        }
        float shift[FRAGS][2];  // what each weight's exponent is taken against, in base-2 units
#pragma unroll
        for (int f = 0; f < FRAGS; ++f) {
            float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < KT / 8; ++n) {
                tile_max[0] = fmaxf(tile_max[0], fmaxf(s[f][n][0], s[f][n][1]));
                tile_max[1] = fmaxf(tile_max[1], fmaxf(s[f][n][2], s[f][n][3]));
            }
#pragma unroll
            for (int w = 0; w < 2; ++w) {
                tile_max[w] = fmaxf(tile_max[w], __shfl_xor_sync(0xffffffff, tile_max[w], 1));
                tile_max[w] = fmaxf(tile_max[w], __shfl_xor_sync(0xffffffff, tile_max[w], 2));
                const float new_max = fmaxf(row_max[f][w], tile_max[w]);
                // A row with every key so far hidden keeps its zeros (and −∞ maximum).
                const float rescale = new_max == -INFINITY ? 1.f
                                      : TERMS              ? __expf(row_max[f][w] - new_max)
                                                           : exp2_approx((row_max[f][w] - new_max) * unit);
                row_sum[f][w] *= rescale;
#pragma unroll
                for (int n = 0; n < DP / 8; ++n) {
                    acc[f][n][2 * w] *= rescale;
                    acc[f][n][2 * w + 1] *= rescale;
                }
                row_max[f][w] = new_max;
                shift[f][w] = new_max == -INFINITY ? 0.f : (TERMS ? new_max * 1.4426950408889634f : new_max * unit);
            }
        }
        const float to_base2 = TERMS ? 1.4426950408889634f : unit;

        // Weights times values, 16 keys at a time: the weights of two 8-key tiles are operand A;
        // per 16 dims, the four 8×8 matrices (keys 0–7 | 8–15) × (dims 0–7 | 8–15), transposed,
        // give operand B of both 8-dim tiles, for every fragment.
#pragma unroll
        for (int j = 0; j < KT / 16; ++j) {
            uint32_t p[FRAGS][4];
#pragma unroll
            for (int f = 0; f < FRAGS; ++f) {
                float e[2][4];
#pragma unroll
                for (int half = 0; half < 2; ++half)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        e[half][i] = exp2_approx(fmaf(s[f][2 * j + half][i], to_base2, -shift[f][i >> 1]));
                        row_sum[f][i >> 1] += e[half][i];
                    }
                p[f][0] = pack_pair<T>(e[0][0], e[0][1]);
                p[f][1] = pack_pair<T>(e[0][2], e[0][3]);
                p[f][2] = pack_pair<T>(e[1][0], e[1][1]);
                p[f][3] = pack_pair<T>(e[1][2], e[1][3]);
            }
#pragma unroll
            for (int c = 0; c < DP / 16; ++c) {
                uint32_t v[4];
                load_matrix_x4_transposed(v, values + j * 16 * LD + value_offset + c * 16);
#pragma unroll
                for (int f = 0; f < FRAGS; ++f) {
                    mma_16816<T>(acc[f][2 * c], p[f], v[0], v[1]);
                    mma_16816<T>(acc[f][2 * c + 1], p[f], v[2], v[3]);
                }
            }
        }
        __syncthreads();  // every warp is done with this stage before the next copy into it
    }

    // Each warp's rows through its own part of shared memory, then 16-byte runs per row.
    T* staged = shared + warp * 16 * FRAGS * LD;
#pragma unroll
    for (int f = 0; f < FRAGS; ++f) {
        float inv[2];
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            float sum = row_sum[f][w];
            sum += __shfl_xor_sync(0xffffffff, sum, 1);
            sum += __shfl_xor_sync(0xffffffff, sum, 2);
            inv[w] = sum > 0.f ? 1.f / sum : 0.f;
        }
        T* rows = staged + f * 16 * LD;
#pragma unroll
        for (int n = 0; n < DP / 8; ++n) {
            *reinterpret_cast<uint32_t*>(rows + g * LD + n * 8 + 2 * t) =
                pack_pair<T>(acc[f][n][0] * inv[0], acc[f][n][1] * inv[0]);
            *reinterpret_cast<uint32_t*>(rows + (g + 8) * LD + n * 8 + 2 * t) =
                pack_pair<T>(acc[f][n][2] * inv[1], acc[f][n][3] * inv[1]);
        }
    }
    __syncwarp();
    for (int i = lane; i < 16 * FRAGS * CHUNKS; i += 32) {
        const int r = i / CHUNKS, c = i % CHUNKS;
        const int q = warp_q0 + r;
        if (q < seq)
            *reinterpret_cast<uint4*>(out + ((size_t)row * seq + q) * width + h * D + c * CHUNK) =
                *reinterpret_cast<const uint4*>(staged + r * LD + c * CHUNK);
    }
#endif
}

template <typename T, int D, int FRAGS>
__device__ void attend_flash_in(T* __restrict__ shared, const T* __restrict__ qkv, T* __restrict__ out, int seq,
                                int width, LogitTerms terms, float scale, int first_row) {
    if (terms.bias != nullptr || terms.mask != nullptr)
        attend_flash_with<T, D, FRAGS, true>(shared, qkv, out, seq, width, terms, scale, first_row);
    else
        attend_flash_with<T, D, FRAGS, false>(shared, qkv, out, seq, width, terms, scale, first_row);
}

__device__ __forceinline__ unsigned dynamic_shared_bytes() {
    unsigned bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(bytes));
    return bytes;
}

template <typename T, int D, int FRAGS>
__device__ void attend_flash(const T* __restrict__ qkv, T* __restrict__ out, int seq, int width, LogitTerms terms,
                             float scale, int first_row) {
    // One shared buffer for both forms (each declaring its own would double the block's share).
    constexpr int BYTES = FlashTile<D, FRAGS>::ELEMENTS * sizeof(T);
    if constexpr (BYTES <= STATIC_SHARED_BYTES) {
        __shared__ __align__(128) T shared[FlashTile<D, FRAGS>::ELEMENTS];
        attend_flash_in<T, D, FRAGS>(shared, qkv, out, seq, width, terms, scale, first_row);
    } else {
        extern __shared__ __align__(128) unsigned char dynamic_shared[];
        // A launch that sized the block's memory otherwise than `FlashTile` fails loudly.
        if (dynamic_shared_bytes() < BYTES) __trap();
        attend_flash_in<T, D, FRAGS>(reinterpret_cast<T*>(dynamic_shared), qkv, out, seq, width, terms, scale,
                                     first_row);
    }
}

#define ATTEND_FLASH(NAME, T, D, FRAGS)                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * FLASH_WARPS)                                        \
        NAME(const T* qkv, T* out, int seq, int width, const float* bias, const float* mask, int groups, \
             float scale, int first_row) {                                                                \
        attend_flash<T, D, FRAGS>(qkv, out, seq, width, LogitTerms{bias, mask, groups}, scale, first_row); \
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



// 64 queries a block (one fragment a warp) and 128 (two, "wide") for every tensor-core width.
ATTEND_FLASH(attend_flash_f16_32, __half, 32, 1)
ATTEND_FLASH(attend_flash_bf16_32, __nv_bfloat16, 32, 1)
ATTEND_FLASH(attend_flash_f16_64, __half, 64, 1)
ATTEND_FLASH(attend_flash_bf16_64, __nv_bfloat16, 64, 1)
ATTEND_FLASH(attend_flash_f16_72, __half, 72, 1)
ATTEND_FLASH(attend_flash_bf16_72, __nv_bfloat16, 72, 1)
ATTEND_FLASH(attend_flash_f16_80, __half, 80, 1)
ATTEND_FLASH(attend_flash_bf16_80, __nv_bfloat16, 80, 1)
ATTEND_FLASH(attend_flash_f16_96, __half, 96, 1)
ATTEND_FLASH(attend_flash_bf16_96, __nv_bfloat16, 96, 1)
ATTEND_FLASH(attend_flash_f16_128, __half, 128, 1)
ATTEND_FLASH(attend_flash_bf16_128, __nv_bfloat16, 128, 1)
ATTEND_FLASH(attend_flash_wide_f16_32, __half, 32, 2)
ATTEND_FLASH(attend_flash_wide_bf16_32, __nv_bfloat16, 32, 2)
ATTEND_FLASH(attend_flash_wide_f16_64, __half, 64, 2)
ATTEND_FLASH(attend_flash_wide_bf16_64, __nv_bfloat16, 64, 2)
ATTEND_FLASH(attend_flash_wide_f16_72, __half, 72, 2)
ATTEND_FLASH(attend_flash_wide_bf16_72, __nv_bfloat16, 72, 2)
ATTEND_FLASH(attend_flash_wide_f16_80, __half, 80, 2)
ATTEND_FLASH(attend_flash_wide_bf16_80, __nv_bfloat16, 80, 2)
ATTEND_FLASH(attend_flash_wide_f16_96, __half, 96, 2)
ATTEND_FLASH(attend_flash_wide_bf16_96, __nv_bfloat16, 96, 2)
ATTEND_FLASH(attend_flash_wide_f16_128, __half, 128, 2)
ATTEND_FLASH(attend_flash_wide_bf16_128, __nv_bfloat16, 128, 2)

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
