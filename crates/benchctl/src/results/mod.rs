//! Stored runs: `results/runs/<stamp>_<model>_<suite>.json` (the run) and
//! `….scores.jsonl` (one line per item: its id and K×L scores), from which every metric
//! can be recomputed without the model.

use benchctl_scoring::metrics::stats::Interval;
use benchctl_scoring::Report;
use serde::{Deserialize, Serialize};

use crate::{Error, ErrorKind, Result};

mod files;
mod fingerprint;
mod intervals;
pub use files::*;
pub use fingerprint::{fingerprint, image_fingerprint};
pub use intervals::BootstrapRecord;
use intervals::{intervals_from_json, intervals_json};

/// Version of the run file layout.
pub const SCHEMA: u32 = 1;

/// One evaluation of one model on one suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub started_at: String,
    pub model: ModelRecord,
    pub suite: SuiteRecord,
    pub batch_size: usize,
    pub counts: Counts,
    pub timings: Timings,
    pub report: Report,
    /// Bootstrap 95 % intervals of the headline metrics (empty for retrieval suites).
    pub intervals: Vec<Interval>,
    /// How the intervals were drawn (items or clusters); `None` in older run files and for
    /// retrieval suites.
    pub bootstrap: Option<BootstrapRecord>,
    /// The benchctl build's git commit (`unknown` outside a checkout).
    pub tool_commit: String,
    /// SHA-256 of the suite's annotation files and image list ([`crate::results::fingerprint`]).
    pub data_fingerprint: String,
    /// SHA-256 of the content of every image the run scored, in item order
    /// ([`crate::results::image_fingerprint`]): two runs with equal annotations but different
    /// image bytes differ here. Empty in older run files.
    pub image_fingerprint: String,
    /// `i/n` for a shard's run.
    pub shard: Option<String>,
}

/// What makes two runs comparable for the regression gate: the same model (zoo id, or
/// external name), score head, dtype, suite and tie rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunIdentity {
    pub model: String,
    /// An external model's run (`benchctl score --model-name`), never the zoo model of that name.
    pub external: bool,
    pub head: Option<String>,
    /// The caption preparation where it is not the authors'.
    pub text_prep: Option<String>,
    pub dtype: String,
    pub suite: String,
    pub ties: String,
    /// `generate` where the answers were generated replies (here or by a server), not
    /// log-probabilities: another rule, so never the other's baseline.
    pub answer_rule: Option<String>,
    /// How images were sized where a run chose it ([`ModelRecord::image_choice`]): another
    /// preparation, so never the other's baseline.
    pub images: Option<String>,
}

impl std::fmt::Display for RunIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{} [head {}{}{}{}, {}] on {} (ties {})",
            self.model,
            if self.external { " (external)" } else { "" },
            self.head.as_deref().unwrap_or("-"),
            self.text_prep.as_deref().map(|p| format!(", {p} captions")).unwrap_or_default(),
            self.images.as_deref().map(|i| format!(", images {i}")).unwrap_or_default(),
            self.answer_rule.as_deref().map(|r| format!(", answers by {r}")).unwrap_or_default(),
            self.dtype,
            self.suite,
            self.ties
        )
    }
}

/// The git commit benchctl was built from.
pub const TOOL_COMMIT: &str = env!("BENCHCTL_GIT_COMMIT");

/// Resamples and seed of every run's bootstrap intervals.
pub const BOOTSTRAP_RESAMPLES: usize = 1000;
pub const BOOTSTRAP_SEED: u64 = 0;

impl ModelRecord {
    /// How the run sized images where it chose to (`--max-patches`, `--min-pixels` and
    /// `--max-pixels`): `576 patches`, `200704–1003520 pixels`; `None` for the checkpoint's
    /// own sizing.
    pub fn image_choice(&self) -> Option<String> {
        let patches = self.max_patches.map(|n| format!("{n} patches"));
        let pixels = self.processor_pixels.map(|[min, max]| format!("{min}–{max} pixels"));
        let both: Vec<String> = patches.into_iter().chain(pixels).collect();
        (!both.is_empty()).then(|| both.join(", "))
    }

    /// What the recorded score head yields: probabilities for SigLIP's sigmoid and ITM.
    pub fn score_kind(&self) -> benchctl_scoring::ScoreKind {
        if let Some(kind) = self.score_kind.as_deref().and_then(benchctl_scoring::ScoreKind::from_name) {
            return kind;
        }
        // Run files written before the kind was recorded held probabilities for these heads.
        match self.score.as_deref() {
            Some("sigmoid" | "itm") => benchctl_scoring::ScoreKind::Probability,
            _ => benchctl_scoring::ScoreKind::Similarity,
        }
    }
}

