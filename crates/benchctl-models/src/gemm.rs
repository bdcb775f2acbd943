//! The dense layers' matrix product `C = A · Wᵀ + b` on the AVX2 and AVX-512 tiers: a blocked
//! GEMM in the BLIS layout (Van Zee & van de Geijn, "BLIS: A Framework for Rapidly
//! Instantiating BLAS Functionality", ACM TOMS 2015).
//!
//! `W` is `(n, k)` row-major, as every linear layer stores it, so `Wᵀ`'s columns are `W`'s
//! rows. The weights are packed once per layer, when the model loads ([`PackedDense`]), into
//! panels of `NR` output columns per block of `KC` depths (`KC × NR` contiguous). Depth block
//! by depth block, every task works through the same packed weights at once (both cores
//! reading one block beat each streaming its own: 155 vs 105 GFLOP/s); a task owns up to `MC`
//! rows of `A`, read in place in slivers of `MR` rows (unlike BLIS, `A` is not packed: the
//! kernel broadcasts each of its values from memory, and a sliver's rows stay in L1 while
//! the panels stream past). The AVX2 micro-kernel's
//! 6 × 16 tile of `C` takes 12 of the 16 `ymm` registers: per depth, two vector loads of the
//! weight panel, six broadcasts of `A`, twelve FMAs; the AVX-512 one's 6 × 64 tile takes 24
//! of the 32 `zmm` registers (four loads, six broadcasts, 24 FMAs). The first depth block
//! starts from the bias; later ones add to `C`; after the last, an epilogue (the MLP's
//! activation, a residual sum) can run on each tile while it is still in L1.
//!
//! Measured (`benchctl bench --part dense`, ViT-B/32's MLP product, 2 threads, weights packed
//! per call): 155 GFLOP/s on the AVX2 tier of an Intel Xeon, 77 % of its measured FMA peak,
//! where the `gemm` crate's AVX2 kernel ran the image encoder's products at ≈ 47 %. On
//! AVX-512 the `gemm` crate's kernels beat a 12 × 32 version of this kernel on that Xeon
//! (170–197 vs 120–169 GFLOP/s); on an AMD EPYC (Zen 5) the 6 × 64 kernel with the weights
//! packed at load runs the image encoder 12 % and the text encoder 37 % faster than the
//! `gemm` crate (`bench --part both`, alternating binaries); `bench --part dense` gives 462
//! GFLOP/s packed at load (87 % of the peak) against the `gemm` crate's 445 packing per call.
//! The generic tier and every other product
//! (attention's fallback, the patch embedding) keep the `gemm` crate.

use benchctl_cpu::{Isa, Tier};
use rayon::prelude::*;

/// Depths per block: a sliver of `A` (`KC × 6`, 12 KB) stays in L1 beside the streaming
/// panels. With [`NC`], measured on Zen 5 (`bench --part both`, AVX-512, alternating
/// binaries): 512 × 256 ran the image encoder ≈ 3 % faster than 256 × 512 (49.2–50.7 vs
/// 48.9 images/s), the text encoder no slower; AVX2 the same within noise.
const KC: usize = 512;
/// Rows of `A` per task at most: their `MC × KC` values (144 KB) stay in L2.
const MC: usize = 72;
/// Output columns per pass over a task's slivers: the panels (`KC × NC`, 512 KB) stay in L2.
const NC: usize = 256;

/// The most rows of `A` any tier's tile has.
const MAX_MR: usize = 6;

/// The register tile of a tier.
#[derive(Debug, Clone, Copy)]
struct Shape {
    mr: usize,
    nr: usize,
}

fn shape(isa: Isa) -> Option<Shape> {
    match isa {
        Isa::Avx2 => Some(Shape { mr: 6, nr: 16 }),
        Isa::Avx512 => Some(Shape { mr: 6, nr: 64 }),
        Isa::Generic => None,
    }
}

/// A dense layer's weights and bias in the micro-kernel's layout: per depth block of `KC`
/// (the last one as deep as what is left), panels of `nr` output columns (`kc × nr`
/// contiguous, zero columns past `n`): exactly `k × n` values when `nr` divides `n`. Models pack
/// each layer once at load (`models::transformer::Dense`): packing per call cost the text
/// encoder ≈ 15 % of its time on the AVX2 tier (`bench --part text`, 126–133 → 141–153 texts/s
/// packed at load, alternating binaries, AMD EPYC Zen 5).
pub struct PackedDense {
    isa: Isa,
    shape: Shape,
    /// Input width (depths).
    k: usize,
    /// Output width.
    n: usize,
    weights: Vec<f32>,
    /// The bias, padded to whole panels so that every tile reads a full row of it.
    bias: Vec<f32>,
}

