//! PNG and JPEG bytes decoded as `PIL.Image.open` holds them ([`PilImage`]): Pillow's size
//! limit, a memory budget shared by the decoders running at once, each PNG mode and `tRNS`
//! as Pillow reads them, JPEGs by zune-jpeg or (`libjpeg-turbo`) Pillow's own decoder.

use image::{RgbImage, RgbaImage};

use super::PilImage;

/// The most pixels an image may have: Pillow's `MAX_IMAGE_PIXELS` doubled, where it stops
/// warning and refuses (`DecompressionBombError`).
pub const MAX_PIXELS: u64 = 2 * 89_478_485;

/// The most bytes one decode may allocate (a 178 M-pixel RGBA image at 16 bits is 1.4 GB).
const MAX_DECODE_ALLOC: u64 = 1536 << 20;

/// The most bytes the decoders running in parallel may hold at once: images are decoded on
/// every core, and without a common bound a batch of large files could each take up to
/// `MAX_DECODE_ALLOC` (1.5 GiB) at the same time.
pub const DECODE_MEMORY: u64 = 2 << 30;

/// A budget of bytes shared by concurrent decoders: [`DecodeBudget::reserve`] waits until
/// its share fits. One request larger than the whole budget waits for the budget to be
/// free and then runs alone, so no image that passes the pixel limit is refused for it.
#[derive(Debug)]
pub struct DecodeBudget {
    total: u64,
    in_use: std::sync::Mutex<u64>,
    freed: std::sync::Condvar,
}

/// Bytes held from a [`DecodeBudget`] until dropped.
#[derive(Debug)]
pub struct Reservation<'a> {
    budget: &'a DecodeBudget,
    bytes: u64,
}

impl DecodeBudget {
    pub const fn new(total: u64) -> Self {
        Self { total, in_use: std::sync::Mutex::new(0), freed: std::sync::Condvar::new() }
    }

    /// Holds `bytes` (at most the whole budget) once they fit beside the other holders.
    pub fn reserve(&self, bytes: u64) -> Reservation<'_> {
        let bytes = bytes.min(self.total);
        // A poisoned lock only means another decoder panicked; the count is still right.
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        while *in_use + bytes > self.total {
            in_use = self.freed.wait(in_use).unwrap_or_else(|e| e.into_inner());
        }
        *in_use += bytes;
        Reservation { budget: self, bytes }
    }

    /// Bytes held now.
    pub fn in_use(&self) -> u64 {
        *self.in_use.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut in_use = self.budget.in_use.lock().unwrap_or_else(|e| e.into_inner());
        *in_use -= self.bytes;
        self.budget.freed.notify_all();
    }
}

/// The budget every image decode in this process draws from.
static DECODERS: DecodeBudget = DecodeBudget::new(DECODE_MEMORY);

/// Pillow's `CMYK` → `RGB` (`cmyk2rgb` in `Convert.c`), packed pixels to packed pixels: with
/// `nk = 255 − k`, each channel is `nk − nk·c/255` (the product rounded as `MULDIV255`).
pub fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    cmyk.chunks_exact(4)
        .flat_map(|p| {
            let nk = 255 - p[3];
            [0, 1, 2].map(|c| nk - muldiv255(p[c], nk))
        })
        .collect()
}

/// Pillow's `MULDIV255`: `a · b / 255`, rounded, in integers.
pub fn muldiv255(a: u8, b: u8) -> u8 {
    let t = u32::from(a) * u32::from(b) + 128;
    (((t >> 8) + t) >> 8) as u8
}

/// The PNG header's bit depth and colour type, if `header` starts a PNG.
fn png_depth_and_colour(header: &[u8]) -> Option<(u8, u8)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    (header.len() >= 26 && header.starts_with(SIGNATURE) && &header[12..16] == b"IHDR")
        .then(|| (header[24], header[25]))
}

/// Whether a JPEG stream has an end-of-image marker (`FF D9`) after its first start-of-scan
/// (`FF DA`): inside scan data a `FF` byte is always followed by `00` or a restart marker, so
/// the pair marks the end there (an EXIF thumbnail's own markers come before the scan, and
/// bytes after the end are ignored, as Pillow ignores them). The scan's start is searched
/// from the front and the last end marker from the back, so the scan data is not read.
fn jpeg_is_complete(bytes: &[u8]) -> bool {
    let Some(scan) = bytes.windows(2).position(|pair| pair == [0xFF, 0xDA]) else {
        return false;
    };
    bytes[scan + 2..].windows(2).rev().any(|pair| pair == [0xFF, 0xD9])
}

