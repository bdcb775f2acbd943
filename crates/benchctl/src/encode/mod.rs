//! The encode and scores stage: a run's unique inputs through the embedding cache (the cache
//! consulted first, the missing inputs encoded in batches, images decoded and preprocessed
//! ([`load_pixels`]) a batch ahead on all cores while the model encodes the previous batch:
//! [`stream`]); for fusion models each unique (image, text) pair scored once ([`pairs`]);
//! an item suite's score tensor made of them ([`scores`]).

pub mod asks;
pub mod pairs;
pub mod scores;
pub mod stream;

use benchctl_models::preprocess::Preprocessor;
use benchctl_models::DualEncoder;
use benchctl_suites::ImageSource;
use candle_core::{Device, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use crate::cache::{EmbeddingCache, Keys, SourceList};
use crate::results::Counts;
use crate::{Error, ErrorKind, Result};
use stream::{with_stream, EmbeddingPlan};

/// One decoded image through the model's preprocessing ([`Preprocessor::apply_pil`]).
pub(crate) fn preprocess(prep: &Preprocessor, image: &benchctl_suites::PilImage) -> Vec<f32> {
    let (w, h) = image.dimensions();
    let mut out = vec![0.0; prep.len_for(w as usize, h as usize)];
    prep.apply_pil(image, &mut out);
    out
}

/// Decoded and preprocessed `images` as one `(n, 3, height, width)` batch on `device`
/// (decoding on all cores): `size × size`, or for a preprocessor that keeps each image's size,
/// the images' one output size (a batch of such images is one image, or images of one size).
pub fn load_pixels(
    prep: &Preprocessor,
    images: &[impl std::borrow::Borrow<ImageSource> + Sync],
    device: &Device,
) -> Result<Tensor> {
    let mut batch = load_pixel_groups(prep, images, device)?;
    match batch.groups.pop() {
        Some((_, pixels)) if batch.groups.is_empty() => Ok(pixels),
        _ => Err(Error::new(ErrorKind::Compute, "stack an image batch: its images were resized to different sizes")),
    }
}

/// A batch of decoded images stacked by output size: one `(n, 3, height, width)` tensor where
/// the preprocessor gives every image one size; for one that keeps each image's own
/// (SigLIP 2 NaFlex), one tensor per size, so that a dual encoder still encodes images of
/// equal size together and none is padded.
pub struct PixelBatch {
    rows: usize,
    /// The batch's rows of each size (in order of first appearance) and their pixels.
    groups: Vec<(Vec<usize>, Tensor)>,
}

impl PixelBatch {
    /// `encode` on each group, its outputs back in the batch's row order: `(rows, …)`.
    pub fn encode(&self, mut encode: impl FnMut(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        if let [(_, pixels)] = &self.groups[..] {
            return encode(pixels);
        }
        // Where each row lands when the groups' outputs are stacked one after another.
        let mut at = vec![0u32; self.rows];
        for (position, &row) in self.groups.iter().flat_map(|(rows, _)| rows).enumerate() {
            at[row] = position as u32;
        }
        let outputs = self.groups.iter().map(|(_, pixels)| encode(pixels)).collect::<Result<Vec<_>>>()?;
        let compute =
            |e: candle_core::Error| Error::caused_by(ErrorKind::Compute, format!("gather an image batch: {e}"), e);
        let stacked = Tensor::cat(&outputs, 0).map_err(compute)?;
        let at = Tensor::new(at, stacked.device()).map_err(compute)?;
        stacked.index_select(&at, 0).map_err(compute)
    }

    /// The number of images.
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }
}

/// Decoded and preprocessed `images` on `device` (decoding on all cores), grouped by output
/// size ([`PixelBatch`]).
pub fn load_pixel_groups(
    prep: &Preprocessor,
    images: &[impl std::borrow::Borrow<ImageSource> + Sync],
    device: &Device,
) -> Result<PixelBatch> {
    let pixels: Vec<((usize, usize), Vec<f32>)> = images
        .par_iter()
        .map(|s| {
            let s: &ImageSource = s.borrow();
            let img = s.load_pil().map_err(Error::from)?;
            let (w, h) = img.dimensions();
            prep.check_input(w as usize, h as usize).map_err(|e| {
                Error::caused_by(ErrorKind::Data, format!("preprocess image {}: {e}", s.display_name()), e)
            })?;
            Ok((prep.output_size(w as usize, h as usize), preprocess(prep, &img)))
        })
        .collect::<Result<_>>()?;
    let mut sizes: Vec<(usize, usize)> = Vec::new();
    for (size, _) in &pixels {
        if !sizes.contains(size) {
            sizes.push(*size);
        }
    }
    if sizes.is_empty() {
        sizes.push((prep.size, prep.size));
    }
    let groups = sizes
        .into_iter()
        .map(|(w, h)| {
            let rows: Vec<usize> = (0..pixels.len()).filter(|&i| pixels[i].0 == (w, h)).collect();
            let flat: Vec<f32> = rows.iter().flat_map(|&i| pixels[i].1.iter().copied()).collect();
            Tensor::from_vec(flat, (rows.len(), 3, h, w), &Device::Cpu)
                .and_then(|t| t.to_device(device))
                .map(|t| (rows, t))
                .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("stack an image batch: {e}"), e))
        })
        .collect::<Result<_>>()?;
    Ok(PixelBatch { rows: images.len(), groups })
}

