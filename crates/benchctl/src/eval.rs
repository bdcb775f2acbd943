//! `benchctl eval`: load a suite, encode each unique image and text once, score every
//! item, compute the suite's metrics and store the run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use benchctl_models::hub::{self, HubSettings, ModelFiles, Origin};
use benchctl_models::registry::{self, Architecture, ScoreHead};
use benchctl_models::{DualEncoder, FusionEncoder, Model, ScoreKind, Similarity};
use benchctl_scoring::metrics::Ties;
use benchctl_scoring::ScoreTensor;
use benchctl_suites::{ImageSource, Suite};
use candle_core::{DType, Device, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use crate::cache::{self, hex, EmbeddingCache};
use crate::cli::{EvalArgs, LongCaptionArg, ModelChoice};
use crate::results::{self, ModelRecord, Run};
use crate::{Error, ErrorKind, Result};

/// A model resolved to its files and score head, with what identifies it in run records
/// and in the embedding cache; its weights are read only by [`ResolvedModel::load`].
pub struct ResolvedModel {
    files: ModelFiles,
    pub architecture: Architecture,
    head: ScoreHead,
    dtype: DType,
    device: Device,
    pub record: ModelRecord,
    /// Everything an embedding depends on besides its input: the embedding cache's namespace.
    pub cache_namespace: String,
}

/// A loaded model and what identifies it in run records.
pub struct LoadedModel {
    pub model: Model,
    pub record: ModelRecord,
}

/// What turns a run's cached values into scores: a dual encoder's head, or the kind of a
/// fusion model's pair scores. It is cached beside the embeddings or pair scores, so a run
/// that finds everything in the cache scores without the weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Head {
    Dual(Similarity),
    Fusion(ScoreKind),
}

impl Head {
    fn of(model: &Model) -> Head {
        match model {
            Model::Dual(encoder) => Head::Dual(encoder.similarity()),
            Model::Fusion(fusion) => Head::Fusion(fusion.score_kind()),
        }
    }

    /// The cache key of a dual encoder's or a fusion model's head.
    fn key(fusion: bool) -> cache::Key {
        cache::key(&[if fusion { b"fusion-score-kind" } else { b"similarity-head" }])
    }

    /// Its cache entry: the key and the values ([`Similarity::to_values`], or 0 for
    /// similarities, 1 for probabilities and 2 for logits).
    fn entry(&self) -> (cache::Key, Vec<f32>) {
        match self {
            Head::Dual(similarity) => (Head::key(false), similarity.to_values().to_vec()),
            Head::Fusion(kind) => (
                Head::key(true),
                vec![match kind {
                    ScoreKind::Similarity => 0.0,
                    ScoreKind::Probability => 1.0,
                    ScoreKind::Logit => 2.0,
                }],
            ),
        }
    }

    /// The head a cache holds for a dual encoder or a fusion model, if any.
    fn cached(cache: &EmbeddingCache, fusion: bool) -> Option<Head> {
        let values = cache.get(&Head::key(fusion))?;
        match (fusion, values) {
            (true, [0.0]) => Some(Head::Fusion(ScoreKind::Similarity)),
            (true, [1.0]) => Some(Head::Fusion(ScoreKind::Probability)),
            (true, [2.0]) => Some(Head::Fusion(ScoreKind::Logit)),
            (true, _) => None,
            (false, values) => Similarity::from_values(values).map(Head::Dual),
        }
    }
}

impl ResolvedModel {
    /// The memo of image files' content keys (off with `--no-cache` or without a location).
    pub fn file_keys(&self, no_cache: bool) -> cache::FileKeys {
        match cache::default_root() {
            Some(root) if !no_cache => cache::FileKeys::open(&root),
            _ => cache::FileKeys::disabled(),
        }
    }

