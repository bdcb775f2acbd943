//! Image preprocessing exactly as each checkpoint's reference pipeline does it on a PIL image
//! ([`Pipeline`]):
//! - OpenAI CLIP / OpenCLIP (torchvision): `Resize(size, BICUBIC)` (shorter side) →
//!   `CenterCrop(size)`, offset `round((full − crop) / 2)` with half to even → `ToTensor()`
//!   (`x / 255` in f32) → `Normalize(mean, std)`;
//! - checkpoints in `transformers`' layout follow their `preprocessor_config.json` as its PIL
//!   image processors apply it ([`Preprocessor::from_hf_config`]): CLIP resizes the shortest
//!   edge and centre-crops at offset `(full − crop) // 2` (floor); SigLIP and BLIP resize both
//!   sides to `height × width` (no crop); then `x · rescale_factor` in f64, cast to f32, and
//!   normalised with the file's mean and std.
//!
//! The resize reproduces Pillow's antialiased resampling (`Resample.c`): a separable
//! convolution whose support widens with the downscale factor, bicubic with a = −0.5,
//! coefficients in 22-bit fixed point, two passes (in Pillow 13's order), each rounded and
//! clamped to 8 bits (`resample.rs`: only the pixels the crop keeps are computed). A plain
//! bicubic interpolation (no antialiasing) or a bilinear one moves CLIP scores measurably, so
//! none is offered. Images that are not RGB enter by the mode PIL holds them in
//! ([`Preprocessor::apply_pil`]) and become RGB by the family's [`ModeRule`]: torchvision
//! resizes them in that mode and converts after; `transformers` composites transparency over
//! white first; readers that open every image with `convert("RGB")` (ALBEF, FIBER,
//! `t2v_metrics`) drop the alpha first.

mod canvas;
mod hf_config;
mod resample;
mod sizes;
pub mod tiles;

pub(crate) use hf_config::read as read_settings;
pub use hf_config::ImageSettings;
pub use sizes::{patch_grid_size, smart_resize, NATIVE_MAX_ASPECT};

use benchctl_cpu::Tier;
use benchctl_suites::image::{cmyk_to_rgb, muldiv255};
use benchctl_suites::PilImage;
use image::{ImageBuffer, Luma, RgbImage, RgbaImage};

pub use resample::Filter;
use resample::{resize_16, resize_nearest, resize_window};

/// OpenAI CLIP's normalisation constants, as published (f32 keeps the nearest values).
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

/// ImageNet's mean and standard deviation (torchvision, timm; FIBER's `albef` transform).
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// SigLIP's normalisation: to [−1, 1].
pub const HALF: [f32; 3] = [0.5, 0.5, 0.5];

/// How an image becomes `size × size`.
/// The fewest and the most pixels a `smart_resize` leaves an image (the image processor's
/// `min_pixels` and `max_pixels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PixelBounds {
    pub min: usize,
    pub max: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// Shorter side to `size`, then a centre crop (CLIP).
    ShorterSideThenCrop,
    /// Shorter side to this many pixels, then a centre crop to `size` (a processor whose
    /// shortest edge and crop differ).
    ShorterSide(usize),
    /// Both sides to `size`, stretching (SigLIP, BLIP).
    Stretch,
    /// Each image at about its own size, no crop: both sides to multiples of `factor` (a
    /// vision tower's patch size times its merge size) with between `min_pixels` and
    /// `max_pixels` pixels, the aspect ratio kept as `qwen_vl_utils.smart_resize` keeps it
    /// (Qwen3-VL). `size` is then unused: every image has its own ([`Preprocessor::output_size`]).
    /// With `processor` bounds, the image processor then resizes that image again to them
    /// (`smart_resize` at the same factor), as `AutoProcessor.from_pretrained(…, min_pixels=…,
    /// max_pixels=…)` called with its resize on does after `qwen_vl_utils` (NaturalBench's
    /// Qwen2.5-VL example); a transparent colour is made white between the two resizes, where
    /// the processor converts to RGB.
    Native { factor: usize, min_pixels: usize, max_pixels: usize, processor: Option<PixelBounds> },
    /// Each image near its own aspect ratio as a grid of at most `max_patches` patches of
    /// `patch × patch` pixels, no crop: the largest scale whose sides, rounded up to multiples
    /// of `patch` (at least one patch each), fit, found as `Siglip2ImageProcessor` finds it
    /// ([`patch_grid_size`]; SigLIP 2 NaFlex). `size` is the patch side.
    Patches { patch: usize, max_patches: usize },
    /// InternVL's tiles of `size × size` (`dynamic_preprocess`): at most `max_tiles` in the
    /// grid nearest the image's aspect ratio, and a thumbnail, packed into one image
    /// ([`tiles`]). With [`ModeRule::ConvertFirst`] only: the tiles are cut from the
    /// converted image.
    Tiles { max_tiles: usize },
}

