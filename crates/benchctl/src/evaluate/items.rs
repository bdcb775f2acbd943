//! Item suites (Winoground, EqBen, VALSE, SPEC): the suite's unique inputs
//! ([`crate::inputs`]) → their cache keys → embeddings or pair scores ([`crate::encode`]) →
//! an `N × K × L` score tensor → the suite's metrics → the run record
//! ([`crate::record::RunBuilder`]); `--shard i/n` evaluates a slice.

use std::time::Instant;

use benchctl_base::spill::SpillVec;
use benchctl_models::{Model, Similarity};
use benchctl_scoring::metrics::stats::Interval;
use benchctl_scoring::{Report, ScoreTensor};
use benchctl_suites::items::Sources;
use benchctl_suites::Suite;
use candle_core::{DType, Tensor};

use crate::cache::{self, text_keys, Keys};
use crate::encode::pairs::{score_pairs_through_cache, PairInputs, PairTable};
use crate::encode::stream::{with_stream, EmbeddingPlan, EmbeddingStream};
use crate::encode::{encode_captions, encode_pixels, prepare_images, prepare_texts, Encoder};
use crate::evaluate::tie_rule;
use crate::inputs::{unique_by, ItemInputs};
use crate::model::Head;
use crate::plan::EvalPlan;
use crate::record::{bootstrap_intervals, Evaluation, Outcome, Scored};
use crate::results::{fingerprint, image_fingerprint, SuiteRecord};
use crate::session::Session;
use crate::{Error, ErrorKind, Result};

/// Evaluates an item suite, up to, not including, storing the run.
pub fn run(plan: &EvalPlan) -> Result<Evaluation> {
    let full_suite = load_suite(plan)?;
    let mut session = Session::open(plan)?;
    let data_fingerprint = fingerprint(&full_suite)?;
    // The items hold each distinct image source once, in first-seen order: those are the
    // unique images, and each item's indices into them its slots.
    let unique_images = full_suite.items.distinct_sources();
    let all_image_slots: SpillVec<usize> =
        full_suite.items.iter().flat_map(|i| i.source_indices().iter().map(|&s| s as usize)).collect();
    let (all_text_slots, unique_texts) = unique_by(full_suite.items.iter().flat_map(|i| i.texts()));
    // A shard keeps its slice of the items (and their slots); the unique inputs stay global.
    let shard = match plan.options.shard {
        None => None,
        Some(_) if session.model.is_fusion() => {
            return Err(Error::new(
                ErrorKind::Usage,
                "use --shard: it applies to dual encoders (CLIP, SigLIP, BLIP ITC)",
            ))
        }
        Some(s) => {
            let all = ItemInputs::new(&full_suite, &all_image_slots, &all_text_slots);
            Some(Shard::of(&all, s.index, s.count, unique_images.len(), unique_texts.len()))
        }
    };
    let (suite, inputs, wanted) = match &shard {
        None => (&full_suite, ItemInputs::new(&full_suite, &all_image_slots, &all_text_slots), None),
        Some(s) => (
            &s.suite,
            ItemInputs::new(&s.suite, &s.image_slots, &s.text_slots),
            Some((s.wanted_images.as_slice(), s.wanted_texts.as_slice())),
        ),
    };
    session.run.counts.unique_images = unique_images.len();
    session.run.counts.unique_texts = unique_texts.len();
    session.check_captions(&unique_texts)?;
    let image_keys = Keys::from(session.image_keys(unique_images)?);
    session.keys_done();
    let image_fingerprint = image_fingerprint(all_image_slots.iter().map(|&s| image_keys.get(s)));
    let text_keys = text_keys(&unique_texts);
    let sides =
        Sides { images: unique_images, texts: &unique_texts, image_keys: &image_keys, text_keys: &text_keys, wanted };
    // A fusion model needs each item's pair scores; a dual encoder its inputs' embeddings.
    let scores = if session.model.is_fusion() {
        score_pairs(&mut session, &inputs, &sides)?
    } else {
        score_embeddings(&mut session, &inputs, &sides)?
    };
    let (report, intervals) = metrics(suite, &scores, &mut session)?;
    let scored = Scored {
        suite: SuiteRecord { incomplete: full_suite.incomplete.clone(), ..SuiteRecord::of(suite) },
        report,
        intervals,
        data_fingerprint,
        image_fingerprint,
    };
    session.run.model.score_kind = Some(scores.kind().name().to_string());
    let run = session.run.finish(scored);
    // The unique inputs borrow from the suite's items (and spill, so they are dropped with
    // their files here, before the suite moves).
    drop(inputs);
    drop(text_keys);
    drop((unique_texts, all_image_slots, all_text_slots));
    let suite = match shard {
        None => full_suite,
        Some(shard) => shard.suite,
    };
    Ok(Evaluation { run, outcome: Outcome::Items { suite: Box::new(suite), scores } })
}

