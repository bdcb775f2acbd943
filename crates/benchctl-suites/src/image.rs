//! Where an item's image comes from, and decoding it as `PIL.Image.open` holds it
//! ([`PilImage`]) or as 8-bit RGB.

use std::path::{Path, PathBuf};

use image::{ImageBuffer, Luma, RgbImage, RgbaImage};

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
    /// A region of an image file (ARO's bounding boxes, from a [`crate::manifest`]).
    Cropped(Box<CroppedSource>),
}

/// An image file and the region of it an item shows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CroppedSource {
    pub file: PathBuf,
    pub region: CropRegion,
}

/// A crop box in pixels, as PIL's `Image.crop` takes it after rounding: columns
/// `left..right`, rows `top..bottom`. Pixels outside the image are black, as PIL pads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CropRegion {
    pub left: i64,
    pub top: i64,
    pub right: i64,
    pub bottom: i64,
}

impl CropRegion {
    /// `image`'s pixels in the region, black where the region leaves the image (PIL's
    /// `convert("RGB").crop(box)`); a region over the pixel limit is refused.
    pub fn cut(&self, image: &RgbImage) -> Result<RgbImage> {
        let (w, h) = (self.right - self.left, self.bottom - self.top);
        if w <= 0 || h <= 0 || (w as u64).saturating_mul(h as u64) > MAX_PIXELS {
            return Err(Error::new(
                ErrorKind::Malformed,
                format!("the crop box {self:?} is empty or has more than {MAX_PIXELS} pixels"),
            ));
        }
        let mut out = RgbImage::new(w as u32, h as u32);
        let (iw, ih) = (i64::from(image.width()), i64::from(image.height()));
        for y in self.top.max(0)..self.bottom.min(ih) {
            for x in self.left.max(0)..self.right.min(iw) {
                out.put_pixel((x - self.left) as u32, (y - self.top) as u32, *image.get_pixel(x as u32, y as u32));
            }
        }
        Ok(out)
    }
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
            ImageSource::Cropped(cropped) => &cropped.file,
        }
    }

    /// Every file the image is read from (none for one embedded in an annotation file).
    pub fn files(&self) -> Vec<&Path> {
        match self {
            ImageSource::File(path) | ImageSource::NpyBgr(path) => vec![path],
            ImageSource::Altered(altered) => vec![&altered.base, &altered.other],
            ImageSource::Embedded(_) => Vec::new(),
            ImageSource::Cropped(cropped) => vec![&cropped.file],
        }
    }

    /// A name for the image in messages and fingerprints: its path, or for an embedded image
    /// `<file>#<name>`.
    pub fn display_name(&self) -> String {
        match self {
            ImageSource::Embedded(e) => format!("{}#{}", e.file.display(), e.name),
            ImageSource::Cropped(c) => {
                let r = c.region;
                format!("{}#crop({},{},{},{})", c.file.display(), r.left, r.top, r.right, r.bottom)
            }
            other => other.path().display().to_string(),
        }
    }

    /// Decodes to 8-bit RGB as PIL's `convert("RGB")` does: alpha dropped, greyscale
    /// replicated, 16-bit greyscale clipped above 255 (see [`PilImage::to_rgb`]).
    pub fn load_rgb(&self) -> Result<RgbImage> {
        Ok(self.load_pil()?.to_rgb())
    }

    /// Decodes to the mode `PIL.Image.open` gives the file ([`PilImage`]), which decides how
    /// a PIL pipeline resizes it. A `.npy` frame and an altered image are RGB.
    pub fn load_pil(&self) -> Result<PilImage> {
        if let ImageSource::Altered(altered) = self {
            let base = ImageSource::File(altered.base.clone()).load_rgb()?;
            let other = ImageSource::File(altered.other.clone()).load_rgb()?;
            return Ok(PilImage::Rgb(crate::rococo::altered::render(&altered.spec, &base, &other)));
        }
        if let ImageSource::Cropped(cropped) = self {
            let whole = ImageSource::File(cropped.file.clone()).load_rgb()?;
            return cropped
                .region
                .cut(&whole)
                .map(PilImage::Rgb)
                .map_err(|e| Error::caused_by(e.kind(), format!("crop image {}: {e}", self.display_name()), e));
        }
        if let ImageSource::Embedded(embedded) = self {
            return decode_pil(&embedded.bytes).map_err(|e| {
                Error::new(ErrorKind::CorruptImage, format!("decode image {}: {e}", self.display_name()))
            });
        }
        let path = self.path();
        // A FIFO would block the open, a device never end: only regular files are images.
        crate::paths::require_regular_file(path)
            .map_err(|e| Error::new(ErrorKind::CorruptImage, format!("read image {}: {e}", path.display())))?;
        let file = std::fs::File::open(path).map_err(|e| {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                ErrorKind::MissingImage
            } else {
                ErrorKind::CorruptImage
            };
            Error::new(kind, format!("read image {}: {e}", path.display()))
        })?;
        let corrupt = |e: String| Error::new(ErrorKind::CorruptImage, format!("decode image {}: {e}", path.display()));
        if let ImageSource::NpyBgr(_) = self {
            return decode_npy_bgr_from(std::io::BufReader::new(file))
                .map(PilImage::Rgb)
                .map_err(|e| corrupt(e.to_string()));
        }
        let bytes = read_image_file(file).map_err(|e| corrupt(e.to_string()))?;
        decode_pil(&bytes).map_err(|e| corrupt(e.to_string()))
    }
}

