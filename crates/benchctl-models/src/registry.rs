//! The zoo: model ids and what each resolves to (the entries: `registry/zoo.rs`), and the
//! architectures benchctl implements, detected from a checkpoint's files.
//!
//! Every entry pins a hub revision (a commit), so a run names exactly the weights it used, or,
//! where no commit could be verified when it was added (the hub was out of reach), names
//! `main`: the hub cache then keeps the commit `main` resolved to at its first download
//! (`refs/main`), and each run records that commit. Every entry states what `benchctl models` shows: input size and preprocessing, activation,
//! tokenizer and context length, and the score kinds it offers.

use crate::hub::ModelFiles;
use crate::models::eva::{eva02, pe_core};
use crate::models::{
    blip, clip, clip_openai, clip_t5, fiber, gemma3, internvl, metaclip2, paligemma, qwen25vl, qwen3vl, siglip,
    siglip2_naflex, siglip_open_clip,
};
use crate::preprocess::Preprocessor;
use crate::{Error, ErrorKind, Result};

pub use crate::architecture::{
    Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, LoadChoice, ScoreHead, TextPrep,
};

mod downloads;
mod zoo;
pub use downloads::{DownloadEntry, FIBER_CHECKPOINTS};
pub use zoo::MODELS;

/// Every architecture benchctl implements, each declared once in its own module.
pub const ARCHITECTURES: &[Architecture] = &[
    clip::ARCHITECTURE,
    clip_openai::ARCHITECTURE,
    pe_core::ARCHITECTURE,
    eva02::ARCHITECTURE,
    siglip::ARCHITECTURE,
    siglip2_naflex::ARCHITECTURE,
    siglip_open_clip::ARCHITECTURE,
    metaclip2::ARCHITECTURE,
    blip::ARCHITECTURE,
    fiber::ARCHITECTURE,
    gemma3::ARCHITECTURE,
    paligemma::ARCHITECTURE,
    qwen3vl::ARCHITECTURE,
    qwen25vl::ARCHITECTURE,
    internvl::ARCHITECTURE,
    clip_t5::ARCHITECTURE,
];

/// The architecture with this name.
pub fn architecture(name: &str) -> Option<Architecture> {
    ARCHITECTURES.iter().copied().find(|a| a.name() == name)
}

/// One zoo entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: &'static str,
    pub repo: &'static str,
    /// The pinned hub revision (a commit), or `main` ([`ModelEntry::is_pinned`]).
    pub revision: &'static str,
    pub architecture: Architecture,
    pub description: &'static str,
    /// Input size and preprocessing, as `benchctl models` lists it.
    pub preprocessing: &'static str,
    /// The MLP activation the weights were trained with.
    pub activation: &'static str,
    /// Tokenizer and context length.
    pub tokenizer: &'static str,
}

impl ModelEntry {
    /// Whether it pins a commit; else it names `main`, whose commit at first download the
    /// hub cache keeps.
    pub fn is_pinned(&self) -> bool {
        benchctl_base::hub_names::is_commit_hash(self.revision)
    }

    /// The revision as `benchctl models` lists it: the commit's first 12 digits, or what an
    /// unpinned entry resolves to.
    pub fn revision_label(&self) -> String {
        if self.is_pinned() {
            self.revision[..12].to_string()
        } else {
            format!("{} (the commit of the first download, kept)", self.revision)
        }
    }
}

/// The entry with this id, or an error listing the known ones (and, for a checkpoint that
/// is not on the hub, where to download it).
pub fn find(id: &str) -> Result<&'static ModelEntry> {
    if let Some(download) = FIBER_CHECKPOINTS.iter().find(|m| m.id == id) {
        return Err(Error::new(
            ErrorKind::MissingFile,
            format!(
                "find model `{id}`: it is not on the Hugging Face hub; download {} and pass --model-path with the file (roberta-base's tokenizer.json, or vocab.json and merges.txt, beside it)",
                download.url
            ),
        ));
    }
    MODELS.iter().find(|m| m.id == id).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.id).chain(FIBER_CHECKPOINTS.iter().map(|m| m.id)).collect();
        Error::new(
            ErrorKind::UnknownModel,
            format!(
                "find model `{id}`: known models are {} (or pass --model hf:ORG/NAME for any hub checkpoint of a supported architecture, or --model-path DIR)",
                known.join(", ")
            ),
        )
    })
}

