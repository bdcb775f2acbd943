//! Ranking a whole retrieval gallery from embeddings: every query's [`QueryOutcome`],
//! exactly what [`query_outcome_with`] gives for the row of [`dot`] scores, without computing most
//! of those fp32 scores. This is the one place in the crate that reads embeddings rather
//! than scores; it exists because RoCOCO's galleries are too big to score in fp32.
//!
//! RoCOCO ranks 5,000 images against 50,010 captions and 25,010 captions against 10,000
//! images: 2 × 128 G multiply-adds of 512-dimensional embeddings, more than two cores' fp32
//! peak can do in 2 s. Integer multiply-adds of 16-bit values (AVX-512 VNNI's `vpdpwssd`,
//! 32 per instruction) run at twice the fp32 FMA rate. So:
//!
//! 1. Each embedding row x is quantised, x ≈ s·q with a per-row scale s and 16-bit integers
//!    q, as fine as `i32` allows: ‖q‖ < 46,341, so by Cauchy–Schwarz no dot product of two
//!    rows (nor any partial sum of one) can overflow.
//! 2. A pair's approximate score s_a·s_g·(q_a·q_g) comes from an exact integer dot product.
//!    It is within a per-query bound B of the reference score `dot(a, g)`: the quantisation
//!    error by Cauchy–Schwarz (‖â‖·‖e_g‖ + ‖e_a‖·‖ĝ‖ + ‖e_a‖·‖e_g‖, with the gallery's largest
//!    norms), plus the fp32 rounding of `dot` and of the approximation itself.
//! 3. A candidate whose approximate score is further than B from the query's threshold (the
//!    `dot` score of its best match) is decided by it; one within B gets its `dot` score. The
//!    best candidate of each class (altered or not) is found among those whose approximate
//!    score is within 2B of the class's best approximate score, by `dot`.
//!
//! The bound is ≈ 3e-4 on 512-dimensional unit vectors, so about 0.3 % of random pairs need
//! their `dot` score (fewer on real embeddings, whose best matches stand out). The integers are
//! exact and `dot` has one fixed order and no fused multiply-add on every machine, so
//! outcomes do not depend on the CPU. Each kernel is compiled per instruction-set tier
//! (`benchctl_cpu`): `vpdpwssd` on AVX-512 VNNI and AVX-VNNI, `vpmaddwd` + `vpaddd` on
//! AVX-512 BW and AVX2, portable loops elsewhere; all compute the same integers.

use rayon::prelude::*;

use crate::metrics::retrieval::{query_outcome_with, QueryOutcome};
use crate::metrics::Ties;
#[cfg(target_arch = "x86_64")]
use benchctl_cpu::Isa;
use benchctl_cpu::{madd, per_tier, Tier};

use crate::{Error, Result};

/// Partial sums of the reference dot product, one per residue of the dimension mod 64 (four
/// AVX-512 accumulators: a quarter of one chain's latency).
const LANES: usize = 64;
/// ‖q‖ stays below this, so that ‖q_a‖·‖q_g‖ ≤ `i32::MAX`.
const NORM_LIMIT: f64 = 46_340.0;
/// Queries per micro-tile of the integer product.
const TILE_QUERIES: usize = 12;
/// Gallery rows per panel: two vectors of 16 `i32` lanes.
const PANEL_ROWS: usize = 32;
/// Queries per parallel task: their integers (0.6 MB at dimension 512) stay in L2 while the
/// gallery streams past, and each pass over the gallery (whose fp32 rows the band checks
/// read from memory) serves this many queries: 240 took 1.75 s at RoCOCO scale, 576 1.4 s,
/// 1,440 1.5–1.65 s (too few tasks to share between the cores).
const TASK_QUERIES: usize = TILE_QUERIES * 48;
/// Embedding values are refused beyond this magnitude, so no fp32 dot product overflows.
const MAX_VALUE: f32 = 1e15;
/// fp32's unit roundoff.
const UNIT_ROUNDOFF: f64 = 1.0 / (1u64 << 24) as f64;

