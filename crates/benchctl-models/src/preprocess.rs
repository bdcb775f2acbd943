//! Image preprocessing exactly as the models' reference code does it on a PIL image:
//! - OpenAI CLIP / OpenCLIP: `Resize(size, BICUBIC)` (shorter side) → `CenterCrop(size)` →
//!   `ToTensor()` → `Normalize(mean, std)`;
//! - SigLIP and BLIP (`transformers`' PIL image processors): resize both sides to
//!   `size × size` (BICUBIC, aspect ratio not kept, no crop) → rescale → normalise, with
//!   mean = std = 0.5 for SigLIP (values in [−1, 1]) and OpenAI's constants for BLIP.
//!
//! The resize reproduces Pillow's antialiased resampling (`Resample.c`): a separable
//! convolution whose support widens with the downscale factor, bicubic with a = −0.5,
//! coefficients in 22-bit fixed point, a horizontal pass then a vertical pass, each
//! rounded and clamped to 8 bits. A plain bicubic interpolation (no antialiasing) or a
//! bilinear one moves CLIP scores measurably, so none is offered.

use image::RgbImage;

/// OpenAI CLIP's normalisation constants, as published (f32 keeps the nearest values).
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

/// SigLIP's normalisation: to [−1, 1].
pub const HALF: [f32; 3] = [0.5, 0.5, 0.5];

/// How an image becomes `size × size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// Shorter side to `size`, then a centre crop (CLIP).
    ShorterSideThenCrop,
    /// Both sides to `size`, stretching (SigLIP, BLIP).
    Stretch,
}

/// A resize to `size`×`size`, then per-channel `(x / 255 − mean) / std`, laid out CHW.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessor {
    pub size: usize,
    pub resize: Resize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl Preprocessor {
    /// OpenAI CLIP's preprocessing at the given input size.
    pub fn openai_clip(size: usize) -> Self {
        Self { size, resize: Resize::ShorterSideThenCrop, mean: OPENAI_CLIP_MEAN, std: OPENAI_CLIP_STD }
    }

    /// A square stretch to `size` with these constants (`transformers`' SigLIP and BLIP processors).
    pub fn stretch(size: usize, mean: [f32; 3], std: [f32; 3]) -> Self {
        Self { size, resize: Resize::Stretch, mean, std }
    }

    /// One line for listings: `224 px, shorter side + centre crop, bicubic, mean … std …`.
    pub fn describe(&self) -> String {
        let how = match self.resize {
            Resize::ShorterSideThenCrop => "shorter side + centre crop",
            Resize::Stretch => "stretched square",
        };
        let fmt = |v: &[f32; 3]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join("/");
        format!("{} px {how}, bicubic, mean {} std {}", self.size, fmt(&self.mean), fmt(&self.std))
    }

    /// Values per image: 3 × size × size.
    pub fn len(&self) -> usize {
        3 * self.size * self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The normalised CHW tensor data of one image.
    pub fn apply(&self, image: &RgbImage) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        self.apply_into(image, &mut out);
        out
    }

    /// As [`Preprocessor::apply`], writing into `out` (length [`Preprocessor::len`]).
    pub fn apply_into(&self, image: &RgbImage, out: &mut [f32]) {
        let size = self.size;
        assert_eq!(out.len(), self.len(), "output buffer has the wrong length");
        let (w, h) = (image.width() as usize, image.height() as usize);
        let (new_w, new_h) = match self.resize {
            Resize::ShorterSideThenCrop => short_side_size(w, h, size),
            Resize::Stretch => (size, size),
        };
        let resized = resize_bicubic(image.as_raw(), w, h, new_w, new_h);
        let top = centre_offset(new_h, size);
        let left = centre_offset(new_w, size);
        let plane = size * size;
        for c in 0..3 {
            let (mean, std) = (self.mean[c], self.std[c]);
            for y in 0..size {
                let row = (top + y) * new_w;
                for x in 0..size {
                    let v = resized[(row + left + x) * 3 + c] as f32 / 255.0;
                    out[c * plane + y * size + x] = (v - mean) / std;
                }
            }
        }
    }
}

/// torchvision's `Resize(size)` for an int size: the shorter side becomes `size`, the longer
/// `int(size * long / short)`.
pub fn short_side_size(w: usize, h: usize, size: usize) -> (usize, usize) {
    let (short, long) = if w <= h { (w, h) } else { (h, w) };
    let new_long = ((size * long) as f64 / short as f64) as usize;
    if w <= h {
        (size, new_long)
    } else {
        (new_long, size)
    }
}

