//! Where an item's image comes from, and decoding it to 8-bit RGB.

use std::path::{Path, PathBuf};

use image::RgbImage;

use crate::{Error, ErrorKind, Result};

/// An image on disk.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageSource {
    /// A PNG or JPEG file.
    File(PathBuf),
    /// A `.npy` array of uint8, shape (H, W, 3), channels in BGR order (OpenCV frames, as
    /// EqBen's YouCook2 split ships them).
    NpyBgr(PathBuf),
    /// An image made from two others (RoCOCO's visually altered images).
    Altered(Box<AlteredSource>),
    /// An encoded PNG or JPEG held inside an annotation file (Winoground's parquet release).
    Embedded(Box<EmbeddedImage>),
}

/// An image's encoded bytes as read from the file that embeds them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EmbeddedImage {
    /// The file holding the bytes.
    pub file: PathBuf,
    /// The image's name inside it (e.g. `ex_0_img_0`).
    pub name: String,
    pub bytes: std::sync::Arc<[u8]>,
}

/// What becomes of an image's alpha channel on the way to RGB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alpha {
    /// Dropped, as PIL's `convert("RGB")` does (torchvision pipelines).
    #[default]
    Drop,
    /// Composited onto opaque white, as `transformers`' `convert_to_rgb` does (PIL's
    /// `alpha_composite` over a white RGBA background, in its fixed-point arithmetic).
    OverWhite,
}

/// Two image files and how [`crate::rococo::altered`] combines them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AlteredSource {
    pub base: PathBuf,
    pub other: PathBuf,
    pub spec: crate::rococo::altered::AlteredImage,
}

impl ImageSource {
    /// A source for this path, by extension: `.npy` is a BGR frame, anything else a file.
    pub fn from_path(path: PathBuf) -> Self {
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npy")) {
            ImageSource::NpyBgr(path)
        } else {
            ImageSource::File(path)
        }
    }

    /// The file read (for an altered image, its base image; for an embedded one, the file
    /// holding it).
    pub fn path(&self) -> &Path {
        match self {
            ImageSource::File(path) | ImageSource::NpyBgr(path) => path,
            ImageSource::Altered(altered) => &altered.base,
            ImageSource::Embedded(embedded) => &embedded.file,
        }
    }

    /// A name for the image in messages and fingerprints: its path, or for an embedded image
    /// `<file>#<name>`.
    pub fn display_name(&self) -> String {
        match self {
            ImageSource::Embedded(e) => format!("{}#{}", e.file.display(), e.name),
            other => other.path().display().to_string(),
        }
    }

    /// Decodes to 8-bit RGB: alpha is dropped, greyscale replicated, 16-bit values scaled
    /// down by 257. PIL's `convert("RGB")` agrees on the first two but clips 16-bit greyscale
    /// above 255 instead, and open_clip resizes before converting (alpha-weighted for RGBA,
    /// nearest neighbour for palette images): those cases are not yet reproduced (issue 12).
    pub fn load_rgb(&self) -> Result<RgbImage> {
        self.load_rgb_with(Alpha::Drop)
    }

    /// As [`ImageSource::load_rgb`], with the alpha channel (if any) handled by `alpha`.
    pub fn load_rgb_with(&self, alpha: Alpha) -> Result<RgbImage> {
        if let ImageSource::Altered(altered) = self {
            let base = ImageSource::File(altered.base.clone()).load_rgb()?;
            let other = ImageSource::File(altered.other.clone()).load_rgb()?;
            return Ok(crate::rococo::altered::render(&altered.spec, &base, &other));
        }
        if let ImageSource::Embedded(embedded) = self {
            return decode_rgb_with(&embedded.bytes, alpha)
                .map_err(|e| Error::new(ErrorKind::CorruptImage, format!("decode image {}: {e}", self.display_name())));
        }
        let path = self.path();
        // Read as a stream: the decoders take only the bytes the format needs, so junk after
        // an image's end is never loaded into memory.
        let open = || {
            std::fs::File::open(path).map(std::io::BufReader::new).map_err(|e| {
                let kind = if e.kind() == std::io::ErrorKind::NotFound {
                    ErrorKind::MissingImage
                } else {
                    ErrorKind::CorruptImage
                };
                Error::new(kind, format!("read image {}: {e}", path.display()))
            })
        };
        // Opened first on its own, so a missing or unreadable file keeps its kind of error.
        let first = open()?;
        let decoded = match self {
            ImageSource::NpyBgr(_) => decode_npy_bgr_from(first),
            _ => decode_rgb_from(|| open().map_err(|e| image::ImageError::IoError(std::io::Error::other(e.to_string()))), alpha)
                .map_err(|e| e.to_string()),
        };
        decoded.map_err(|e| Error::new(ErrorKind::CorruptImage, format!("decode image {}: {e}", path.display())))
    }
}

/// An (H, W, 3) uint8 BGR `.npy` array as RGB.
pub fn decode_npy_bgr(bytes: &[u8]) -> std::result::Result<RgbImage, String> {
    decode_npy_bgr_from(bytes)
}

