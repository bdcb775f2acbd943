//! The command line (the binary's own module: no library module sees these types). Each
//! subcommand's arguments become the typed plan of the library module that runs it
//! ([`EvalArgs::plan`], `From<…Args>` for the others), as ripgrep turns its low-level
//! arguments into high-level ones.

use std::path::PathBuf;

use benchctl::plan::{
    AlteredImages, CaptionNormalisation, EvalOptions, EvalPlan, LongCaptions, ModelSource, RetrievalOptions, Shard,
};
use benchctl::{check, fetch, merge, report, score, Error, ErrorKind, Result};
use benchctl_models::device::DeviceSpec;
use benchctl_models::vqascore::endpoint::{AnswerRule, ImagePosition};
use clap::{Args, Parser, Subcommand, ValueEnum};

mod bench_args;
mod gate;
mod values;

pub use bench_args::BenchArgs;
pub use gate::{CompareArgs, PowerArgs};
pub use values::*;

#[derive(Debug, Parser)]
#[command(name = "benchctl", version, about = "Evaluate vision-language models on fine-grained image-text benchmarks")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Keep every table row on one line, however wide (by default tables wrap to the
    /// terminal's width, or to COLUMNS where that is set).
    #[arg(long, global = true)]
    pub wide: bool,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum Command {
    /// Evaluate a model on a suite and store the run under the results directory.
    ///
    /// The run goes into the results store (`<results-dir>/benchctl.sqlite`) and is written as
    /// `<results-dir>/runs/<time>_<model>_<suite>.json`, its per-item scores beside it in
    /// `….scores.jsonl` (one line per item: its id and its K×L scores, rows = images; RoCOCO:
    /// one line per query and gallery), from which `benchctl score` recomputes every metric.
    Eval(EvalArgs),
    /// Compute a suite's metrics from scores produced elsewhere (no model needed).
    Score(ScoreArgs),
    /// Write a stored run's failure browser: one HTML page of every item, its scores and outcome.
    Report(ReportArgs),
    /// Download a suite's data from its Hugging Face dataset repo, or say how to get it.
    Fetch(FetchArgs),
    /// Validate a suite's data: every problem at once, non-zero exit when any.
    Check(CheckArgs),
    /// Regenerate LEADERBOARD.md from the stored runs.
    Leaderboard(LeaderboardArgs),
    /// Compare runs with a baseline; exits 6 when a metric drops beyond the tolerance.
    Compare(CompareArgs),
    /// How many items (or seeds) the gate needs to find a drop of a given size on a suite.
    Power(PowerArgs),
    /// Combine the shard runs of one evaluation (`eval --shard i/n`) into one run.
    Merge(MergeArgs),
    /// Measure encoder throughput on random weights of a model's architecture.
    Bench(BenchArgs),
    /// Convert a PyTorch checkpoint (a Lightning `.ckpt` such as FIBER's) to safetensors once.
    Convert(ConvertArgs),
    /// List the models of the zoo.
    Models,
    /// List the suites benchctl can load, and what this machine has of each one's data.
    Suites(SuitesArgs),
}