impl std::fmt::Debug for PackedDense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedDense({} → {}, {:?})", self.k, self.n, self.isa)
    }
}

impl PackedDense {
    /// `w` `(n, k)` row-major and `bias` (`n` values, zeros when the layer has none) packed
    /// for `tier`'s micro-kernel; `None` on a tier without one.
    pub(crate) fn pack(tier: Tier, w: &[f32], bias: Option<&[f32]>, n: usize, k: usize) -> Option<Self> {
        let shape @ Shape { nr, .. } = shape(tier.isa())?;
        assert!(
            w.len() >= n * k && bias.is_none_or(|b| b.len() >= n),
            "dense: weights smaller than ({n}, {k}) or a bias shorter than {n}"
        );
        let panels = n.div_ceil(nr);
        let mut bias_padded = vec![0f32; panels * nr];
        if let Some(bias) = bias {
            bias_padded[..n].copy_from_slice(&bias[..n]);
        }
        // Block by block, each `kc` deep (the last one shorter: no padding to whole blocks).
        let mut weights = vec![0f32; k * panels * nr];
        for (block, packed) in weights.chunks_mut((KC * panels * nr).max(1)).enumerate() {
            let (depth, kc) = (block * KC, KC.min(k - block * KC));
            packed.par_chunks_mut(nr * kc).enumerate().for_each(|(p, panel)| {
                for c in 0..nr.min(n.saturating_sub(p * nr)) {
                    let row = &w[(p * nr + c) * k + depth..][..kc];
                    for (d, &v) in row.iter().enumerate() {
                        panel[d * nr + c] = v;
                    }
                }
            });
        }
        Some(PackedDense { isa: tier.isa(), shape, k, n, weights, bias: bias_padded })
    }

    /// Whether `tier` has a micro-kernel here (else its products go to the `gemm` crate).
    pub(crate) fn packs_on(tier: Tier) -> bool {
        shape(tier.isa()).is_some()
    }

    /// Input width.
    pub fn in_dim(&self) -> usize {
        self.k
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.n
    }

    /// `out (m, n) = x (m, k) · Wᵀ + bias`, on all cores.
    pub(crate) fn forward(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.forward_then(x, m, None)
    }

    /// [`Self::forward`], then `then` applied to each finished tile while it is still in L1:
    /// called with a row, its first column and that row's values in the tile (in place). A
    /// separate pass over the output (an activation, a residual sum) reads it back from memory
    /// instead: the image encoder's 1,600 × 3,072 MLP activations are 20 MB.
    pub(crate) fn forward_then(&self, x: &[f32], m: usize, then: Option<&Epilogue<'_>>) -> Vec<f32> {
        self.forward_on(x, m, then, rayon::current_num_threads())
    }

    /// [`Self::forward`] on the calling thread alone: for products too small to split, run
    /// many at once by the caller (attention's per-head products).
    pub(crate) fn forward_serial(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.forward_on(x, m, None, 1)
    }

