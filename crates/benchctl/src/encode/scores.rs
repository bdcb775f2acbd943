//! The scores stage of an item suite: its `N × K × L` score tensor from its inputs
//! ([`crate::inputs::SuiteInputs`]). A dual encoder's embeddings are streamed through the
//! cache (images decoded ahead) and compared item by item, window by window; a fusion model
//! scores each unique pair once, through the cache, and so does a scoring server
//! ([`crate::encode::asks`]). The weights are read only when the cache
//! lacks something.

use std::time::Instant;

use benchctl_base::spill::SpillVec;
use benchctl_models::{Model, ScoreKind, Similarity};
use benchctl_scoring::ScoreTensor;
use candle_core::{DType, Tensor};

use crate::cache::{self, Keys};
use crate::encode::asks::ask_pairs_through_cache;
use crate::encode::pairs::{score_pairs_through_cache, PairInputs, PairScores, PairTable};
use crate::encode::stream::{with_stream, EmbeddingPlan, EmbeddingStream};
use crate::encode::{encode_captions, encode_pixels, prepare_images, prepare_texts, Encoder};
use crate::inputs::{ItemInputs, SuiteInputs};
use crate::model::Head;
use crate::replies::ItemReplies;
use crate::session::Session;
use crate::{Error, ErrorKind, Result};

/// The scores of every item `inputs` holds (a shard's, or the whole suite's), and the replies
/// they were read from where the model generated them.
pub(crate) fn item_scores(session: &mut Session, inputs: &SuiteInputs) -> Result<(ScoreTensor, Option<ItemReplies>)> {
    let items = inputs.items();
    let (scores, replies) = if session.model.is_fusion() {
        score_pairs(session, &items, inputs)?
    } else {
        (score_embeddings(session, &items, inputs)?, None)
    };
    session.run.model.score_kind = Some(scores.kind().name().to_string());
    Ok((scores, replies))
}

fn head_mismatch() -> Error {
    Error::new(ErrorKind::Compute, "score: the model's kind and its score head disagree")
}

/// A fusion model's scores: each unique pair once, through the cache.
fn score_pairs(
    session: &mut Session,
    inputs: &ItemInputs,
    unique: &SuiteInputs,
) -> Result<(ScoreTensor, Option<ItemReplies>)> {
    let pairs = PairTable::of_items(&unique.all_items(), unique.scored_range());
    let pair_keys = Keys::from(pairs.keys(&unique.image_keys, &unique.text_keys()));
    let keeps_replies = session.model.generates_replies();
    let pair_inputs = PairInputs { images: unique.images, texts: &unique.texts, pair_keys: &pair_keys, keeps_replies };
    let with_replies = |scores: PairScores, kind| -> Result<_> {
        let replies = scores.replies.as_ref().map(|replies| pairs.item_replies(inputs.suite, replies));
        Ok((pairs.score_tensor(inputs.suite, &scores.values, kind)?, replies))
    };
    if let Some(server) = session.model.endpoint() {
        let started = Instant::now();
        let scores =
            ask_pairs_through_cache(server, &pairs, &pair_inputs, &mut session.run.counts, &mut session.cache)?;
        session.run.timings.score_s += started.elapsed().as_secs_f64();
        return with_replies(scores, ScoreKind::LogProbability);
    }
    // A re-run that finds everything in the cache scores without reading the weights.
    let (loaded, head) = session.model.load_unless_cached(&mut session.cache, &[(&pair_keys, pairs.wanted())])?;
    session.run.timings.load_model_s = loaded.as_ref().map_or(0.0, |l| l.load_s);
    let Head::Fusion(kind) = head else { return Err(head_mismatch()) };
    let fusion = match loaded.as_ref().map(|l| &l.model) {
        Some(Model::Fusion(fusion)) => Some(fusion.as_ref()),
        _ => None,
    };
    let started = Instant::now();
    let batch = session.batch();
    let scores =
        score_pairs_through_cache(fusion, &pairs, &pair_inputs, batch, &mut session.run.counts, &mut session.cache)?;
    let scored = with_replies(scores, kind)?;
    session.run.timings.score_s += started.elapsed().as_secs_f64();
    Ok(scored)
}

/// A dual encoder's scores: the embeddings streamed through the cache (images decoded ahead)
/// and each item's K×L similarities, window by window.
fn score_embeddings(session: &mut Session, inputs: &ItemInputs, unique: &SuiteInputs) -> Result<ScoreTensor> {
    let (wanted_images, wanted_texts) = unique.wanted();
    let text_keys = unique.text_keys();
    let needed = [(&unique.image_keys, wanted_images), (&text_keys, wanted_texts)];
    let (loaded, head) = session.model.load_unless_cached(&mut session.cache, &needed)?;
    session.run.timings.load_model_s = loaded.as_ref().map_or(0.0, |l| l.load_s);
    let Head::Dual(similarity) = head else { return Err(head_mismatch()) };
    let model = match loaded.as_ref().map(|l| &l.model) {
        Some(Model::Dual(encoder)) => Some(encoder.as_ref()),
        _ => None,
    };
    let batch = session.batch();
    let Session { model: resolved, cache, run, .. } = session;
    let encoder = Encoder { model, device: resolved.device() };
    let started = Instant::now();
    let image_plan = EmbeddingPlan::new(&unique.image_keys, wanted_images, batch, cache, "image");
    let text_plan = EmbeddingPlan::new(&text_keys, wanted_texts, batch, cache, "text");
    let bars = indicatif::MultiProgress::new();
    let (images, texts) = (prepare_images(encoder, unique.images), prepare_texts(&unique.texts));
    let ((scores, text_tally, encode_texts_s), image_tally, encode_images_s) =
        with_stream(&image_plan, &bars, images, encode_pixels(encoder), |images| {
            with_stream(&text_plan, &bars, texts, encode_captions(encoder), |texts| {
                score_items(&similarity, inputs, images, texts, encoder.device, cache)
            })
        })?;
    image_tally.add_images_to(&mut run.counts);
    text_tally.add_texts_to(&mut run.counts);
    run.timings.encode_images_s = encode_images_s;
    run.timings.encode_texts_s = encode_texts_s;
    run.timings.score_s += (started.elapsed().as_secs_f64() - encode_images_s - encode_texts_s).max(0.0);
    Ok(scores)
}