/// Which model to run: a zoo id or a local directory.
#[derive(Debug, Clone, Args)]
pub struct ModelChoice {
    /// A zoo id (see `benchctl models`), or hf:ORG/NAME[@REV] for any hub checkpoint of a
    /// supported architecture; resolved through the Hugging Face hub cache.
    #[arg(long, conflicts_with_all = ["model_path", "endpoint"], required_unless_present_any = ["model_path", "config", "endpoint"], help_heading = "Model and device")]
    pub model: Option<String>,
    /// A model directory: config.json, model.safetensors and tokenizer.json (transformers'
    /// layout), or open_clip_config.json, open_clip_model.safetensors and tokenizer.json; or a
    /// FIBER checkpoint file (`.ckpt`) with roberta-base's tokenizer (and optionally a
    /// config.json) beside it.
    #[arg(long, value_name = "DIR_OR_FILE", conflicts_with = "endpoint", help_heading = "Model and device")]
    pub model_path: Option<PathBuf>,
    /// A generative model behind an OpenAI-compatible chat-completions server that returns
    /// log-probabilities (vLLM, SGLang, llama.cpp's server): its base URL
    /// (`http://host:8000/v1`). Pairs are scored by VQAScore, the probability of "Yes".
    #[arg(long, value_name = "URL", requires = "served_model", help_heading = "Scoring server")]
    pub endpoint: Option<String>,
    /// The model name the server serves (the requests' `model`).
    #[arg(long, value_name = "NAME", requires = "endpoint", help_heading = "Scoring server")]
    pub served_model: Option<String>,
    /// The environment variable holding the server's API key, sent as a bearer token when set.
    #[arg(long, value_name = "VAR", default_value = "OPENAI_API_KEY", help_heading = "Scoring server")]
    pub api_key_env: String,
    /// Requests to the server at once.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024), help_heading = "Scoring server")]
    pub max_in_flight: u32,
    /// The most pairs asked in one run; the rest are left for the next run (answers are cached).
    #[arg(long, value_name = "N", help_heading = "Scoring server")]
    pub request_budget: Option<usize>,
    /// Attempts after a failed request (429, 5xx, timeouts), waiting 1 s, 2 s, 4 s, …
    #[arg(long, value_name = "N", default_value_t = 5, help_heading = "Scoring server")]
    pub retries: u32,
    /// Seconds one request may take in all: connecting, sending and the whole answer (a
    /// server that drips its answer is cut off at this deadline).
    #[arg(long, value_name = "S", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Scoring server")]
    pub request_timeout: u64,
    /// Top log-probabilities asked for; "Yes" (or failing it "No") is looked for among them.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20), help_heading = "Scoring server")]
    pub top_logprobs: u32,
    /// The question asked about each pair, `{}` standing for the caption (Python's
    /// `str.format`): t2v_metrics' by default.
    #[arg(long, value_name = "TEMPLATE", default_value = benchctl_models::vqascore::Template::T2V_METRICS.0, help_heading = "Scoring server")]
    pub question_template: String,
    /// The answer whose probability is the score.
    #[arg(long, value_name = "ANSWER", default_value = benchctl_models::vqascore::Template::T2V_METRICS.1, help_heading = "Scoring server")]
    pub answer_template: String,
    /// Where the image goes in the request: after the question, as t2v_metrics asks API
    /// models, or before it, as its local models (and the checkpoints' chat templates) put it.
    #[arg(long, value_parser = ImagePosition::NAMES, default_value = ImagePosition::NAMES[0], help_heading = "Scoring server")]
    pub image_position: String,
    /// How a generative model's answer gives the score, here or behind a server: its
    /// log-probability (`logprobs`), or a reply generated greedily and searched for the answer
    /// as the suite's official code reads replies (`generate`: 0 when it gives the answer, else
    /// the log of zero).
    #[arg(long, value_parser = AnswerRule::NAMES, default_value = AnswerRule::NAMES[0], help_heading = "Model and device")]
    pub answer_rule: String,
    /// Which of the model's scores to use: `itm` or `itc` for BLIP and FIBER (default itm);
    /// CLIP and SigLIP have one (see `benchctl models`).
    #[arg(long, value_name = "HEAD", help_heading = "Model and device")]
    pub score: Option<String>,
    /// How captions reach the tokenizer: `authors` (as the model's authors trained and
    /// evaluated it; the default) or `transformers` (as transformers' processor prepares them,
    /// called as the model card says). They differ for SigLIP 2: docs/models.md, "Captions".
    #[arg(long, value_name = "PREP", value_parser = ["authors", "transformers"], help_heading = "Model and device")]
    pub text_prep: Option<String>,
    /// The most patches a SigLIP 2 NaFlex image becomes (the image processor's
    /// `max_num_patches`; the checkpoint's, 256 for the hub's, by default): the paper reports
    /// 256, 576, 784 and 1024.
    #[arg(long, value_name = "N", help_heading = "Model and device")]
    pub max_patches: Option<usize>,
    /// The fewest pixels the image processor resizes a Qwen2.5-VL or Qwen3-VL image to after
    /// `qwen_vl_utils`' resize (with --max-pixels; as `AutoProcessor.from_pretrained(…,
    /// min_pixels=…)` with its resize on, as NaturalBench's Qwen2.5-VL example: 200704). By
    /// default the processor does not resize again, as `t2v_metrics` calls it.
    #[arg(long, value_name = "N", requires = "max_pixels", help_heading = "Model and device")]
    pub min_pixels: Option<usize>,
    /// The most pixels (with --min-pixels; NaturalBench's Qwen2.5-VL example: 1003520).
    #[arg(long, value_name = "N", requires = "min_pixels", help_heading = "Model and device")]
    pub max_pixels: Option<usize>,
}

