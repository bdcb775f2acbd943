//! Pillow's antialiased bicubic resampling (`ImagingResample` in `libImaging/Resample.c`),
//! bit for bit, computing only the output pixels a crop keeps.
//!
//! Pillow convolves each axis with a bicubic kernel (a = −0.5) whose support widens with the
//! downscale factor; the weights are normalised, stored in 22-bit fixed point, and each pass
//! adds half, shifts and clamps to 8 bits. Every sum is an exact integer sum, so any order of
//! additions gives Pillow's result: the passes here run vectorised on the CPU's tier
//! ([`benchctl_cpu::per_tier!`]) and skip every row and column the crop drops (a landscape
//! photo's shorter-side resize and centre crop keep about three quarters of the columns).
//! Which pass runs first follows Pillow too, because the 8-bit rounding in between depends on it.

use std::ops::Range;

use benchctl_cpu::Tier;

/// Fractional bits of Pillow's 8-bit weights (`PRECISION_BITS`).
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Pillow's resampling filters benchctl reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filter {
    /// `Image.BICUBIC` (CLIP, SigLIP, BLIP).
    #[default]
    Bicubic,
    /// `Image.BILINEAR`: the triangle kernel, support 1 (Gemma 3).
    Bilinear,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bicubic => 2.0,
            Filter::Bilinear => 1.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bicubic => bicubic(x),
            Filter::Bilinear => (1.0 - x.abs()).max(0.0),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Filter::Bicubic => "bicubic",
            Filter::Bilinear => "bilinear",
        }
    }
}

/// Pillow's bicubic kernel, a = −0.5.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Pillow's `precompute_coeffs` for the outputs in `outs`: each one's first input index and
/// the normalised weights of the inputs it reads.
pub(super) fn coefficients(
    in_size: usize,
    out_size: usize,
    outs: Range<usize>,
    filter: Filter,
) -> Vec<(usize, Vec<f64>)> {
    let scale = in_size as f64 / out_size as f64;
    let filter_scale = scale.max(1.0);
    let support = filter.support() * filter_scale;
    outs.map(|xx| {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filter_scale;
        // C's (int) cast truncates toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let weights: Vec<f64> =
            (0..xmax).map(|x| filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss)).collect();
        let total: f64 = weights.iter().sum();
        (xmin, weights.iter().map(|w| if total != 0.0 { w / total } else { *w }).collect())
    })
    .collect()
}

/// The weights of some outputs of one axis in Pillow's 22-bit fixed point
/// (`normalize_coeffs_8bpc`), and which inputs they read.
#[derive(Debug)]
struct Taps {
    /// Per output: its first input index and its weights.
    taps: Vec<(usize, Vec<i32>)>,
}

impl Taps {
    fn new(in_size: usize, out_size: usize, outs: Range<usize>, filter: Filter) -> Self {
        let fixed = |w: f64| {
            let scaled = w * f64::from(1u32 << PRECISION_BITS);
            if scaled < 0.0 {
                (scaled - 0.5) as i32
            } else {
                (scaled + 0.5) as i32
            }
        };
        let taps = coefficients(in_size, out_size, outs, filter)
            .into_iter()
            .map(|(min, k)| (min, k.into_iter().map(fixed).collect()));
        Self { taps: taps.collect() }
    }

    /// The inputs these outputs read, together.
    fn inputs(&self) -> Range<usize> {
        let start = self.taps.iter().map(|(min, _)| *min).min().unwrap_or(0);
        let end = self.taps.iter().map(|(min, k)| min + k.len()).max().unwrap_or(start);
        start..end
    }
}

/// The horizontal pass's weights laid out for vectors: every output reads `span` consecutive
/// inputs (its taps, padded with zero weights, shifted left near the row's end so the span
/// stays inside it), each weight repeated once per band.
struct Spans {
    /// Per output, the first input of its span (relative to the pass's first column).
    starts: Vec<usize>,
    /// Inputs per span: the most taps any output has, rounded up to a multiple of 8 where the
    /// row is wide enough, so the vector loop has no remainder.
    span: usize,
    /// `outputs × span × bands` weights.
    weights: Vec<i32>,
}