impl Resize {
    /// Whether each image keeps a size of its own ([`Resize::Native`], [`Resize::Patches`],
    /// [`Resize::Tiles`]).
    pub fn keeps_own_size(self) -> bool {
        matches!(self, Resize::Native { .. } | Resize::Patches { .. } | Resize::Tiles { .. })
    }
}

/// Whose arithmetic the crop offset and the rescale follow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pipeline {
    /// torchvision (OpenAI CLIP, OpenCLIP): crop offset rounded half to even, `x / 255` in f32.
    Torchvision,
    /// `transformers`' image processors: crop offset floored, `x · factor` in f64 then f32.
    Transformers { rescale_factor: f64 },
}

/// How an image that is not RGB (alpha, a palette, 16-bit grey, CMYK) becomes RGB: each
/// reference pipeline reads such images its own way, and scores move with it (an RGBA image
/// with a gradient alpha moves a generative model's log P("Yes") by more than 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeRule {
    /// torchvision on the image as PIL opened it (OpenAI CLIP, OpenCLIP): resized in its mode
    /// (RGBA premultiplied, a palette nearest-neighbour, 16-bit grey in 16 bits, CMYK in four
    /// bands), then `convert("RGB")`: the alpha dropped, grey clipped above 255.
    ResizeThenConvert,
    /// `Image.open(…).convert("RGB")` before anything (ALBEF and FIBER datasets, `t2v_metrics`'
    /// generative models): the alpha dropped without compositing (the colour under a
    /// transparent pixel kept), a palette looked up, 16-bit grey clipped above 255, CMYK
    /// converted. The one transparent colour `convert("RGB")` carries over
    /// (`info["transparency"]`: a palette's single transparent entry, a grey or RGB PNG's
    /// `tRNS`) follows `colour_key`.
    ConvertFirst { colour_key: ColourKey },
    /// `transformers`' `convert_to_rgb` (its CLIP, SigLIP and BLIP processors): RGBA, a palette
    /// with transparency and a transparent colour composited over opaque white; other modes
    /// converted as `convert("RGB")` converts them.
    OverWhite,
}

/// What becomes of the one transparent colour an image converted with `convert("RGB")` still
/// names: `transformers`' `convert_to_rgb` (an image processor with `do_convert_rgb`) makes
/// every pixel of that colour white, before its own resize or after the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColourKey {
    /// Nothing converts it (a torchvision transform, or `do_convert_rgb` off or `null`).
    Kept,
    /// White, then resized (Gemma 3's and PaliGemma's processors resize after converting).
    WhiteBeforeResize,
    /// Resized, then white where the resized pixel is exactly that colour (`qwen_vl_utils`
    /// resizes before Qwen3-VL's processor converts).
    WhiteAfterResize,
}