/// torchvision's `CenterCrop` offset: `int(round((full - crop) / 2))`, with Python's
/// round-half-to-even.
pub fn centre_offset(full: usize, crop: usize) -> usize {
    let d = full.saturating_sub(crop);
    let half = d / 2;
    if d % 2 == 1 && half % 2 == 1 {
        half + 1
    } else {
        half
    }
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

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

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc`: for each output pixel, the first
/// input index and the fixed-point weights of the input pixels it reads.
fn coefficients(in_size: usize, out_size: usize) -> (usize, Vec<(usize, Vec<i32>)>) {
    let scale = in_size as f64 / out_size as f64;
    let filter_scale = scale.max(1.0);
    let support = 2.0 * filter_scale;
    let ksize = support.ceil() as usize * 2 + 1;
    let taps = (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            let ss = 1.0 / filter_scale;
            // C's (int) cast truncates toward zero.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
            let weights: Vec<f64> =
                (0..xmax).map(|x| bicubic((x as f64 + xmin as f64 - center + 0.5) * ss)).collect();
            let total: f64 = weights.iter().sum();
            let fixed = weights
                .iter()
                .map(|w| {
                    let w = if total != 0.0 { w / total } else { *w };
                    let scaled = w * (1u32 << PRECISION_BITS) as f64;
                    if scaled < 0.0 {
                        (scaled - 0.5) as i32
                    } else {
                        (scaled + 0.5) as i32
                    }
                })
                .collect();
            (xmin, fixed)
        })
        .collect();
    (ksize, taps)
}

fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Pillow's bicubic `Image.resize` of packed RGB8: two separable passes, each skipped when
/// that dimension keeps its size. Pillow (13, as in the reference environment) runs the
/// vertical pass first when the height shrinks by more than twice as many pixels as the
/// width, else the horizontal pass first; the order changes the 8-bit rounding in between,
/// so it is followed here.
pub fn resize_bicubic(src: &[u8], w: usize, h: usize, new_w: usize, new_h: usize) -> Vec<u8> {
    let vertical_first = h > new_h && (h - new_h) as i64 > 2 * (w as i64 - new_w as i64);
    if vertical_first {
        let tall = resize_vertical(src.to_vec(), w, h, new_h);
        resize_horizontal(tall, w, new_h, new_w)
    } else {
        let wide = resize_horizontal(src.to_vec(), w, h, new_w);
        resize_vertical(wide, new_w, h, new_h)
    }
}

/// The horizontal pass: `w × h` → `new_w × h`.
fn resize_horizontal(src: Vec<u8>, w: usize, h: usize, new_w: usize) -> Vec<u8> {
    if new_w == w {
        return src;
    }
    let (_, taps) = coefficients(w, new_w);
    let mut out = vec![0u8; new_w * h * 3];
    for y in 0..h {
        let row = &src[y * w * 3..(y + 1) * w * 3];
        let out_row = &mut out[y * new_w * 3..(y + 1) * new_w * 3];
        for (xx, (xmin, k)) in taps.iter().enumerate() {
            let mut acc = [1i32 << (PRECISION_BITS - 1); 3];
            for (i, &kw) in k.iter().enumerate() {
                let p = &row[(xmin + i) * 3..(xmin + i) * 3 + 3];
                for c in 0..3 {
                    acc[c] += p[c] as i32 * kw;
                }
            }
            for c in 0..3 {
                out_row[xx * 3 + c] = clip8(acc[c]);
            }
        }
    }
    out
}

/// The vertical pass: `w × h` → `w × new_h`.
fn resize_vertical(src: Vec<u8>, w: usize, h: usize, new_h: usize) -> Vec<u8> {
    if new_h == h {
        return src;
    }
    let (_, taps) = coefficients(h, new_h);
    let stride = w * 3;
    let mut out = vec![0u8; w * new_h * 3];
    let mut acc = vec![0i32; stride];
    for (yy, (ymin, k)) in taps.iter().enumerate() {
        acc.fill(1i32 << (PRECISION_BITS - 1));
        for (i, &kw) in k.iter().enumerate() {
            let row = &src[(ymin + i) * stride..(ymin + i + 1) * stride];
            for (a, &p) in acc.iter_mut().zip(row) {
                *a += p as i32 * kw;
            }
        }
        for (o, &a) in out[yy * stride..(yy + 1) * stride].iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_side_follows_torchvision() {
        assert_eq!(short_side_size(640, 480, 224), (298, 224));
        assert_eq!(short_side_size(480, 640, 224), (224, 298));
        assert_eq!(short_side_size(300, 300, 224), (224, 224));
    }

    #[test]
    fn centre_offset_rounds_half_to_even() {
        assert_eq!(centre_offset(224, 224), 0);
        assert_eq!(centre_offset(226, 224), 1);
        // (227 - 224) / 2 = 1.5 → 2; (225 - 224) / 2 = 0.5 → 0; (229-224)/2 = 2.5 → 2
        assert_eq!(centre_offset(227, 224), 2);
        assert_eq!(centre_offset(225, 224), 0);
        assert_eq!(centre_offset(229, 224), 2);
    }

    #[test]
    fn resizing_a_flat_image_keeps_its_colour() {
        let src: Vec<u8> = [10u8, 200, 99].repeat(37 * 23);
        let out = resize_bicubic(&src, 37, 23, 11, 50);
        assert!(out.chunks(3).all(|p| p == [10, 200, 99]));
    }

    #[test]
    fn weights_of_each_output_pixel_sum_to_one() {
        for (a, b) in [(640, 224), (100, 224), (224, 224), (7, 3)] {
            let (_, taps) = coefficients(a, b);
            for (_, k) in taps {
                let sum: i64 = k.iter().map(|&w| w as i64).sum();
                assert!((sum - (1 << PRECISION_BITS)).abs() <= k.len() as i64, "{a}->{b}: {sum}");
            }
        }
    }
}