/// The reference score of two embeddings: 64 partial sums of rounded products (dimension i
/// goes to sum i mod 64, as `sum + x·y` with the product rounded first), then added pairwise
/// (sum l gets l + 32, then l + 16, …, l + 1). The order is fixed and no multiply-add is
/// fused, so every machine and every tier gets the same bits (a fused multiply-add would
/// need a library call per element where the CPU has no FMA).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_on(Tier::current(), a, b)
}

// Compiled per tier: the 64 lanes become four AVX-512 or eight AVX2 vectors.
#[inline(always)]
fn dot_body<const FUSED: bool>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (mut xs, mut ys) = (a[..n].chunks_exact(LANES), b[..n].chunks_exact(LANES));
    let mut acc = [0f32; LANES];
    for (x, y) in (&mut xs).zip(&mut ys) {
        for l in 0..LANES {
            acc[l] = madd::<FUSED>(x[l], y[l], acc[l]);
        }
    }
    for (l, (x, y)) in xs.remainder().iter().zip(ys.remainder()).enumerate() {
        acc[l] = madd::<FUSED>(*x, *y, acc[l]);
    }
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0]
}

per_tier!(
    /// [`dot`] on a given tier: the same bits on each.
    pub fn dot_on = dot_body(a: &[f32], b: &[f32]) -> f32; fused = false);

/// Embedding rows quantised to `i16`, with what the error bound needs.
struct Quantised {
    /// The dimension rounded up to even (the integer kernel takes pairs).
    width: usize,
    values: Vec<i16>,
    scale: Vec<f32>,
    /// ‖s·q‖, ‖x − s·q‖ and ‖x‖ per row.
    norm_approx: Vec<f64>,
    norm_error: Vec<f64>,
    norm: Vec<f64>,
}

fn quantise(rows: &[f32], dim: usize, what: &str) -> Result<Quantised> {
    let width = dim + dim % 2;
    let mut values = vec![0i16; rows.len() / dim * width];
    // Rounding adds at most √width / 2 to ‖x / s‖.
    let norm_target = NORM_LIMIT - (width as f64).sqrt();
    let per_row: Vec<(f32, f64, f64, f64)> = values
        .par_chunks_mut(width)
        .zip(rows.par_chunks_exact(dim))
        .enumerate()
        .map(|(r, (slots, row))| {
            let largest = row.iter().fold(0f32, |m, x| m.max(x.abs()));
            if !largest.is_finite() || largest > MAX_VALUE || row.iter().any(|x| x.is_nan()) {
                return Err(Error::new(format!(
                    "{what} embedding {r} has a value that is not finite or beyond ±{MAX_VALUE:e}"
                )));
            }
            let norm = row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            let mut scale = ((largest as f64 / i16::MAX as f64).max(norm / norm_target)) as f32;
            if scale == 0.0 {
                scale = 1.0;
            }
            loop {
                let mut squares = 0i64;
                for (slot, &x) in slots.iter_mut().zip(row) {
                    let q = (x / scale).round().clamp(-(i16::MAX as f32), i16::MAX as f32) as i16;
                    *slot = q;
                    squares += q as i64 * q as i64;
                }
                // The overflow guarantee checked, not assumed (float rounding of the scale).
                if (squares as f64) < NORM_LIMIT * NORM_LIMIT {
                    break;
                }
                scale *= 1.001;
            }
            let (mut approx, mut error) = (0f64, 0f64);
            for (&q, &x) in slots.iter().zip(row) {
                let a = scale as f64 * q as f64;
                approx += a * a;
                error += (x as f64 - a) * (x as f64 - a);
            }
            Ok((scale, approx.sqrt(), error.sqrt(), norm))
        })
        .collect::<Result<_>>()?;
    Ok(Quantised {
        width,
        values,
        scale: per_row.iter().map(|r| r.0).collect(),
        norm_approx: per_row.iter().map(|r| r.1).collect(),
        norm_error: per_row.iter().map(|r| r.2).collect(),
        norm: per_row.iter().map(|r| r.3).collect(),
    })
}

