//! Where an item's image comes from, and decoding it to 8-bit RGB.

use std::path::{Path, PathBuf};

use image::RgbImage;

use crate::{Error, ErrorKind, Result};

/// An image on disk. Suites with other storage (e.g. raw frames) add variants here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageSource {
    /// A PNG or JPEG file.
    File(PathBuf),
}

impl ImageSource {
    pub fn path(&self) -> &Path {
        match self {
            ImageSource::File(path) => path,
        }
    }

    /// Decodes to 8-bit RGB: alpha is dropped, greyscale replicated, 16-bit scaled down
    /// (as PIL's `convert("RGB")` does).
    pub fn load_rgb(&self) -> Result<RgbImage> {
        let path = self.path();
        let bytes = std::fs::read(path).map_err(|e| {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                ErrorKind::MissingImage
            } else {
                ErrorKind::CorruptImage
            };
            Error::new(kind, format!("read image {}: {e}", path.display()))
        })?;
        decode_rgb(&bytes).map_err(|e| {
            Error::new(ErrorKind::CorruptImage, format!("decode image {}: {e}", path.display()))
        })
    }
}

/// Decodes PNG or JPEG bytes to 8-bit RGB.
pub fn decode_rgb(bytes: &[u8]) -> std::result::Result<RgbImage, image::ImageError> {
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes)).with_guessed_format()?;
    Ok(reader.decode()?.into_rgb8())
}
