//! What `benchctl eval` is asked to do, typed: the first stage of a run. The binary's command
//! line and run specs ([`crate::config`]) build an [`EvalPlan`]; nothing after this stage
//! sees a flag or a string that still has to be parsed.

use std::path::{Path, PathBuf};

use benchctl_models::device::DeviceSpec;
use benchctl_models::preprocess::PixelBounds;
use benchctl_models::registry::{ScoreHead, TextPrep};
use benchctl_models::vqascore::reply::ReplyReading;
use benchctl_models::vqascore::AnswerRule;
use benchctl_scoring::metrics::Ties;
use benchctl_suites::rococo::altered::Method;
use benchctl_suites::SuiteInfo;
use candle_core::DType;

use crate::{Error, ErrorKind, Result};

/// One evaluation: a model on a suite, with the options of the run.
#[derive(Clone)]
pub struct EvalPlan {
    pub model: ModelChoice,
    pub suite: SuiteInfo,
    /// The suite's data, absolute (so `report` finds it from any directory).
    pub data_dir: PathBuf,
    pub options: EvalOptions,
}

impl EvalPlan {
    /// The plan of `model` on the suite `suite_id`, its data in `data_dir` (default
    /// `datasets/<suite>`).
    pub fn new(mut model: ModelChoice, suite_id: &str, data_dir: Option<&Path>, options: EvalOptions) -> Result<Self> {
        let suite = benchctl_suites::find(suite_id)?;
        // A generated reply is read as the suite's official code reads its replies.
        model.reply_reading = suite.reply_reading();
        if let ModelSource::Endpoint(endpoint) = &mut model.source {
            endpoint.settings.reply_reading = suite.reply_reading();
        }
        let data_dir = data_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| crate::fetch::default_data_dir(&suite, Path::new("datasets")));
        let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
        Ok(EvalPlan { model, suite, data_dir, options })
    }

    /// The model's name as the progress of a run spec shows it.
    pub fn model_name(&self) -> String {
        match &self.model.source {
            ModelSource::Zoo(id) => id.clone(),
            ModelSource::Path(path) => path.display().to_string(),
            ModelSource::Endpoint(endpoint) => {
                format!("{} at {}", endpoint.settings.served_model, endpoint.settings.url)
            }
        }
    }
}

/// Which model, and which of its score heads.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    pub source: ModelSource,
    /// `None`: the architecture's default head (ITM for BLIP and FIBER).
    pub head: Option<ScoreHead>,
    /// `None`: the authors' caption preparation (`--text-prep`).
    pub text_prep: Option<TextPrep>,
    /// `None`: the checkpoint's own patch budget (`--max-patches`, SigLIP 2 NaFlex).
    pub max_patches: Option<usize>,
    /// `None`: images prepared as `qwen_vl_utils` resizes them, with no second resize by the
    /// image processor (`--min-pixels`, `--max-pixels`; Qwen2.5-VL, Qwen3-VL).
    pub processor_pixels: Option<PixelBounds>,
    /// How a generative model run here gives its score (`--answer-rule`; a server's is in its
    /// settings).
    pub answer_rule: AnswerRule,
    /// How its generated replies are read: the suite's official rule, set by [`EvalPlan::new`].
    pub reply_reading: ReplyReading,
    pub device: DeviceSpec,
    pub dtype: DType,
}

/// A caption preparation by name (`--text-prep`, a run spec's `text_prep`); whether the model
/// offers it is checked when the model is resolved.
pub fn text_prep(name: Option<&str>) -> Result<Option<TextPrep>> {
    let Some(name) = name else { return Ok(None) };
    TextPrep::parse(name).map(Some).ok_or_else(|| {
        Error::new(ErrorKind::Usage, format!("use --text-prep {name}: the preparations are authors and transformers"))
    })
}

/// The image processor's pixel bounds (`--min-pixels` and `--max-pixels`, a run spec's
/// `min_pixels` and `max_pixels`): both or neither; whether the model has them is checked when
/// the model is resolved.
pub fn pixel_bounds(min: Option<usize>, max: Option<usize>) -> Result<Option<PixelBounds>> {
    match (min, max) {
        (None, None) => Ok(None),
        (Some(min), Some(max)) => Ok(Some(PixelBounds { min, max })),
        _ => Err(Error::new(
            ErrorKind::Usage,
            "use --min-pixels and --max-pixels: give both (the image processor's bounds)",
        )),
    }
}

/// A score head by name (`--score`, a run spec's `score`); whether the model has it is
/// checked when the model is resolved.
pub fn score_head(name: Option<&str>) -> Result<Option<ScoreHead>> {
    let Some(name) = name else { return Ok(None) };
    match ScoreHead::parse(name) {
        Some(head) => Ok(Some(head)),
        None => Err(Error::new(
            ErrorKind::Usage,
            format!(
                "use --score {name}: the score heads are contrastive, sigmoid, itm and itc (see `benchctl models`)"
            ),
        )),
    }
}