/// libjpeg's YCCK → CMYK (`ycck_cmyk_convert` in `jdcolor.c`), in place: Y, Cb, Cr become
/// R, G, B in libjpeg's 16-bit fixed point, then C, M, Y = 255 − R, G, B; K is kept.
fn ycck_to_cmyk(pixel: &mut [u8]) {
    const ONE_HALF: i32 = 1 << 15;
    let fix = |x: f64| (x * 65536.0 + 0.5) as i32;
    let (y, cb, cr) = (i32::from(pixel[0]), i32::from(pixel[1]) - 128, i32::from(pixel[2]) - 128);
    let r = y + ((fix(1.40200) * cr + ONE_HALF) >> 16);
    let g = y + ((-fix(0.34414) * cb + ONE_HALF - fix(0.71414) * cr) >> 16);
    let b = y + ((fix(1.77200) * cb + ONE_HALF) >> 16);
    for (out, v) in pixel.iter_mut().zip([r, g, b]) {
        *out = 255 - v.clamp(0, 255) as u8;
    }
}

fn refused(message: String) -> image::ImageError {
    image::ImageError::IoError(std::io::Error::other(message))
}

/// Refuses an empty image or one of more than [`MAX_PIXELS`], before any pixel is decoded.
fn check_size(w: u64, h: u64) -> std::result::Result<(), image::ImageError> {
    if w == 0 || h == 0 || w * h > MAX_PIXELS {
        return Err(refused(format!(
            "the image is {w}×{h} pixels: benchctl refuses empty images and, as Pillow does, more than {MAX_PIXELS}"
        )));
    }
    Ok(())
}

/// Decodes PNG or JPEG bytes as `PIL.Image.open` would hold them ([`PilImage`]). The
/// dimensions are read from the header first: an empty image, or one of more than
/// [`MAX_PIXELS`], is refused before any pixel is decoded, and the decoder's allocations are
/// bounded.
pub fn decode_pil(bytes: &[u8]) -> std::result::Result<PilImage, image::ImageError> {
    if bytes.starts_with(&[0xFF, 0xD8]) {
        return decode_jpeg(bytes);
    }
    let open = || image::ImageReader::new(std::io::Cursor::new(bytes)).with_guessed_format();
    let (w, h) = open().map_err(image::ImageError::IoError)?.into_dimensions()?;
    check_size(u64::from(w), u64::from(h))?;
    // The decoded pixels at up to 8 bytes each (16-bit RGBA), and as much again for the
    // decoder's own buffers and the conversion: held until this decode is done.
    let _held = DECODERS.reserve((u64::from(w) * u64::from(h) * 16).min(MAX_DECODE_ALLOC));
    let mut reader = open().map_err(image::ImageError::IoError)?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    reader.limits(limits);
    let decoded = reader.decode().map_err(|e| {
        let eof = matches!(&e, image::ImageError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof)
            || e.to_string().contains("end of file");
        if eof {
            refused(format!("the image is truncated: {e}"))
        } else {
            e
        }
    })?;
    // Colour type 3 is a palette; 0 at 1 bit is Pillow's mode "1": both resize nearest.
    let header = png_depth_and_colour(bytes);
    let nearest = matches!(header, Some((_, 3)) | Some((1, 0)));
    let transparency = png_transparency(bytes);
    use image::DynamicImage as D;
    if nearest {
        return Ok(PilImage::Palette { rgba: decoded.into_rgba8(), key: transparency.flatten() });
    }
    // A grey or RGB PNG with a `tRNS` is "L" or "RGB" to Pillow (its transparent colour aside),
    // where the decoder gave it an alpha channel.
    let decoded = match (transparency.is_some(), decoded) {
        (true, D::ImageRgba8(i)) => D::ImageRgb8(D::ImageRgba8(i).into_rgb8()),
        (true, D::ImageLumaA8(i)) => D::ImageLuma8(D::ImageLumaA8(i).into_luma8()),
        (true, D::ImageRgba16(i)) => D::ImageRgb16(D::ImageRgba16(i).into_rgb16()),
        (true, D::ImageLumaA16(i)) => D::ImageLuma16(D::ImageLumaA16(i).into_luma16()),
        (_, decoded) => decoded,
    };
    Ok(match (pil_mode(decoded), transparency.flatten()) {
        (PilImage::Rgb(rgb), Some(key)) => PilImage::Keyed { rgb, key },
        (image, _) => image,
    })
}

