//! Item suites (Winoground, EqBen, VALSE, SPEC): unique inputs → embeddings or pair scores
//! ([`crate::encode`]) → an `N × K × L` score tensor → the suite's metrics → a run record
//! ([`crate::results::Run`]); `--shard i/n` evaluates a slice.

use std::path::Path;
use std::time::Instant;

use benchctl_models::{Model, Similarity};
use benchctl_scoring::spill::{self, SpillVec};
use benchctl_scoring::ScoreTensor;
use benchctl_suites::Suite;
use candle_core::{DType, Tensor};

use crate::cache;
use crate::cli::EvalArgs;
use crate::encode::*;
use crate::evaluate::{bootstrap_intervals, tie_rule, Evaluation, Outcome};
use crate::model::{resolve_model, Head, Needed};
use crate::results::{self, fingerprint, image_fingerprint, Counts, ModelRecord, Run};
use crate::{Error, ErrorKind, Result};

/// Evaluates an item suite from `data_dir`, up to, not including, storing the run.
pub fn run(args: &EvalArgs, suite_info: &'static benchctl_suites::SuiteInfo, data_dir: &Path) -> Result<Evaluation> {
    let started = Instant::now();
    let started_at = results::now_rfc3339();
    let mut full_suite = suite_info.load(data_dir)?;
    full_suite.summary.ties = tie_rule(suite_info, args.ties)?;
    if full_suite.items.is_empty() {
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "evaluate {} in {}: it has no items to score ({} record(s) excluded by the suite's validity rule)",
                full_suite.id,
                full_suite.data_dir.display(),
                full_suite.excluded
            ),
        ));
    }
    check_images(&full_suite)?;
    let resolved = resolve_model(&args.model, &args.device, &args.dtype)?;
    let batch = args.batch_size as usize;

    let data_fingerprint = fingerprint(&full_suite)?;
    // The items hold each distinct image source once, in first-seen order: those are the
    // unique images, and each item's indices into them its slots.
    let unique_images = full_suite.items.distinct_sources();
    let all_image_slots: SpillVec<usize> =
        full_suite.items.iter().flat_map(|i| i.source_indices().iter().map(|&s| s as usize)).collect();
    let (all_text_slots, unique_texts) = unique_by(full_suite.items.iter().flat_map(|i| i.texts()));
    // A shard keeps its slice of the items (and their slots); the unique inputs stay global.
    let shard = match args.shard {
        None => None,
        Some(_) if resolved.head.is_fusion() => {
            return Err(Error::new(
                ErrorKind::Usage,
                "use --shard: it applies to dual encoders (CLIP, SigLIP, BLIP ITC)",
            ))
        }
        Some((i, n)) => Some(Shard::of(
            &ItemInputs::new(&full_suite, &all_image_slots, &all_text_slots),
            i,
            n,
            unique_images.len(),
            unique_texts.len(),
        )),
    };
    let (suite, image_slots, text_slots, wanted) = match &shard {
        None => (&full_suite, &all_image_slots, &all_text_slots, None),
        Some(s) => (&s.suite, &s.image_slots, &s.text_slots, Some((&s.wanted_images, &s.wanted_texts))),
    };
    let mut counts =
        Counts { unique_images: unique_images.len(), unique_texts: unique_texts.len(), ..Default::default() };
    (counts.captions_truncated, counts.text_context) = long_captions(&resolved, &unique_texts, args.on_long_caption)?;

    let mut cache = resolved.cache(args.no_cache)?;
    let mut memo = resolved.file_keys(args.no_cache);
    if !args.allow_outside_links {
        memo.inside = Some(benchctl_suites::paths::DataRoot::new(data_dir));
    }
    let image_keys = Keys::from(image_keys(unique_images, &memo)?);
    counts.images_hashed = memo.hashed.load(std::sync::atomic::Ordering::Relaxed);
    remember(&memo);
    let image_fingerprint = image_fingerprint(all_image_slots.iter().map(|&s| {
        spill::touched(spill::ITEM_BYTES / 2);
        image_keys.get(s)
    }));
    let text_keys = text_keys(&unique_texts);
    let wanted_images = wanted.as_ref().map(|(w, _)| w.as_slice());
    let wanted_texts = wanted.as_ref().map(|(_, w)| w.as_slice());
    // A fusion model needs each item's pair scores; a dual encoder its inputs' embeddings.
    let inputs = ItemInputs::new(suite, image_slots, text_slots);
    let pairs = resolved.head.is_fusion().then(|| PairTable::of_items(&inputs));
    let pair_keys = Keys::from(pairs.as_ref().map(|table| table.keys(&image_keys, &text_keys)).unwrap_or_default());
    let needed: Vec<Needed> = match pairs {
        Some(_) => vec![(&pair_keys, None)],
        None => vec![(&image_keys, wanted_images), (&text_keys, wanted_texts)],
    };
    // A re-run that finds everything in the cache scores without reading the weights.
    let (loaded, head, load_s) = resolved.load_unless_cached(&mut cache, &needed)?;
    let model = loaded.as_ref().map(|l| &l.model);
    let (scores, encode_images_s, encode_texts_s, mut score_s) = match (head, &pairs) {
        (Head::Fusion(kind), Some(pairs)) => {
            let fusion = match model {
                Some(Model::Fusion(fusion)) => Some(fusion.as_ref()),
                _ => None,
            };
            let t = Instant::now();
            let inputs = PairInputs { images: unique_images, texts: &unique_texts, pair_keys: &pair_keys };
            let values = score_pairs_through_cache(fusion, pairs, &inputs, batch, &mut counts, &mut cache)?;
            let scores = pairs.score_tensor(suite, &values, kind)?;
            (scores, 0.0, 0.0, t.elapsed().as_secs_f64())
        }
        (Head::Dual(similarity), None) => {
            let model = match model {
                Some(Model::Dual(encoder)) => Some(encoder.as_ref()),
                _ => None,
            };
            let encoder = Encoder { model, device: resolved.device() };
            let t = Instant::now();
            let image_plan = EmbeddingPlan::new(&image_keys, wanted_images, batch, &cache, "image");
            let text_plan = EmbeddingPlan::new(&text_keys, wanted_texts, batch, &cache, "text");
            let bars = indicatif::MultiProgress::new();
            let (image_steps, text_steps) = (
                (prepare_images(encoder, unique_images), encode_pixels(encoder)),
                (prepare_texts(&unique_texts), encode_captions(encoder)),
            );
            let ((scores, text_tally, encode_texts_s), image_tally, encode_images_s) =
                with_stream(&image_plan, &bars, image_steps.0, image_steps.1, |images| {
                    with_stream(&text_plan, &bars, text_steps.0, text_steps.1, |texts| {
                        score_items(&similarity, &inputs, images, texts, encoder.device, &mut cache)
                    })
                })?;
            counts.add_images(image_tally);
            counts.add_texts(text_tally);
            let score_s = (t.elapsed().as_secs_f64() - encode_images_s - encode_texts_s).max(0.0);
            (scores, encode_images_s, encode_texts_s, score_s)
        }
        _ => return Err(Error::new(ErrorKind::Compute, "score: the model's kind and its score head disagree")),
    };
    let t = Instant::now();
    let (report, intervals) = if suite.items.is_empty() {
        // An empty shard (more shards than items) is legal: nothing to score, and `merge`
        // joins it with the others.
        (benchctl_scoring::Report { items: 0, metrics: Vec::new(), breakdowns: Vec::new() }, Vec::new())
    } else {
        (suite.evaluate(&scores)?, bootstrap_intervals(suite, &scores)?)
    };
    score_s += t.elapsed().as_secs_f64();

    let run = Run {
        started_at,
        model: ModelRecord { score_kind: Some(scores.kind().name().to_string()), ..resolved.record.clone() },
        suite: results::SuiteRecord { incomplete: full_suite.incomplete.clone(), ..results::SuiteRecord::of(suite) },
        batch_size: batch,
        counts,
        timings: results::Timings {
            load_model_s: load_s,
            encode_images_s,
            encode_texts_s,
            score_s,
            total_s: started.elapsed().as_secs_f64(),
        },
        report,
        intervals,
        tool_commit: results::TOOL_COMMIT.to_string(),
        data_fingerprint,
        image_fingerprint,
        shard: args.shard.map(|(i, n)| format!("{i}/{n}")),
    };
    // The unique inputs borrow from the suite's items (and spill, so they are dropped with
    // their files here, before the suite moves).
    drop((unique_texts, all_image_slots, all_text_slots));
    let suite = match shard {
        None => full_suite,
        Some(shard) => shard.suite,
    };
    Ok(Evaluation { run, outcome: Outcome::Items { suite: Box::new(suite), scores } })
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
        spill::touched(spill::ITEM_BYTES);
    }
    let mut tensor = ScoreTensor::of_kind(similarity.kind());
    for window_start in (0..items).step_by(WINDOW) {
        let window = window_start..(window_start + WINDOW).min(items);
        for n in window.clone() {
            spill::touched(spill::ITEM_BYTES);
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