impl Spans {
    fn new(taps: &Taps, first_column: usize, columns: usize, bands: usize) -> Self {
        let most = taps.taps.iter().map(|(_, k)| k.len()).max().unwrap_or(0);
        let span = most.next_multiple_of(8).min(columns).max(most);
        let mut starts = Vec::with_capacity(taps.taps.len());
        let mut weights = vec![0i32; taps.taps.len() * span * bands];
        for (out, (min, k)) in taps.taps.iter().enumerate() {
            let min = min - first_column;
            let start = min.min(columns - span);
            starts.push(start);
            let row = &mut weights[out * span * bands..(out + 1) * span * bands];
            for (i, &w) in k.iter().enumerate() {
                row[(min - start + i) * bands..(min - start + i + 1) * bands].fill(w);
            }
        }
        Self { starts, span, weights }
    }
}

/// One pass's input: `rows` rows of `stride` bytes.
#[derive(Clone, Copy)]
struct Plane<'a> {
    bytes: &'a [u8],
    stride: usize,
}

/// Rounds and clamps a fixed-point sum to 8 bits, as Pillow's `clip8`.
#[inline(always)]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Half, in the weights' fixed point: every sum starts from it (Pillow rounds by adding it).
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// The horizontal pass over every row of `src` for `BANDS` interleaved bands: output `o` of a
/// row is `Σ span · weights[o]`, accumulated in `8 × BANDS` lanes (eight pixels a step, so
/// each lane holds one band) and summed per band at the end.
#[inline(always)]
fn horizontal_bands<const BANDS: usize>(src: Plane<'_>, rows: usize, spans: &Spans, out: &mut [u8]) {
    let outputs = spans.starts.len();
    let width = spans.span * BANDS;
    if !width.is_multiple_of(8 * BANDS) {
        return horizontal_plain::<BANDS>(src, rows, spans, out);
    }
    for y in 0..rows {
        let row = &src.bytes[y * src.stride..];
        let out_row = &mut out[y * outputs * BANDS..(y + 1) * outputs * BANDS];
        for (o, &start) in spans.starts.iter().enumerate() {
            let pixels = &row[start * BANDS..start * BANDS + width];
            let weights = &spans.weights[o * width..(o + 1) * width];
            let mut lanes = [[0i32; BANDS]; 8];
            for (p, w) in pixels.chunks_exact(8 * BANDS).zip(weights.chunks_exact(8 * BANDS)) {
                for lane in 0..8 {
                    for b in 0..BANDS {
                        lanes[lane][b] += i32::from(p[lane * BANDS + b]) * w[lane * BANDS + b];
                    }
                }
            }
            let mut sums = [HALF; BANDS];
            for lane in lanes {
                for b in 0..BANDS {
                    sums[b] += lane[b];
                }
            }
            for b in 0..BANDS {
                out_row[o * BANDS + b] = clip8(sums[b]);
            }
        }
    }
}

/// [`horizontal_bands`] one product at a time, for a span narrower than a vector step (an
/// image only a few pixels wide).
#[inline(always)]
fn horizontal_plain<const BANDS: usize>(src: Plane<'_>, rows: usize, spans: &Spans, out: &mut [u8]) {
    let outputs = spans.starts.len();
    let width = spans.span * BANDS;
    for y in 0..rows {
        let row = &src.bytes[y * src.stride..];
        for (o, &start) in spans.starts.iter().enumerate() {
            let mut sums = [HALF; BANDS];
            let weights = &spans.weights[o * width..(o + 1) * width];
            for (i, (&p, &w)) in row[start * BANDS..start * BANDS + width].iter().zip(weights).enumerate() {
                sums[i % BANDS] += i32::from(p) * w;
            }
            for b in 0..BANDS {
                out[(y * outputs + o) * BANDS + b] = clip8(sums[b]);
            }
        }
    }
}