/// A decoded PNG (not a palette) in the mode Pillow holds it in.
fn pil_mode(decoded: image::DynamicImage) -> PilImage {
    let high_byte = |v: u16| (v >> 8) as u8;
    use image::DynamicImage as D;
    match decoded {
        D::ImageLuma16(grey) => PilImage::Gray16(grey),
        D::ImageRgb16(rgb) => {
            let (w, h) = rgb.dimensions();
            PilImage::Rgb(
                RgbImage::from_vec(w, h, rgb.into_raw().into_iter().map(high_byte).collect()).unwrap_or_default(),
            )
        }
        D::ImageRgba16(rgba) => {
            let (w, h) = rgba.dimensions();
            PilImage::Rgba(
                RgbaImage::from_vec(w, h, rgba.into_raw().into_iter().map(high_byte).collect()).unwrap_or_default(),
            )
        }
        D::ImageLumaA16(la) => {
            let (w, h) = la.dimensions();
            let rgba = la
                .pixels()
                .flat_map(|p| {
                    let (l, a) = (high_byte(p[0]), high_byte(p[1]));
                    [l, l, l, a]
                })
                .collect();
            PilImage::Rgba(RgbaImage::from_vec(w, h, rgba).unwrap_or_default())
        }
        other if other.color().has_alpha() => PilImage::Rgba(other.into_rgba8()),
        other => PilImage::Rgb(other.into_rgb8()),
    }
}

/// A PNG's transparency chunk (`tRNS`) as Pillow reads it: `None` without one, else the one
/// transparent colour Pillow keeps in `info["transparency"]` (and `convert("RGB")` carries
/// over), if it names one: a palette's single fully transparent entry where every other entry
/// is opaque, or an 8-bit grey or RGB value. The chunks before the image data are walked.
fn png_transparency(bytes: &[u8]) -> Option<Option<[u8; 3]>> {
    let (depth, colour) = png_depth_and_colour(bytes)?;
    let mut at = 8;
    let mut palette: &[u8] = &[];
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let data = bytes.get(at + 8..(at + 8).checked_add(len)?)?;
        let value = |i: usize| data.get(i..i + 2).and_then(|v| u8::try_from(u16::from_be_bytes([v[0], v[1]])).ok());
        match &head[4..8] {
            b"PLTE" => palette = data,
            b"tRNS" => {
                return Some(match (colour, depth) {
                    (3, _) => single_transparent_entry(data)
                        .and_then(|i| palette.get(3 * i..3 * i + 3))
                        .map(|c| [c[0], c[1], c[2]]),
                    (0, 8) => value(0).map(|v| [v; 3]),
                    (2, 8) => value(0).zip(value(2)).zip(value(4)).map(|((r, g), b)| [r, g, b]),
                    _ => None,
                })
            }
            b"IDAT" | b"IEND" => return None,
            _ => {}
        }
        at = at.checked_add(12 + len)?;
    }
    None
}

/// The index of a palette `tRNS`'s one fully transparent entry when every other entry is
/// opaque (Pillow's `^\xff*\x00\xff*$`).
fn single_transparent_entry(alphas: &[u8]) -> Option<usize> {
    let zero = alphas.iter().position(|&a| a == 0)?;
    alphas.iter().enumerate().all(|(i, &a)| a == 255 || i == zero).then_some(zero)
}

/// Which library decodes JPEGs in this build: `libjpeg-turbo` (the `libjpeg-turbo` feature:
/// Pillow's own decoder, so Pillow's pixels) or `zune-jpeg` (pure Rust, within a few levels).
pub const JPEG_DECODER: &str = if cfg!(feature = "libjpeg-turbo") { "libjpeg-turbo" } else { "zune-jpeg" };