impl ModeRule {
    /// Its name in listings and records.
    pub fn name(self) -> &'static str {
        match self {
            ModeRule::ResizeThenConvert => "resized in its mode, then RGB",
            ModeRule::ConvertFirst { colour_key: ColourKey::Kept } => "convert(\"RGB\") first, alpha dropped",
            ModeRule::ConvertFirst { colour_key: ColourKey::WhiteBeforeResize } => {
                "convert(\"RGB\") first, alpha dropped, a transparent colour made white"
            }
            ModeRule::ConvertFirst { colour_key: ColourKey::WhiteAfterResize } => {
                "convert(\"RGB\") first, alpha dropped, a transparent colour made white after the resize"
            }
            ModeRule::OverWhite => "alpha composited over white",
        }
    }
}

/// A resize to `size`×`size`, then per-channel `(x / 255 − mean) / std`, laid out CHW.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessor {
    pub size: usize,
    pub resize: Resize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub pipeline: Pipeline,
    /// Pillow's resampling filter (bicubic but for Gemma 3's bilinear).
    pub filter: Filter,
    /// How images that are not RGB become RGB.
    pub modes: ModeRule,
    /// Padded to a square of this colour first, centred (LLaVA's `expand2square`, which
    /// CLIP-FlanT5's scorer applies to the RGB image before its processor); with
    /// [`ModeRule::ConvertFirst`] only, since the padding is of the converted image.
    pub square_canvas: Option<[u8; 3]>,
}

/// The most pixels a resized image may have before cropping (≈ 200 MB of RGB).
pub const MAX_RESIZED_PIXELS: u64 = 1 << 26;

/// `transformers`' default rescale factor, `1 / 255`.
pub const RESCALE_1_255: f64 = 1.0 / 255.0;

impl Preprocessor {
    /// OpenAI CLIP's preprocessing at the given input size, as torchvision computes it.
    pub fn openai_clip(size: usize) -> Self {
        Self {
            size,
            resize: Resize::ShorterSideThenCrop,
            mean: OPENAI_CLIP_MEAN,
            std: OPENAI_CLIP_STD,
            pipeline: Pipeline::Torchvision,
            filter: Filter::Bicubic,
            modes: ModeRule::ResizeThenConvert,
            square_canvas: None,
        }
    }

    /// A square stretch to `size` with these constants (`transformers`' SigLIP and BLIP processors).
    pub fn stretch(size: usize, mean: [f32; 3], std: [f32; 3]) -> Self {
        Self {
            size,
            resize: Resize::Stretch,
            mean,
            std,
            pipeline: Pipeline::Transformers { rescale_factor: RESCALE_1_255 },
            filter: Filter::Bicubic,
            modes: ModeRule::OverWhite,
            square_canvas: None,
        }
    }

    /// The same with Pillow's bilinear filter (`Gemma3ImageProcessor`'s `resample=2`).
    pub fn bilinear(self) -> Self {
        Self { filter: Filter::Bilinear, ..self }
    }

    /// The same for images the reference opened with `convert("RGB")` (or another [`ModeRule`]).
    pub fn with_modes(self, modes: ModeRule) -> Self {
        Self { modes, ..self }
    }

    /// `transformers`' CLIP image processor with its defaults (shortest edge and crop `size`).
    pub fn hf_clip(size: usize) -> Self {
        Self {
            pipeline: Pipeline::Transformers { rescale_factor: RESCALE_1_255 },
            modes: ModeRule::OverWhite,
            ..Self::openai_clip(size)
        }
    }

    /// The preprocessing an image processor's settings file asks for (a
    /// `preprocessor_config.json`, or a `processor_config.json`'s `image_processor` section),
    /// as `transformers`' PIL image processors apply it, on top of `defaults` (see
    /// `hf_config.rs`); `defaults` where the file holds no image settings.
    pub fn from_hf_config(path: &std::path::Path, defaults: &Preprocessor) -> crate::Result<Self> {
        match ImageSettings::read(path)? {
            Some(settings) => hf_config::read(&settings, defaults),
            None => Ok(defaults.clone()),
        }
    }