/// The gallery's integers in panels of [`PANEL_ROWS`] rows, pair-interleaved for the
/// kernel: for each pair of dimensions t, 16 rows' `(q[2t], q[2t+1])`, then the next 16.
fn pack_panels(g: &Quantised, rows: usize) -> Vec<i16> {
    let pairs = g.width / 2;
    let mut out = vec![0i16; rows.div_ceil(PANEL_ROWS) * pairs * PANEL_ROWS * 2];
    out.par_chunks_mut(pairs * PANEL_ROWS * 2).enumerate().for_each(|(panel, packed)| {
        for within in 0..PANEL_ROWS.min(rows - panel * PANEL_ROWS) {
            let r = panel * PANEL_ROWS + within;
            let source = &g.values[r * g.width..(r + 1) * g.width];
            for t in 0..pairs {
                let at = t * PANEL_ROWS * 2 + within * 2;
                packed[at] = source[2 * t];
                packed[at + 1] = source[2 * t + 1];
            }
        }
    });
    out
}

/// [`TILE_QUERIES`] query rows packed for the kernel: for each pair of dimensions t, the
/// queries' `(q[2t], q[2t+1])` as one `i32` each, so the kernel reads them in sequence.
fn pack_queries(q: &Quantised, rows: std::ops::Range<usize>, packed: &mut [i32]) {
    let pairs = q.width / 2;
    packed.fill(0);
    for (i, r) in rows.enumerate() {
        let source = &q.values[r * q.width..(r + 1) * q.width];
        for t in 0..pairs {
            packed[t * TILE_QUERIES + i] =
                (source[2 * t] as u16 as u32 | (source[2 * t + 1] as u16 as u32) << 16) as i32;
        }
    }
}

/// Integer dot products of [`TILE_QUERIES`] query rows with one panel's [`PANEL_ROWS`] rows.
type Tile = [[i32; PANEL_ROWS]; TILE_QUERIES];
type TileFn = fn(&[i32], usize, &[i16], &mut Tile);

/// The integer kernel of a tier: `vpdpwssd` (VNNI) where the CPU has it, `vpmaddwd` +
/// `vpaddd` otherwise; the exact same integers either way.
fn tile_kernel(tier: Tier) -> TileFn {
    match tier.isa() {
        // SAFETY (each arm): the tier and `has_vnni` checked the features each is compiled for.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if tier.has_vnni() => |q, width, panel, out| unsafe { tile_avx512::<true>(q, width, panel, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => |q, width, panel, out| unsafe { tile_avx512::<false>(q, width, panel, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if tier.has_vnni() => |q, width, panel, out| unsafe { tile_avx2::<true>(q, width, panel, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => |q, width, panel, out| unsafe { tile_avx2::<false>(q, width, panel, out) },
        _ => tile_generic,
    }
}

// The same loop nest as the vector kernels (a query pair broadcast against a row of panel
// pairs), so that it vectorises where the target allows (NEON's widening multiply-adds).
fn tile_generic(queries: &[i32], width: usize, panel: &[i16], out: &mut Tile) {
    let mut acc = [[0i32; PANEL_ROWS]; TILE_QUERIES];
    for t in 0..width / 2 {
        let g = &panel[t * PANEL_ROWS * 2..][..PANEL_ROWS * 2];
        for (i, row) in acc.iter_mut().enumerate() {
            let pair = queries[t * TILE_QUERIES + i];
            let (lo, hi) = ((pair as i16) as i32, ((pair >> 16) as i16) as i32);
            for (j, cell) in row.iter_mut().enumerate() {
                *cell += lo * g[2 * j] as i32 + hi * g[2 * j + 1] as i32;
            }
        }
    }
    *out = acc;
}

