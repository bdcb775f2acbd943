//! The model of a run: `--model` / `--model-path` resolved into files, an architecture and a
//! score head ([`resolve_model`]), without reading weights; the weights read only when the
//! embedding cache lacks something (`ResolvedModel::load_unless_cached`); the
//! [`ModelRecord`] a run stores.

use benchctl_models::hub::{self, HubSettings, ModelFiles, Origin};
use benchctl_models::registry::{self, Architecture, LoadChoice, ScoreHead, TextPrep};
use benchctl_models::{Model, ScoreKind, Similarity};
use candle_core::{DType, Device};

use crate::cache::identity::{content_digest, EndpointIdentity, FileStamp, ModelIdentity};
use crate::cache::{self, CacheIdentity, EmbeddingCache, KeyTag, Keys};
use benchctl_models::vqascore::endpoint::{AnswerRule, Endpoint};
use benchctl_models::vqascore::reply::ReplyReading;

use crate::plan::{EndpointChoice, ModelChoice, ModelSource};
use crate::results::{EndpointRecord, ModelRecord, IMAGE_SETTINGS_DEFAULTS};
use crate::Result;
use benchctl_models::preprocess::ImageSettings;

/// A model resolved to its files and score head, with what identifies it in run records
/// and in the embedding cache; its weights are read only by [`ResolvedModel::load`].
pub struct ResolvedModel {
    backend: Backend,
    dtype: DType,
    device: Device,
    pub record: ModelRecord,
    /// Everything an embedding depends on besides its input: the embedding cache's namespace.
    pub cache_identity: CacheIdentity,
}

/// What computes the scores: model files run here, or a scoring server.
enum Backend {
    Local { files: Box<ModelFiles>, architecture: Architecture, choice: LoadChoice },
    Endpoint(Box<EndpointModel>),
}

/// A generative model behind a server, and how a run may use it.
pub struct EndpointModel {
    pub endpoint: Endpoint,
    /// Requests at once.
    pub in_flight: usize,
    /// The most pairs asked in one run.
    pub request_budget: Option<usize>,
}

/// A loaded model and what identifies it in run records.
pub struct LoadedModel {
    pub model: Model,
    pub record: ModelRecord,
    /// Seconds spent reading the weights (a run's `load_model_s`).
    pub load_s: f64,
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
    pub(crate) fn of(model: &Model) -> Head {
        match model {
            Model::Dual(encoder) => Head::Dual(encoder.similarity()),
            Model::Fusion(fusion) => Head::Fusion(fusion.score_kind()),
        }
    }

    /// The cache key of a dual encoder's or a fusion model's head.
    pub(crate) fn key(fusion: bool) -> cache::Key {
        if fusion {
            KeyTag::FusionScoreKind.key(&[])
        } else {
            KeyTag::SimilarityHead.key(&[])
        }
    }

    /// Its cache entry: the key and the values ([`Similarity::to_values`], or the kind's
    /// [`ScoreKind::code`]).
    pub(crate) fn entry(&self) -> (cache::Key, Vec<f32>) {
        match self {
            Head::Dual(similarity) => (Head::key(false), similarity.to_values().to_vec()),
            Head::Fusion(kind) => (Head::key(true), vec![kind.code()]),
        }
    }