#[inline(always)]
fn horizontal_pass<const FUSED: bool>(src: Plane<'_>, rows: usize, spans: &Spans, bands: usize, out: &mut [u8]) {
    match bands {
        1 => horizontal_bands::<1>(src, rows, spans, out),
        3 => horizontal_bands::<3>(src, rows, spans, out),
        4 => horizontal_bands::<4>(src, rows, spans, out),
        _ => unreachable!("Pillow's 8-bit images have 1, 3 or 4 bands"),
    }
}
benchctl_cpu::per_tier!(fn horizontal_on = horizontal_pass(src: Plane<'_>, rows: usize, spans: &Spans, bands: usize, out: &mut [u8]); fused = false);

/// The horizontal pass on `tier`: RGB on AVX2 (and up) by [`horizontal_rgb_avx2`], the rest
/// by the per-tier compilation of [`horizontal_pass`].
fn horizontal(tier: Tier, src: Plane<'_>, rows: usize, spans: &Spans, bands: usize, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if bands == 3 && spans.span.is_multiple_of(8) && tier.isa() >= benchctl_cpu::Isa::Avx2 {
        // SAFETY: a `Tier` of AVX2 or above exists only where the CPU runs AVX2.
        return unsafe { horizontal_rgb_avx2(src, rows, spans, out) };
    }
    horizontal_on(tier, src, rows, spans, bands, out)
}

/// [`horizontal_bands`] for RGB in AVX2: each span is read 8 pixels (24 bytes, three vectors
/// of 8 lanes) at a time into three accumulators whose lanes hold the bands in the rotating
/// order R G B R G B R G, G B R …, B R G …; blends gather each band's lanes into one vector,
/// and horizontal adds sum the three at once. The same integer sums as Pillow's, so the
/// same bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn horizontal_rgb_avx2(src: Plane<'_>, rows: usize, spans: &Spans, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let outputs = spans.starts.len();
    let width = spans.span * 3;
    // Lanes j of the first accumulator hold band j % 3; the second's band (j + 2) % 3, the
    // third's (j + 1) % 3. Masks of the lanes where the first holds band 0, 1 and 2:
    const B0: i32 = 0b0100_1001;
    const B1: i32 = 0b1001_0010;
    let half = _mm_set1_epi32(HALF);
    for y in 0..rows {
        let row = &src.bytes[y * src.stride..];
        let out_row = &mut out[y * outputs * 3..(y + 1) * outputs * 3];
        for (o, &start) in spans.starts.iter().enumerate() {
            let pixels = &row[start * 3..start * 3 + width];
            let weights = &spans.weights[o * width..(o + 1) * width];
            let (mut a0, mut a1, mut a2) = (_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256());
            for (p, w) in pixels.chunks_exact(24).zip(weights.chunks_exact(24)) {
                // SAFETY: each load reads 8 bytes of `p` (24 long) or 8 weights of `w` (24 long).
                let lanes = |at: usize| _mm256_cvtepu8_epi32(_mm_loadl_epi64(p[at..at + 8].as_ptr().cast()));
                let weight = |at: usize| _mm256_loadu_si256(w[at..at + 8].as_ptr().cast());
                a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(lanes(0), weight(0)));
                a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(lanes(8), weight(8)));
                a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(lanes(16), weight(16)));
            }
            // Each band's eight partial sums in one vector: band 0 sits in a0 where j % 3 = 0,
            // in a1 where j % 3 = 1, in a2 where j % 3 = 2; bands 1 and 2 rotate.
            let red = _mm256_blend_epi32::<B1>(_mm256_blend_epi32::<B0>(a2, a0), a1);
            let green = _mm256_blend_epi32::<B1>(_mm256_blend_epi32::<B0>(a1, a2), a0);
            let blue = _mm256_blend_epi32::<B1>(_mm256_blend_epi32::<B0>(a0, a1), a2);
            let pairs = _mm256_hadd_epi32(red, green);
            let quads = _mm256_hadd_epi32(pairs, _mm256_hadd_epi32(blue, blue));
            let sums = _mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256::<1>(quads));
            // `clip8` on the four lanes: the shift, then saturation to 0..=255 by packing
            // (a sum shifted is at most a few hundred, so the 16-bit stage never saturates).
            let shifted = _mm_srai_epi32::<{ PRECISION_BITS as i32 }>(_mm_add_epi32(sums, half));
            let bytes = _mm_packus_epi16(_mm_packus_epi32(shifted, shifted), _mm_setzero_si128());
            let rgb = _mm_cvtsi128_si32(bytes).to_le_bytes();
            out_row[o * 3..o * 3 + 3].copy_from_slice(&rgb[..3]);
        }
    }
}