/// Which model ran: zoo id with hub repo, revision and resolved commit, or a local path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub id: String,
    pub repo: Option<String>,
    pub revision: Option<String>,
    pub commit: Option<String>,
    pub path: Option<String>,
    pub dtype: String,
    pub device: String,
    /// The score head (`contrastive`, `sigmoid`, `itm`, `itc`); absent in older run files.
    #[serde(default)]
    pub score: Option<String>,
    /// What the stored scores are (`similarity`, `probability`, `logit`): SigLIP's and BLIP
    /// ITM's are logits of their match probabilities. Absent in older run files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score_kind: Option<String>,
    /// A model scored outside benchctl (`benchctl score --model-name`): `id` is the name its
    /// user gave, and the scores came from a file. Absent for the zoo's and local models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalModel>,
    /// A generative model behind a scoring server (`eval --endpoint`): `id` is the served
    /// model's name. Absent for models run here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointRecord>,
    /// Where a `transformers`-layout model's image settings came from:
    /// `preprocessor_config.json`, `processor_config.json:image_processor`, or
    /// [`IMAGE_SETTINGS_DEFAULTS`] where the checkpoint has neither. Absent for layouts whose
    /// preprocessing is fixed (OpenCLIP, FIBER), servers, and older run files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_settings: Option<String>,
    /// The caption preparation (`--text-prep`) where it is not the authors': `transformers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_prep: Option<String>,
    /// The architecture benchctl ran the files as (`siglip2-naflex`, `clip`, …): what their
    /// config named and the code that produced the scores. Absent for servers, external models
    /// and older run files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// The image processor's patch budget where a run set it (`--max-patches`); absent
    /// otherwise (the checkpoint's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_patches: Option<usize>,
    /// The image processor's pixel bounds after `qwen_vl_utils`' resize, `[min, max]`, where a
    /// run set them (`--min-pixels`, `--max-pixels`); absent otherwise (no second resize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processor_pixels: Option<[usize; 2]>,
    /// `generate` where a generative model run here scored by replies it generated
    /// (`--answer-rule generate`), and how they were read (`first-found`, `label-in-reply`);
    /// absent for scoring by log-probabilities (a server's are in `endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_reading: Option<String>,
}

/// [`ModelRecord::image_settings`] of a checkpoint without image settings.
pub const IMAGE_SETTINGS_DEFAULTS: &str = "architecture defaults";

/// The server a generative model was asked through, and how: what its VQAScores rest on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRecord {
    /// The chat-completions URL.
    pub url: String,
    pub served_model: String,
    pub question_template: String,
    pub answer_template: String,
    pub top_logprobs: u32,
    /// Where the image went in each request (absent from older records: after the question).
    #[serde(default)]
    pub image_position: benchctl_models::vqascore::endpoint::ImagePosition,
    /// How each answer was read (absent from older records: its log-probability).
    #[serde(default)]
    pub answer_rule: benchctl_models::vqascore::endpoint::AnswerRule,
    /// How each generated reply was read (`first-found`, `label-in-reply`); only when
    /// `answer_rule` is `generate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_reading: Option<String>,
}

/// Where an external model's run came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalModel {
    /// One line on the model and how it was run (`--model-description`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where the model or its scores are published (`--model-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The score file as given, and the SHA-256 of its bytes: what the run's numbers rest on.
    pub scores_file: String,
    pub scores_sha256: String,
    /// Its layout (`dump`, `winoground-jsonl`, `eqben-npy`, `rococo-dump`).
    pub scores_format: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteRecord {
    pub id: String,
    pub data_dir: String,
    pub items: usize,
    /// How ties for the top score were counted: `strict` or `first` (`--ties`).
    #[serde(default = "strict")]
    pub ties: String,
    /// How the data falls short of the complete official release (a partial release
    /// evaluates, and says so here); empty when complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete: Vec<String>,
    /// RoCOCO: where the visually altered images came from (the release's `mix_images.py`
    /// folders, or generated by benchctl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub altered_images: Option<String>,
    /// How captions were normalised before encoding (`blip`: BLIP's `pre_caption`), if at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption_normalisation: Option<String>,
    /// The manifest file the suite was read from (absent for built-in suites and bundled
    /// manifests, found by id): later commands (`report`, `merge`, `compare`) read it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// RoCOCO: the contrastive model a fusion or generative one re-ranked (`--shortlist-model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortlist: Option<String>,
    /// The hub dataset repo and commit the data came from (a hub cache snapshot, or a data
    /// directory `benchctl fetch` filled); part of the data fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<benchctl_suites::hub::HubOrigin>,
}