    /// The head a cache holds for a dual encoder or a fusion model, if any.
    pub(crate) fn cached(cache: &EmbeddingCache, fusion: bool) -> Option<Head> {
        let values = cache.get(&Head::key(fusion))?;
        match (fusion, values.as_slice()) {
            (true, [code]) => ScoreKind::ALL.into_iter().find(|k| k.code() == *code).map(Head::Fusion),
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
            Some(root) if !no_cache => Ok(EmbeddingCache::open_for(&root, &self.cache_identity).unwrap_or_else(|e| {
                cache::warn_unwritable(&format!("failed to {e}; the run goes on without the embedding cache"));
                EmbeddingCache::disabled()
            })),
            _ => Ok(EmbeddingCache::disabled()),
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// How the model's tokenizer fits captions to its context (config and tokenizer only); a
    /// server's model is not known to cut any.
    pub fn caption_limit(&self) -> Result<registry::CaptionLimit> {
        match &self.backend {
            Backend::Local { files, architecture, choice } => Ok(architecture.caption_limit(files, choice.text_prep)?),
            Backend::Endpoint(_) => Ok(registry::CaptionLimit::unlimited()),
        }
    }

    /// The architecture of model files run here; `None` for a server.
    pub fn architecture(&self) -> Option<Architecture> {
        match &self.backend {
            Backend::Local { architecture, .. } => Some(*architecture),
            Backend::Endpoint(_) => None,
        }
    }

    /// Whether pairs are scored jointly (a fusion model, or a generative one).
    pub fn is_fusion(&self) -> bool {
        match &self.backend {
            Backend::Local { choice, .. } => choice.head.is_fusion(),
            Backend::Endpoint(_) => true,
        }
    }

    /// Whether it answers questions: a generative model scored by the log-probability of an
    /// answer (VQAScore, here or behind a server), which can score answer options.
    pub fn answers_questions(&self) -> bool {
        match &self.backend {
            Backend::Local { choice, .. } => choice.head == ScoreHead::Vqa,
            Backend::Endpoint(_) => true,
        }
    }

    /// Whether it scores by replies it generates (`--answer-rule generate`), which a run keeps.
    pub fn generates_replies(&self) -> bool {
        match &self.backend {
            Backend::Local { choice, .. } => choice.answer_rule == AnswerRule::Generate,
            Backend::Endpoint(server) => server.endpoint.settings().answer_rule == AnswerRule::Generate,
        }
    }

    /// The scoring server, for a model behind one.
    pub fn endpoint(&self) -> Option<&EndpointModel> {
        match &self.backend {
            Backend::Endpoint(endpoint) => Some(endpoint),
            Backend::Local { .. } => None,
        }
    }

    /// Reads the weights, and records the score head in `cache`.
    pub fn load(&self, cache: &mut EmbeddingCache) -> Result<LoadedModel> {
        let started = std::time::Instant::now();
        let Backend::Local { files, architecture, choice } = &self.backend else {
            return Err(crate::Error::new(
                crate::ErrorKind::Usage,
                "load the model: a scoring server's model has no weights here",
            ));
        };
        let model = architecture.load(*choice, files, self.dtype, &self.device)?;
        if self.record.image_settings.as_deref() == Some(IMAGE_SETTINGS_DEFAULTS) {
            let at = match &files.origin {
                Origin::Directory(dir) => dir.display().to_string(),
                Origin::Hub { repo, commit, .. } => format!("{repo}@{commit}"),
            };
            benchctl_base::stderr_line!(
                "note: {at} has no image settings ({}, or {}'s `image_processor`): {} applies {}'s defaults: {}",
                hub::PREPROCESSOR_FILE,
                hub::PROCESSOR_FILE,
                self.record.id,
                architecture.name(),
                model.preprocessor().describe()
            );
        }
        let (key, values) = Head::of(&model).entry();
        if cache.get(&key).as_deref() != Some(&values[..]) {
            cache.append(&[(key, &values)])?;
        }
        Ok(LoadedModel { model, record: self.record.clone(), load_s: started.elapsed().as_secs_f64() })
    }

    /// The score head, when `cache` holds it and every one of `needed` (embeddings for a dual
    /// encoder, pair scores for a fusion model), each list's entries of one size (an entry of
    /// another size is encoded again, see `drop_odd_sized`): then the run needs nothing from
    /// the weights.
    pub(crate) fn cached_head(&self, cache: &EmbeddingCache, needed: &[Needed]) -> Option<Head> {
        let head = Head::cached(cache, self.is_fusion())?;
        let complete = |&(keys, wanted): &Needed| {
            let mut sizes = keys.wanted(wanted).map(|k| cache.dim(&k));
            match sizes.next() {
                None => true,
                Some(None) => false,
                Some(Some(first)) => sizes.all(|size| size == Some(first)),
            }
        };
        needed.iter().all(complete).then_some(head)
    }

    /// [`ResolvedModel::load`] unless the cache makes it unnecessary: `(model, head)`, the
    /// model `None` exactly when [`ResolvedModel::cached_head`] finds everything.
    pub(crate) fn load_unless_cached(
        &self,
        cache: &mut EmbeddingCache,
        needed: &[Needed],
    ) -> Result<(Option<LoadedModel>, Head)> {
        if let Some(head) = self.cached_head(cache, needed) {
            return Ok((None, head));
        }
        let loaded = self.load(cache)?;
        let head = Head::of(&loaded.model);
        Ok((Some(loaded), head))
    }
}

/// Inputs a run needs from the cache: their keys, and which of them (all without a mask).
pub(crate) type Needed<'a> = (&'a Keys<'a>, Option<&'a [bool]>);

/// Resolves a zoo id or a model path to files, architecture and head, without reading the
/// weights; opens the device.
pub fn resolve_model(choice: &ModelChoice) -> Result<ResolvedModel> {
    let device = choice.device.open()?;
    let dtype = choice.dtype;
    let (files, architecture, id) = match &choice.source {
        ModelSource::Endpoint(endpoint) => return resolve_endpoint(endpoint, device),
        ModelSource::Zoo(id) => match registry::HubModelId::parse(id) {
            Some(hub_id) => {
                let hub_id = hub_id?;
                let (files, architecture) = registry::resolve_hub_model(&hub_id, &HubSettings::from_env())?;
                (files, architecture, hub_id.id())
            }
            None => {
                let entry = registry::find(id)?;
                let settings = HubSettings::from_env();
                let files = hub::from_hub_with(entry.repo, entry.revision, entry.architecture.layout(), &settings)?;
                (files, entry.architecture, entry.id.to_string())
            }
        },
        ModelSource::Path(dir) => {
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
    };
    let head = architecture.choose_head(choice.head.map(|h| h.name()))?;
    let text_prep = architecture.choose_text_prep(choice.text_prep)?;
    let max_patches = architecture.choose_max_patches(choice.max_patches)?;
    // Pixel bounds or a rule the model cannot take are a bad option (exit 2), not bad model files.
    let processor_pixels = architecture
        .choose_processor_pixels(choice.processor_pixels)
        .map_err(|e| crate::Error::caused_by(crate::ErrorKind::Usage, e.to_string(), e))?;
    let answer_rule = architecture
        .choose_answer_rule(choice.answer_rule)
        .map_err(|e| crate::Error::caused_by(crate::ErrorKind::Usage, e.to_string(), e))?;
    let generates = answer_rule == AnswerRule::Generate;
    let mut record = model_record(id, &files, dtype, &device);
    record.max_patches = max_patches;
    record.processor_pixels = processor_pixels.map(|b| [b.min, b.max]);
    // Recorded for generated replies only, so that earlier runs' records read the same.
    record.answer_rule = generates.then(|| answer_rule.name().to_string());
    record.reply_reading = generates.then(|| choice.reply_reading.name().to_string());
    record.score = Some(head.name().to_string());
    record.architecture = Some(architecture.name().to_string());
    // Recorded where it is not the default, so that earlier runs' records read the same.
    let transformers_prep = text_prep == TextPrep::Transformers;
    record.text_prep = transformers_prep.then(|| text_prep.name().to_string());
    if architecture.layout().image_settings {
        record.image_settings = Some(match ImageSettings::of(&files)? {
            Some(settings) => settings.source(),
            None => IMAGE_SETTINGS_DEFAULTS.to_string(),
        });
    }
    let cache_identity = CacheIdentity::Model(Box::new(ModelIdentity {
        output_version: benchctl_models::OUTPUT_VERSION,
        benchctl_version: env!("CARGO_PKG_VERSION").to_string(),
        model: record.id.clone(),
        repo: record.repo.clone(),
        commit: record.commit.clone(),
        weights: FileStamp::of(&files.weights),
        dtype: record.dtype.clone(),
        device: record.device.clone(),
        architecture: architecture.name().to_string(),
        head: head.name().to_string(),
        config: content_digest(&files.config),
        tokenizer: content_digest(&files.tokenizer),
        preprocessor: files.preprocessor.as_deref().and_then(content_digest),
        jpeg_decoder: benchctl_suites::image::JPEG_DECODER.to_string(),
        text_prep: record.text_prep.clone(),
        tokenizer_settings: (files.tokenizer_settings.as_deref())
            .filter(|_| transformers_prep || generates)
            .and_then(content_digest),
        max_patches,
        processor_pixels: record.processor_pixels,
        answer_rule: record.answer_rule.clone(),
        reply_reading: record.reply_reading.clone(),
        generation: match (&files.generation, generates) {
            (hub::GenerationFile::Found(path), true) => content_digest(path),
            _ => None,
        },
    }));
    let choice =
        LoadChoice { head, text_prep, max_patches, answer_rule, reply_reading: choice.reply_reading, processor_pixels };
    let backend = Backend::Local { files: Box::new(files), architecture, choice };
    Ok(ResolvedModel { backend, dtype, device, record, cache_identity })
}

/// A scoring server as a run's model: no files, its identity the server's URL, the served
/// model and the template (the answers' cache namespace), recorded in the run.
fn resolve_endpoint(choice: &EndpointChoice, device: Device) -> Result<ResolvedModel> {
    let endpoint = Endpoint::new(choice.settings.clone(), choice.template.clone())?;
    let settings = endpoint.settings();
    let template = endpoint.template();
    let record = ModelRecord {
        id: settings.served_model.clone(),
        repo: None,
        revision: None,
        commit: None,
        path: None,
        dtype: "-".into(),
        device: "server".into(),
        score: Some(VQASCORE_HEAD.into()),
        score_kind: None,
        external: None,
        endpoint: Some(EndpointRecord {
            url: endpoint.chat_url().to_string(),
            served_model: settings.served_model.clone(),
            question_template: template.question().to_string(),
            answer_template: template.answer().to_string(),
            top_logprobs: settings.top_logprobs,
            image_position: settings.image_position,
            answer_rule: settings.answer_rule,
            reply_reading: (settings.answer_rule == AnswerRule::Generate)
                .then(|| settings.reply_reading.name().to_string()),
        }),
        image_settings: None,
        text_prep: None,
        architecture: None,
        max_patches: None,
        processor_pixels: None,
        answer_rule: None,
        reply_reading: None,
    };
    let cache_identity = CacheIdentity::Endpoint(EndpointIdentity {
        url: endpoint.chat_url().to_string(),
        served_model: settings.served_model.clone(),
        question_template: template.question().to_string(),
        answer_template: template.answer().to_string(),
        top_logprobs: settings.top_logprobs,
        image_position: settings.image_position.name().to_string(),
        answer_rule: (settings.answer_rule != AnswerRule::Logprobs).then(|| settings.answer_rule.name().to_string()),
        reply_reading: (settings.answer_rule == AnswerRule::Generate
            && settings.reply_reading != ReplyReading::FirstFound)
            .then(|| settings.reply_reading.name().to_string()),
    });
    let model = EndpointModel { endpoint, in_flight: choice.in_flight, request_budget: choice.request_budget };
    Ok(ResolvedModel { backend: Backend::Endpoint(Box::new(model)), dtype: DType::F32, device, record, cache_identity })
}

/// The score head a scoring server's runs record: VQAScore, `log P("Yes")`.
pub const VQASCORE_HEAD: &str = "vqascore";

pub(crate) fn model_record(id: String, files: &ModelFiles, dtype: DType, device: &Device) -> ModelRecord {
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
        external: None,
        endpoint: None,
        image_settings: None,
        text_prep: None,
        architecture: None,
        max_patches: None,
        processor_pixels: None,
        answer_rule: None,
        reply_reading: None,
    }
}
