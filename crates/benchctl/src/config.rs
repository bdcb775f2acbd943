//! `benchctl eval --config run.toml`: a run spec listing models × suites × options, so a
//! whole leaderboard refresh is one command.
//!
//! ```toml
//! results_dir = "results"          # optional, else --results-dir
//!
//! [[runs]]
//! models = ["clip-vit-b32", "siglip-base-patch16-224"]   # zoo ids
//! model_paths = ["./my-clip"]                             # and/or local directories
//! endpoints = [{ url = "http://gpu1:8000/v1", served_model = "Qwen/Qwen3-VL-8B-Instruct" }]
//!                                 # and/or scoring servers (every `eval --endpoint` option, as
//!                                 # `max_in_flight`, `top_logprobs`, `question_template`, …)
//! suites = ["winoground", "eqben"]
//! data_dirs = { winoground = "/data/winoground" }         # else datasets/<suite>
//! batch_size = 64                                         # optional, as the flags
//! dtype = "f32"
//! device = "cpu"
//! score = "itc"
//! no_cache = false
//! ```
//!
//! Every `[[runs]]` block expands to each model × each suite, in the order written; the
//! command-line flags are the defaults a block overrides.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use benchctl_models::device::DeviceSpec;
use candle_core::DType;

use crate::plan::{score_head, EndpointSpec, EvalOptions, EvalPlan, ModelChoice, ModelSource};
use crate::{Error, ErrorKind, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    results_dir: Option<PathBuf>,
    #[serde(default)]
    runs: Vec<Block>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    model_paths: Vec<PathBuf>,
    #[serde(default)]
    endpoints: Vec<EndpointSpec>,
    suites: Vec<String>,
    #[serde(default)]
    data_dirs: BTreeMap<String, PathBuf>,
    batch_size: Option<u32>,
    dtype: Option<String>,
    device: Option<String>,
    score: Option<String>,
    text_prep: Option<String>,
    max_patches: Option<usize>,
    /// The image processor's pixel bounds after `qwen_vl_utils` (Qwen2.5-VL, Qwen3-VL): both
    /// or neither.
    min_pixels: Option<usize>,
    max_pixels: Option<usize>,
    /// `logprobs` or `generate`, for the generative models run here (a server's is its own).
    answer_rule: Option<String>,
    no_cache: Option<bool>,
}

/// What the command line gives every run of a spec, unless a block overrides it.
#[derive(Debug, Clone)]
pub struct SpecDefaults {
    /// The data of every suite [default: datasets/SUITE].
    pub data_dir: Option<PathBuf>,
    pub device: DeviceSpec,
    pub dtype: DType,
    pub options: EvalOptions,
}

/// The runs a spec file describes, as the plan of each, in order.
pub fn expand(path: &Path, defaults: &SpecDefaults) -> Result<Vec<EvalPlan>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::caused_by(ErrorKind::Usage, format!("read run spec {}: {e}", path.display()), e))?;
    let spec: Spec = toml::from_str(&text)
        .map_err(|e| Error::caused_by(ErrorKind::Usage, format!("parse run spec {}: {e}", path.display()), e))?;
    // Relative paths in the spec are relative to the spec file.
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &PathBuf| if p.is_absolute() { p.clone() } else { base.join(p) };
    let mut out = Vec::new();
    for (b, block) in spec.runs.iter().enumerate() {
        if block.models.is_empty() && block.model_paths.is_empty() && block.endpoints.is_empty() {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("use run spec {}: runs[{b}] names no models, model_paths or endpoints", path.display()),
            ));
        }
        if let Some(suite) = block.data_dirs.keys().find(|s| !block.suites.contains(s)) {
            return Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "use run spec {}: runs[{b}].data_dirs names `{suite}`, which is not in its suites",
                    path.display()
                ),
            ));
        }
        let head = score_head(block.score.as_deref())?;
        let text_prep = crate::plan::text_prep(block.text_prep.as_deref())?;
        let device = block.device.as_deref().map(DeviceSpec::parse).transpose()?.unwrap_or(defaults.device);
        let dtype =
            block.dtype.as_deref().map(benchctl_models::device::parse_dtype).transpose()?.unwrap_or(defaults.dtype);
        let sources = block
            .models
            .iter()
            .map(|m| ModelSource::Zoo(m.clone()))
            .chain(block.model_paths.iter().map(|p| ModelSource::Path(resolve(p))));
        let servers = block.endpoints.iter().enumerate().map(|(e, spec)| {
            spec.choice().map(ModelSource::Endpoint).map_err(|err| {
                Error::caused_by(
                    ErrorKind::Usage,
                    format!("use run spec {}: runs[{b}].endpoints[{e}]: {err}", path.display()),
                    err,
                )
            })
        });
        let sources: Vec<ModelSource> = sources.map(Ok).chain(servers).collect::<Result<_>>()?;
        let max_patches = block.max_patches;
        let processor_pixels = crate::plan::pixel_bounds(block.min_pixels, block.max_pixels).map_err(|e| {
            Error::caused_by(
                ErrorKind::Usage,
                format!("use run spec {}: runs[{b}].min_pixels and max_pixels: give both", path.display()),
                e,
            )
        })?;
        let answer_rule = match block.answer_rule.as_deref() {
            None => Default::default(),
            Some(name) => name.parse().map_err(|e: benchctl_models::Error| {
                Error::caused_by(
                    ErrorKind::Usage,
                    format!("use run spec {}: runs[{b}].answer_rule: {e}", path.display()),
                    e,
                )
            })?,
        };
        let models = sources.into_iter().map(|source| ModelChoice {
            source,
            head,
            text_prep,
            max_patches,
            processor_pixels,
            answer_rule,
            reply_reading: Default::default(),
            device,
            dtype,
        });
        for model in models {
            for suite in &block.suites {
                let mut options = defaults.options.clone();
                if let Some(v) = block.batch_size {
                    options.batch_size = v as usize;
                }
                if let Some(v) = block.no_cache {
                    options.use_cache = !v;
                }
                if let Some(dir) = &spec.results_dir {
                    options.results_dir = resolve(dir);
                }
                let data_dir = block.data_dirs.get(suite).map(resolve).or_else(|| defaults.data_dir.clone());
                out.push(EvalPlan::new(model.clone(), suite, data_dir.as_deref(), options)?);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::new(ErrorKind::Usage, format!("use run spec {}: it lists no runs", path.display())));
    }
    Ok(out)
}