pub(crate) fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// What encodes the inputs the cache lacks: the dual encoder, or none when the run found
/// every input in the cache and did not load the weights.
#[derive(Clone, Copy)]
pub(crate) struct Encoder<'a> {
    pub model: Option<&'a dyn DualEncoder>,
    /// Where the embeddings go.
    pub device: &'a Device,
}

impl<'a> Encoder<'a> {
    pub(crate) fn model(&self) -> Result<&'a dyn DualEncoder> {
        self.model.ok_or_else(Self::not_loaded)
    }

    pub(crate) fn not_loaded() -> Error {
        Error::new(ErrorKind::Compute, "encode an input missing from the cache: the model was not loaded")
    }
}

/// Decoding and preprocessing a batch of `images` (on all cores).
pub(crate) fn prepare_images<'a>(
    encoder: Encoder<'a>,
    images: &'a (impl SourceList + ?Sized),
) -> impl Fn(&[usize]) -> Result<PixelBatch> + Sync + 'a {
    let (prep, device) = (encoder.model.map(|m| m.preprocessor().clone()), encoder.device);
    move |chunk: &[usize]| {
        let prep = prep.as_ref().ok_or_else(Encoder::not_loaded)?;
        let sources: Vec<ImageSource> = chunk.iter().map(|&i| images.source(i)).collect();
        load_pixel_groups(prep, &sources, device)
    }
}

/// The image tower on a prepared batch.
pub(crate) fn encode_pixels(encoder: Encoder<'_>) -> impl FnMut(PixelBatch) -> Result<Tensor> + '_ {
    move |batch: PixelBatch| batch.encode(|pixels| Ok(encoder.model()?.encode_images(pixels)?))
}

/// A batch of `texts`.
pub(crate) fn prepare_texts<'a>(texts: &'a [&'a str]) -> impl Fn(&[usize]) -> Result<Vec<&'a str>> + Sync + 'a {
    move |chunk: &[usize]| Ok(chunk.iter().map(|&i| texts[i]).collect::<Vec<&str>>())
}

/// The text tower on a batch.
pub(crate) fn encode_captions<'a>(encoder: Encoder<'a>) -> impl FnMut(Vec<&str>) -> Result<Tensor> + 'a {
    move |refs: Vec<&str>| Ok(encoder.model()?.encode_texts(&refs)?)
}

/// L2-normalised embeddings of `images` (with their cache `keys`), in order, through the
/// cache, as one table (a retrieval gallery's).
pub(crate) fn encode_images(
    encoder: Encoder,
    images: &(impl SourceList + ?Sized),
    keys: &Keys,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<Tensor> {
    let plan = EmbeddingPlan::new(keys, None, batch, cache, "image");
    let (table, tally) = encode_table(encoder, &plan, prepare_images(encoder, images), encode_pixels(encoder), cache)?;
    tally.add_images_to(counts);
    Ok(table)
}

/// L2-normalised embeddings of `texts` (with their cache `keys`), in order, through the
/// cache, as one table (a retrieval gallery's).
pub(crate) fn encode_texts(
    encoder: Encoder,
    texts: &[&str],
    keys: &Keys,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<Tensor> {
    let plan = EmbeddingPlan::new(keys, None, batch, cache, "text");
    let (table, tally) = encode_table(encoder, &plan, prepare_texts(texts), encode_captions(encoder), cache)?;
    tally.add_texts_to(counts);
    Ok(table)
}

/// Every row of `plan` as one table, streamed through the cache.
fn encode_table<P: Send>(
    encoder: Encoder,
    plan: &EmbeddingPlan<'_>,
    prepare: impl Fn(&[usize]) -> Result<P> + Sync,
    encode: impl FnMut(P) -> Result<Tensor>,
    cache: &mut EmbeddingCache,
) -> Result<(Tensor, stream::Tally)> {
    let bars = indicatif::MultiProgress::new();
    let (table, tally, _) = with_stream(plan, &bars, prepare, encode, |s| s.table(encoder.device, cache))?;
    Ok((table, tally))
}