/// The vertical pass: output row `o` is `Σ weights · rows`, over `width` bytes of each row
/// from byte `first_byte`, rows counted from `first_row` of `src`.
#[inline(always)]
fn vertical_pass<const FUSED: bool>(
    src: Plane<'_>,
    first_row: usize,
    bytes: Range<usize>,
    taps: &Taps,
    out: &mut [u8],
) {
    let width = bytes.len();
    let mut acc = vec![0i32; width];
    for (o, (min, k)) in taps.taps.iter().enumerate() {
        acc.fill(HALF);
        for (i, &w) in k.iter().enumerate() {
            let start = (min + i - first_row) * src.stride + bytes.start;
            let row = &src.bytes[start..start + width];
            for (a, &p) in acc.iter_mut().zip(row) {
                *a += i32::from(p) * w;
            }
        }
        for (o, &a) in out[o * width..(o + 1) * width].iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
}
benchctl_cpu::per_tier!(fn vertical_on = vertical_pass(src: Plane<'_>, first_row: usize, bytes: Range<usize>, taps: &Taps, out: &mut [u8]); fused = false);

/// Whether Pillow runs the vertical pass first: when the height shrinks by more than twice
/// as many pixels as the width (Pillow 13's `Image.resize`), else the horizontal one.
pub(super) fn vertical_first(w: usize, h: usize, new_w: usize, new_h: usize) -> bool {
    h > new_h && (h - new_h) as i64 > 2 * (w as i64 - new_w as i64)
}

/// The rows `rows` and columns `columns` of `src` (`w` pixels of `bands` bytes per row).
fn copy_window(src: &[u8], w: usize, bands: usize, rows: Range<usize>, columns: Range<usize>) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * columns.len() * bands);
    for y in rows {
        out.extend_from_slice(&src[(y * w + columns.start) * bands..(y * w + columns.end) * bands]);
    }
    out
}

/// Pillow's bicubic `Image.resize` of `w × h` packed 8-bit pixels of `bands` bands to
/// `new_w × new_h`, computing only the window `columns × rows` of the result (returned
/// packed, `rows.len()` rows of `columns.len()` pixels). A pass whose dimension keeps its
/// size is skipped, as Pillow skips it.
#[allow(clippy::too_many_arguments)]
pub(super) fn resize_window(
    tier: Tier,
    src: &[u8],
    bands: usize,
    (w, h): (usize, usize),
    (new_w, new_h): (usize, usize),
    columns: Range<usize>,
    rows: Range<usize>,
    filter: Filter,
) -> Vec<u8> {
    assert_eq!(src.len(), w * h * bands, "the image's bytes do not match its size");
    assert!(columns.end <= new_w && rows.end <= new_h, "the window lies outside the resized image");
    // Each pass's weights, computed once, for the kept outputs only (none for a pass Pillow skips).
    let horizontal_taps = (new_w != w).then(|| Taps::new(w, new_w, columns.clone(), filter));
    let horizontal = |taps: &Taps, src: Plane<'_>, src_rows: usize, first_column: usize, src_columns: usize| {
        let spans = Spans::new(taps, first_column, src_columns, bands);
        let mut out = vec![0u8; src_rows * columns.len() * bands];
        horizontal(tier, src, src_rows, &spans, bands, &mut out);
        out
    };
    if vertical_first(w, h, new_w, new_h) {
        // Vertically first, over the columns the kept outputs' horizontal taps read.
        let in_columns = horizontal_taps.as_ref().map_or(columns.clone(), Taps::inputs);
        let taps = Taps::new(h, new_h, rows.clone(), filter);
        let bytes = in_columns.start * bands..in_columns.end * bands;
        let mut tall = vec![0u8; rows.len() * bytes.len()];
        vertical_on(tier, Plane { bytes: src, stride: w * bands }, 0, bytes.clone(), &taps, &mut tall);
        let Some(horizontal_taps) = &horizontal_taps else {
            return tall;
        };
        let plane = Plane { bytes: &tall, stride: bytes.len() };
        horizontal(horizontal_taps, plane, rows.len(), in_columns.start, in_columns.len())
    } else {
        // Horizontally first, over the rows the kept outputs' vertical taps read.
        let vertical_taps = (new_h != h).then(|| Taps::new(h, new_h, rows.clone(), filter));
        let in_rows = vertical_taps.as_ref().map_or(rows.clone(), Taps::inputs);
        let wide = match &horizontal_taps {
            None => copy_window(src, w, bands, in_rows.clone(), columns.clone()),
            Some(taps) => {
                let first = &src[in_rows.start * w * bands..in_rows.end * w * bands];
                horizontal(taps, Plane { bytes: first, stride: w * bands }, in_rows.len(), 0, w)
            }
        };
        let Some(taps) = vertical_taps else {
            return wide;
        };
        let stride = columns.len() * bands;
        let mut out = vec![0u8; rows.len() * stride];
        vertical_on(tier, Plane { bytes: &wide, stride }, in_rows.start, 0..stride, &taps, &mut out);
        out
    }
}