/// AVX-512: 12 queries × 32 rows in 24 registers. `VNNI`: only where the CPU has AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn tile_avx512<const VNNI: bool>(queries: &[i32], width: usize, panel: &[i16], out: &mut Tile) {
    use std::arch::x86_64::*;
    let pairs = width / 2;
    assert!(queries.len() >= TILE_QUERIES * pairs && panel.len() >= pairs * PANEL_ROWS * 2);
    let mut acc = [[_mm512_setzero_si512(); 2]; TILE_QUERIES];
    let (q, g) = (queries.as_ptr(), panel.as_ptr());
    for t in 0..pairs {
        // SAFETY (all reads): inside the slices, as asserted above.
        let g0 = _mm512_loadu_si512(g.add(t * PANEL_ROWS * 2) as *const _);
        let g1 = _mm512_loadu_si512(g.add(t * PANEL_ROWS * 2 + 32) as *const _);
        for (i, a) in acc.iter_mut().enumerate() {
            let pair = _mm512_set1_epi32(*q.add(t * TILE_QUERIES + i));
            if VNNI {
                a[0] = dpwssd_512(a[0], pair, g0);
                a[1] = dpwssd_512(a[1], pair, g1);
            } else {
                a[0] = _mm512_add_epi32(a[0], _mm512_madd_epi16(pair, g0));
                a[1] = _mm512_add_epi32(a[1], _mm512_madd_epi16(pair, g1));
            }
        }
    }
    for (row, a) in out.iter_mut().zip(&acc) {
        _mm512_storeu_si512(row.as_mut_ptr() as *mut _, a[0]);
        _mm512_storeu_si512(row.as_mut_ptr().add(16) as *mut _, a[1]);
    }
}

/// AVX2 (16 registers): the tile in four passes of 6 queries × 16 rows (12 accumulators).
/// `VNNI`: only where the CPU has AVX-VNNI (the VEX-encoded, 256-bit `vpdpwssd`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2<const VNNI: bool>(queries: &[i32], width: usize, panel: &[i16], out: &mut Tile) {
    use std::arch::x86_64::*;
    const GROUP: usize = TILE_QUERIES / 2;
    let pairs = width / 2;
    assert!(queries.len() >= TILE_QUERIES * pairs && panel.len() >= pairs * PANEL_ROWS * 2);
    let (q, g) = (queries.as_ptr(), panel.as_ptr());
    for half in 0..2 {
        for group in 0..2 {
            let mut acc = [[_mm256_setzero_si256(); 2]; GROUP];
            for t in 0..pairs {
                // SAFETY (all reads): inside the slices, as asserted above.
                let rows = g.add(t * PANEL_ROWS * 2 + half * PANEL_ROWS);
                let (g0, g1) = (_mm256_loadu_si256(rows as *const _), _mm256_loadu_si256(rows.add(16) as *const _));
                for (i, a) in acc.iter_mut().enumerate() {
                    let pair = _mm256_set1_epi32(*q.add(t * TILE_QUERIES + group * GROUP + i));
                    if VNNI {
                        a[0] = dpwssd_256(a[0], pair, g0);
                        a[1] = dpwssd_256(a[1], pair, g1);
                    } else {
                        a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(pair, g0));
                        a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(pair, g1));
                    }
                }
            }
            for (i, a) in acc.iter().enumerate() {
                let row = out[group * GROUP + i][half * 16..].as_mut_ptr();
                _mm256_storeu_si256(row as *mut _, a[0]);
                _mm256_storeu_si256(row.add(8) as *mut _, a[1]);
            }
        }
    }
}