#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:
  benchctl eval --model-path crates/benchctl-models/tests/fixtures/clip-shapes --suite demo
  benchctl eval --model clip-vit-b32 --suite winoground            # data in datasets/winoground
  benchctl eval --model clip-vit-b32 --suite valse --data-dir /data/valse --batch-size 64
  benchctl eval --model blip-itm-base-coco --score itc --suite eqben
  benchctl eval --model blip-itm-base-coco --suite rococo --rerank-k 128
  benchctl eval --model gemma-3-4b-it --suite winoground --device cuda --dtype bf16
  benchctl eval --endpoint http://localhost:8000/v1 --served-model Qwen/Qwen3-VL-8B-Instruct --suite eqben
  benchctl eval --model clip-vit-b32 --suite my-bench.toml --data-dir /data/mine
  benchctl eval --config run.toml

Suites and their data: `benchctl suites`; models: `benchctl models`; docs/ in the repository.")]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelChoice,
    /// The suite id (see `benchctl suites`), or a manifest file (`.toml`).
    #[arg(long, required_unless_present = "config", help_heading = "Suite")]
    pub suite: Option<String>,
    /// A run spec (TOML) listing models × suites × options: one command for a whole
    /// leaderboard refresh (see docs/results.md).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["model", "model_path", "suite"], help_heading = "Suite")]
    pub config: Option<PathBuf>,
    /// The suite's data in its official layout [default: datasets/SUITE].
    #[arg(long, value_name = "DIR", help_heading = "Suite")]
    pub data_dir: Option<PathBuf>,
    /// Images or texts per encoder forward pass.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096), help_heading = "Model and device")]
    pub batch_size: u32,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", help_heading = "Model and device")]
    pub device: String,
    /// f32, f16 or bf16.
    #[arg(long, default_value = "f32", help_heading = "Model and device")]
    pub dtype: String,
    /// Where runs are stored.
    #[arg(long, default_value = "results", value_name = "DIR", help_heading = "Results")]
    pub results_dir: PathBuf,
    /// Encode everything afresh and store nothing in the embedding cache
    /// (`BENCHCTL_CACHE`, else `~/.cache/benchctl`).
    #[arg(long, help_heading = "Results")]
    pub no_cache: bool,
    /// Read images that a symbolic link inside the data directory leads out of it to
    /// (refused by default, naming both paths).
    #[arg(long, help_heading = "Suite")]
    pub allow_outside_links: bool,
    /// RoCOCO only: how the altered images of the text-to-image gallery are made.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [AlterMethod::Mix, AlterMethod::Patch], help_heading = "RoCOCO")]
    pub rococo_methods: Vec<AlterMethod>,
    /// RoCOCO only: the share λ of the original image kept, in thousandths (900 = 0.9).
    #[arg(long, value_delimiter = ',', default_values_t = [900u16, 800], value_parser = clap::value_parser!(u16).range(0..=1000), help_heading = "RoCOCO")]
    pub rococo_lambdas: Vec<u16>,
    /// RoCOCO only: where the visually altered images come from. `auto` reads the folders
    /// RoCOCO's `mix_images.py` writes (`images/<method>_<λ>/`, e.g. `images/mix_0.9/`) where
    /// they exist and generates the others; `release` requires those folders; `generate`
    /// always makes them in process (seeded, see `--rococo-seeds`).
    #[arg(long, value_enum, default_value_t = AlteredSourceArg::Auto, help_heading = "RoCOCO")]
    pub rococo_altered: AlteredSourceArg,
    /// RoCOCO only: caption normalisation. `auto` applies BLIP's `pre_caption` (30 words) when
    /// a BLIP model is evaluated, as BLIP's own COCO retrieval evaluation does, and nothing
    /// otherwise; `blip` and `none` force it on or off.
    #[arg(long, value_enum, default_value_t = CaptionNormalisationArg::Auto, help_heading = "RoCOCO")]
    pub caption_normalisation: CaptionNormalisationArg,
    /// RoCOCO only: seeds of the generated altered galleries; results are averaged over them.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 1, 2], help_heading = "RoCOCO")]
    pub rococo_seeds: Vec<u64>,
    /// Retrieval suites with a fusion model (BLIP ITM): candidates per query that its
    /// contrastive head shortlists for the fusion head to re-rank (BLIP's evaluation uses 128).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Retrieval re-ranking")]
    pub rerank_k: u32,
    /// Retrieval suites with a fusion or generative model: the contrastive zoo model whose
    /// top --rerank-k candidates it re-ranks (default: the model's own contrastive head, which
    /// BLIP and FIBER have and generative models lack), on the same device and dtype.
    #[arg(long, value_name = "ID", conflicts_with = "shortlist_model_path", help_heading = "Retrieval re-ranking")]
    pub shortlist_model: Option<String>,
    /// As --shortlist-model, a local model directory.
    #[arg(long, value_name = "DIR", help_heading = "Retrieval re-ranking")]
    pub shortlist_model_path: Option<PathBuf>,
    /// Evaluate one deterministic slice of an item suite, `i/n` (0-based, contiguous item
    /// ranges); `benchctl merge` combines the n shard runs into the unsharded run.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, help_heading = "Suite")]
    pub shard: Option<Shard>,
    /// A caption longer than the model's text context (CLIP 77, SigLIP 64, BLIP 35 tokens):
    /// `truncate` cuts it as the reference pipelines do (the default; the run counts and
    /// reports them), `error` refuses the run, naming the first.
    #[arg(long, value_enum, default_value_t = LongCaptionArg::Truncate, help_heading = "Model and device")]
    pub on_long_caption: LongCaptionArg,
    /// How a tie for the top score counts: `strict`, a miss; `first`, the first of the tied
    /// candidates wins, as an official scorer that takes an argmax or a ranking counts it:
    /// SPEC (`argmax`), RoCOCO (`argsort`) and manifests that say `ties = "first"`
    /// (`benchctl suites` lists which; docs/manifests.md); `shared`, every answer option
    /// tied at the top counts, unless its probability is zero (VisMin's reading of generated
    /// replies). [default: shared for a server's generated replies to a suite that reads them
    /// by label (vismin-vqa), else strict]
    #[arg(long, value_enum, help_heading = "Results")]
    pub ties: Option<TiesArg>,
    /// What the bootstrap intervals resample: `clusters` of items made together (items
    /// sharing an image, or a manifest's `metrics.cluster_by`; the default), or `items` one
    /// by one, as published intervals usually are (narrower where items cluster). The run
    /// records which, with each metric's design effect (docs/results.md).
    #[arg(long, value_enum, default_value_t = BootstrapArg::Clusters, help_heading = "Results")]
    pub bootstrap: BootstrapArg,
}

