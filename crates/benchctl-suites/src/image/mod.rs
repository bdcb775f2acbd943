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
    /// An encoded image held inside an annotation file (a parquet or Arrow cell).
    Embedded(Box<EmbeddedImage>),
    /// A region of an image file (ARO's bounding boxes, from a [`crate::manifest`]).
    Cropped(Box<CroppedSource>),
    /// Several images shown together in one prompt, in order (VisMin's VQA image task asks a
    /// generative model which of two images shows a caption): a candidate of its own, sent as
    /// its images, never decoded as one image.
    Together(Box<[ImageSource]>),
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
    /// holding it; for images shown together, the first one's).
    pub fn path(&self) -> &Path {
        match self {
            ImageSource::File(path) | ImageSource::NpyBgr(path) => path,
            ImageSource::Altered(altered) => &altered.base,
            ImageSource::Embedded(embedded) => &embedded.file,
            ImageSource::Cropped(cropped) => &cropped.file,
            ImageSource::Together(images) => images.first().map_or(Path::new(""), |first| first.path()),
        }
    }

    /// Every file the image is read from (none for one embedded in an annotation file).
    pub fn files(&self) -> Vec<&Path> {
        match self {
            ImageSource::File(path) | ImageSource::NpyBgr(path) => vec![path],
            ImageSource::Altered(altered) => vec![&altered.base, &altered.other],
            ImageSource::Embedded(_) => Vec::new(),
            ImageSource::Cropped(cropped) => vec![&cropped.file],
            ImageSource::Together(images) => images.iter().flat_map(ImageSource::files).collect(),
        }
    }

    /// The images a candidate shows: itself, or the images shown together.
    pub fn shown(&self) -> &[ImageSource] {
        match self {
            ImageSource::Together(images) => images,
            one => std::slice::from_ref(one),
        }
    }

    /// A name for the image in messages and fingerprints: its path, for an embedded image
    /// `<file>#<name>`, for images shown together `together(<name>, <name>)`.
    pub fn display_name(&self) -> String {
        match self {
            ImageSource::Embedded(e) => format!("{}#{}", e.file.display(), e.name),
            ImageSource::Cropped(c) => {
                let r = c.region;
                format!("{}#crop({},{},{},{})", c.file.display(), r.left, r.top, r.right, r.bottom)
            }
            ImageSource::Together(images) => {
                format!("together({})", images.iter().map(ImageSource::display_name).collect::<Vec<_>>().join(", "))
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
        if let ImageSource::Together(images) = self {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "decode image {}: its {} images are shown together in one prompt, not decoded as one image",
                    self.display_name(),
                    images.len()
                ),
            ));
        }
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
        // Counted here, once per image read: an altered or cropped image counts the files
        // it is made from.
        DECODES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let ImageSource::Embedded(embedded) = self {
            return decode_pil(&embedded.bytes()?).map_err(|e| {
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

/// Images this process has decoded ([`ImageSource::load_pil`], every kind): a run records how
/// many it decoded, none when the embedding cache holds its images.
static DECODES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many images this process has decoded so far.
pub fn decodes() -> u64 {
    DECODES.load(std::sync::atomic::Ordering::Relaxed)
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

mod decode;
mod embedded;
pub use decode::{
    cmyk_to_rgb, decode_pil, muldiv255, DecodeBudget, Reservation, DECODE_MEMORY, JPEG_DECODER, MAX_PIXELS,
};
pub(crate) use embedded::{stamp, CellFile, RecentParts, Stamp, Step};
pub use embedded::{EmbeddedImage, ImageBytes, ImageCell};