/// `acc + Σ pairs a·b` in one `vpdpwssd`. Written as assembly because LLVM's generic tuning
/// splits the intrinsic into `vpmaddwd` + `vpaddd`, twice the instructions.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dpwssd_512(
    acc: std::arch::x86_64::__m512i,
    a: std::arch::x86_64::__m512i,
    b: std::arch::x86_64::__m512i,
) -> std::arch::x86_64::__m512i {
    let mut acc = acc;
    // SAFETY: register-only arithmetic on features the caller has (AVX-512 VNNI).
    std::arch::asm!("vpdpwssd {acc}, {a}, {b}", acc = inout(zmm_reg) acc, a = in(zmm_reg) a, b = in(zmm_reg) b, options(pure, nomem, nostack, preserves_flags));
    acc
}

/// The AVX-VNNI form of [`dpwssd_512`] on 256-bit registers (`{vex}`: not the AVX-512 VL one).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dpwssd_256(
    acc: std::arch::x86_64::__m256i,
    a: std::arch::x86_64::__m256i,
    b: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    let mut acc = acc;
    // SAFETY: register-only arithmetic on features the caller has (AVX-VNNI).
    std::arch::asm!("{{vex}} vpdpwssd {acc}, {a}, {b}", acc = inout(ymm_reg) acc, a = in(ymm_reg) a, b = in(ymm_reg) b, options(pure, nomem, nostack, preserves_flags));
    acc
}

/// f32 at or above `x`.
fn f32_up(x: f64) -> f32 {
    let y = x as f32;
    if (y as f64) < x {
        y.next_up()
    } else {
        y
    }
}

/// f32 at or below `x`.
fn f32_down(x: f64) -> f32 {
    let y = x as f32;
    if (y as f64) > x {
        y.next_down()
    } else {
        y
    }
}

/// One query's progress through the gallery.
struct QueryState {
    /// The `dot` score of its best match, and the band around it that `dot` must decide.
    threshold: f32,
    band: (f32, f32),
    /// Twice the error bound: how far below a class's best approximate score its true best
    /// may be.
    margin: f64,
    at_or_above: usize,
    /// The lowest index among the matches scoring `threshold`, and (with [`Ties::First`]) how
    /// many candidates after it score exactly `threshold`.
    first_match: usize,
    tied_after: usize,
    /// Per class (not altered, altered): best approximate score, the cut below which a
    /// candidate cannot be the class's best, and the candidates above the cut when seen.
    best: [f32; 2],
    cut: [f32; 2],
    contenders: [Vec<(u32, f32)>; 2],
}

impl QueryState {
    /// A candidate `j` inside the band: its `dot` score decides.
    fn in_band(&mut self, exact: f32, j: usize) {
        self.at_or_above += (exact >= self.threshold) as usize;
        self.tied_after += (exact == self.threshold && j > self.first_match) as usize;
    }

    /// A candidate at or above the lower of the two classes' cuts.
    fn contend(&mut self, approx: f32, j: usize, class: usize) {
        if approx < self.cut[class] {
            return;
        }
        if approx > self.best[class] {
            self.best[class] = approx;
            self.cut[class] = f32_down(approx as f64 - self.margin);
            let cut = self.cut[class];
            if self.contenders[class].len() > 64 {
                self.contenders[class].retain(|&(_, a)| a >= cut);
            }
        }
        self.contenders[class].push((j as u32, approx));
    }

    /// The `dot` score of the class's best candidate (−∞ for an empty class) and the lowest
    /// index holding it (every candidate tied at the class's best is among the contenders).
    fn best_exact(&self, class: usize, exact: impl Fn(usize) -> f32) -> (f32, usize) {
        self.contenders[class]
            .iter()
            .filter(|&&(_, a)| a >= self.cut[class])
            .map(|&(j, _)| (exact(j as usize), j as usize))
            .fold((f32::NEG_INFINITY, usize::MAX), |best, (s, j)| {
                if s > best.0 || (s == best.0 && j < best.1) {
                    (s, j)
                } else {
                    best
                }
            })
    }
}

/// What one query's row of a tile asks for, as lane masks: at or above the band (counted),
/// inside the band (`dot` decides), at or above the lower cut (may be its class's best).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lanes {
    above: u32,
    band: u32,
    contend: u32,
}

