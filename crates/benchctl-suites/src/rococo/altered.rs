//! RoCOCO's visually altered images, made by benchctl itself, deterministically from a seed.
//!
//! For each test image `x_o` another test image `x_f` is drawn (never itself), and:
//! - **Mix**: `x̃ = λ·x_o + (1 − λ)·x_f`, per pixel and channel, rounded half away from zero;
//! - **Patch**: a rectangle of `x_f` covering a fraction `1 − λ` of the image (sides scaled by
//!   `√(1 − λ)`, rounded), pasted at a random position of `x_o`.
//!
//! `x_f` is first resized to `x_o`'s size (Catmull-Rom). The draws come from SplitMix64
//! seeded with `seed` and the image's index, so a gallery is bit-identical for a seed on
//! every machine, and independent of the order images are made in.

use image::RgbImage;

/// How an altered image is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Mix,
    Patch,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Mix => "mix",
            Method::Patch => "patch",
        }
    }
}

/// One altered image: which test images it combines, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AlteredImage {
    pub base: usize,
    pub other: usize,
    pub method: Method,
    /// λ in thousandths (900 = 0.9), so that images hash and compare exactly.
    pub lambda_milli: u16,
    /// The random draws of this image (patch position).
    pub draw: u64,
}

impl AlteredImage {
    pub fn lambda(&self) -> f32 {
        f32::from(self.lambda_milli) / 1000.0
    }
}

/// SplitMix64: a tiny, well-mixed generator with a fixed definition.
fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The altered gallery of `n` test images: one altered image per test image; λ in
/// thousandths.
pub fn gallery(n: usize, method: Method, lambda_milli: u16, seed: u64) -> crate::Result<Vec<AlteredImage>> {
    if n < 2 {
        return Err(crate::Error::new(
            crate::ErrorKind::Malformed,
            format!("make an altered gallery of {n} image(s): at least two are needed to combine"),
        ));
    }
    Ok((0..n)
        .map(|base| {
            let draw = splitmix64(seed ^ splitmix64(base as u64));
            // Any image but the base: draw among n − 1 and skip over the base.
            let pick = (splitmix64(draw) % (n as u64 - 1)) as usize;
            let other = if pick >= base { pick + 1 } else { pick };
            AlteredImage { base, other, method, lambda_milli, draw }
        })
        .collect())
}

/// Renders an altered image from its base and other image.
pub fn render(spec: &AlteredImage, base: &RgbImage, other: &RgbImage) -> RgbImage {
    let (w, h) = base.dimensions();
    let other = if other.dimensions() == (w, h) {
        other.clone()
    } else {
        image::imageops::resize(other, w, h, image::imageops::FilterType::CatmullRom)
    };
    let lambda = spec.lambda().clamp(0.0, 1.0);
    match spec.method {
        Method::Mix => {
            let mut out = base.clone();
            for (o, f) in out.as_mut().iter_mut().zip(other.as_raw()) {
                *o = (lambda * *o as f32 + (1.0 - lambda) * *f as f32).round().clamp(0.0, 255.0) as u8;
            }
            out
        }
        Method::Patch => {
            let side = (1.0 - lambda).sqrt();
            let (pw, ph) = (((w as f32) * side).round() as u32, ((h as f32) * side).round() as u32);
            // A fixed salt ("PATCH") separates the position draw from the partner draw.
            let r = splitmix64(spec.draw ^ 0x50_4154_4348);
            let x0 = (r % (w - pw + 1) as u64) as u32;
            let y0 = ((r >> 32) % (h - ph + 1) as u64) as u32;
            let mut out = base.clone();
            for y in y0..y0 + ph {
                for x in x0..x0 + pw {
                    out.put_pixel(x, y, *other.get_pixel(x, y));
                }
            }
            out
        }
    }
}