    /// The product on `threads` tasks' worth of row blocks; one runs on the calling thread.
    fn forward_on(&self, x: &[f32], m: usize, then: Option<&Epilogue<'_>>, threads: usize) -> Vec<f32> {
        let PackedDense { isa, shape: Shape { mr, nr }, k, n, ref weights, ref bias } = *self;
        assert!(x.len() >= m * k, "dense: input smaller than ({m}, {k})");
        if k == 0 {
            // No depths: every row is the bias.
            let mut out: Vec<f32> = (0..m).flat_map(|_| bias[..n].iter().copied()).collect();
            if let Some(then) = then {
                out.chunks_exact_mut(n.max(1)).enumerate().for_each(|(i, row)| then(i, 0, row));
            }
            return out;
        }
        if m == 0 || n == 0 {
            return vec![0f32; m * n];
        }
        // Not zero-filled: the first depth block writes every element (full tiles in place,
        // edge tiles copied from `tile`) before any is read (zeroing took 1.5 % of the image
        // encoder's time).
        let mut out = Vec::<f32>::with_capacity(m * n);
        let panels = n.div_ceil(nr);
        let blocks = k.div_ceil(KC);
        let out_ptr = SendPtr(out.as_mut_ptr());
        let tasks = RowTasks::new(m, mr, threads);
        for block in 0..blocks {
            let (depth, kc, first, last) = (block * KC, KC.min(k - block * KC), block == 0, block + 1 == blocks);
            // Tasks of at most MC rows, all working through the same depth block of the
            // weights (`kc × n`, read by both cores at once).
            let task_body = |tile: &mut Vec<f32>, task: usize| {
                let rows = tasks.rows(task);
                // `A` is read in place, row by row: the kernel broadcasts each value from
                // memory anyway, and a sliver's `mr` rows of `kc` values (12 KB) stay in L1
                // while the panels stream past, so packing them (a transposing copy per
                // depth block, 4.6 % of the image encoder's time) bought nothing.
                // Per block of NC columns, sliver by sliver.
                for cb in 0..n.div_ceil(NC) {
                    for i0 in rows.clone().step_by(mr) {
                        let valid_rows = mr.min(rows.end - i0);
                        // Rows past `m` repeat the last one; their results are dropped.
                        let a: [*const f32; MAX_MR] =
                            std::array::from_fn(|r| x[(i0 + r.min(valid_rows - 1)) * k + depth..].as_ptr());
                        for p in cb * NC / nr..((cb + 1) * NC).min(n).div_ceil(nr) {
                            let panel = &weights[(depth * panels + p * kc) * nr..][..nr * kc];
                            let bias = &bias[p * nr..(p + 1) * nr];
                            let cols = nr.min(n - p * nr);
                            let full = valid_rows == mr && cols == nr;
                            // SAFETY (raw accesses to `out`): this task's rows only, inside
                            // `out`'s capacity, which outlives the parallel loop; read only
                            // after the first depth block wrote them.
                            let at = |r: usize| unsafe { out_ptr.get().add((i0 + r) * n + p * nr) };
                            // Full tiles go straight to `out`; edge tiles through `tile`.
                            if !full && !first {
                                for r in 0..valid_rows {
                                    let src = unsafe { std::slice::from_raw_parts(at(r), cols) };
                                    tile[r * nr..r * nr + cols].copy_from_slice(src);
                                }
                            }
                            let (c, ldc) = if full { (at(0), n) } else { (tile.as_mut_ptr(), nr) };
                            // SAFETY: each of `a`'s rows holds `kc` values from `depth`
                            // (inside `x`: `x.len() >= m * k`), `panel` kc × nr and `bias`
                            // nr values; `c` addresses mr rows of nr values, `ldc` apart;
                            // the packing tier has the features the kernel is compiled for.
                            unsafe { micro_kernel(isa, kc, &a, panel.as_ptr(), bias.as_ptr(), c, ldc, first) };
                            if !full {
                                for r in 0..valid_rows {
                                    // A raw copy, not a slice: in the first depth block
                                    // the destination is not initialised yet.
                                    let src = &tile[r * nr..r * nr + cols];
                                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), at(r), cols) };
                                }
                            }
                            if let Some(then) = then.filter(|_| last) {
                                for r in 0..valid_rows {
                                    then(i0 + r, p * nr, unsafe { std::slice::from_raw_parts_mut(at(r), cols) });
                                }
                            }
                        }
                    }
                }
            };
            if threads == 1 {
                let mut tile = vec![0f32; mr * nr];
                (0..tasks.count).for_each(|task| task_body(&mut tile, task));
            } else {
                (0..tasks.count).into_par_iter().for_each_init(|| vec![0f32; mr * nr], task_body);
            }
        }
        // SAFETY: the first depth block wrote all `m × n` values (see above).
        unsafe { out.set_len(m * n) };
        out
    }
}

/// What [`PackedDense::forward_then`] applies to each finished tile row: `(row, first column,
/// values)`.
pub(crate) type Epilogue<'a> = dyn Fn(usize, usize, &mut [f32]) + Sync + 'a;

/// The rows of `A` split into tasks of whole slivers (`mr` rows), at most `MC` rows each, their
/// number a multiple of the threads' and the slivers spread evenly over them: so that every
/// thread gets the same work. Tasks of `MC` rows and one remainder left a thread idle for up to
/// a task's time per depth block (the text encoder's 512 rows: 4 × 72 rows against 3 × 72 + 8).
#[derive(Debug, Clone, Copy)]
struct RowTasks {
    m: usize,
    mr: usize,
    count: usize,
    /// Slivers per task; the first `longer` tasks take one more.
    per: usize,
    longer: usize,
}