/// The suite as the plan names it, its tie rule set, refused before any model work when it
/// has no items or lacks images.
fn load_suite(plan: &EvalPlan) -> Result<Suite> {
    let mut suite = plan.suite.load(&plan.data_dir)?;
    suite.summary.ties = tie_rule(plan.suite, plan.options.ties)?;
    if suite.items.is_empty() {
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "evaluate {} in {}: it has no items to score ({} record(s) excluded by the suite's validity rule)",
                suite.id,
                suite.data_dir.display(),
                suite.excluded
            ),
        ));
    }
    check_images(&suite)?;
    Ok(suite)
}

/// The unique inputs of a suite on both sides, their cache keys, and (a shard's) which of
/// them the run needs.
struct Sides<'a> {
    images: &'a Sources,
    texts: &'a [&'a str],
    image_keys: &'a Keys<'a>,
    text_keys: &'a Keys<'a>,
    wanted: Option<(&'a [bool], &'a [bool])>,
}

fn head_mismatch() -> Error {
    Error::new(ErrorKind::Compute, "score: the model's kind and its score head disagree")
}

/// A fusion model's scores: each unique pair once, through the cache.
fn score_pairs(session: &mut Session, inputs: &ItemInputs, sides: &Sides) -> Result<ScoreTensor> {
    let pairs = PairTable::of_items(inputs);
    let pair_keys = Keys::from(pairs.keys(sides.image_keys, sides.text_keys));
    // A re-run that finds everything in the cache scores without reading the weights.
    let (loaded, head) = session.load_unless_cached(&[(&pair_keys, None)])?;
    let Head::Fusion(kind) = head else { return Err(head_mismatch()) };
    let fusion = match loaded.as_ref().map(|l| &l.model) {
        Some(Model::Fusion(fusion)) => Some(fusion.as_ref()),
        _ => None,
    };
    let started = Instant::now();
    let pair_inputs = PairInputs { images: sides.images, texts: sides.texts, pair_keys: &pair_keys };
    let batch = session.batch();
    let values =
        score_pairs_through_cache(fusion, &pairs, &pair_inputs, batch, &mut session.run.counts, &mut session.cache)?;
    let scores = pairs.score_tensor(inputs.suite, &values, kind)?;
    session.run.timings.score_s += started.elapsed().as_secs_f64();
    Ok(scores)
}