/// The preprocessing a zoo entry's checkpoint ships with, at the size its `preprocessing`
/// line starts with (the checkpoint's own `preprocessor_config.json` can still change it
/// when the model loads); for benchmarks that run without the checkpoint's files.
pub fn default_preprocessor(id: &str) -> Result<Preprocessor> {
    let (architecture, line) = match MODELS.iter().find(|m| m.id == id) {
        Some(m) => (m.architecture, m.preprocessing),
        None => FIBER_CHECKPOINTS
            .iter()
            .find(|m| m.id == id)
            .map(|m| (m.architecture, m.preprocessing))
            .ok_or_else(|| find(id).err().unwrap_or_else(|| Error::new(ErrorKind::UnknownModel, id.to_string())))?,
    };
    let size = line.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(224);
    (architecture.spec().default_preprocessor)(size).ok_or_else(|| {
        Error::new(
            ErrorKind::BadConfig,
            format!("use {id}: a {} preprocessor comes from its checkpoint's config", architecture.name()),
        )
    })
}

/// A hub checkpoint named by id, outside the zoo: `hf:ORG/NAME` or `hf:ORG/NAME@REVISION`
/// (a branch, tag or commit; default `main`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModelId {
    pub repo: String,
    pub revision: String,
}

impl HubModelId {
    pub const PREFIX: &'static str = "hf:";

    /// `id` as a hub checkpoint id, if it starts with `hf:` (`None` for a zoo id); a
    /// malformed one is an error saying the form.
    pub fn parse(id: &str) -> Option<Result<Self>> {
        let rest = id.strip_prefix(Self::PREFIX)?;
        let (repo, revision) = rest.split_once('@').unwrap_or((rest, "main"));
        use benchctl_base::hub_names::{is_repo_id, is_repo_path};
        if !is_repo_id(repo) || !is_repo_path(revision) {
            return Some(Err(Error::new(
                ErrorKind::UnknownModel,
                format!(
                    "use --model {id}: a hub checkpoint is hf:ORG/NAME or hf:ORG/NAME@REVISION, as on huggingface.co"
                ),
            )));
        }
        Some(Ok(HubModelId { repo: repo.to_string(), revision: revision.to_string() }))
    }

    /// The id runs record: `hf:ORG/NAME` (the revision and commit are recorded beside it).
    pub fn id(&self) -> String {
        format!("{}{}", Self::PREFIX, self.repo)
    }
}

/// A hub checkpoint's files and architecture: the repo's file list (offline: the cache) gives
/// its config file (`config.json`, else a layout's own such as `open_clip_config.json`), the
/// config gives the architecture ([`detect_architecture`]), and the files that architecture's
/// layout needs are checked in the list, then downloaded (or found in the cache). Nothing but
/// the config is downloaded before the repo is known to hold everything the model needs.
pub fn resolve_hub_model(id: &HubModelId, settings: &crate::hub::HubSettings) -> Result<(ModelFiles, Architecture)> {
    use crate::hub;
    let (repo, revision) = (id.repo.as_str(), id.revision.as_str());
    let named = |e: Error| Error::new(e.kind(), format!("use --model {}: {e}", id.id()));
    let listed: Option<(String, Vec<String>)> =
        if settings.offline { None } else { Some(hub::list_model(repo, revision, settings).map_err(named)?) };
    let has = |name: &str| match &listed {
        Some((_, files)) => files.iter().any(|f| f == name),
        None => hub::cached_file(&settings.cache_dir, repo, revision, name).is_some(),
    };
    let mut configs: Vec<&str> = Vec::new();
    for config in ARCHITECTURES.iter().map(|a| a.layout().config) {
        if !configs.contains(&config) {
            configs.push(config);
        }
    }
    let Some(config_name) = configs.iter().copied().find(|c| has(c)) else {
        return Err(match &listed {
            Some((commit, files)) => Error::new(
                ErrorKind::MissingFile,
                format!(
                    "use --model {}: {repo} at commit {commit} is not a checkpoint benchctl loads: it has none of {} ({} files: {})",
                    id.id(),
                    configs.join(", "),
                    files.len(),
                    shown_files(files)
                ),
            ),
            None => named(hub::offline_miss(repo, revision, configs[0], settings)),
        });
    };
    // Online, everything is read at the commit the listing resolved, not an older cached one.
    let at = listed.as_ref().map_or(revision, |(commit, _)| commit.as_str());
    let config = hub::model_file(repo, at, config_name, settings).map_err(named)?;
    let architecture = detect_architecture(&config).map_err(named)?;
    let mut layout = architecture.layout().with_weights_found(has);
    if has(layout.tokenizer) {
        layout.tokenizer_instead = None;
    }
    if let Some((commit, files)) = &listed {
        let missing: Vec<&str> = layout.repo_files().into_iter().filter(|f| !has(f)).collect();
        if !missing.is_empty() {
            return Err(Error::new(
                ErrorKind::MissingFile,
                format!(
                    "use --model {}: {repo} at commit {commit} lacks {} that a {} checkpoint needs (it has {})",
                    id.id(),
                    missing.join(", "),
                    architecture.name(),
                    shown_files(files)
                ),
            ));
        }
    }
    let files = match &listed {
        Some((commit, _)) => hub::from_hub_at(repo, revision, commit, layout, settings),
        None => hub::from_hub_with(repo, revision, layout, settings),
    };
    Ok((files.map_err(named)?, architecture))
}