/// Pillow's resize of `I;16` (`ImagingResample{Horizontal,Vertical}_16bpc`) with `filter`
/// (bicubic, or bilinear for open_clip's bilinear checkpoints such as PE-Core): the weights in f64, each sum rounded half away from zero, then stored byte by byte with each
/// byte clipped to 0–255 (a sum above 65,535 keeps its low byte under a high byte of 255).
pub(super) fn resize_16(src: &[u16], w: usize, h: usize, new_w: usize, new_h: usize, filter: Filter) -> Vec<u16> {
    let pass = |src: &[u16], len: usize, count: usize, stride: usize, step: usize, new_len: usize| -> Vec<u16> {
        // `count` lines of `len` samples, `step` apart within a line, `stride` between lines.
        let taps = coefficients(len, new_len, 0..new_len, filter);
        let mut out = vec![0u16; count * new_len];
        for line in 0..count {
            for (i, (min, k)) in taps.iter().enumerate() {
                let ss: f64 =
                    k.iter().enumerate().map(|(j, &kw)| f64::from(src[line * stride + (min + j) * step]) * kw).sum();
                let v = if ss >= 0.0 { (ss + 0.5) as i64 } else { (ss - 0.5) as i64 };
                let byte = |b: i64| b.clamp(0, 255) as u16;
                out[line * new_len + i] = byte(v % 256) | byte(v >> 8) << 8;
            }
        }
        out
    };
    let transpose = |src: &[u16], w: usize, h: usize| -> Vec<u16> {
        (0..w).flat_map(|x| (0..h).map(move |y| (x, y))).map(|(x, y)| src[y * w + x]).collect()
    };
    let horizontal = |src: &[u16], w: usize, h: usize| {
        if new_w == w {
            src.to_vec()
        } else {
            pass(src, w, h, w, 1, new_w)
        }
    };
    // The vertical pass on the transposed image, transposed back.
    let vertical = |src: &[u16], w: usize, h: usize| {
        if new_h == h {
            src.to_vec()
        } else {
            transpose(&pass(&transpose(src, w, h), h, w, h, 1, new_h), new_h, w)
        }
    };
    if vertical_first(w, h, new_w, new_h) {
        horizontal(&vertical(src, w, h), w, new_h)
    } else {
        vertical(&horizontal(src, w, h), new_w, h)
    }
}