/// [`decode_npy_bgr`] from a reader: the header, then exactly the array's bytes.
pub fn decode_npy_bgr_from(reader: impl std::io::Read) -> std::result::Result<RgbImage, String> {
    let npy = npyz::NpyFile::new(reader).map_err(|e| format!("not a .npy array: {e}"))?;
    let shape = npy.shape().to_vec();
    if npy.order() != npyz::Order::C {
        return Err("expected a C-ordered array".into());
    }
    let [h, w, 3] = shape[..] else {
        return Err(format!("expected shape (H, W, 3), got {shape:?}"));
    };
    if h == 0 || w == 0 || h.saturating_mul(w) > MAX_PIXELS {
        return Err(format!("a frame of shape {shape:?} is empty or has more than {MAX_PIXELS} pixels"));
    }
    if npy.dtype().descr().trim_matches('\'') != "|u1" {
        return Err(format!("expected uint8 values (|u1), got dtype {}", npy.dtype().descr()));
    }
    let data: Vec<u8> = npy.into_vec().map_err(|e| format!("expected uint8 values: {e}"))?;
    if data.len() as u64 != h * w * 3 {
        return Err(format!("array of shape {shape:?} holds {} values", data.len()));
    }
    let rgb: Vec<u8> = data.chunks_exact(3).flat_map(|bgr| [bgr[2], bgr[1], bgr[0]]).collect();
    RgbImage::from_raw(w as u32, h as u32, rgb).ok_or_else(|| format!("array of shape {shape:?} is truncated"))
}

/// Decodes PNG or JPEG bytes to 8-bit RGB, dropping any alpha.
pub fn decode_rgb(bytes: &[u8]) -> std::result::Result<RgbImage, image::ImageError> {
    decode_rgb_with(bytes, Alpha::Drop)
}

/// The most pixels an image may have: Pillow's `MAX_IMAGE_PIXELS` doubled, where it stops
/// warning and refuses (`DecompressionBombError`).
pub const MAX_PIXELS: u64 = 2 * 89_478_485;

/// The most bytes one decode may allocate (a 178 M-pixel RGBA image at 16 bits is 1.4 GB).
const MAX_DECODE_ALLOC: u64 = 1536 << 20;

/// Decodes PNG or JPEG bytes to 8-bit RGB, the alpha channel (if any) handled by `alpha`.
/// The dimensions are read from the header first: an empty image, or one of more than
/// [`MAX_PIXELS`], is refused before any pixel is decoded, and the decoder's allocations are
/// bounded.
pub fn decode_rgb_with(bytes: &[u8], alpha: Alpha) -> std::result::Result<RgbImage, image::ImageError> {
    decode_rgb_from(|| Ok(std::io::Cursor::new(bytes)), alpha)
}

/// [`decode_rgb_with`] from a source opened twice: once for the header's dimensions, once to
/// decode.
pub fn decode_rgb_from<R: std::io::BufRead + std::io::Seek>(
    source: impl Fn() -> std::result::Result<R, image::ImageError>,
    alpha: Alpha,
) -> std::result::Result<RgbImage, image::ImageError> {
    let open = || image::ImageReader::new(source()?).with_guessed_format().map_err(image::ImageError::IoError);
    let (w, h) = open()?.into_dimensions()?;
    if w == 0 || h == 0 || u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(image::ImageError::IoError(std::io::Error::other(format!(
            "the image is {w}×{h} pixels: benchctl refuses empty images and, as Pillow does, more than {MAX_PIXELS}"
        ))));
    }
    let mut reader = open()?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    reader.limits(limits);
    let decoded = reader.decode()?;
    if alpha == Alpha::Drop || !decoded.color().has_alpha() {
        return Ok(decoded.into_rgb8());
    }
    let rgba = decoded.into_rgba8();
    let (w, h) = rgba.dimensions();
    let rgb = rgba.pixels().flat_map(|p| {
        let a = u32::from(p[3]);
        [0, 1, 2].map(|c| if a == 0 { 255 } else { over_white(u32::from(p[c]), a) })
    });
    Ok(RgbImage::from_vec(w, h, rgb.collect()).unwrap_or_default())
}

/// One channel of Pillow's `alpha_composite` of a straight-alpha pixel over opaque white:
/// 7 fractional bits, `(x >> 8 + x) >> 8` for ÷255, rounded. Over an opaque background the
/// weights reduce to `a · 128` and `(255 − a) · 128`.
fn over_white(value: u32, a: u32) -> u8 {
    const PRECISION_BITS: u32 = 7;
    let shift_div_255 = |x: u32| ((x >> 8) + x) >> 8;
    let (coef1, coef2) = (a << PRECISION_BITS, (255 - a) << PRECISION_BITS);
    let tmp = value * coef1 + 255 * coef2;
    (shift_div_255(tmp + (0x80 << PRECISION_BITS)) >> PRECISION_BITS) as u8
}