/// A repo's file list in a message: the first few names.
fn shown_files(files: &[String]) -> String {
    let mut shown: Vec<&str> = files.iter().map(String::as_str).take(8).collect();
    if files.len() > shown.len() {
        shown.push("…");
    }
    shown.join(", ")
}

/// The architecture of local model files: a PyTorch checkpoint without a `config.json` is
/// the architecture released that way (FIBER), else [`detect_architecture`].
pub fn architecture_of(files: &ModelFiles) -> Result<Architecture> {
    if !files.config.exists() && crate::hub::is_torch_checkpoint(&files.weights) {
        if let Some(&released) = ARCHITECTURES.iter().find(|a| a.spec().released_as_torch_checkpoint) {
            return Ok(released);
        }
    }
    detect_architecture(&files.config)
}

/// The architecture of a local model directory: the one whose own config file this is
/// (OpenCLIP's `open_clip_config.json`), else the one that loads the `model_type` of
/// `config.json`.
pub fn detect_architecture(config: &std::path::Path) -> Result<Architecture> {
    let name = config.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let own: Vec<Architecture> = ARCHITECTURES
        .iter()
        .copied()
        .filter(|a| a.spec().model_types.is_empty() && a.layout().config == name)
        .collect();
    if let [only] = own[..] {
        return Ok(only);
    }
    if !own.is_empty() {
        return timm_architecture(config, &own);
    }
    let value: serde_json::Value = crate::models::read_config(config)?;
    let Some(model_type) = value.get("model_type").and_then(|v| v.as_str()) else {
        return Err(Error::new(ErrorKind::BadConfig, format!("use {}: it has no `model_type` key", config.display())));
    };
    ARCHITECTURES.iter().copied().find(|a| a.spec().model_types.contains(&model_type)).ok_or_else(|| {
        let hint = match model_type {
            internvl::REMOTE_CODE_MODEL_TYPE => internvl::REMOTE_CODE_HINT,
            _ => "",
        };
        Error::new(
            ErrorKind::BadConfig,
            format!("use {}: model_type `{model_type}` is not supported {}{hint}", config.display(), supported()),
        )
    })
}

/// Of the architectures sharing a layout (OpenCLIP's), the one for the config's timm image
/// tower (`model_cfg.vision_cfg.timm_model_name`), or the plain one where it names none.
fn timm_architecture(config: &std::path::Path, candidates: &[Architecture]) -> Result<Architecture> {
    let value: serde_json::Value = crate::models::read_config(config)?;
    let timm = value.pointer("/model_cfg/vision_cfg/timm_model_name").and_then(|v| v.as_str());
    let found = candidates.iter().copied().find(|a| match timm {
        None => a.spec().timm_towers.is_empty(),
        Some(name) => a.spec().timm_towers.iter().any(|prefix| name.starts_with(prefix)),
    });
    found.ok_or_else(|| {
        let towers: Vec<String> =
            candidates.iter().flat_map(|a| a.spec().timm_towers.iter().map(|p| format!("{p}*"))).collect();
        Error::new(
            ErrorKind::BadConfig,
            format!(
                "use {}: the timm image tower `{}` is not supported (supported: {})",
                config.display(),
                timm.unwrap_or_default(),
                towers.join(", ")
            ),
        )
    })
}

/// What [`detect_architecture`] recognises, for errors: every declared `model_type`, then
/// each layout of its own and each architecture released as a PyTorch checkpoint.
pub fn supported() -> String {
    let types: Vec<&str> = ARCHITECTURES.iter().flat_map(|a| a.spec().model_types.iter().copied()).collect();
    let mut text = format!("(supported: {})", types.join(", "));
    for a in ARCHITECTURES.iter().filter(|a| a.spec().model_types.is_empty()) {
        text += &format!("; a {} directory has {}", a.name(), a.layout().config);
        let towers: Vec<String> = a.spec().timm_towers.iter().map(|prefix| format!("{prefix}*")).collect();
        match towers.as_slice() {
            [] => {}
            [one] => text += &format!(" naming a timm tower {one}"),
            several => text += &format!(" naming a timm tower of {}", several.join(", ")),
        }
    }
    for a in ARCHITECTURES.iter().filter(|a| a.spec().released_as_torch_checkpoint) {
        text += &format!("; a {} checkpoint may be its released PyTorch file", a.name());
    }
    text
}