/// A dual encoder's scores: the embeddings streamed through the cache (images decoded ahead)
/// and each item's K×L similarities, window by window.
fn score_embeddings(session: &mut Session, inputs: &ItemInputs, sides: &Sides) -> Result<ScoreTensor> {
    let (wanted_images, wanted_texts) = (sides.wanted.map(|w| w.0), sides.wanted.map(|w| w.1));
    let needed = [(sides.image_keys, wanted_images), (sides.text_keys, wanted_texts)];
    let (loaded, head) = session.load_unless_cached(&needed)?;
    let Head::Dual(similarity) = head else { return Err(head_mismatch()) };
    let model = match loaded.as_ref().map(|l| &l.model) {
        Some(Model::Dual(encoder)) => Some(encoder.as_ref()),
        _ => None,
    };
    let batch = session.batch();
    let Session { model: resolved, cache, run, .. } = session;
    let encoder = Encoder { model, device: resolved.device() };
    let started = Instant::now();
    let image_plan = EmbeddingPlan::new(sides.image_keys, wanted_images, batch, cache, "image");
    let text_plan = EmbeddingPlan::new(sides.text_keys, wanted_texts, batch, cache, "text");
    let bars = indicatif::MultiProgress::new();
    let (images, texts) = (prepare_images(encoder, sides.images), prepare_texts(sides.texts));
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

/// The suite's metrics and their bootstrap intervals, timed with the scoring.
fn metrics(suite: &Suite, scores: &ScoreTensor, session: &mut Session) -> Result<(Report, Vec<Interval>)> {
    let started = Instant::now();
    let out = if suite.items.is_empty() {
        // An empty shard (more shards than items) is legal: nothing to score, and `merge`
        // joins it with the others.
        (Report { items: 0, metrics: Vec::new(), breakdowns: Vec::new() }, Vec::new())
    } else {
        (suite.evaluate(scores)?, bootstrap_intervals(suite, scores)?)
    };
    session.run.timings.score_s += started.elapsed().as_secs_f64();
    Ok(out)
}

/// One shard's slice of a suite: items `⌊N·i/n⌋ .. ⌊N·(i+1)/n⌋`, their slots into the
/// global unique inputs, and which of those inputs the slice needs.
pub(crate) struct Shard {
    suite: Suite,
    image_slots: SpillVec<usize>,
    text_slots: SpillVec<usize>,
    wanted_images: SpillVec<bool>,
    wanted_texts: SpillVec<bool>,
}

impl Shard {
    /// Shard `i` of `n` of `all` (the whole suite's items and slots), among `images` and
    /// `texts` unique inputs.
    fn of(all: &ItemInputs, i: usize, n: usize, images: usize, texts: usize) -> Self {
        let total = all.suite.items.len();
        let (start, end) = (total * i / n, total * (i + 1) / n);
        let (image_slots, text_slots) = (all.images_of_range(start..end), all.texts_of_range(start..end));
        let mut wanted_images = SpillVec::from_elem(false, images);
        let mut wanted_texts = SpillVec::from_elem(false, texts);
        image_slots.iter().for_each(|&s| wanted_images[s] = true);
        text_slots.iter().for_each(|&s| wanted_texts[s] = true);
        Shard {
            suite: all.suite.with_items(all.suite.items.range(start..end)),
            image_slots: image_slots.into(),
            text_slots: text_slots.into(),
            wanted_images,
            wanted_texts,
        }
    }
}

/// Fails before any model work when images are missing, naming them.
pub(crate) fn check_images(suite: &Suite) -> Result<()> {
    let missing = suite.missing_images();
    if missing.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = missing.iter().take(5).map(|p| p.display().to_string()).collect();
    let more = if missing.len() > 5 { format!(" and {} more", missing.len() - 5) } else { String::new() };
    Err(Error::new(
        ErrorKind::Data,
        format!("find {} image(s) of {}: {}{more}", missing.len(), suite.id, shown.join(", ")),
    ))
}

/// The K×L scores of every item, computed window by window of items in suite order (within a
/// window, in batches of items with the same shape), the embeddings fetched as a window needs
/// them and released after the last item that shows them: an eval holds the embeddings of a
/// window (and of inputs shared across windows), not of the suite.
pub(crate) fn score_items<PI, PT>(
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
        for ((k, l), members) in by_shape {
            let image_batch = gather(images, &members, |n| inputs.images_of(n), device)?;
            let text_batch = gather(texts, &members, |n| inputs.texts_of(n), device)?;
            let scores = similarity.scores(&image_batch, &text_batch)?;
            let values = scores
                .to_dtype(DType::F32)
                .and_then(|s| s.flatten_all())
                .and_then(|s| s.to_vec1::<f32>())
                .map_err(|e| Error::new(ErrorKind::Compute, format!("read scores: {e}")))?;
            for (j, &n) in members.iter().enumerate() {
                window_values[n - window.start] = values[j * k * l..(j + 1) * k * l].to_vec();
            }
        }
        for (n, values) in window.clone().zip(&window_values) {
            let item = suite.items.item(n);
            tensor
                .push(item.image_count(), item.text_count(), values)
                .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("score item {}: {e}", item.id()), e))?;
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
