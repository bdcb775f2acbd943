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
    let (w, h) = pixels.first().map_or((prep.size, prep.size), |(size, _)| *size);
    if pixels.iter().any(|(size, _)| *size != (w, h)) {
        return Err(Error::new(ErrorKind::Compute, "stack an image batch: its images were resized to different sizes"));
    }
    let flat: Vec<f32> = pixels.into_iter().flat_map(|(_, values)| values).collect();
    Tensor::from_vec(flat, (images.len(), 3, h, w), &Device::Cpu)
        .and_then(|t| t.to_device(device))
        .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("stack an image batch: {e}"), e))
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
) -> impl Fn(&[usize]) -> Result<Tensor> + Sync + 'a {
    let (prep, device) = (encoder.model.map(|m| m.preprocessor().clone()), encoder.device);
    move |chunk: &[usize]| {
        let prep = prep.as_ref().ok_or_else(Encoder::not_loaded)?;
        let sources: Vec<ImageSource> = chunk.iter().map(|&i| images.source(i)).collect();
        load_pixels(prep, &sources, device)
    }
}

/// The image tower on a prepared batch.
pub(crate) fn encode_pixels(encoder: Encoder<'_>) -> impl FnMut(Tensor) -> Result<Tensor> + '_ {
    move |pixels: Tensor| Ok(encoder.model()?.encode_images(&pixels)?)
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