impl RowTasks {
    fn new(m: usize, mr: usize, threads: usize) -> Self {
        let slivers = m.div_ceil(mr);
        let threads = threads.max(1);
        let count = slivers.div_ceil(MC / mr).div_ceil(threads) * threads;
        // No task without a sliver (fewer slivers than threads).
        let count = count.min(slivers).max(1);
        RowTasks { m, mr, count, per: slivers / count, longer: slivers % count }
    }

    /// Task `t`'s rows.
    fn rows(&self, t: usize) -> std::ops::Range<usize> {
        let first = t * self.per + t.min(self.longer);
        let slivers = self.per + usize::from(t < self.longer);
        (first * self.mr).min(self.m)..((first + slivers) * self.mr).min(self.m)
    }
}

/// `out (m, n) = x (m, k) · w (n, k)ᵀ + bias (n)`, packing `w` for this one call; `None` on a
/// tier without a micro-kernel.
pub(crate) fn dense(tier: Tier, x: &[f32], w: &[f32], bias: &[f32], m: usize, k: usize, n: usize) -> Option<Vec<f32>> {
    Some(PackedDense::pack(tier, w, Some(bias), n, k)?.forward(x, m))
}

/// `out`'s base pointer, shared by the tasks that write disjoint tiles of it.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);

impl SendPtr {
    // A method, so closures capture the whole (Send + Sync) wrapper, not the raw field.
    fn get(&self) -> *mut f32 {
        self.0
    }
}
// SAFETY: the tasks write disjoint regions (see `dense`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// One `mr × nr` tile: `c = (first ? bias : c) + a · panel` over `kc` depths.
///
/// # Safety
/// The pointers must cover what [`dense`] documents, and the CPU must have `isa`.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))] // the kernels are x86's
unsafe fn micro_kernel(
    isa: Isa,
    kc: usize,
    a: &[*const f32; MAX_MR],
    panel: *const f32,
    bias: *const f32,
    c: *mut f32,
    ldc: usize,
    first: bool,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => kernel_avx2(kc, a, panel, bias, c, ldc, first),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => kernel_avx512(kc, a, panel, bias, c, ldc, first),
        _ => unreachable!("the generic tier has no micro-kernel here"),
    }
}