    /// The embedding cache for this model (disabled with `--no-cache` or without a location).
    pub fn cache(&self, no_cache: bool) -> Result<EmbeddingCache> {
        match cache::default_root() {
            // A cache that cannot be opened (a read-only or missing location) is not used.
            Some(root) if !no_cache => Ok(EmbeddingCache::open(&root, &self.cache_namespace).unwrap_or_else(|e| {
                eprintln!("warning: failed to {e}; the run goes on without the embedding cache");
                EmbeddingCache::disabled()
            })),
            _ => Ok(EmbeddingCache::disabled()),
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether the chosen head scores pairs jointly (a fusion model).
    /// How the model's tokenizer fits captions to its context (config and tokenizer only).
    pub fn caption_limit(&self) -> Result<registry::CaptionLimit> {
        Ok(registry::caption_limit(self.architecture, &self.files)?)
    }

    pub fn is_fusion(&self) -> bool {
        self.head.is_fusion()
    }

    /// Reads the weights, and records the score head in `cache`.
    pub fn load(&self, cache: &mut EmbeddingCache) -> Result<LoadedModel> {
        let model = registry::load(self.architecture, self.head, &self.files, self.dtype, &self.device)?;
        let (key, values) = Head::of(&model).entry();
        if cache.get(&key) != Some(&values[..]) {
            cache.append(&[(key, values)])?;
        }
        Ok(LoadedModel { model, record: self.record.clone() })
    }

    /// [`ResolvedModel::load`], timed: `(model, seconds)`.
    pub fn load_timed(&self, cache: &mut EmbeddingCache) -> Result<(LoadedModel, f64)> {
        let started = Instant::now();
        let loaded = self.load(cache)?;
        Ok((loaded, started.elapsed().as_secs_f64()))
    }

    /// The score head, when `cache` holds it and every one of `needed` (embeddings for a dual
    /// encoder, pair scores for a fusion model), each list's entries of one size (an entry of
    /// another size is encoded again, see `drop_odd_sized`): then the run needs nothing from
    /// the weights.
    pub fn cached_head(&self, cache: &EmbeddingCache, needed: &[&[cache::Key]]) -> Option<Head> {
        let head = Head::cached(cache, self.head.is_fusion())?;
        let complete = |keys: &[cache::Key]| {
            let mut sizes = keys.iter().map(|k| cache.get(k).map(<[f32]>::len));
            match sizes.next() {
                None => true,
                Some(None) => false,
                Some(Some(first)) => sizes.all(|size| size == Some(first)),
            }
        };
        needed.iter().all(|keys| complete(keys)).then_some(head)
    }

    /// [`ResolvedModel::load`] unless the cache makes it unnecessary: `(model, head, seconds
    /// spent loading)`, the model `None` exactly when [`ResolvedModel::cached_head`] finds
    /// everything.
    pub fn load_unless_cached(
        &self,
        cache: &mut EmbeddingCache,
        needed: &[&[cache::Key]],
    ) -> Result<(Option<LoadedModel>, Head, f64)> {
        if let Some(head) = self.cached_head(cache, needed) {
            return Ok((None, head, 0.0));
        }
        let (loaded, seconds) = self.load_timed(cache)?;
        let head = Head::of(&loaded.model);
        Ok((Some(loaded), head, seconds))
    }
}

/// Resolves `--model` / `--model-path` to files, architecture and head, without reading the
/// weights.
pub fn resolve_model(choice: &ModelChoice, device_spec: &str, dtype_spec: &str) -> Result<ResolvedModel> {
    let device = benchctl_models::device::parse_device(device_spec)?;
    let dtype = benchctl_models::device::parse_dtype(dtype_spec)?;
    let (files, architecture, id) = match (&choice.model, &choice.model_path) {
        (Some(id), None) => {
            let entry = registry::find(id)?;
            let files = hub::from_hub(entry.repo, entry.revision, &HubSettings::from_env())?;
            (files, entry.architecture, entry.id.to_string())
        }
        (None, Some(dir)) => {
            let files = hub::from_path(dir)?;
            let architecture = registry::architecture_of(&files)?;
            let id = dir
                .canonicalize()
                .unwrap_or_else(|_| dir.clone())
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "local".into());
            (files, architecture, id)
        }
        _ => return Err(Error::new(ErrorKind::Usage, "choose a model: pass exactly one of --model or --model-path")),
    };
    let head = registry::choose_head(architecture, choice.score.as_deref())?;
    let mut record = model_record(id, &files, dtype, &device);
    record.score = Some(head.name().to_string());
    // A local directory is identified by where its weights are and their size and mtime, so a
    // replaced file gets a new namespace; a hub model by its commit. The preprocessing and the
    // tokenizer follow from the architecture and the config, tokenizer and image processor
    // files, whose bytes are hashed in. The code's own part: `OUTPUT_VERSION`, bumped by any
    // change to decoding, preprocessing or model code that alters an embedding, and the crate
    // version.
    let stamp = |path: &Path| {
        std::fs::metadata(path).ok().map(|m| format!("{}:{:?}", m.len(), m.modified().ok())).unwrap_or_default()
    };
    let contents = |path: &Path| std::fs::read(path).map(|bytes| hex(&cache::key(&[&bytes])[..8])).unwrap_or_default();
    let cache_namespace = format!(
        "v{}|{}|{}|{:?}|{:?}|{:?}|{}|{}|{}|{}|{}|{}|{}|{}",
        benchctl_models::OUTPUT_VERSION,
        env!("CARGO_PKG_VERSION"),
        record.id,
        record.repo,
        record.commit,
        files.weights.canonicalize().ok(),
        stamp(&files.weights),
        record.dtype,
        record.device,
        architecture.name(),
        head.name(),
        contents(&files.config),
        contents(&files.tokenizer),
        files.preprocessor.as_deref().map(contents).unwrap_or_default(),
    );
    Ok(ResolvedModel { files, architecture, head, dtype, device, record, cache_namespace })
}

fn model_record(id: String, files: &ModelFiles, dtype: DType, device: &Device) -> ModelRecord {
    let (repo, revision, commit, path) = match &files.origin {
        Origin::Hub { repo, revision, commit } => {
            (Some(repo.clone()), Some(revision.clone()), Some(commit.clone()), None)
        }
        Origin::Directory(dir) => (None, None, None, Some(dir.display().to_string())),
    };
    ModelRecord {
        id,
        repo,
        revision,
        commit,
        path,
        dtype: benchctl_models::device::dtype_name(dtype).to_string(),
        device: match device {
            Device::Cpu => "cpu".to_string(),
            other => format!("{other:?}").to_lowercase(),
        },
        score: None,
        score_kind: None,
    }
}

/// Forward-pass counts of one run: each unique input is encoded at most once, and not at
/// all when the embedding cache has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub unique_images: usize,
    pub unique_texts: usize,
    pub images_encoded: usize,
    pub image_batches: usize,
    pub texts_encoded: usize,
    pub text_batches: usize,
    pub images_cached: usize,
    pub texts_cached: usize,
    /// Fusion models: (image, text) pairs scored by a forward pass, and taken from the cache.
    pub pairs_scored: usize,
    pub pairs_cached: usize,
    /// Unique captions longer than the model's text context, cut by its tokenizer, and that
    /// context in tokens (special tokens included).
    pub captions_truncated: usize,
    pub text_context: usize,
    /// Image files whose bytes were read to key them (not known to the memo by path, size
    /// and mtime).
    pub images_hashed: usize,
}