/// Where a model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A zoo id, resolved through the Hugging Face hub cache.
    Zoo(String),
    /// A model directory, or a FIBER checkpoint file.
    Path(PathBuf),
    /// A generative model behind an OpenAI-compatible server, scored by VQAScore.
    Endpoint(EndpointChoice),
}

/// A scoring server as the command line (`--endpoint`, `--served-model`, …) or a run spec's
/// `endpoints` entry names it, with the same defaults.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    /// The server's OpenAI base URL (`http://host:8000/v1`).
    pub url: String,
    pub served_model: String,
    /// The environment variable holding the API key.
    #[serde(default = "EndpointSpec::default_api_key_env")]
    pub api_key_env: String,
    #[serde(default = "EndpointSpec::default_max_in_flight")]
    pub max_in_flight: usize,
    #[serde(default)]
    pub request_budget: Option<usize>,
    #[serde(default = "EndpointSpec::default_retries")]
    pub retries: u32,
    /// Seconds to wait for one answer.
    #[serde(default = "EndpointSpec::default_request_timeout")]
    pub request_timeout: u64,
    #[serde(default = "EndpointSpec::default_top_logprobs")]
    pub top_logprobs: u32,
    #[serde(default = "EndpointSpec::default_question")]
    pub question_template: String,
    #[serde(default = "EndpointSpec::default_answer")]
    pub answer_template: String,
    /// Where the image goes in the request: after the question (`t2v_metrics`' API models) or
    /// before it (its local models, and the checkpoints' own chat templates).
    #[serde(default)]
    pub image_position: benchctl_models::vqascore::endpoint::ImagePosition,
    /// How an answer is read: `logprobs` (its log-probability) or `generate` (a reply searched
    /// for it, as NaturalBench's official code reads replies).
    #[serde(default)]
    pub answer_rule: benchctl_models::vqascore::endpoint::AnswerRule,
}

impl EndpointSpec {
    pub fn default_api_key_env() -> String {
        "OPENAI_API_KEY".into()
    }
    pub fn default_max_in_flight() -> usize {
        8
    }
    pub fn default_retries() -> u32 {
        5
    }
    pub fn default_request_timeout() -> u64 {
        300
    }
    pub fn default_top_logprobs() -> u32 {
        2
    }
    pub fn default_question() -> String {
        benchctl_models::vqascore::Template::T2V_METRICS.0.into()
    }
    pub fn default_answer() -> String {
        benchctl_models::vqascore::Template::T2V_METRICS.1.into()
    }

    /// The server to ask, its API key read from its variable; out-of-range settings and a
    /// template without its `{}` are usage errors.
    pub fn choice(&self) -> Result<EndpointChoice> {
        use benchctl_models::vqascore::{endpoint::EndpointSettings, Template};
        let usage = |what: String| Error::new(ErrorKind::Usage, format!("use the endpoint {}: {what}", self.url));
        if !(1..=1024).contains(&self.max_in_flight) {
            return Err(usage(format!("max_in_flight {} is not 1 to 1024", self.max_in_flight)));
        }
        if !(1..=20).contains(&self.top_logprobs) {
            return Err(usage(format!("top_logprobs {} is not 1 to 20", self.top_logprobs)));
        }
        if self.request_timeout == 0 {
            return Err(usage("request_timeout must be at least 1 second".into()));
        }
        let mut settings = EndpointSettings::new(&self.url, &self.served_model);
        settings.api_key = std::env::var(&self.api_key_env).ok().filter(|k| !k.is_empty());
        settings.top_logprobs = self.top_logprobs;
        settings.retries = self.retries;
        settings.request_timeout = std::time::Duration::from_secs(self.request_timeout);
        settings.image_position = self.image_position;
        settings.answer_rule = self.answer_rule;
        let template = Template::new(&self.question_template, &self.answer_template)
            .map_err(|e| Error::caused_by(ErrorKind::Usage, e.to_string(), e))?;
        Ok(EndpointChoice { settings, template, in_flight: self.max_in_flight, request_budget: self.request_budget })
    }
}

/// A scoring server and how to ask it (`--endpoint`, `--served-model`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointChoice {
    /// URL, served model, API key (read from its variable at the edge), retries, timeouts.
    pub settings: benchctl_models::vqascore::endpoint::EndpointSettings,
    pub template: benchctl_models::vqascore::Template,
    /// Requests sent at once.
    pub in_flight: usize,
    /// The most pairs asked in one run; the rest wait for the next run (the answers are
    /// cached). `None`: no limit.
    pub request_budget: Option<usize>,
}