impl SuiteRecord {
    /// The record of an item suite as loaded (its ties as its summary counts them).
    pub fn of(suite: &benchctl_suites::Suite) -> Self {
        SuiteRecord {
            id: suite.id.to_string(),
            data_dir: suite.data_dir.display().to_string(),
            items: suite.items.len(),
            ties: suite.summary.ties.name().to_string(),
            incomplete: suite.incomplete.clone(),
            altered_images: None,
            caption_normalisation: None,
            manifest: suite.manifest.as_ref().and_then(|m| m.path.as_ref()).map(|p| p.display().to_string()),
            shortlist: None,
            hub: benchctl_suites::hub::HubOrigin::of(&suite.data_dir),
        }
    }

    /// The suite this run was on: a built-in suite or bundled manifest by id, else the
    /// manifest file it was read from.
    pub fn info(&self) -> Result<benchctl_suites::SuiteInfo> {
        Ok(benchctl_suites::find(self.manifest.as_deref().unwrap_or(&self.id))?)
    }
}

fn strict() -> String {
    "strict".into()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub load_model_s: f64,
    pub encode_images_s: f64,
    pub encode_texts_s: f64,
    pub score_s: f64,
    pub total_s: f64,
}

impl Timings {
    /// Adds another run's times (shards run one after another or side by side: their sum is
    /// the compute spent).
    pub fn add(&mut self, other: &Timings) {
        self.load_model_s += other.load_model_s;
        self.encode_images_s += other.encode_images_s;
        self.encode_texts_s += other.encode_texts_s;
        self.score_s += other.score_s;
        self.total_s += other.total_s;
    }
}

/// A run file as written: [`Run`]'s fields in the file's layout (the tool and the options
/// grouped, the report and intervals in their own JSON forms).
#[derive(Serialize, Deserialize)]
struct RunFileLayout {
    schema: u32,
    #[serde(default)]
    tool: Tool,
    started_at: String,
    model: ModelRecord,
    suite: SuiteRecord,
    #[serde(default)]
    data_fingerprint: String,
    /// Absent in older run files.
    #[serde(default)]
    image_fingerprint: String,
    #[serde(default)]
    options: RunOptions,
    counts: Counts,
    timings: Timings,
    report: serde_json::Value,
    #[serde(default)]
    intervals: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bootstrap: Option<BootstrapRecord>,
}

/// The tool that wrote a run file; any part may be missing from an older one.
#[derive(Serialize, Deserialize)]
#[serde(default)]
struct Tool {
    name: String,
    version: String,
    commit: String,
}

impl Default for Tool {
    fn default() -> Self {
        Tool { name: "benchctl".into(), version: String::new(), commit: "unknown".into() }
    }
}

#[derive(Default, Serialize, Deserialize)]
struct RunOptions {
    #[serde(default)]
    batch_size: usize,
    #[serde(default)]
    shard: Option<String>,
}

impl Run {
    pub fn to_json(&self) -> serde_json::Value {
        let file = RunFileLayout {
            schema: SCHEMA,
            tool: Tool {
                name: "benchctl".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                commit: self.tool_commit.clone(),
            },
            started_at: self.started_at.clone(),
            model: self.model.clone(),
            suite: self.suite.clone(),
            data_fingerprint: self.data_fingerprint.clone(),
            image_fingerprint: self.image_fingerprint.clone(),
            options: RunOptions { batch_size: self.batch_size, shard: self.shard.clone() },
            counts: self.counts.clone(),
            timings: self.timings.clone(),
            report: self.report.to_json(),
            intervals: intervals_json(&self.intervals),
            bootstrap: self.bootstrap.clone(),
        };
        // Every field is plain data (strings, numbers, maps with string keys): it serialises.
        serde_json::to_value(file).unwrap_or_default()
    }

    /// Reads a run file's JSON; the error names the key, not the file (callers add it).
    pub fn from_json(v: &serde_json::Value) -> Result<Self> {
        let bad = |what: String| Error::bad_results(what);
        let schema = v.get("schema").ok_or_else(|| bad("missing key `schema`".into()))?;
        let schema = schema.as_u64().ok_or_else(|| bad("`schema` is not a number".into()))?;
        if schema != SCHEMA as u64 {
            return Err(bad(format!("schema {schema} is not supported (expected {SCHEMA})")));
        }
        // The error names the key where reading stopped (`counts.items`, `model`).
        let file: RunFileLayout = serde_path_to_error::deserialize(v.clone()).map_err(|e| {
            let message = format!("key `{}`: {}", e.path(), e.inner());
            Error::caused_by(ErrorKind::BadResults, message, e.into_inner())
        })?;
        let report = Report::from_json(&file.report).ok_or_else(|| bad("key `report` is malformed".into()))?;
        Ok(Run {
            started_at: file.started_at,
            model: file.model,
            suite: file.suite,
            batch_size: file.options.batch_size,
            counts: file.counts,
            timings: file.timings,
            intervals: intervals_from_json(Some(&file.intervals), &report, file.bootstrap.as_ref())?,
            bootstrap: file.bootstrap,
            report,
            tool_commit: file.tool.commit,
            data_fingerprint: file.data_fingerprint,
            image_fingerprint: file.image_fingerprint,
            shard: file.options.shard,
        })
    }