impl Counts {
    /// Adds another run's encoding and cache work (not its unique-input totals).
    pub fn add_work(&mut self, other: &Counts) {
        self.images_encoded += other.images_encoded;
        self.image_batches += other.image_batches;
        self.texts_encoded += other.texts_encoded;
        self.text_batches += other.text_batches;
        self.images_cached += other.images_cached;
        self.texts_cached += other.texts_cached;
        self.pairs_scored += other.pairs_scored;
        self.pairs_cached += other.pairs_cached;
        self.images_hashed += other.images_hashed;
    }
}

/// A finished evaluation, not yet stored.
pub struct Evaluation {
    pub run: Run,
    /// The score dump's lines.
    pub dump: Vec<serde_json::Value>,
    /// An item suite and its scores (retrieval suites have none).
    pub scored: Option<(Suite, ScoreTensor)>,
}

impl Evaluation {
    /// Stores the run under `results_dir`, all or nothing: the run file and score dump
    /// first, then the store's row that names them (one transaction); returns the run's id
    /// and the run file.
    pub fn store(&self, results_dir: &Path) -> Result<(i64, PathBuf)> {
        let mut store = crate::store::Store::open(results_dir)?;
        let path = results::store(results_dir, &self.run, &self.dump)?;
        crate::fault::at("store-files", 0);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        Ok((store.insert(&self.run, &self.dump, Some(name))?, path))
    }
}

/// Runs `benchctl eval` up to, not including, storing the run.
pub fn run(args: &EvalArgs) -> Result<Evaluation> {
    let suite_info = benchctl_suites::find(&args.suite)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| Path::new("datasets").join(suite_info.id));
    if let benchctl_suites::SuiteKind::Galleries = suite_info.kind {
        return crate::retrieval::run(args, &data_dir);
    }
    let started = Instant::now();
    let started_at = results::now_rfc3339();
    let mut full_suite = suite_info.load(&data_dir)?;
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
    let (all_image_slots, unique_images) = unique_by(full_suite.items.iter().flat_map(|i| &i.images));
    let (all_text_slots, unique_texts) = unique_by(full_suite.items.iter().flat_map(|i| &i.texts));
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
            &full_suite,
            i,
            n,
            &all_image_slots,
            &all_text_slots,
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
    let memo = resolved.file_keys(args.no_cache);
    let image_keys = image_keys(&unique_images, &memo)?;
    counts.images_hashed = memo.hashed.load(std::sync::atomic::Ordering::Relaxed);
    remember(&memo);
    let image_fingerprint = image_fingerprint(all_image_slots.iter().map(|&s| &image_keys[s]));
    let text_keys = text_keys(&unique_texts);
    let wanted_images = wanted.as_ref().map(|(w, _)| w.as_slice());
    let wanted_texts = wanted.as_ref().map(|(_, w)| w.as_slice());
    let needed = |keys: &[cache::Key], wanted: Option<&[bool]>| -> Vec<cache::Key> {
        keys.iter().enumerate().filter(|&(i, _)| wanted.is_none_or(|w| w[i])).map(|(_, k)| *k).collect()
    };
    // A fusion model needs each item's pair scores; a dual encoder its inputs' embeddings.
    let pairs = resolved.head.is_fusion().then(|| PairTable::of_items(suite, image_slots, text_slots));
    let pair_keys = pairs.as_ref().map(|table| table.keys(&image_keys, &text_keys)).unwrap_or_default();
    let (needed_images, needed_texts) = match pairs {
        Some(_) => (Vec::new(), Vec::new()),
        None => (needed(&image_keys, wanted_images), needed(&text_keys, wanted_texts)),
    };
    // A re-run that finds everything in the cache scores without reading the weights.
    let (loaded, head, load_s) =
        resolved.load_unless_cached(&mut cache, &[&pair_keys, &needed_images, &needed_texts])?;
    let model = loaded.as_ref().map(|l| &l.model);
    let (scores, encode_images_s, encode_texts_s, mut score_s) = match (head, &pairs) {
        (Head::Fusion(kind), Some(pairs)) => {
            let fusion = match model {
                Some(Model::Fusion(fusion)) => Some(fusion.as_ref()),
                _ => None,
            };
            let t = Instant::now();
            let inputs = PairInputs { images: &unique_images, texts: &unique_texts, pair_keys: &pair_keys };
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
            let image_embeddings =
                encode_images(encoder, &unique_images, &image_keys, wanted_images, batch, &mut counts, &mut cache)?;
            let encode_images_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let text_embeddings =
                encode_texts(encoder, &unique_texts, &text_keys, wanted_texts, batch, &mut counts, &mut cache)?;
            let encode_texts_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let scores = score_items(&similarity, suite, image_slots, text_slots, &image_embeddings, &text_embeddings)?;
            (scores, encode_images_s, encode_texts_s, t.elapsed().as_secs_f64())
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
        suite: results::SuiteRecord {
            id: suite.id.to_string(),
            data_dir: suite.data_dir.display().to_string(),
            items: suite.items.len(),
            ties: suite.summary.ties.name().to_string(),
            incomplete: full_suite.incomplete.clone(),
            altered_images: None,
            caption_normalisation: None,
        },
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
    let dump = results::item_dump(suite, &scores);
    let suite = suite.clone();
    Ok(Evaluation { run, dump, scored: Some((suite, scores)) })
}

/// How many of `texts` the model's tokenizer truncates, and its context: with
/// `--on-long-caption error`, the first such caption is an error (bad data, naming it and how
/// many tokens it loses) before any model work.
pub(crate) fn long_captions(
    resolved: &ResolvedModel,
    texts: &[&String],
    policy: LongCaptionArg,
) -> Result<(usize, usize)> {
    let limit = resolved.caption_limit()?;
    let cuts: Vec<usize> = texts
        .par_iter()
        .map(|t| limit.tokens_cut(t))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::new(ErrorKind::Model, format!("tokenize the captions: {e}")))?;
    let truncated = cuts.iter().filter(|&&c| c > 0).count();
    if policy == LongCaptionArg::Error {
        if let Some((text, cut)) = texts.iter().zip(&cuts).find(|(_, &c)| c > 0) {
            return Err(Error::new(
                ErrorKind::Data,
                format!(
                    "accept caption {text:?}: it is {cut} token(s) longer than the model's {}-token context ({truncated} caption(s) are; --on-long-caption truncate cuts them as the reference pipeline does)",
                    limit.context
                ),
            ));
        }
    }
    Ok((truncated, limit.context))
}