#[derive(Debug, Clone, Args)]
pub struct ScoreArgs {
    /// The suite id (see `benchctl suites`).
    #[arg(long)]
    pub suite: String,
    /// The suite's data in its official layout [default: datasets/SUITE].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The scores.
    #[arg(long, value_name = "FILE")]
    pub scores: PathBuf,
    /// Their layout: `dump` (benchctl's per-item dump), `winoground-jsonl` (Winoground's
    /// published model scores), or the suite's official submission format (`benchctl suites`
    /// names it) [default: from the file: a submission file by its name or first line,
    /// winoground-jsonl where the first line has a `label`, dump where it is another JSON
    /// object, else the suite's submission format].
    #[arg(long, value_name = "FORMAT", value_parser = parse_score_format)]
    pub format: Option<score::ScoreFormat>,
    /// How a tie for the top score counts (see `eval --ties`).
    #[arg(long, value_enum, default_value_t = TiesArg::Strict)]
    pub ties: TiesArg,
    /// What the bootstrap intervals resample (see `eval --bootstrap`).
    #[arg(long, value_enum, default_value_t = BootstrapArg::Clusters)]
    pub bootstrap: BootstrapArg,
    /// What the scores are: `probability` (in [0, 1], e.g. an ITM head) adds the threshold
    /// metrics (VALSE's p_c, p_f, acc, min); `logit` (log-odds of a match probability) adds
    /// them through the sigmoid, and keeps saturated probabilities from tying.
    #[arg(long, value_enum, default_value_t = ScoreKindArg::Similarity)]
    pub score_kind: ScoreKindArg,
    /// Store the result as a run of an external model with this name, beside the zoo's runs
    /// (leaderboard, intervals, `compare`). Without it, nothing is stored.
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
    /// One line on the external model (what it is, how its scores were made).
    #[arg(long, value_name = "TEXT", requires = "model_name")]
    pub model_description: Option<String>,
    /// Where the external model or its scores are published.
    #[arg(long, value_name = "URL", requires = "model_name")]
    pub model_url: Option<String>,
    /// Where the results store is (with --model-name).
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results_dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The run file (`results/runs/….json`; its score dump beside it).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
    /// Another run on the same items: its scores beside, and the items where the two disagree.
    #[arg(long, value_name = "RUN")]
    pub against: Option<PathBuf>,
    /// Where to write the page [default: RUN.report/ beside the run file].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The suite's data, if it moved since the run [default: the run's data directory].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Show the run even when the suite's data is no longer what it scored (its fingerprint
    /// differs): with a warning, the scores beside today's items.
    #[arg(long)]
    pub allow_changed_data: bool,
    /// Thumbnails of at most this many images (those of the first items); the others show
    /// their path.
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub max_thumbnails: usize,
}