/// The K×L scores of every item, computed window by window of items in suite order (within a
/// window, in batches of items with the same shape), the embeddings fetched as a window needs
/// them and released after the last item that shows them: an eval holds the embeddings of a
/// window (and of inputs shared across windows), not of the suite. Where the suite's metrics
/// compare texts with texts, each item's L×L cosines of its texts' embeddings go beside its
/// scores.
fn score_items<PI, PT>(
    similarity: &Similarity,
    inputs: &ItemInputs,
    images: &mut EmbeddingStream<'_, PI>,
    texts: &mut EmbeddingStream<'_, PT>,
    device: &candle_core::Device,
    cache: &mut cache::EmbeddingCache,
) -> Result<ScoreTensor> {
    const WINDOW: usize = 4096;
    let (suite, items) = (inputs.suite, inputs.suite.items.len());
    // The last item that shows each unique input.
    let size = |slots: &[usize]| slots.iter().max().map_or(0, |&s| s + 1);
    let (mut last_image, mut last_text) =
        (SpillVec::from_elem(0u32, size(inputs.image_slots)), SpillVec::from_elem(0u32, size(inputs.text_slots)));
    for n in 0..items {
        inputs.images_of(n).iter().for_each(|&s| last_image[s] = n as u32);
        inputs.texts_of(n).iter().for_each(|&s| last_text[s] = n as u32);
    }
    let compare_texts = suite.summary.family.compares_texts();
    let mut tensor = ScoreTensor::of_kind(similarity.kind());
    for window_start in (0..items).step_by(WINDOW) {
        let window = window_start..(window_start + WINDOW).min(items);
        for n in window.clone() {
            for &s in inputs.images_of(n) {
                images.ensure(s, cache)?;
            }
            for &s in inputs.texts_of(n) {
                texts.ensure(s, cache)?;
            }
        }
        let mut by_shape: std::collections::BTreeMap<(usize, usize), Vec<usize>> = Default::default();
        for n in window.clone() {
            by_shape.entry((suite.items.item(n).image_count(), suite.items.item(n).text_count())).or_default().push(n);
        }
        let mut window_values: Vec<Vec<f32>> = vec![Vec::new(); window.len()];
        let mut window_text_values: Vec<Vec<f32>> = vec![Vec::new(); window.len()];
        for ((k, l), members) in by_shape {
            let image_batch = gather(images, &members, |n| inputs.images_of(n), device)?;
            let text_batch = gather(texts, &members, |n| inputs.texts_of(n), device)?;
            let values = read_scores(&similarity.scores(&image_batch, &text_batch)?)?;
            for (j, &n) in members.iter().enumerate() {
                window_values[n - window.start] = values[j * k * l..(j + 1) * k * l].to_vec();
            }
            if compare_texts {
                let values = read_scores(&Similarity::COSINE.scores(&text_batch, &text_batch)?)?;
                for (j, &n) in members.iter().enumerate() {
                    window_text_values[n - window.start] = values[j * l * l..(j + 1) * l * l].to_vec();
                }
            }
        }
        for (n, (values, text_values)) in window.clone().zip(window_values.iter().zip(&window_text_values)) {
            let item = suite.items.item(n);
            let mut scored = tensor.push(item.image_count(), item.text_count(), values);
            if compare_texts && scored.is_ok() {
                let wide: Vec<f64> = text_values.iter().map(|&v| f64::from(v)).collect();
                scored = tensor.push_text_scores(&wide);
            }
            scored.map_err(|e| Error::caused_by(ErrorKind::Compute, format!("score item {}: {e}", item.id()), e))?;
        }
        for n in window.clone() {
            for &s in inputs.images_of(n) {
                if (last_image[s] as usize) < window.end {
                    images.release(s);
                }
            }
            for &s in inputs.texts_of(n) {
                if (last_text[s] as usize) < window.end {
                    texts.release(s);
                }
            }
        }
    }
    Ok(tensor)
}

/// A batch of scores as f32 values, in order.
fn read_scores(scores: &Tensor) -> Result<Vec<f32>> {
    scores
        .to_dtype(DType::F32)
        .and_then(|s| s.flatten_all())
        .and_then(|s| s.to_vec1::<f32>())
        .map_err(|e| Error::new(ErrorKind::Compute, format!("read scores: {e}")))
}

/// The embeddings of each of `members` (items of one shape), their slots given by `slots_of`,
/// as a `members × per item × dim` tensor.
fn gather<'s, P>(
    stream: &EmbeddingStream<'_, P>,
    members: &[usize],
    slots_of: impl Fn(usize) -> &'s [usize],
    device: &candle_core::Device,
) -> Result<Tensor> {
    let (dim, per) = (stream.dim(), members.first().map_or(0, |&n| slots_of(n).len()));
    let mut flat = Vec::with_capacity(members.len() * per * dim);
    for &n in members {
        for &s in slots_of(n) {
            flat.extend_from_slice(stream.row(s)?);
        }
    }
    Tensor::from_vec(flat, (members.len(), per, dim), device)
        .map_err(|e| Error::new(ErrorKind::Compute, format!("gather embeddings: {e}")))
}