/// Pillow's `NEAREST` resize (`ImagingScaleAffine`): output pixel x reads input
/// `floor(pos_x)`, where `pos_0 = step / 2` and each next position adds `step = in / out`, in
/// f64 as Pillow sums it. Where `(x + 0.5) · step` is a whole number the sum can fall just
/// below it, so computing each position by one product would read the next pixel there.
pub(super) fn resize_nearest(src: &[u8], bands: usize, w: usize, h: usize, new_w: usize, new_h: usize) -> Vec<u8> {
    let positions = |from: usize, to: usize| -> Vec<usize> {
        let step = from as f64 / to as f64;
        let mut at = step * 0.5;
        (0..to)
            .map(|_| {
                let index = (at as usize).min(from - 1);
                at += step;
                index
            })
            .collect()
    };
    let (columns, rows) = (positions(w, new_w), positions(h, new_h));
    let mut out = Vec::with_capacity(new_w * new_h * bands);
    for &sy in &rows {
        for &sx in &columns {
            out.extend_from_slice(&src[(sy * w + sx) * bands..(sy * w + sx + 1) * bands]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pillow's resize written plainly: both passes over the whole image, one sum per pixel.
    fn plain(src: &[u8], bands: usize, w: usize, h: usize, new_w: usize, new_h: usize) -> Vec<u8> {
        let horizontal = |src: &[u8], w: usize, h: usize| -> Vec<u8> {
            if new_w == w {
                return src.to_vec();
            }
            let taps = Taps::new(w, new_w, 0..new_w, Filter::Bicubic);
            let mut out = Vec::new();
            for y in 0..h {
                for (min, k) in &taps.taps {
                    for b in 0..bands {
                        let s: i32 = k
                            .iter()
                            .enumerate()
                            .map(|(i, &kw)| i32::from(src[(y * w + min + i) * bands + b]) * kw)
                            .sum();
                        out.push(clip8(s + HALF));
                    }
                }
            }
            out
        };
        let vertical = |src: &[u8], w: usize, h: usize| -> Vec<u8> {
            if new_h == h {
                return src.to_vec();
            }
            let taps = Taps::new(h, new_h, 0..new_h, Filter::Bicubic);
            let mut out = Vec::new();
            for (min, k) in &taps.taps {
                for x in 0..w * bands {
                    let s: i32 =
                        k.iter().enumerate().map(|(i, &kw)| i32::from(src[(min + i) * w * bands + x]) * kw).sum();
                    out.push(clip8(s + HALF));
                }
            }
            out
        };
        if vertical_first(w, h, new_w, new_h) {
            horizontal(&vertical(src, w, h), w, new_h)
        } else {
            vertical(&horizontal(src, w, h), new_w, h)
        }
    }

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect()
    }

    /// Every tier, every window, both pass orders, up- and downscaling and odd sizes give
    /// the plain computation's bytes.
    #[test]
    fn windows_on_every_tier_match_the_plain_resize() {
        let cases = [
            (640, 480, 298, 224),
            (480, 640, 224, 298),
            (300, 90, 224, 67),
            (37, 23, 11, 50),
            (5, 7, 224, 224),
            (224, 224, 224, 224),
            (224, 500, 224, 224),
            (500, 224, 224, 224),
            (9, 1000, 3, 224),
        ];
        for bands in [1, 3, 4] {
            for (i, &(w, h, new_w, new_h)) in cases.iter().enumerate() {
                let src = noise(w * h * bands, i as u64);
                let whole = plain(&src, bands, w, h, new_w, new_h);
                let windows = [
                    (0..new_w, 0..new_h),
                    (new_w / 3..new_w - new_w / 4, new_h / 5..new_h / 2),
                    (new_w - 1..new_w, 0..1),
                ];
                for tier in Tier::available() {
                    for (columns, rows) in windows.clone() {
                        let got = resize_window(
                            tier,
                            &src,
                            bands,
                            (w, h),
                            (new_w, new_h),
                            columns.clone(),
                            rows.clone(),
                            Filter::Bicubic,
                        );
                        let expected = copy_window(&whole, new_w, bands, rows.clone(), columns.clone());
                        assert!(
                            got == expected,
                            "{w}×{h} → {new_w}×{new_h}, {bands} bands, window {columns:?} × {rows:?}, {tier:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn resizing_a_flat_image_keeps_its_colour() {
        let src: Vec<u8> = [10u8, 200, 99].repeat(37 * 23);
        let out = resize_window(Tier::current(), &src, 3, (37, 23), (11, 50), 0..11, 0..50, Filter::Bicubic);
        assert!(out.chunks(3).all(|p| p == [10, 200, 99]));
    }

    #[test]
    fn weights_of_each_output_pixel_sum_to_one() {
        for (a, b) in [(640, 224), (100, 224), (224, 224), (7, 3)] {
            for (_, k) in Taps::new(a, b, 0..b, Filter::Bicubic).taps {
                let sum: i64 = k.iter().map(|&w| i64::from(w)).sum();
                assert!((sum - (1 << PRECISION_BITS)).abs() <= k.len() as i64, "{a}->{b}: {sum}");
            }
        }
    }
}