/// A JPEG as Pillow holds it: YCbCr and RGB files as RGB, greyscale replicated, four
/// components as CMYK (inverted back, as Pillow reads Adobe's inverted CMYK, `CMYK;I`).
/// The headers are read by `zune-jpeg`, the pixels decoded by [`JPEG_DECODER`]: `zune-jpeg`'s
/// integer IDCT and upsampling differ from libjpeg-turbo's (Pillow's) by a few levels on some
/// pixels; docs/models.md ("Decoding") states the bound and
/// `benchctl-models/tests/preprocess.rs` checks it against Pillow's decode (exact with
/// libjpeg-turbo).
fn decode_jpeg(bytes: &[u8]) -> std::result::Result<PilImage, image::ImageError> {
    use zune_core::colorspace::ColorSpace;
    let error = |e: zune_jpeg::errors::DecodeErrors| refused(format!("not a readable JPEG: {e}"));
    let options = zune_core::options::DecoderOptions::default()
        .set_strict_mode(false)
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(zune_core::bytestream::ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(error)?;
    let (w, h) = decoder.dimensions().ok_or_else(|| refused("the JPEG has no frame header".into()))?;
    check_size(w as u64, h as u64)?;
    // The decoder fills missing scan data with grey; Pillow refuses such a file.
    if !jpeg_is_complete(bytes) {
        return Err(refused(
            "the JPEG is truncated: its scan data has no end-of-image marker (Pillow: \"image file is truncated\")"
                .into(),
        ));
    }
    let (colour, channels) = match decoder.input_colorspace() {
        Some(ColorSpace::Luma | ColorSpace::LumaA) => (ColorSpace::Luma, 1),
        Some(ColorSpace::CMYK) => (ColorSpace::CMYK, 4),
        Some(ColorSpace::YCCK) => (ColorSpace::YCCK, 4),
        _ => (ColorSpace::RGB, 3),
    };
    let _held = DECODERS.reserve((w as u64 * h as u64 * 8).min(MAX_DECODE_ALLOC));
    let mut pixels = vec![0u8; w * h * channels];
    if cfg!(feature = "libjpeg-turbo") {
        turbo::decode_into(bytes, w, h, channels, &mut pixels)?;
    } else {
        decoder.set_options(options.jpeg_set_out_colorspace(colour));
        decoder.decode_into(&mut pixels).map_err(error)?;
        if colour == ColorSpace::YCCK {
            pixels.chunks_exact_mut(4).for_each(ycck_to_cmyk);
        }
    }
    let (w, h) = (w as u32, h as u32);
    Ok(match channels {
        1 => PilImage::Rgb(RgbImage::from_vec(w, h, pixels.iter().flat_map(|&l| [l; 3]).collect()).unwrap_or_default()),
        4 => {
            pixels.iter_mut().for_each(|v| *v = 255 - *v);
            PilImage::Cmyk(RgbaImage::from_vec(w, h, pixels).unwrap_or_default())
        }
        _ => PilImage::Rgb(RgbImage::from_vec(w, h, pixels).unwrap_or_default()),
    })
}

/// Decoding through libjpeg-turbo's TurboJPEG API with Pillow's settings: the accurate
/// integer IDCT (`JDCT_ISLOW`) and smooth ("fancy") chroma upsampling, TurboJPEG's defaults.
#[cfg(feature = "libjpeg-turbo")]
mod turbo {
    use std::cell::RefCell;

    thread_local! {
        /// One decompressor per thread, reused from image to image.
        static DECOMPRESSOR: RefCell<Option<turbojpeg::Decompressor>> = const { RefCell::new(None) };
    }

    /// Decodes `bytes` (`w × h`, already checked) into `pixels`: RGB for 3 channels, grey for
    /// 1, CMYK (YCCK converted by the library, as Pillow's libjpeg does) for 4.
    pub(super) fn decode_into(
        bytes: &[u8],
        w: usize,
        h: usize,
        channels: usize,
        pixels: &mut [u8],
    ) -> std::result::Result<(), image::ImageError> {
        let refused = |e: turbojpeg::Error| super::refused(format!("not a readable JPEG (libjpeg-turbo): {e}"));
        let format = match channels {
            1 => turbojpeg::PixelFormat::GRAY,
            4 => turbojpeg::PixelFormat::CMYK,
            _ => turbojpeg::PixelFormat::RGB,
        };
        DECOMPRESSOR.with_borrow_mut(|slot| {
            let decompressor = match slot {
                Some(d) => d,
                None => slot.insert(turbojpeg::Decompressor::new().map_err(refused)?),
            };
            let image = turbojpeg::Image { pixels, width: w, pitch: w * channels, height: h, format };
            decompressor.decompress(bytes, image).map_err(refused)
        })
    }
}

/// Without the feature nothing calls it ([`decode_jpeg`] tests `cfg!` first).
#[cfg(not(feature = "libjpeg-turbo"))]
mod turbo {
    pub(super) fn decode_into(
        _: &[u8],
        _: usize,
        _: usize,
        _: usize,
        _: &mut [u8],
    ) -> std::result::Result<(), image::ImageError> {
        Err(super::refused("decode a JPEG with libjpeg-turbo: this build has no `libjpeg-turbo` feature".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::DecodeBudget;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Concurrent holders never exceed the budget together, every one gets its turn, and a
    /// request larger than the budget runs alone.
    #[test]
    fn decoders_share_one_memory_budget() {
        let budget = DecodeBudget::new(1_000);
        let (held, peak, done) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|scope| {
            for i in 0..12u64 {
                let (budget, held, peak, done) = (&budget, &held, &peak, &done);
                scope.spawn(move || {
                    let bytes = if i == 5 { 5_000 } else { 300 };
                    let _r = budget.reserve(bytes);
                    let now = held.fetch_add(bytes.min(1_000), Ordering::SeqCst) + bytes.min(1_000);
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    held.fetch_sub(bytes.min(1_000), Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(done.load(Ordering::SeqCst), 12);
        assert!(peak.load(Ordering::SeqCst) <= 1_000, "{} bytes held at once", peak.load(Ordering::SeqCst));
        assert!(peak.load(Ordering::SeqCst) >= 600, "the budget lets decoders run side by side");
        assert_eq!(budget.in_use(), 0);
    }
}