    /// The model's name in tables: its id, and the score head for models with several
    /// (BLIP's ITM and ITC are different entries).
    pub fn label(&self) -> String {
        if self.model.external.is_some() {
            return format!("{} (external)", self.model.id);
        }
        let replies = if self.answer_rule().is_some() { " (generated replies)" } else { "" };
        if self.model.endpoint.is_some() {
            return format!("{} (server){replies}", self.model.id);
        }
        let mut base = match self.model.score.as_deref() {
            Some(head @ ("itm" | "itc")) => format!("{} ({head})", self.model.id),
            _ => self.model.id.clone(),
        };
        if let Some(images) = self.model.image_choice() {
            base = format!("{base} ({images})");
        }
        match &self.model.text_prep {
            Some(prep) => format!("{base} ({prep} captions){replies}"),
            None => format!("{base}{replies}"),
        }
    }

    /// `generate` where the run's answers were generated replies, here or by a server.
    pub fn answer_rule(&self) -> Option<String> {
        let server = self.model.endpoint.as_ref().map(|e| e.answer_rule);
        match server {
            Some(benchctl_models::vqascore::AnswerRule::Generate) => Some("generate".to_string()),
            Some(_) => None,
            None => self.model.answer_rule.clone(),
        }
    }

    /// The score's family: `contrastive` (two embeddings: CLIP, SigLIP, ITC), `matching` (an
    /// ITM head over each pair), `generative` (VQAScore's "Yes"), or `external`.
    pub fn score_family(&self) -> &'static str {
        if self.model.external.is_some() {
            return "external";
        }
        match self.model.score.as_deref() {
            Some("itm") => "matching",
            Some("vqascore") => "generative",
            _ => "contrastive",
        }
    }

    /// What a run is a run of, for the regression gate: model, score head, dtype, suite and tie
    /// rule. Runs of one identity are comparable; a shard's run is part of one (see
    /// [`Run::is_complete`]).
    pub fn identity(&self) -> RunIdentity {
        RunIdentity {
            model: self.model.id.clone(),
            external: self.model.external.is_some(),
            head: self.model.score.clone(),
            text_prep: self.model.text_prep.clone(),
            dtype: self.model.dtype.clone(),
            suite: self.suite.id.clone(),
            ties: self.suite.ties.clone(),
            answer_rule: self.answer_rule(),
            images: self.model.image_choice(),
        }
    }

    /// Whether the run covers its whole suite: unsharded, or the merge of a complete set of
    /// shards (a single shard's run covers a slice and is never gated).
    pub fn is_complete(&self) -> bool {
        self.shard.is_none()
    }

    /// The interval of a headline metric.
    pub fn interval(&self, metric: &str) -> Option<&Interval> {
        self.intervals.iter().find(|i| i.metric == metric)
    }
}

/// Forward-pass counts of one run: each unique input is encoded at most once, and not at
/// all when the embedding cache has it. The counters after `text_batches` are absent from
/// older run files (read as 0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub unique_images: usize,
    pub unique_texts: usize,
    pub images_encoded: usize,
    pub image_batches: usize,
    pub texts_encoded: usize,
    pub text_batches: usize,
    #[serde(default)]
    pub images_cached: usize,
    #[serde(default)]
    pub texts_cached: usize,
    /// Fusion models: (image, text) pairs scored by a forward pass, and taken from the cache.
    #[serde(default)]
    pub pairs_scored: usize,
    #[serde(default)]
    pub pairs_cached: usize,
    /// Unique captions longer than the model's text context, cut by its tokenizer, and that
    /// context in tokens (special tokens included).
    #[serde(default)]
    pub captions_truncated: usize,
    #[serde(default)]
    pub text_context: usize,
    /// Images whose bytes were read to key them: files, and images inside an annotation file,
    /// not known to the memo by path (and cell), size and mtime.
    #[serde(default)]
    pub images_hashed: usize,
    /// Images decoded (from files or from the bytes inside an annotation file): none in a run
    /// whose images the embedding cache holds.
    #[serde(default)]
    pub images_decoded: usize,
    /// A scoring server: requests made (retries included), and answers whose top
    /// log-probabilities held neither "Yes" nor "No" (scored as probability 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requests: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub answers_without_yes_or_no: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
        self.images_decoded += other.images_decoded;
    }
}