// Approximate scores of one query against a panel (written to `approx`) and their `Lanes`
// for `band` and the lower cut; only the `valid` lanes count. Compiled per tier.
#[inline(always)]
fn classify_body<const FUSED: bool>(
    sums: &[i32; PANEL_ROWS],
    scales: &[f32; PANEL_ROWS],
    scale: f32,
    band: (f32, f32),
    cut: f32,
    valid: u32,
    approx: &mut [f32; PANEL_ROWS],
) -> Lanes {
    let (mut above, mut inside, mut contend) = (0u32, 0u32, 0u32);
    for j in 0..PANEL_ROWS {
        let a = sums[j] as f32 * (scale * scales[j]);
        approx[j] = a;
        let bit = 1u32 << j;
        above |= if a >= band.1 { bit } else { 0 };
        inside |= if a >= band.0 && a < band.1 { bit } else { 0 };
        contend |= if a >= cut { bit } else { 0 };
    }
    Lanes { above: above & valid, band: inside & valid, contend: contend & valid }
}

per_tier!(
    #[allow(clippy::too_many_arguments)] // the tier, then the body's own seven
    fn classify = classify_body(
    sums: &[i32; PANEL_ROWS],
    scales: &[f32; PANEL_ROWS],
    scale: f32,
    band: (f32, f32),
    cut: f32,
    valid: u32,
    approx: &mut [f32; PANEL_ROWS],
) -> Lanes; fused = false);

/// Lane indices of a mask, lowest first.
fn lanes(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let j = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            j
        })
    })
}

/// Every query's outcome against the whole gallery: `queries` and `gallery` are row-major
/// embeddings of width `dim`; `matches(q)` lists query q's matching gallery rows; `altered[c]`
/// tells which gallery rows are altered samples (an empty slice: none are). The same as
/// [`query_outcome_with`] on the row of [`dot`] scores of each query, computed on all cores.
pub fn rank_gallery(
    queries: &[f32],
    gallery: &[f32],
    dim: usize,
    matches: &(dyn Fn(usize) -> Vec<usize> + Sync),
    altered: &[bool],
    ties: Ties,
) -> Result<Vec<QueryOutcome>> {
    rank_gallery_on(Tier::current(), queries, gallery, dim, matches, altered, ties)
}

fn row(rows: &[f32], dim: usize, i: usize) -> &[f32] {
    &rows[i * dim..(i + 1) * dim]
}

/// [`rank_gallery`] on a given tier. Every tier gives the same outcomes (the integers are
/// exact and [`dot`] has the same bits on all of them); tests hold each tier to that.
pub fn rank_gallery_on(
    tier: Tier,
    queries: &[f32],
    gallery: &[f32],
    dim: usize,
    matches: &(dyn Fn(usize) -> Vec<usize> + Sync),
    altered: &[bool],
    ties: Ties,
) -> Result<Vec<QueryOutcome>> {
    if dim == 0 || !queries.len().is_multiple_of(dim) || !gallery.len().is_multiple_of(dim) {
        return Err(Error::new(format!(
            "embeddings of {} and {} values are not rows of width {dim}",
            queries.len(),
            gallery.len()
        )));
    }
    let (n_queries, n_gallery) = (queries.len() / dim, gallery.len() / dim);
    if !altered.is_empty() && altered.len() != n_gallery {
        return Err(Error::new(format!("{} altered flags for a gallery of {n_gallery}", altered.len())));
    }
    if n_gallery == 0 {
        // Nothing to rank against: the row-wise definition says what that means.
        return (0..n_queries).map(|q| query_outcome_with(&[], &matches(q), altered, ties)).collect();
    }
    let (q, g) = (quantise(queries, dim, "query")?, quantise(gallery, dim, "gallery")?);
    let max = |v: &[f64]| v.iter().copied().fold(0f64, f64::max);
    let ranking = Ranking {
        tier,
        tile: tile_kernel(tier),
        queries,
        gallery,
        dim,
        n_gallery,
        panels: pack_panels(&g, n_gallery),
        g_norms: (max(&g.norm_approx), max(&g.norm_error), max(&g.norm)),
        q,
        g,
        // |dot(a, g) − a·g| ≤ γ ‖a‖‖g‖: each of the 64 partial sums rounds ⌈dim/64⌉ products
        // and as many additions, then 6 pairwise additions (γ_n = n·u / (1 − n·u) < 2·n·u).
        gamma: 2.0 * (dim.div_ceil(LANES) + LANES.ilog2() as usize + 1) as f64 * UNIT_ROUNDOFF,
        matches,
        altered,
        ties,
    };
    let per_task: Vec<Vec<QueryOutcome>> = (0..n_queries.div_ceil(TASK_QUERIES))
        .into_par_iter()
        .map(|task| ranking.task(task * TASK_QUERIES, TASK_QUERIES.min(n_queries - task * TASK_QUERIES)))
        .collect::<Result<_>>()?;
    Ok(per_task.into_iter().flatten().collect())
}

