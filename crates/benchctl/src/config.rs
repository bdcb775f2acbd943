//! `benchctl eval --config run.toml`: a run spec listing models × suites × options, so a
//! whole leaderboard refresh is one command.
//!
//! ```toml
//! results_dir = "results"          # optional, else --results-dir
//!
//! [[runs]]
//! models = ["clip-vit-b32", "siglip-base-patch16-224"]   # zoo ids
//! model_paths = ["./my-clip"]                             # and/or local directories
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

use crate::cli::{EvalArgs, ModelChoice};
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
    suites: Vec<String>,
    #[serde(default)]
    data_dirs: BTreeMap<String, PathBuf>,
    batch_size: Option<u32>,
    dtype: Option<String>,
    device: Option<String>,
    score: Option<String>,
    no_cache: Option<bool>,
}

/// The runs a spec file describes, as the `eval` arguments of each, in order.
pub fn expand(path: &Path, defaults: &EvalArgs) -> Result<Vec<EvalArgs>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::caused_by(ErrorKind::Usage, format!("read run spec {}: {e}", path.display()), e))?;
    let spec: Spec = toml::from_str(&text)
        .map_err(|e| Error::caused_by(ErrorKind::Usage, format!("parse run spec {}: {e}", path.display()), e))?;
    // Relative paths in the spec are relative to the spec file.
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &PathBuf| if p.is_absolute() { p.clone() } else { base.join(p) };
    let mut out = Vec::new();
    for (b, block) in spec.runs.iter().enumerate() {
        if block.models.is_empty() && block.model_paths.is_empty() {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("use run spec {}: runs[{b}] names no models or model_paths", path.display()),
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
        let models = block
            .models
            .iter()
            .map(|m| ModelChoice { model: Some(m.clone()), model_path: None, score: block.score.clone() })
            .chain(block.model_paths.iter().map(|p| ModelChoice {
                model: None,
                model_path: Some(resolve(p)),
                score: block.score.clone(),
            }));
        for model in models {
            for suite in &block.suites {
                benchctl_suites::find(suite)?;
                let mut args = defaults.clone();
                args.config = None;
                args.model = model.clone();
                args.suite = suite.clone();
                args.data_dir = block.data_dirs.get(suite).map(resolve).or_else(|| defaults.data_dir.clone());
                if let Some(v) = block.batch_size {
                    args.batch_size = v;
                }
                if let Some(v) = &block.dtype {
                    args.dtype = v.clone();
                }
                if let Some(v) = &block.device {
                    args.device = v.clone();
                }
                if let Some(v) = block.no_cache {
                    args.no_cache = v;
                }
                if let Some(dir) = &spec.results_dir {
                    args.results_dir = resolve(dir);
                }
                out.push(args);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::new(ErrorKind::Usage, format!("use run spec {}: it lists no runs", path.display())));
    }
    Ok(out)
}