    /// A `transformers`-layout model's preprocessing: its image settings when the files have
    /// them ([`ImageSettings::of`]), else `defaults`; the result must feed the model's
    /// `image_size`.
    pub fn for_hf_model(
        files: &crate::hub::ModelFiles,
        defaults: Preprocessor,
        image_size: usize,
    ) -> crate::Result<Self> {
        let Some(settings) = ImageSettings::of(files)? else {
            return Ok(defaults);
        };
        let preprocessor = hf_config::read(&settings, &defaults)?;
        if preprocessor.size != image_size {
            return Err(crate::Error::new(
                crate::ErrorKind::BadConfig,
                format!(
                    "use {}: it makes {size}×{size} inputs, but {} has image_size {image_size}",
                    settings.origin(),
                    files.config.display(),
                    size = preprocessor.size
                ),
            ));
        }
        Ok(preprocessor)
    }

    /// One line for listings: `224 px, shorter side + centre crop, bicubic, mean … std …`.
    pub fn describe(&self) -> String {
        let how = match self.resize {
            Resize::ShorterSideThenCrop => "shorter side + centre crop".to_string(),
            Resize::ShorterSide(edge) => format!("shorter side {edge} + centre crop"),
            Resize::Stretch => "stretched square".to_string(),
            Resize::Native { factor, min_pixels, max_pixels, processor } => {
                let then = processor.map(|p| format!(", then resized by the processor to {}–{} pixels", p.min, p.max));
                format!(
                    "native size in multiples of {factor}, {min_pixels}–{max_pixels} pixels{}",
                    then.unwrap_or_default()
                )
            }
            Resize::Patches { patch, max_patches } => {
                format!("aspect ratio kept, at most {max_patches} patches of {patch} px")
            }
            Resize::Tiles { max_tiles } => {
                format!("tiles of {0}×{0} px by aspect ratio (at most {max_tiles}), and a thumbnail", self.size)
            }
        };
        let fmt = |v: &[f32; 3]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join("/");
        let pipeline = match self.pipeline {
            Pipeline::Torchvision => "torchvision",
            Pipeline::Transformers { .. } => "transformers",
        };
        let filter = self.filter.name();
        let size = if self.resize.keeps_own_size() { String::new() } else { format!("{} px ", self.size) };
        let (mean, std, modes) = (fmt(&self.mean), fmt(&self.std), self.modes.name());
        let pad = self.square_canvas.map(|[r, g, b]| format!("padded to a square of ({r}, {g}, {b}), "));
        let pad = pad.unwrap_or_default();
        format!("{size}{pad}{how}, {filter}, mean {mean} std {std} ({pipeline}; {modes})")
    }

    /// Refuses an input the resize would blow up: a degenerate aspect ratio makes the
    /// shorter-side resize enormous (1 × 1,000,000 pixels resizes to 224 × 224,000,000, where
    /// the reference pipeline runs out of memory). The resized image may hold at most
    /// [`MAX_RESIZED_PIXELS`].
    pub fn check_input(&self, w: usize, h: usize) -> crate::Result<()> {
        let unusable = |what: String| crate::Error::new(crate::ErrorKind::UnusableInput, what);
        if w == 0 || h == 0 {
            return Err(unusable(format!("a {w}×{h} image has no pixels")));
        }
        if let Resize::Native { .. } = self.resize {
            let aspect = w.max(h) as f64 / w.min(h) as f64;
            if aspect > NATIVE_MAX_ASPECT {
                return Err(unusable(format!(
                    "a {w}×{h} image's aspect ratio {aspect:.0} is beyond the {NATIVE_MAX_ASPECT} the model's resize accepts"
                )));
            }
        }
        if self.square_canvas.is_some() && (w.max(h) as u64).pow(2) > MAX_RESIZED_PIXELS {
            return Err(unusable(format!(
                "padding this {w}×{h} image to a square would make {side}×{side} pixels (at most {MAX_RESIZED_PIXELS}): its aspect ratio is too extreme",
                side = w.max(h)
            )));
        }
        let (new_w, new_h) = self.resized_size(w, h);
        if (new_w as u64).saturating_mul(new_h as u64) > MAX_RESIZED_PIXELS {
            return Err(unusable(format!(
                "resizing this {w}×{h} image's shorter side would make {new_w}×{new_h} pixels (at most {MAX_RESIZED_PIXELS}): its aspect ratio is too extreme"
            )));
        }
        Ok(())
    }