/// What ranking every query of a gallery shares: the rows, their quantised forms and the
/// gallery's panels, the error bound's terms, and how outcomes are counted.
struct Ranking<'a> {
    tier: Tier,
    tile: TileFn,
    queries: &'a [f32],
    gallery: &'a [f32],
    dim: usize,
    n_gallery: usize,
    q: Quantised,
    g: Quantised,
    panels: Vec<i16>,
    /// The gallery's largest approximate norm, norm error and norm.
    g_norms: (f64, f64, f64),
    gamma: f64,
    matches: &'a (dyn Fn(usize) -> Vec<usize> + Sync),
    altered: &'a [bool],
    ties: Ties,
}

/// One query's state before the scan, with how many matches score at its threshold and how
/// many of them come after its first best match.
struct Start {
    state: QueryState,
    matched: usize,
    matches_tied_after: usize,
}

impl Ranking<'_> {
    fn dot(&self, a: usize, c: usize) -> f32 {
        dot_on(self.tier, row(self.queries, self.dim, a), row(self.gallery, self.dim, c))
    }

    /// The outcomes of queries `first..first + count`.
    fn task(&self, first: usize, count: usize) -> Result<Vec<QueryOutcome>> {
        let mut starts = (first..first + count).map(|a| self.start(a)).collect::<Result<Vec<_>>>()?;
        self.scan(first, &mut starts);
        Ok(starts.iter().enumerate().map(|(i, s)| self.outcome(first + i, s)).collect())
    }

    /// Query `a`'s threshold (its best match's exact score) and the band around it that the
    /// integer screening cannot decide.
    fn start(&self, a: usize) -> Result<Start> {
        let mut these = (self.matches)(a);
        if these.is_empty() {
            return Err(Error::new("a query needs at least one matching candidate"));
        }
        if let Some(&c) = these.iter().find(|&&c| c >= self.n_gallery) {
            return Err(Error::new(format!("matching candidate {c} is outside a gallery of {}", self.n_gallery)));
        }
        these.sort_unstable();
        these.dedup();
        let scored: Vec<f32> = these.iter().map(|&c| self.dot(a, c)).collect();
        let threshold = scored.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let first_match = these.iter().zip(&scored).find(|&(_, &s)| s == threshold).map_or(0, |(&c, _)| c);
        let (g_approx, g_error, g_norm) = self.g_norms;
        let q = &self.q;
        // The last two terms cover rounding the norms (f64) and fp32 underflow.
        let bound = (q.norm_approx[a] * g_error
            + q.norm_error[a] * (g_approx + g_error)
            + self.gamma * q.norm[a] * g_norm
            + 4.0 * UNIT_ROUNDOFF * q.norm_approx[a] * g_approx)
            * (1.0 + 1e-9)
            + 1e-36;
        let t = threshold as f64;
        Ok(Start {
            state: QueryState {
                threshold,
                band: (f32_down(t - bound), f32_up(t + bound)),
                margin: 2.0 * bound,
                at_or_above: 0,
                first_match,
                tied_after: 0,
                best: [f32::NEG_INFINITY; 2],
                cut: [f32::NEG_INFINITY; 2],
                contenders: [Vec::new(), Vec::new()],
            },
            matched: scored.iter().filter(|&&s| s >= threshold).count(),
            matches_tied_after: these.iter().zip(&scored).filter(|&(&c, &s)| c > first_match && s == threshold).count(),
        })
    }

    /// Every gallery panel against the queries from `first`, micro-tile by micro-tile: the
    /// integer products counted, the candidates in a query's band decided by `dot`.
    fn scan(&self, first: usize, starts: &mut [Start]) {
        let (q, g) = (&self.q, &self.g);
        let (count, pairs) = (starts.len(), q.width / 2);
        // This task's integers, packed per micro-tile (zero rows pad the last).
        let tiles = count.div_ceil(TILE_QUERIES);
        let mut ints = vec![0i32; tiles * TILE_QUERIES * pairs];
        for (t, packed) in ints.chunks_mut(TILE_QUERIES * pairs).enumerate() {
            let start = first + t * TILE_QUERIES;
            pack_queries(q, start..(start + TILE_QUERIES).min(first + count), packed);
        }
        let mut products: Tile = [[0; PANEL_ROWS]; TILE_QUERIES];
        let mut approx = [0f32; PANEL_ROWS];
        for (p, panel) in self.panels.chunks_exact(pairs * PANEL_ROWS * 2).enumerate() {
            let rows = PANEL_ROWS.min(self.n_gallery - p * PANEL_ROWS);
            let valid = if rows == PANEL_ROWS { u32::MAX } else { (1u32 << rows) - 1 };
            let mut scales = [0f32; PANEL_ROWS];
            scales[..rows].copy_from_slice(&g.scale[p * PANEL_ROWS..p * PANEL_ROWS + rows]);
            for t in 0..tiles {
                (self.tile)(&ints[t * TILE_QUERIES * pairs..], q.width, panel, &mut products);
                for (i, sums) in products.iter().enumerate().take(count - t * TILE_QUERIES) {
                    let a = t * TILE_QUERIES + i;
                    let state = &mut starts[a].state;
                    let cut = state.cut[0].min(state.cut[1]);
                    let found =
                        classify(self.tier, sums, &scales, q.scale[first + a], state.band, cut, valid, &mut approx);
                    state.at_or_above += found.above.count_ones() as usize;
                    for j in lanes(found.band) {
                        state.in_band(self.dot(first + a, p * PANEL_ROWS + j), p * PANEL_ROWS + j);
                    }
                    for j in lanes(found.contend) {
                        let c = p * PANEL_ROWS + j;
                        state.contend(approx[j], c, self.altered.get(c).copied().unwrap_or(false) as usize);
                    }
                }
            }
        }
    }

    /// Query `a`'s outcome once every panel is scanned.
    fn outcome(&self, a: usize, s: &Start) -> QueryOutcome {
        let exact = |c: usize| self.dot(a, c);
        let state = &s.state;
        let ((altered_best, altered_at), (other_best, other_at)) =
            (state.best_exact(1, exact), state.best_exact(0, exact));
        match self.ties {
            // `shared` is for answer options only, refused before a gallery is ranked.
            Ties::Strict | Ties::Shared => {
                QueryOutcome { rank: state.at_or_above - s.matched, top1_altered: altered_best >= other_best }
            }
            // Tied candidates after the first best match rank behind it; the top-1 is the
            // first candidate at the highest score.
            Ties::First => QueryOutcome {
                rank: state.at_or_above - s.matched - (state.tied_after - s.matches_tied_after),
                top1_altered: altered_best > other_best || (altered_best == other_best && altered_at < other_at),
            },
        }
    }
}