/// One micro-kernel per tier from one body: the `6 × (V · lanes)` tile of `C` in registers,
/// per depth `V` vector loads of the weight panel, six broadcasts of `A` and `6 · V` FMAs;
/// `prefetch`, when given, asks for the panel that many floats ahead.
macro_rules! micro_kernel {
    ($name:ident, $features:literal, $vector:ty, lanes = $lanes:literal, vectors = $v:literal,
     $zero:ident, $load:ident, $store:ident, $splat:ident, $fmadd:ident, prefetch = $prefetch:expr) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name(
            kc: usize,
            a: &[*const f32; MAX_MR],
            panel: *const f32,
            bias: *const f32,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            use std::arch::x86_64::*;
            const MR: usize = 6;
            const NR: usize = $lanes * $v;
            let mut acc = [[$zero(); $v]; MR];
            for (r, row) in acc.iter_mut().enumerate() {
                let from = if first { bias } else { c.add(r * ldc) };
                for (v, lane) in row.iter_mut().enumerate() {
                    *lane = $load(from.add($lanes * v));
                }
            }
            let a: [*const f32; MR] = *a;
            for d in 0..kc {
                if let Some(ahead) = $prefetch {
                    _mm_prefetch::<_MM_HINT_T0>(panel.add(d * NR + ahead) as *const i8);
                }
                let b: [$vector; $v] = std::array::from_fn(|v| $load(panel.add(d * NR + $lanes * v)));
                for (r, row) in acc.iter_mut().enumerate() {
                    let x = $splat(*a[r].add(d));
                    for (lane, b) in row.iter_mut().zip(&b) {
                        *lane = $fmadd(x, *b, *lane);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                for (v, lane) in row.iter().enumerate() {
                    $store(c.add(r * ldc + $lanes * v), *lane);
                }
            }
        }
    };
}

// AVX2: 6 × 16, 12 of the 16 `ymm` registers; the panel streams from L2, asked for 8 depths
// ahead.
micro_kernel!(
    kernel_avx2,
    "avx2,fma",
    __m256,
    lanes = 8,
    vectors = 2,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    prefetch = Some(128)
);
// AVX-512: 6 × 64, 24 of the 32 `zmm` registers (the `gemm` crate's best AVX-512 kernel has
// the same shape, transposed); a prefetch measured no gain here.
micro_kernel!(
    kernel_avx512,
    "avx512f",
    __m512,
    lanes = 16,
    vectors = 4,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    prefetch = None::<usize>
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The tasks cover the rows once, in order, in whole slivers of at most `MC` rows, and no
    /// thread gets more than one sliver more than another per round of tasks.
    #[test]
    fn row_tasks_cover_the_rows_evenly() {
        for (m, mr, threads) in [(512, 6, 2), (1600, 6, 2), (1, 6, 2), (7, 6, 16), (0, 6, 2), (1000, 6, 3), (72, 6, 1)]
        {
            let tasks = RowTasks::new(m, mr, threads);
            let mut next = 0;
            let mut lengths = Vec::new();
            for t in 0..tasks.count {
                let rows = tasks.rows(t);
                assert_eq!(rows.start, next, "({m}, {mr}, {threads}) task {t}");
                assert!(rows.len() <= MC, "({m}, {mr}, {threads}) task {t}: {} rows", rows.len());
                assert!(rows.start.is_multiple_of(mr), "({m}, {mr}, {threads}) task {t} starts inside a sliver");
                lengths.push(rows.len().div_ceil(mr));
                next = rows.end;
            }
            assert_eq!(next, m, "({m}, {mr}, {threads}) rows covered");
            let (most, least) = (lengths.iter().max(), lengths.iter().min());
            assert!(most.zip(least).is_none_or(|(a, b)| a - b <= 1), "({m}, {mr}, {threads}): {lengths:?}");
        }
    }

    /// How the rows are split into tasks depends on the thread count, the values must not: every
    /// output is the same sums in the same order, bit for bit, on 1 to 7 threads.
    #[test]
    fn products_do_not_depend_on_the_thread_count() -> Result<(), rayon::ThreadPoolBuildError> {
        let mut rng = benchctl_scoring::metrics::stats::SplitMix64::new(11);
        let mut next = || (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        let (m, k, n) = (97, 600, 130);
        let x: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let w: Vec<f32> = (0..n * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..n).map(|_| next()).collect();
        for tier in Tier::available().into_iter().filter(|t| shape(t.isa()).is_some()) {
            let on = |threads: usize| -> Result<Option<Vec<f32>>, rayon::ThreadPoolBuildError> {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
                Ok(pool.install(|| dense(tier, &x, &w, &b, m, k, n)))
            };
            let one = on(1)?;
            assert!(one.is_some(), "{:?} has a micro-kernel", tier.isa());
            for threads in [2, 3, 7] {
                let bits = |v: &Option<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&on(threads)?), bits(&one), "{:?} on {threads} threads", tier.isa());
            }
        }
        Ok(())
    }

    /// Every tier with a micro-kernel against an f64 reference, on shapes with edge tiles in
    /// every direction and depths across several blocks.
    #[test]
    fn dense_matches_an_f64_reference_on_awkward_shapes() {
        let mut rng = benchctl_scoring::metrics::stats::SplitMix64::new(7);
        let mut next = || (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        for tier in Tier::available().into_iter().filter(|t| shape(t.isa()).is_some()) {
            for (m, k, n) in [
                (1, 1, 1),
                (5, 3, 7),
                (13, 300, 33),
                (97, 257, 130),
                (200, 768, 64),
                (37, 513, 600),
                (4, 0, 5),
                (3, 4, 0),
            ] {
                let x: Vec<f32> = (0..m * k).map(|_| next()).collect();
                let w: Vec<f32> = (0..n * k).map(|_| next()).collect();
                let b: Vec<f32> = (0..n).map(|_| next()).collect();
                let Some(out) = dense(tier, &x, &w, &b, m, k, n) else { panic!("{:?} has a micro-kernel", tier.isa()) };
                for i in 0..m {
                    for j in 0..n {
                        let exact =
                            b[j] as f64 + (0..k).map(|d| x[i * k + d] as f64 * w[j * k + d] as f64).sum::<f64>();
                        let bound =
                            1e-6 * (1.0 + (0..k).map(|d| (x[i * k + d] * w[j * k + d]).abs() as f64).sum::<f64>());
                        assert!(
                            (out[i * n + j] as f64 - exact).abs() <= bound,
                            "{:?} ({m}, {k}, {n}) at ({i}, {j})",
                            tier.isa()
                        );
                    }
                }
            }
        }
    }
}