/// Saves what the memo learnt; a failure only costs rehashing next time, so it warns.
pub(crate) fn remember(memo: &cache::FileKeys) {
    if let Err(e) = memo.save() {
        eprintln!("warning: could not remember image keys in the cache ({e}); they are hashed again next run");
    }
}

/// The tie rule a run asked for, refused (a usage error) for a suite whose official scorer
/// compares strictly: there `first` would reproduce nothing and only reward candidate order.
pub fn tie_rule(suite: &benchctl_suites::SuiteInfo, asked: crate::cli::TiesArg) -> Result<Ties> {
    let asked = Ties::from(asked);
    if asked == Ties::First && suite.official_ties != Ties::First {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("use --ties first on {}: its official scorer compares strictly (a tie is a miss), so only strict reproduces it; --ties first is for spec and rococo", suite.id),
        ));
    }
    Ok(asked)
}

/// The bootstrap intervals of a suite's headline metrics ([`results::BOOTSTRAP_RESAMPLES`]
/// resamples of the items, seed [`results::BOOTSTRAP_SEED`]).
pub fn bootstrap_intervals(
    suite: &Suite,
    scores: &ScoreTensor,
) -> Result<Vec<benchctl_scoring::metrics::stats::Interval>> {
    Ok(benchctl_scoring::metrics::stats::bootstrap(
        suite.summary,
        scores,
        &suite.item_views(),
        results::BOOTSTRAP_RESAMPLES,
        results::BOOTSTRAP_SEED,
    )?)
}

/// SHA-256 (hex) of a suite's data as the run saw it: the annotation files' names and bytes,
/// then every item's id and image paths (relative to the data directory) in order. Images'
/// bytes are not read (a 251K-item suite would take minutes); the embedding cache keys them
/// by content anyway.
pub fn fingerprint(suite: &Suite) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for file in &suite.annotation_files {
        let bytes =
            std::fs::read(file).map_err(|e| Error::new(ErrorKind::Data, format!("read {}: {e}", file.display())))?;
        let name = file.strip_prefix(&suite.data_dir).unwrap_or(file);
        hash.update(name.to_string_lossy().as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    for item in &suite.items {
        hash.update(item.id.as_bytes());
        hash.update([0]);
        for image in &item.images {
            let name = image.display_name();
            let data_dir = format!("{}/", suite.data_dir.display());
            hash.update(name.strip_prefix(&data_dir).unwrap_or(&name).as_bytes());
            hash.update([0]);
        }
    }
    Ok(cache::hex(&hash.finalize()))
}

/// SHA-256 (hex) of images' content keys (the SHA-256 of each file's bytes, the embedding
/// cache's keys), in the order given: the suite's images item by item. Computed from keys
/// every run reads anyway, so it costs no extra pass over the images.
pub fn image_fingerprint<'a>(keys: impl Iterator<Item = &'a cache::Key>) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for key in keys {
        hash.update(key);
    }
    cache::hex(&hash.finalize())
}

/// One shard's slice of a suite: items `⌊N·i/n⌋ .. ⌊N·(i+1)/n⌋`, their slots into the
/// global unique inputs, and which of those inputs the slice needs.
struct Shard {
    suite: Suite,
    image_slots: Vec<usize>,
    text_slots: Vec<usize>,
    wanted_images: Vec<bool>,
    wanted_texts: Vec<bool>,
}

impl Shard {
    fn of(
        suite: &Suite,
        i: usize,
        n: usize,
        image_slots: &[usize],
        text_slots: &[usize],
        images: usize,
        texts: usize,
    ) -> Self {
        let total = suite.items.len();
        let (start, end) = (total * i / n, total * (i + 1) / n);
        let offset = |take: fn(&benchctl_suites::Item) -> usize, upto: usize| {
            suite.items[..upto].iter().map(take).sum::<usize>()
        };
        let (i0, i1) = (offset(|it| it.images.len(), start), offset(|it| it.images.len(), end));
        let (t0, t1) = (offset(|it| it.texts.len(), start), offset(|it| it.texts.len(), end));
        let mut wanted_images = vec![false; images];
        let mut wanted_texts = vec![false; texts];
        image_slots[i0..i1].iter().for_each(|&s| wanted_images[s] = true);
        text_slots[t0..t1].iter().for_each(|&s| wanted_texts[s] = true);
        let mut sliced = suite.clone();
        sliced.items = suite.items[start..end].to_vec();
        Shard {
            suite: sliced,
            image_slots: image_slots[i0..i1].to_vec(),
            text_slots: text_slots[t0..t1].to_vec(),
            wanted_images,
            wanted_texts,
        }
    }
}