/// Everything of a run besides its model, suite and data.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Images or texts per forward pass.
    pub batch_size: usize,
    /// Where the run is stored.
    pub results_dir: PathBuf,
    /// Read and fill the embedding cache (`--no-cache` turns it off).
    pub use_cache: bool,
    /// Read images a symbolic link in the data directory leads out of it to.
    pub allow_outside_links: bool,
    pub long_captions: LongCaptions,
    /// How a tie for the top score counts (checked against the suite's official scorer);
    /// `None`: the suite's official rule for the model's answers ([`crate::evaluate::run`]).
    pub ties: Option<Ties>,
    /// What the bootstrap resamples.
    pub bootstrap: BootstrapUnit,
    pub shard: Option<Shard>,
    pub retrieval: RetrievalOptions,
}

/// What a run's bootstrap resamples (`--bootstrap`; in run files, `bootstrap.unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BootstrapUnit {
    /// Whole clusters of items made together, where the suite's items cluster (the default).
    #[default]
    Clusters,
    /// Items one by one, as published intervals are usually made.
    Items,
}

impl BootstrapUnit {
    /// The suite's summary with this unit: items drop the cluster rule.
    pub fn apply(self, summary: &mut benchctl_scoring::metrics::Summary) {
        if self == BootstrapUnit::Items {
            summary.clusters = None;
        }
    }
}

/// What a caption longer than the model's text context does to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongCaptions {
    /// Cut as the reference pipelines do; the run counts them.
    Truncate,
    /// Refuse the run, naming the first.
    Refuse,
}

/// Slice `index` of `count` of an item suite (contiguous item ranges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// `i/n` with `i < n`, as `--shard` takes it and a run file records it.
    pub fn parse(text: &str) -> std::result::Result<Shard, ShardError> {
        let (i, n) = text.split_once('/').ok_or(ShardError::NotASlash)?;
        let index = i.trim().parse().map_err(|_| ShardError::NotANumber("i"))?;
        let count = n.trim().parse().map_err(|_| ShardError::NotANumber("n"))?;
        if count == 0 || index >= count {
            return Err(ShardError::OutOfRange { index, count });
        }
        Ok(Shard { index, count })
    }
}

/// What is wrong with a shard's `i/n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardError {
    NotASlash,
    NotANumber(&'static str),
    OutOfRange { index: usize, count: usize },
}

impl std::fmt::Display for ShardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShardError::NotASlash => f.write_str("expected i/n, e.g. 0/4"),
            ShardError::NotANumber(which) => write!(f, "{which} is not a number"),
            ShardError::OutOfRange { index, count } => write!(f, "shard {index}/{count}: need 0 ≤ i < n"),
        }
    }
}

impl std::error::Error for ShardError {}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Retrieval suites (RoCOCO): how the altered galleries and captions are made, and the
/// re-ranking of a fusion model.
#[derive(Debug, Clone)]
pub struct RetrievalOptions {
    pub methods: Vec<Method>,
    /// The share of the original image kept, in thousandths.
    pub lambdas: Vec<u16>,
    pub altered: AlteredImages,
    pub caption_normalisation: CaptionNormalisation,
    /// Seeds of generated altered galleries; results are averaged over them.
    pub seeds: Vec<u64>,
    /// Candidates per query a fusion model re-ranks.
    pub rerank_k: usize,
    /// The contrastive model that shortlists them, when not the fusion model's own head (a
    /// generative model has none).
    pub shortlist: Option<ModelSource>,
}

/// Where RoCOCO's visually altered images come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlteredImages {
    /// The release folders `mix_images.py` writes where they exist, else generated.
    Auto,
    /// The release folders, required.
    Release,
    /// Always generated in process (seeded).
    Generate,
}

/// RoCOCO's caption normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptionNormalisation {
    /// BLIP's `pre_caption` for a BLIP model, nothing otherwise.
    Auto,
    None,
    Blip,
}

#[cfg(test)]
mod tests {
    use super::{Shard, ShardError};

    #[test]
    fn shards_parse_and_print_as_written() {
        assert_eq!(Shard::parse(" 2/5").map(|s| s.to_string()), Ok("2/5".to_string()));
        assert_eq!(Shard::parse("5/5"), Err(ShardError::OutOfRange { index: 5, count: 5 }));
        assert_eq!(Shard::parse("1/0"), Err(ShardError::OutOfRange { index: 1, count: 0 }));
        assert_eq!(Shard::parse("x/2"), Err(ShardError::NotANumber("i")));
        assert_eq!(Shard::parse("3"), Err(ShardError::NotASlash));
    }
}