/// `--score-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScoreKindArg {
    Similarity,
    Probability,
    Logit,
    LogProbability,
}

#[derive(Debug, Clone, Args)]
pub struct FetchArgs {
    /// The suite id (see `benchctl suites`).
    #[arg(long, required_unless_present = "dataset", conflicts_with = "dataset")]
    pub suite: Option<String>,
    /// Any dataset repo of the Hugging Face hub, into the hub cache: ORG/NAME or
    /// ORG/NAME@REVISION.
    #[arg(long, value_name = "ORG/NAME[@REV]")]
    pub dataset: Option<String>,
    /// With --dataset: only the repo files matching this pattern (`*` stands for any run of
    /// characters, `/` included); repeatable [default: every file].
    #[arg(long, value_name = "PATTERN", requires = "dataset")]
    pub include: Vec<String>,
    /// Where to put the data [default: a bundled manifest's suite and --dataset stay in the
    /// hub cache, where they are read; a built-in suite goes to datasets/SUITE].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The dataset repo's branch, tag or commit [default: the manifest's, else main].
    /// Winoground's main branch has the parquet release; earlier commits have examples.jsonl
    /// and images.zip.
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The suite id (see `benchctl suites`).
    #[arg(long)]
    pub suite: String,
    /// The suite's data in its official layout [default: datasets/SUITE].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Check images that a symbolic link inside the data directory leads out of it to
    /// (listed as problems by default).
    #[arg(long)]
    pub allow_outside_links: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SuitesArgs {
    /// Where each suite's data is looked for, as `ROOT/<suite id>` (the default of
    /// `--data-dir`).
    #[arg(long, default_value = "datasets", value_name = "ROOT")]
    pub data_root: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct LeaderboardArgs {
    /// Where runs are stored; LEADERBOARD.md is written there.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results_dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// The shard run files (`results/runs/….json` of each shard; their score dumps beside them).
    #[arg(required = true, value_name = "RUN_FILE")]
    pub runs: Vec<PathBuf>,
    /// The suite's data, if not where the shards found it (annotations are enough).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where the merged run is stored.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results_dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct ConvertArgs {
    /// The PyTorch checkpoint: a Lightning `.ckpt` (tensors under `state_dict`) or a saved
    /// state dict.
    #[arg(value_name = "CHECKPOINT")]
    pub input: PathBuf,
    /// The safetensors file to write (refused if it exists).
    #[arg(value_name = "OUTPUT")]
    pub output: PathBuf,
}

/// `i/n` with `i < n`.
fn parse_score_format(text: &str) -> std::result::Result<score::ScoreFormat, String> {
    score::ScoreFormat::from_name(text)
        .ok_or_else(|| format!("`{text}` is none of {}", score::ScoreFormat::names().join(", ")))
}

fn parse_shard(text: &str) -> std::result::Result<Shard, benchctl::plan::ShardError> {
    Shard::parse(text)
}

impl EvalArgs {
    /// The run these arguments ask for (without `--config`).
    pub fn plan(&self) -> Result<EvalPlan> {
        let model = self.model.choice(self)?;
        EvalPlan::new(model, self.suite.as_deref().unwrap_or_default(), self.data_dir.as_deref(), self.options())
    }

    /// Everything of a run besides its model, suite and data: the defaults of a run spec.
    pub fn options(&self) -> EvalOptions {
        EvalOptions {
            batch_size: self.batch_size as usize,
            results_dir: self.results_dir.clone(),
            use_cache: !self.no_cache,
            allow_outside_links: self.allow_outside_links,
            long_captions: match self.on_long_caption {
                LongCaptionArg::Truncate => LongCaptions::Truncate,
                LongCaptionArg::Error => LongCaptions::Refuse,
            },
            ties: self.ties.map(Into::into),
            bootstrap: self.bootstrap.into(),
            shard: self.shard,
            retrieval: RetrievalOptions {
                methods: self
                    .rococo_methods
                    .iter()
                    .map(|m| match m {
                        AlterMethod::Mix => benchctl_suites::rococo::altered::Method::Mix,
                        AlterMethod::Patch => benchctl_suites::rococo::altered::Method::Patch,
                    })
                    .collect(),
                lambdas: self.rococo_lambdas.clone(),
                altered: match self.rococo_altered {
                    AlteredSourceArg::Auto => AlteredImages::Auto,
                    AlteredSourceArg::Release => AlteredImages::Release,
                    AlteredSourceArg::Generate => AlteredImages::Generate,
                },
                caption_normalisation: match self.caption_normalisation {
                    CaptionNormalisationArg::Auto => CaptionNormalisation::Auto,
                    CaptionNormalisationArg::None => CaptionNormalisation::None,
                    CaptionNormalisationArg::Blip => CaptionNormalisation::Blip,
                },
                seeds: self.rococo_seeds.clone(),
                rerank_k: self.rerank_k as usize,
                shortlist: match (&self.shortlist_model, &self.shortlist_model_path) {
                    (Some(id), _) => Some(ModelSource::Zoo(id.clone())),
                    (None, Some(dir)) => Some(ModelSource::Path(dir.clone())),
                    (None, None) => None,
                },
            },
        }
    }

    /// The device and dtype flags, parsed.
    pub fn device(&self) -> Result<(DeviceSpec, candle_core::DType)> {
        Ok((DeviceSpec::parse(&self.device)?, benchctl_models::device::parse_dtype(&self.dtype)?))
    }
}

impl ModelChoice {
    /// The scoring server these flags name, its API key read from its variable.
    fn endpoint_choice(&self, url: &str) -> Result<benchctl::plan::EndpointChoice> {
        benchctl::plan::EndpointSpec {
            url: url.to_string(),
            served_model: self.served_model.clone().unwrap_or_default(),
            api_key_env: self.api_key_env.clone(),
            max_in_flight: self.max_in_flight as usize,
            request_budget: self.request_budget,
            retries: self.retries,
            request_timeout: self.request_timeout,
            top_logprobs: self.top_logprobs,
            question_template: self.question_template.clone(),
            answer_template: self.answer_template.clone(),
            image_position: self
                .image_position
                .parse()
                .map_err(|e: benchctl_models::Error| Error::caused_by(ErrorKind::Usage, e.to_string(), e))?,
            answer_rule: self
                .answer_rule
                .parse()
                .map_err(|e: benchctl_models::Error| Error::caused_by(ErrorKind::Usage, e.to_string(), e))?,
        }
        .choice()
    }

    /// The model these flags name, on the run's device and dtype.
    fn choice(&self, args: &EvalArgs) -> Result<benchctl::plan::ModelChoice> {
        let source = match (&self.model, &self.model_path, &self.endpoint) {
            (Some(id), None, None) => ModelSource::Zoo(id.clone()),
            (None, Some(path), None) => ModelSource::Path(path.clone()),
            (None, None, Some(url)) => ModelSource::Endpoint(self.endpoint_choice(url)?),
            _ => {
                return Err(Error::new(
                    ErrorKind::Usage,
                    "choose a model: pass exactly one of --model, --model-path or --endpoint",
                ))
            }
        };
        let (device, dtype) = args.device()?;
        Ok(benchctl::plan::ModelChoice {
            source,
            head: benchctl::plan::score_head(self.score.as_deref())?,
            text_prep: benchctl::plan::text_prep(self.text_prep.as_deref())?,
            max_patches: self.max_patches,
            processor_pixels: benchctl::plan::pixel_bounds(self.min_pixels, self.max_pixels)?,
            answer_rule: self
                .answer_rule
                .parse()
                .map_err(|e: benchctl_models::Error| Error::caused_by(ErrorKind::Usage, e.to_string(), e))?,
            reply_reading: Default::default(),
            device,
            dtype,
        })
    }
}

impl ScoreArgs {
    pub fn plan(&self) -> score::ScorePlan {
        score::ScorePlan {
            suite: self.suite.clone(),
            data_dir: self.data_dir.clone(),
            scores: self.scores.clone(),
            format: self.format,
            ties: self.ties.into(),
            bootstrap: self.bootstrap.into(),
            score_kind: match self.score_kind {
                ScoreKindArg::Similarity => benchctl_scoring::ScoreKind::Similarity,
                ScoreKindArg::Probability => benchctl_scoring::ScoreKind::Probability,
                ScoreKindArg::Logit => benchctl_scoring::ScoreKind::Logit,
                ScoreKindArg::LogProbability => benchctl_scoring::ScoreKind::LogProbability,
            },
            model_name: self.model_name.clone(),
            model_description: self.model_description.clone(),
            model_url: self.model_url.clone(),
        }
    }
}

impl From<&ReportArgs> for report::ReportPlan {
    fn from(a: &ReportArgs) -> Self {
        report::ReportPlan {
            run: a.run.clone(),
            against: a.against.clone(),
            out: a.out.clone(),
            data_dir: a.data_dir.clone(),
            allow_changed_data: a.allow_changed_data,
            max_thumbnails: a.max_thumbnails,
        }
    }
}

impl FetchArgs {
    pub fn plan(&self) -> Result<fetch::FetchPlan> {
        let (target, named) = match (&self.suite, &self.dataset) {
            (_, Some(id)) => fetch::FetchTarget::dataset(id, &self.include)?,
            (Some(suite), None) => (fetch::FetchTarget::Suite(suite.clone()), None),
            (None, None) => return Err(Error::new(ErrorKind::Usage, "use fetch: give --suite or --dataset")),
        };
        let revision = match (named, &self.revision) {
            (Some(a), Some(b)) if &a != b => {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("use --dataset with --revision: the id names the revision {a}, --revision {b}"),
                ))
            }
            (named, given) => named.or_else(|| given.clone()),
        };
        Ok(fetch::FetchPlan { target, data_dir: self.data_dir.clone(), revision })
    }
}

impl From<&CheckArgs> for check::CheckPlan {
    fn from(a: &CheckArgs) -> Self {
        check::CheckPlan {
            suite: a.suite.clone(),
            data_dir: a.data_dir.clone(),
            allow_outside_links: a.allow_outside_links,
        }
    }
}

impl From<&MergeArgs> for merge::MergePlan {
    fn from(a: &MergeArgs) -> Self {
        merge::MergePlan { runs: a.runs.clone(), data_dir: a.data_dir.clone() }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_definition_is_consistent() {
        // clap's own checks of every subcommand (conflicts, groups, names).
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