/// Fails before any model work when images are missing, naming them.
fn check_images(suite: &Suite) -> Result<()> {
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

/// Each distinct value once, in first-seen order, and the slot of every occurrence.
pub(crate) fn unique_by<'a, T: Eq + std::hash::Hash + 'a>(
    values: impl Iterator<Item = &'a T>,
) -> (Vec<usize>, Vec<&'a T>) {
    let mut index: HashMap<&T, usize> = HashMap::new();
    let mut unique = Vec::new();
    let slots = values
        .map(|v| {
            *index.entry(v).or_insert_with(|| {
                unique.push(v);
                unique.len() - 1
            })
        })
        .collect();
    (slots, unique)
}

fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// The cache key of an image: the SHA-256 of its bytes (for an altered image, of both
/// sources' keys and the recipe), files' keys through the path/size/mtime memo.
fn image_key(source: &ImageSource, memo: &cache::FileKeys) -> Result<cache::Key> {
    let key_of = |path: &Path, tag: &[u8]| {
        memo.key_of(path, tag).map_err(|e| Error::new(ErrorKind::Data, format!("read image {}: {e}", path.display())))
    };
    Ok(match source {
        ImageSource::File(path) => key_of(path, b"file")?,
        ImageSource::NpyBgr(path) => key_of(path, b"npy-bgr")?,
        // The same bytes as a file: a parquet release shares the cache with the jsonl one.
        ImageSource::Embedded(e) => cache::key(&[b"file", &e.bytes]),
        ImageSource::Altered(a) => {
            let recipe = format!("{:?}|{}|{}", a.spec.method, a.spec.lambda_milli, a.spec.draw);
            cache::key(&[b"altered", &key_of(&a.base, b"file")?, &key_of(&a.other, b"file")?, recipe.as_bytes()])
        }
    })
}

/// The cache keys of `images` (their files read on all cores, unless the memo knows them).
pub(crate) fn image_keys(images: &[&ImageSource], memo: &cache::FileKeys) -> Result<Vec<cache::Key>> {
    images.par_iter().map(|s| image_key(s, memo)).collect()
}

/// The cache keys of `texts`.
pub(crate) fn text_keys(texts: &[&String]) -> Vec<cache::Key> {
    texts.iter().map(|t| cache::key(&[b"text", t.as_bytes()])).collect()
}

/// Assembles `(n, dim)` embeddings from per-input rows.
fn stack(rows: Vec<Vec<f32>>, device: &Device, what: &str) -> Result<Tensor> {
    let n = rows.len();
    let dim = rows.first().map(Vec::len).unwrap_or(0);
    Tensor::from_vec(rows.concat(), (n, dim), device)
        .map_err(|e| Error::new(ErrorKind::Compute, format!("gather {what} embeddings: {e}")))
}

fn to_rows(embeddings: &Tensor, what: &str) -> Result<Vec<Vec<f32>>> {
    embeddings
        .to_dtype(DType::F32)
        .and_then(|e| e.to_vec2::<f32>())
        .map_err(|e| Error::new(ErrorKind::Compute, format!("read {what} embeddings: {e}")))
}

/// Cached rows whose length differs from most cached rows' (an entry that passed its check
/// but cannot belong to this model, e.g. written by hand) become misses, encoded again.
fn drop_odd_sized(rows: &mut [Option<Vec<f32>>], what: &str) {
    let mut lengths: HashMap<usize, usize> = HashMap::new();
    for row in rows.iter().flatten() {
        *lengths.entry(row.len()).or_default() += 1;
    }
    let Some((&usual, _)) = lengths.iter().max_by_key(|&(len, count)| (*count, *len)) else { return };
    let mut dropped = 0;
    for row in rows.iter_mut() {
        if row.as_ref().is_some_and(|r| r.len() != usual) {
            *row = None;
            dropped += 1;
        }
    }
    if dropped > 0 {
        eprintln!("warning: {dropped} cached {what} embedding(s) had the wrong size; they are encoded again");
    }
}

/// How many inputs a cache-aware encode took from the cache and how many it encoded.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    cached: usize,
    encoded: usize,
    batches: usize,
}