    /// Values per image: 3 × size × size (for [`Resize::Native`], see [`Preprocessor::len_for`]).
    pub fn len(&self) -> usize {
        3 * self.size * self.size
    }

    /// The `(width, height)` an input image of `w × h` pixels becomes.
    pub fn output_size(&self, w: usize, h: usize) -> (usize, usize) {
        if self.resize.keeps_own_size() {
            self.resized_size(w, h)
        } else {
            (self.size, self.size)
        }
    }

    /// Values for an input image of `w × h` pixels: 3 × its output size.
    pub fn len_for(&self, w: usize, h: usize) -> usize {
        let (out_w, out_h) = self.output_size(w, h);
        3 * out_w * out_h
    }

    /// How many images one encoder batch of `batch` holds: one where images keep their own
    /// sizes ([`Resize::keeps_own_size`]: their pixels, and a fusion model's states, differ in
    /// shape). A dual encoder's image batches group their images by size instead
    /// (`benchctl`'s `encode::load_pixel_groups`).
    pub fn images_per_batch(&self, batch: usize) -> usize {
        if self.resize.keeps_own_size() {
            1
        } else {
            batch.max(1)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The normalised CHW tensor data of one image.
    pub fn apply(&self, image: &RgbImage) -> Vec<f32> {
        let mut out = vec![0.0; self.len_for(image.width() as usize, image.height() as usize)];
        self.apply_into(image, &mut out);
        out
    }

    /// As [`Preprocessor::apply`], writing into `out` (length [`Preprocessor::len_for`]).
    pub fn apply_into(&self, image: &RgbImage, out: &mut [f32]) {
        if let Some(colour) = self.square_canvas {
            let square = canvas::expand_to_square(image, colour);
            let kept = self.resize_rgb(square.as_raw(), square.width() as usize, square.height() as usize);
            return self.normalise_into(&kept, out);
        }
        let kept = self.resize_rgb(image.as_raw(), image.width() as usize, image.height() as usize);
        self.normalise_into(&kept, out);
    }

    /// The resized image's size and the window of it the crop keeps (columns, rows).
    pub fn crop_window(&self, w: usize, h: usize) -> Window {
        let (new_w, new_h) = self.resized_size(w, h);
        if self.resize.keeps_own_size() {
            return Window { resized: (new_w, new_h), columns: 0..new_w, rows: 0..new_h };
        }
        let offset = |full: usize| match self.pipeline {
            Pipeline::Torchvision => centre_offset(full, self.size),
            Pipeline::Transformers { .. } => full.saturating_sub(self.size) / 2,
        };
        let (left, top) = (offset(new_w), offset(new_h));
        Window { resized: (new_w, new_h), columns: left..left + self.size, rows: top..top + self.size }
    }

    /// The part of Pillow's bicubic resize of packed RGB8 `w × h` pixels that the crop keeps:
    /// `size × size` RGB8 pixels (only those are computed).
    pub fn resize_rgb(&self, rgb: &[u8], w: usize, h: usize) -> Vec<u8> {
        self.resize_rgb_on(Tier::current(), rgb, w, h)
    }

    /// [`Preprocessor::resize_rgb`] on a given CPU tier (for tests and benchmarks that
    /// compare tiers; every tier gives the same bytes).
    pub fn resize_rgb_on(&self, tier: Tier, rgb: &[u8], w: usize, h: usize) -> Vec<u8> {
        self.resize_rgb_whitening(tier, rgb, w, h, None)
    }

    /// [`Preprocessor::resize_rgb_on`], pixels of the colour `white` made white after
    /// `qwen_vl_utils`' resize (before the processor's own, where it resizes again).
    fn resize_rgb_whitening(&self, tier: Tier, rgb: &[u8], w: usize, h: usize, white: Option<[u8; 3]>) -> Vec<u8> {
        let whiten = |mut pixels: Vec<u8>| {
            if let Some(key) = white {
                pixels.chunks_exact_mut(3).filter(|p| **p == key).for_each(|p| p.fill(255));
            }
            pixels
        };
        if let Resize::Tiles { max_tiles } = self.resize {
            return whiten(tiles::pack(tier, rgb, (w, h), self.size, max_tiles, self.filter));
        }
        let (first, then) = self.native_sizes(w, h);
        if first != then {
            let once = whiten(resize_window(tier, rgb, 3, (w, h), first, 0..first.0, 0..first.1, self.filter));
            return resize_window(tier, &once, 3, first, then, 0..then.0, 0..then.1, self.filter);
        }
        let window = self.crop_window(w, h);
        whiten(resize_window(tier, rgb, 3, (w, h), window.resized, window.columns, window.rows, self.filter))
    }

    /// An RGB8 crop (`size × size`, or the output size) rescaled and normalised into `out`
    /// (CHW, as long), as the pipeline computes it.
    pub fn normalise_into(&self, kept: &[u8], out: &mut [f32]) {
        assert_eq!(kept.len(), out.len(), "the cropped image and the output buffer differ in length");
        let plane = out.len() / 3;
        for c in 0..3 {
            let (mean, std) = (self.mean[c], self.std[c]);
            // Each 8-bit value's normalised f32, as the pipeline computes it.
            let normalised: [f32; 256] = std::array::from_fn(|v| {
                let rescaled = match self.pipeline {
                    Pipeline::Torchvision => v as f32 / 255.0,
                    Pipeline::Transformers { rescale_factor } => (v as f64 * rescale_factor) as f32,
                };
                (rescaled - mean) / std
            });
            for (o, p) in out[c * plane..(c + 1) * plane].iter_mut().zip(kept.chunks_exact(3)) {
                *o = normalised[p[c] as usize];
            }
        }
    }

    /// One decoded image through the preprocessing, by the mode PIL holds it in, made RGB by
    /// the [`ModeRule`].
    pub fn apply_pil(&self, image: &PilImage, out: &mut [f32]) {
        match self.white_colour(image) {
            Some((key, ColourKey::WhiteBeforeResize)) => {
                return self.apply_into(&key_to_white(image.to_rgb(), key), out);
            }
            Some((key, _)) => {
                let rgb = image.to_rgb();
                let (w, h) = (rgb.width() as usize, rgb.height() as usize);
                let kept = self.resize_rgb_whitening(Tier::current(), rgb.as_raw(), w, h, Some(key));
                return self.normalise_into(&kept, out);
            }
            None => {}
        }
        match image {
            PilImage::Rgb(rgb) | PilImage::Keyed { rgb, .. } => self.apply_into(rgb, out),
            PilImage::Rgba(rgba) => self.apply_rgba(rgba, false, out),
            PilImage::Palette { rgba, .. } => self.apply_rgba(rgba, true, out),
            PilImage::Gray16(grey) => self.apply_gray16(grey, out),
            PilImage::Cmyk(cmyk) => self.apply_cmyk(cmyk, out),
        }
    }

    /// The transparent colour the [`ModeRule`] makes white in `image`, and when.
    fn white_colour(&self, image: &PilImage) -> Option<([u8; 3], ColourKey)> {
        match (self.modes, image) {
            // A palette's transparency is its alpha, composited with the rest.
            (ModeRule::OverWhite, PilImage::Keyed { key, .. }) => Some((*key, ColourKey::WhiteBeforeResize)),
            (ModeRule::ConvertFirst { colour_key: ColourKey::Kept }, _) => None,
            (
                ModeRule::ConvertFirst { colour_key },
                PilImage::Keyed { key, .. } | PilImage::Palette { key: Some(key), .. },
            ) => Some((*key, colour_key)),
            _ => None,
        }
    }

    /// A CMYK image (C, M, Y, K in each pixel's four bytes): resized in four bands and
    /// converted after ([`ModeRule::ResizeThenConvert`]), else converted first (Pillow's
    /// `cmyk2rgb` either way).
    pub fn apply_cmyk(&self, cmyk: &RgbaImage, out: &mut [f32]) {
        let (w, h) = (cmyk.width() as usize, cmyk.height() as usize);
        if self.modes != ModeRule::ResizeThenConvert {
            let rgb = RgbImage::from_vec(w as u32, h as u32, cmyk_to_rgb(cmyk.as_raw())).unwrap_or_default();
            return self.apply_into(&rgb, out);
        }
        let window = self.crop_window(w, h);
        let kept = resize_window(
            Tier::current(),
            cmyk.as_raw(),
            4,
            (w, h),
            window.resized,
            window.columns,
            window.rows,
            self.filter,
        );
        self.normalise_into(&cmyk_to_rgb(&kept), out);
    }

    /// An RGBA (or LA, replicated) image by the [`ModeRule`]: resized as PIL's `Image.resize`
    /// does, premultiplied by alpha (`RGBa`), then the alpha dropped; composited over white
    /// first; or the alpha dropped first. A palette image (`palette`) is resized
    /// nearest-neighbour by PIL, its transparency dropped after, composited first, or dropped
    /// first.
    pub fn apply_rgba(&self, image: &RgbaImage, palette: bool, out: &mut [f32]) {
        match self.modes {
            ModeRule::OverWhite => return self.apply_into(&over_white(image), out),
            ModeRule::ConvertFirst { .. } => {
                let rgb = image.as_raw().chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
                let rgb = RgbImage::from_vec(image.width(), image.height(), rgb).unwrap_or_default();
                return self.apply_into(&rgb, out);
            }
            ModeRule::ResizeThenConvert => {}
        }
        let (w, h) = (image.width() as usize, image.height() as usize);
        let window = self.crop_window(w, h);
        let rgba = if palette {
            let (new_w, new_h) = window.resized;
            window.cut(&resize_nearest(image.as_raw(), 4, w, h, new_w, new_h), 4)
        } else {
            let premultiplied: Vec<u8> = image.as_raw().chunks_exact(4).flat_map(premultiply).collect();
            let kept = resize_window(
                Tier::current(),
                &premultiplied,
                4,
                (w, h),
                window.resized,
                window.columns,
                window.rows,
                self.filter,
            );
            kept.chunks_exact(4).flat_map(unpremultiply).collect()
        };
        let rgb: Vec<u8> = rgba.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
        self.normalise_into(&rgb, out);
    }

    /// A 16-bit greyscale image (PIL's `I;16`): resized in 16 bits as Pillow does, then
    /// clipped above 255 by `convert("RGB")` ([`ModeRule::ResizeThenConvert`]); else clipped
    /// first.
    pub fn apply_gray16(&self, image: &ImageBuffer<Luma<u16>, Vec<u16>>, out: &mut [f32]) {
        let clip = |v: u16| v.min(255) as u8;
        let (w, h) = (image.width() as usize, image.height() as usize);
        if self.modes != ModeRule::ResizeThenConvert {
            let rgb = image.as_raw().iter().flat_map(|&v| [clip(v); 3]).collect();
            return self.apply_into(&RgbImage::from_vec(w as u32, h as u32, rgb).unwrap_or_default(), out);
        }
        let window = self.crop_window(w, h);
        let (new_w, new_h) = window.resized;
        let resized = resize_16(image.as_raw(), w, h, new_w, new_h, self.filter);
        let rgb: Vec<u8> = resized.iter().flat_map(|&v| [clip(v); 3]).collect();
        self.normalise_into(&window.cut(&rgb, 3), out);
    }

    /// A [`Resize::Native`] resize's `(width, height)` after `qwen_vl_utils`, and after the
    /// processor's own resize (the same without `processor` bounds).
    fn native_sizes(&self, w: usize, h: usize) -> ((usize, usize), (usize, usize)) {
        let Resize::Native { factor, min_pixels, max_pixels, processor } = self.resize else {
            return ((w, h), (w, h));
        };
        let (first_h, first_w) = smart_resize(h, w, factor, min_pixels, max_pixels);
        let (then_h, then_w) = match processor {
            Some(bounds) => smart_resize(first_h, first_w, factor, bounds.min, bounds.max),
            None => (first_h, first_w),
        };
        ((first_w, first_h), (then_w, then_h))
    }

    /// The size of the resize before cropping.
    fn resized_size(&self, w: usize, h: usize) -> (usize, usize) {
        match self.resize {
            Resize::ShorterSideThenCrop => short_side_size(w, h, self.size),
            Resize::ShorterSide(edge) => short_side_size(w, h, edge),
            Resize::Stretch => (self.size, self.size),
            Resize::Native { .. } => self.native_sizes(w, h).1,
            Resize::Patches { patch, max_patches } => {
                let (new_h, new_w) = patch_grid_size(h, w, patch, max_patches);
                (new_w, new_h)
            }
            Resize::Tiles { max_tiles } => {
                tiles::TileLayout::for_image(w, h, self.size, max_tiles).packed_size(self.size)
            }
        }
    }
}

/// Where the crop sits in the resized image: the resize's size, and the columns and rows kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub resized: (usize, usize),
    pub columns: std::ops::Range<usize>,
    pub rows: std::ops::Range<usize>,
}

impl Window {
    /// The window's pixels of a whole resized image of `bands` bytes per pixel.
    fn cut(&self, resized: &[u8], bands: usize) -> Vec<u8> {
        let stride = self.resized.0 * bands;
        self.rows
            .clone()
            .flat_map(|y| &resized[y * stride + self.columns.start * bands..y * stride + self.columns.end * bands])
            .copied()
            .collect()
    }
}

/// Pillow's RGBA → RGBa (premultiplied alpha).
fn premultiply(p: &[u8]) -> [u8; 4] {
    [muldiv255(p[0], p[3]), muldiv255(p[1], p[3]), muldiv255(p[2], p[3]), p[3]]
}

/// Pillow's RGBa → RGBA: `255 · v / alpha` clipped, unchanged where alpha is 0 or 255.
fn unpremultiply(p: &[u8]) -> [u8; 4] {
    let a = u32::from(p[3]);
    let channel = |v: u8| {
        if a == 0 || a == 255 {
            v
        } else {
            (255 * u32::from(v) / a).min(255) as u8
        }
    };
    [channel(p[0]), channel(p[1]), channel(p[2]), p[3]]
}

/// `transformers`' `convert_to_rgb` of an RGB image with a transparent colour: PIL's
/// `convert("RGBA")` makes that colour's pixels transparent, and compositing over white makes
/// them white.
fn key_to_white(mut rgb: RgbImage, key: [u8; 3]) -> RgbImage {
    rgb.pixels_mut().filter(|p| p.0 == key).for_each(|p| p.0 = [255; 3]);
    rgb
}

/// `transformers`' `convert_to_rgb`: PIL's `alpha_composite` over opaque white, then RGB.
pub fn over_white(image: &RgbaImage) -> RgbImage {
    // One channel in Pillow's fixed point: 7 fractional bits, `(x >> 8 + x) >> 8` for ÷255,
    // rounded; over an opaque background the weights reduce to `a · 128` and `(255 − a) · 128`.
    fn channel(value: u32, a: u32) -> u8 {
        const PRECISION_BITS: u32 = 7;
        let shift_div_255 = |x: u32| ((x >> 8) + x) >> 8;
        let (coef1, coef2) = (a << PRECISION_BITS, (255 - a) << PRECISION_BITS);
        let tmp = value * coef1 + 255 * coef2;
        (shift_div_255(tmp + (0x80 << PRECISION_BITS)) >> PRECISION_BITS) as u8
    }
    let rgb = image
        .pixels()
        .flat_map(|p| {
            let a = u32::from(p[3]);
            [0, 1, 2].map(|c| if a == 0 { 255 } else { channel(u32::from(p[c]), a) })
        })
        .collect();
    RgbImage::from_vec(image.width(), image.height(), rgb).unwrap_or_default()
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
}