/// The most bytes of one image read (a 178 M-pixel JPEG at high quality is ≈ 100 MB).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// A file up to this size is read whole, in one call; a larger one is read as its format
/// walks, so bytes after the image's end are never loaded.
const READ_WHOLE_BYTES: u64 = 64 << 20;

/// An image file's bytes: the whole file when it is a regular file of at most
/// [`READ_WHOLE_BYTES`], else the bytes up to the image's end (a JPEG's end-of-image marker
/// after its first scan, a PNG's `IEND` chunk), at most [`MAX_FILE_BYTES`].
fn read_image_file(file: std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let size = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    if let Some(size) = size.filter(|&s| s <= READ_WHOLE_BYTES) {
        let mut bytes = Vec::with_capacity(size as usize);
        file.take(READ_WHOLE_BYTES).read_to_end(&mut bytes)?;
        return Ok(bytes);
    }
    let mut reader = std::io::BufReader::new(file.take(MAX_FILE_BYTES));
    let mut bytes = Vec::new();
    (&mut reader).take(8).read_to_end(&mut bytes)?;
    let too_long = || std::io::Error::other(format!("the image has more than {MAX_FILE_BYTES} bytes"));
    if bytes.starts_with(&[0xFF, 0xD8]) {
        // Up to the end-of-image marker after the first start-of-scan (see `jpeg_is_complete`).
        let mut scanning = false;
        loop {
            let chunk = std::io::BufRead::fill_buf(&mut reader)?;
            if chunk.is_empty() {
                return if bytes.len() as u64 >= MAX_FILE_BYTES { Err(too_long()) } else { Ok(bytes) };
            }
            let start = bytes.len();
            bytes.extend_from_slice(chunk);
            let used = chunk.len();
            std::io::BufRead::consume(&mut reader, used);
            for i in start.max(1)..bytes.len() {
                if bytes[i - 1] == 0xFF {
                    match bytes[i] {
                        0xDA => scanning = true,
                        0xD9 if scanning => {
                            bytes.truncate(i + 1);
                            return Ok(bytes);
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        // Chunk by chunk (length, type, data, CRC) up to `IEND`.
        loop {
            let header_at = bytes.len();
            (&mut reader).take(8).read_to_end(&mut bytes)?;
            if bytes.len() < header_at + 8 {
                return Ok(bytes);
            }
            let header = &bytes[header_at..header_at + 8];
            let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
            let end = &header[4..8] == b"IEND";
            let want = u64::from(length) + 4;
            if bytes.len() as u64 + want > MAX_FILE_BYTES {
                return Err(too_long());
            }
            (&mut reader).take(want).read_to_end(&mut bytes)?;
            if end {
                return Ok(bytes);
            }
        }
    }
    // Another format: as much as there is, up to the limit.
    reader.read_to_end(&mut bytes)?;
    if bytes.len() as u64 >= MAX_FILE_BYTES {
        return Err(too_long());
    }
    Ok(bytes)
}

/// An (H, W, 3) uint8 BGR `.npy` array as RGB.
pub fn decode_npy_bgr(bytes: &[u8]) -> Result<RgbImage> {
    decode_npy_bgr_from(bytes)
}

/// [`decode_npy_bgr`] from a reader: the header, then exactly the array's bytes. Its errors
/// say what is wrong with the array (callers name the file).
pub fn decode_npy_bgr_from(reader: impl std::io::Read) -> Result<RgbImage> {
    let bad = |what: String| Error::new(ErrorKind::CorruptImage, what);
    let npy = npyz::NpyFile::new(reader).map_err(|e| bad(format!("not a .npy array: {e}")))?;
    let shape = npy.shape().to_vec();
    if npy.order() != npyz::Order::C {
        return Err(bad("expected a C-ordered array".into()));
    }
    let [h, w, 3] = shape[..] else {
        return Err(bad(format!("expected shape (H, W, 3), got {shape:?}")));
    };
    if h == 0 || w == 0 || h.saturating_mul(w) > MAX_PIXELS {
        return Err(bad(format!("a frame of shape {shape:?} is empty or has more than {MAX_PIXELS} pixels")));
    }
    if npy.dtype().descr().trim_matches('\'') != "|u1" {
        return Err(bad(format!("expected uint8 values (|u1), got dtype {}", npy.dtype().descr())));
    }
    let data: Vec<u8> = npy.into_vec().map_err(|e| bad(format!("expected uint8 values: {e}")))?;
    if data.len() as u64 != h * w * 3 {
        return Err(bad(format!("array of shape {shape:?} holds {} values", data.len())));
    }
    let rgb: Vec<u8> = data.chunks_exact(3).flat_map(|bgr| [bgr[2], bgr[1], bgr[0]]).collect();
    RgbImage::from_raw(w as u32, h as u32, rgb).ok_or_else(|| bad(format!("array of shape {shape:?} is truncated")))
}

/// Decodes PNG or JPEG bytes to 8-bit RGB as PIL's `convert("RGB")` does
/// ([`decode_pil`], then [`PilImage::to_rgb`]).
pub fn decode_rgb(bytes: &[u8]) -> std::result::Result<RgbImage, image::ImageError> {
    Ok(decode_pil(bytes)?.to_rgb())
}

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

/// An image in the mode `PIL.Image.open` (Pillow 13) gives its file, because a PIL pipeline
/// resizes each mode its own way (`Image.resize`): RGBA and LA premultiplied by alpha, P and
/// 1 nearest-neighbour, I;16 in 16 bits, CMYK as four bands. Greyscale is held replicated as
/// RGB (Pillow resizes each band alike), and 16-bit RGB(A) or LA as their high bytes, as
/// Pillow unpacks them. A single transparent colour (a PNG's `tRNS`: one palette entry, or
/// one RGB or grey value) is kept as Pillow keeps it, in `info["transparency"]`, which
/// `convert("RGB")` carries over and `transformers`' `convert_to_rgb` makes white.
#[derive(Debug, Clone, PartialEq)]
pub enum PilImage {
    /// "RGB" or "L".
    Rgb(RgbImage),
    /// "RGB" or "L" with one transparent colour (`info["transparency"]`).
    Keyed { rgb: RgbImage, key: [u8; 3] },
    /// "RGBA" or "LA" (straight alpha).
    Rgba(RgbaImage),
    /// "P" (the palette's colours, with its transparency as alpha) or "1"; `key` is the colour
    /// of the one fully transparent entry where the others are opaque (Pillow then names it in
    /// `info["transparency"]`; a palette of partial alphas is dropped by `convert("RGB")`).
    Palette { rgba: RgbaImage, key: Option<[u8; 3]> },
    /// "I;16": 16-bit greyscale.
    Gray16(ImageBuffer<Luma<u16>, Vec<u16>>),
    /// "CMYK" (a four-component JPEG), held as C, M, Y, K in the four bytes of each pixel.
    Cmyk(RgbaImage),
}

impl PilImage {
    pub fn dimensions(&self) -> (u32, u32) {
        match self {
            PilImage::Rgb(i) | PilImage::Keyed { rgb: i, .. } => i.dimensions(),
            PilImage::Rgba(i) | PilImage::Palette { rgba: i, .. } | PilImage::Cmyk(i) => i.dimensions(),
            PilImage::Gray16(i) => i.dimensions(),
        }
    }

    /// To 8-bit RGB as `convert("RGB")` does: alpha dropped, I;16 clipped above 255, CMYK
    /// by [`cmyk_to_rgb`] (a transparent colour's pixels keep their colour).
    pub fn to_rgb(&self) -> RgbImage {
        let (w, h) = self.dimensions();
        let rgb: Vec<u8> = match self {
            PilImage::Rgb(rgb) | PilImage::Keyed { rgb, .. } => return rgb.clone(),
            PilImage::Rgba(rgba) | PilImage::Palette { rgba, .. } => {
                rgba.pixels().flat_map(|p| [p[0], p[1], p[2]]).collect()
            }
            PilImage::Gray16(grey) => grey.pixels().flat_map(|p| [p[0].min(255) as u8; 3]).collect(),
            PilImage::Cmyk(cmyk) => cmyk_to_rgb(cmyk.as_raw()),
        };
        RgbImage::from_vec(w, h, rgb).unwrap_or_default()
    }
}

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