/// Embeddings for `keys`, in order: rows the cache has, the rest from `encode` on batches of
/// the missing indices, each batch cached as soon as it is done (a killed run loses at most
/// the batch in flight).
///
/// With `wanted` (a shard's inputs), only those rows are needed, and each is encoded inside
/// its whole *global* batch (inputs `b·batch .. (b+1)·batch` of `keys`), the batch an
/// unsharded cold run encodes it in: encoder outputs depend in their last bits on a batch's
/// composition, and this keeps a shard's embeddings bit-identical to the unsharded run's.
/// Rows neither wanted nor encoded are zeros.
///
/// Batches are prepared (images decoded and preprocessed, on the rayon pool) one ahead, on a
/// helper thread, while the current batch is encoded: decoding fills the gaps the encoder
/// leaves instead of adding to its time, and work-stealing keeps both from starving.
#[allow(clippy::too_many_arguments)]
fn encode_through_cache<P: Send>(
    device: &Device,
    keys: &[cache::Key],
    wanted: Option<&[bool]>,
    batch: usize,
    cache: &mut EmbeddingCache,
    what: &str,
    prepare: impl Fn(&[usize]) -> Result<P> + Sync,
    mut encode: impl FnMut(P) -> Result<Tensor>,
) -> Result<(Tensor, Tally)> {
    let is_wanted = |i: usize| wanted.is_none_or(|w| w[i]);
    let mut rows: Vec<Option<Vec<f32>>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| if is_wanted(i) { cache.get(k).map(<[f32]>::to_vec) } else { None })
        .collect();
    drop_odd_sized(&mut rows, what);
    let todo: Vec<usize> = (0..keys.len()).filter(|&i| is_wanted(i) && rows[i].is_none()).collect();
    let plan: Vec<Vec<usize>> = match wanted {
        None => todo.chunks(batch).map(<[usize]>::to_vec).collect(),
        Some(_) => {
            let all: Vec<usize> = (0..keys.len()).collect();
            all.chunks(batch)
                .filter(|global| global.iter().any(|i| todo.binary_search(i).is_ok()))
                .map(<[usize]>::to_vec)
                .collect()
        }
    };
    let mut tally =
        Tally { cached: (0..keys.len()).filter(|&i| is_wanted(i)).count() - todo.len(), ..Tally::default() };
    let bar = progress(plan.iter().map(Vec::len).sum(), &format!("encoding {what}s"));
    std::thread::scope(|scope| -> Result<()> {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Result<P>>(1);
        let (plan, prepare) = (&plan, &prepare);
        scope.spawn(move || {
            for chunk in plan {
                // A closed channel means the encoder stopped on an error: stop preparing.
                if sender.send(prepare(chunk)).is_err() {
                    break;
                }
            }
        });
        for chunk in plan {
            let prepared = receiver.recv().map_err(|_| {
                Error::new(ErrorKind::Compute, format!("prepare {what} batches: the helper thread stopped"))
            })??;
            let encoded = to_rows(&encode(prepared)?, what)?;
            cache.append(&chunk.iter().zip(&encoded).map(|(&i, e)| (keys[i], e.clone())).collect::<Vec<_>>())?;
            for (&i, e) in chunk.iter().zip(encoded) {
                rows[i] = Some(e);
            }
            tally.encoded += chunk.len();
            tally.batches += 1;
            bar.inc(chunk.len() as u64);
            crate::fault::at("encode-batch", tally.batches - 1);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    let dim = rows.iter().flatten().map(Vec::len).next().unwrap_or(0);
    let rows = rows
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Some(r) => Ok(r),
            None if !is_wanted(i) => Ok(vec![0.0; dim]),
            None => Err(Error::new(
                ErrorKind::Compute,
                format!("gather {what} embeddings: a row was neither cached nor encoded"),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((stack(rows, device, what)?, tally))
}

/// One decoded image through the model's preprocessing, by the mode PIL would hold it in
/// (the reference pipelines resize RGBA, palette and 16-bit images each their own way).
pub(crate) fn preprocess(
    prep: &benchctl_models::preprocess::Preprocessor,
    image: &benchctl_suites::PilImage,
) -> Vec<f32> {
    use benchctl_suites::PilImage;
    let mut out = vec![0.0; prep.len()];
    match image {
        PilImage::Rgb(rgb) => prep.apply_into(rgb, &mut out),
        PilImage::Rgba(rgba) => prep.apply_rgba(rgba, false, &mut out),
        PilImage::Palette(rgba) => prep.apply_rgba(rgba, true, &mut out),
        PilImage::Gray16(grey) => prep.apply_gray16(grey, &mut out),
    }
    out
}

/// Decoded and preprocessed `images` as one `(n, 3, size, size)` batch on `device`
/// (decoding on all cores).
pub(crate) fn load_pixels(
    prep: &benchctl_models::preprocess::Preprocessor,
    images: &[&ImageSource],
    device: &Device,
) -> Result<Tensor> {
    let pixels: Vec<Vec<f32>> = images
        .par_iter()
        .map(|s| {
            let img = s.load_pil().map_err(Error::from)?;
            let (w, h) = img.dimensions();
            prep.check_input(w as usize, h as usize)
                .map_err(|e| Error::new(ErrorKind::Data, format!("preprocess image {}: {e}", s.display_name())))?;
            Ok(preprocess(prep, &img))
        })
        .collect::<Result<_>>()?;
    Tensor::from_vec(pixels.concat(), (images.len(), 3, prep.size, prep.size), &Device::Cpu)
        .and_then(|t| t.to_device(device))
        .map_err(|e| Error::new(ErrorKind::Compute, format!("stack an image batch: {e}")))
}

/// Every (image, text) pair a fusion model must score for a suite, each once, and where
/// each item's K×L pairs are.
pub(crate) struct PairTable {
    /// Unique pairs as (unique image index, unique text index).
    pub pairs: Vec<(usize, usize)>,
    /// Per item, row-major over K×L, the index into `pairs`.
    item_pairs: Vec<Vec<usize>>,
}

impl PairTable {
    fn of_items(suite: &Suite, image_slots: &[usize], text_slots: &[usize]) -> Self {
        let mut index: HashMap<(usize, usize), usize> = HashMap::new();
        let mut pairs = Vec::new();
        let mut item_pairs = Vec::with_capacity(suite.items.len());
        let (mut i0, mut t0) = (0, 0);
        for item in &suite.items {
            let (k, l) = (item.images.len(), item.texts.len());
            let mut these = Vec::with_capacity(k * l);
            for i in 0..k {
                for j in 0..l {
                    let pair = (image_slots[i0 + i], text_slots[t0 + j]);
                    these.push(*index.entry(pair).or_insert_with(|| {
                        pairs.push(pair);
                        pairs.len() - 1
                    }));
                }
            }
            item_pairs.push(these);
            i0 += k;
            t0 += l;
        }
        Self { pairs, item_pairs }
    }

    /// Each pair's cache key, from its image's and text's.
    fn keys(&self, image_keys: &[cache::Key], text_keys: &[cache::Key]) -> Vec<cache::Key> {
        self.pairs.iter().map(|&(i, t)| cache::key(&[b"pair", &image_keys[i], &text_keys[t]])).collect()
    }

    fn score_tensor(&self, suite: &Suite, values: &[f32], kind: benchctl_scoring::ScoreKind) -> Result<ScoreTensor> {
        let mut tensor = ScoreTensor::of_kind(kind);
        for (item, these) in suite.items.iter().zip(&self.item_pairs) {
            let scores: Vec<f32> = these.iter().map(|&p| values[p]).collect();
            tensor
                .push(item.images.len(), item.texts.len(), &scores)
                .map_err(|e| Error::new(ErrorKind::Compute, format!("score item {}: {e}", item.id)))?;
        }
        Ok(tensor)
    }
}

/// The unique inputs a fusion model pairs, and each pair's cache key.
pub(crate) struct PairInputs<'a> {
    pub images: &'a [&'a ImageSource],
    pub texts: &'a [&'a String],
    pub pair_keys: &'a [cache::Key],
}

/// A fusion model's score of every pair, through the cache (one value per pair, keyed by
/// both inputs' keys). Missing pairs are scored grouped by image: `batch` images are
/// encoded at a time, once each, and all their missing pairs scored in batches of `batch`.
pub(crate) fn score_pairs_through_cache(
    model: Option<&dyn FusionEncoder>,
    table: &PairTable,
    inputs: &PairInputs,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<Vec<f32>> {
    let PairInputs { images, texts, pair_keys } = *inputs;
    let mut values: Vec<Option<f32>> =
        pair_keys.iter().map(|k| cache.get(k).and_then(|v| v.first().copied())).collect();
    let mut todo_by_image: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (p, &(i, _)) in table.pairs.iter().enumerate() {
        if values[p].is_none() {
            todo_by_image.entry(i).or_default().push(p);
        }
    }
    counts.pairs_cached += values.iter().filter(|v| v.is_some()).count();
    let todo_images: Vec<usize> = todo_by_image.keys().copied().collect();
    let bar = progress(todo_by_image.values().map(Vec::len).sum(), "scoring pairs");
    let compute = |what: &str, e: candle_core::Error| Error::new(ErrorKind::Compute, format!("{what}: {e}"));
    for image_chunk in todo_images.chunks(batch.max(1)) {
        let model = model.ok_or_else(|| {
            Error::new(ErrorKind::Compute, "score a pair missing from the cache: the model was not loaded")
        })?;
        let sources: Vec<&ImageSource> = image_chunk.iter().map(|&i| images[i]).collect();
        let states = model.encode_images(&load_pixels(model.preprocessor(), &sources, model.device())?)?;
        counts.images_encoded += image_chunk.len();
        counts.image_batches += 1;
        let pairs: Vec<(usize, usize)> = image_chunk
            .iter()
            .enumerate()
            .flat_map(|(row, i)| todo_by_image[i].iter().map(move |&p| (row, p)))
            .collect();
        for chunk in pairs.chunks(batch.max(1)) {
            let rows: Vec<u32> = chunk.iter().map(|&(row, _)| row as u32).collect();
            let rows = Tensor::from_vec(rows, chunk.len(), model.device()).map_err(|e| compute("index pairs", e))?;
            let pair_states = states.index_select(&rows, 0).map_err(|e| compute("gather image states", e))?;
            let pair_texts: Vec<&str> = chunk.iter().map(|&(_, p)| texts[table.pairs[p].1].as_str()).collect();
            let scores = model
                .score_pairs(&pair_states, &pair_texts)?
                .to_dtype(DType::F32)
                .and_then(|s| s.to_vec1::<f32>())
                .map_err(|e| compute("read pair scores", e))?;
            cache
                .append(&chunk.iter().zip(&scores).map(|(&(_, p), &v)| (pair_keys[p], vec![v])).collect::<Vec<_>>())?;
            for (&(_, p), v) in chunk.iter().zip(scores) {
                values[p] = Some(v);
            }
            counts.pairs_scored += chunk.len();
            bar.inc(chunk.len() as u64);
        }
    }
    bar.finish_and_clear();
    values
        .into_iter()
        .map(|v| v.ok_or_else(|| Error::new(ErrorKind::Compute, "score pairs: a pair was neither cached nor scored")))
        .collect()
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
    fn model(&self) -> Result<&'a dyn DualEncoder> {
        self.model.ok_or_else(Self::not_loaded)
    }

    fn not_loaded() -> Error {
        Error::new(ErrorKind::Compute, "encode an input missing from the cache: the model was not loaded")
    }
}

/// L2-normalised embeddings of `images` (with their cache `keys`), in order, through the
/// cache; missing ones are decoded and preprocessed on all cores, then encoded in batches.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_images(
    encoder: Encoder,
    images: &[&ImageSource],
    keys: &[cache::Key],
    wanted: Option<&[bool]>,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<Tensor> {
    let (prep, device) = (encoder.model.map(|m| m.preprocessor().clone()), encoder.device);
    let prepare = |chunk: &[usize]| {
        let prep = prep.as_ref().ok_or_else(Encoder::not_loaded)?;
        let sources: Vec<&ImageSource> = chunk.iter().map(|&i| images[i]).collect();
        load_pixels(prep, &sources, device)
    };
    let encode = |pixels: Tensor| Ok(encoder.model()?.encode_images(&pixels)?);
    let (embeddings, tally) =
        encode_through_cache(encoder.device, keys, wanted, batch, cache, "image", prepare, encode)?;
    counts.images_cached += tally.cached;
    counts.images_encoded += tally.encoded;
    counts.image_batches += tally.batches;
    Ok(embeddings)
}

/// L2-normalised embeddings of `texts` (with their cache `keys`), in order, through the cache.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_texts(
    encoder: Encoder,
    texts: &[&String],
    keys: &[cache::Key],
    wanted: Option<&[bool]>,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<Tensor> {
    let prepare = |chunk: &[usize]| Ok(chunk.iter().map(|&i| texts[i].as_str()).collect::<Vec<&str>>());
    let encode = |refs: Vec<&str>| Ok(encoder.model()?.encode_texts(&refs)?);
    let (embeddings, tally) =
        encode_through_cache(encoder.device, keys, wanted, batch, cache, "text", prepare, encode)?;
    counts.texts_cached += tally.cached;
    counts.texts_encoded += tally.encoded;
    counts.text_batches += tally.batches;
    Ok(embeddings)
}

/// The K×L scores of every item, computed in batches of items with the same shape.
fn score_items(
    similarity: &Similarity,
    suite: &Suite,
    image_slots: &[usize],
    text_slots: &[usize],
    images: &Tensor,
    texts: &Tensor,
) -> Result<ScoreTensor> {
    let compute = |what: &str, e: candle_core::Error| Error::new(ErrorKind::Compute, format!("{what}: {e}"));
    // Where each item's image and text slots start.
    let mut image_start = Vec::with_capacity(suite.items.len());
    let mut text_start = Vec::with_capacity(suite.items.len());
    let (mut i, mut t) = (0, 0);
    for item in &suite.items {
        image_start.push(i);
        text_start.push(t);
        i += item.images.len();
        t += item.texts.len();
    }
    let mut by_shape: std::collections::BTreeMap<(usize, usize), Vec<usize>> = Default::default();
    for (n, item) in suite.items.iter().enumerate() {
        by_shape.entry((item.images.len(), item.texts.len())).or_default().push(n);
    }
    let mut per_item: Vec<Vec<f32>> = vec![Vec::new(); suite.items.len()];
    const ITEMS_PER_BATCH: usize = 4096;
    for ((k, l), members) in by_shape {
        for chunk in members.chunks(ITEMS_PER_BATCH) {
            let image_rows: Vec<u32> = chunk
                .iter()
                .flat_map(|&n| image_slots[image_start[n]..image_start[n] + k].iter().map(|&s| s as u32))
                .collect();
            let text_rows: Vec<u32> = chunk
                .iter()
                .flat_map(|&n| text_slots[text_start[n]..text_start[n] + l].iter().map(|&s| s as u32))
                .collect();
            let gather = |table: &Tensor, rows: Vec<u32>, per: usize| -> Result<Tensor> {
                let idx =
                    Tensor::from_vec(rows, (chunk.len() * per,), table.device()).map_err(|e| compute("index", e))?;
                table
                    .index_select(&idx, 0)
                    .and_then(|t| t.reshape((chunk.len(), per, ())))
                    .map_err(|e| compute("gather embeddings", e))
            };
            let scores = similarity.scores(&gather(images, image_rows, k)?, &gather(texts, text_rows, l)?)?;
            let values = scores
                .to_dtype(DType::F32)
                .and_then(|s| s.flatten_all())
                .and_then(|s| s.to_vec1::<f32>())
                .map_err(|e| compute("read scores", e))?;
            for (j, &n) in chunk.iter().enumerate() {
                per_item[n] = values[j * k * l..(j + 1) * k * l].to_vec();
            }
        }
    }
    let mut tensor = ScoreTensor::of_kind(similarity.kind());
    for (item, values) in suite.items.iter().zip(&per_item) {
        tensor
            .push(item.images.len(), item.texts.len(), values)
            .map_err(|e| Error::new(ErrorKind::Compute, format!("score item {}: {e}", item.id)))?;
    }
    Ok(tensor)
}

#[cfg(test)]
mod tests {
    use super::drop_odd_sized;

    #[test]
    fn cached_rows_of_the_wrong_size_become_misses() {
        let mut rows = vec![Some(vec![1.0; 4]), None, Some(vec![2.0; 3]), Some(vec![3.0; 4]), Some(vec![])];
        drop_odd_sized(&mut rows, "image");
        assert_eq!(rows, vec![Some(vec![1.0; 4]), None, None, Some(vec![3.0; 4]), None]);
        let mut none: Vec<Option<Vec<f32>>> = vec![None, None];
        drop_odd_sized(&mut none, "text");
        assert_eq!(none, vec![None, None]);
    }
}
