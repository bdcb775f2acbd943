//! Finding a model's files: a local directory (`--model-path`), the Hugging Face hub cache
//! (its layout as `hf-hub` names it), or a download (bounded timeouts, sizes
//! and redirects: [`NetLimits`]).
//!
//! The environment is honoured as by `huggingface_hub`: `HF_HUB_CACHE`, else `HF_HOME/hub`,
//! else `~/.cache/huggingface/hub` for the cache; `HF_TOKEN` (else the cached login token)
//! for gated repos; `HF_ENDPOINT`; and `HF_HUB_OFFLINE=1` to never touch the network.
//! Files already in the cache at the requested revision are used without a request.

mod download;
mod layout;
mod optional;

use std::path::{Path, PathBuf};

use hf_hub::{Repo, RepoType};

pub use download::NetLimits;
use download::{check_repo_path, is_commit_hash, Client, RepoKind};
pub use layout::*;
pub use optional::GenerationFile;
use optional::{generation_file, image_settings_file, tokenizer_settings_file};

use crate::{Error, ErrorKind, Result};

/// The files of a model as benchctl loads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    pub config: PathBuf,
    pub weights: PathBuf,
    pub tokenizer: PathBuf,
    /// The image processor's settings an HF-layout model's preprocessing follows:
    /// `preprocessor_config.json`, else `processor_config.json` (where transformers 5 saves
    /// them, in its `image_processor` section); `None` for OpenCLIP's layout, or a checkpoint
    /// with neither (the architecture's defaults then apply, and the run says so).
    pub preprocessor: Option<PathBuf>,
    /// `tokenizer_config.json` beside the tokenizer read, where there is one: what
    /// `transformers`' tokenizer class reads (its padding side, its class) for `--text-prep
    /// transformers`, and how it decodes a generated reply.
    pub tokenizer_settings: Option<PathBuf>,
    /// The layout's [`Companion`] file, where the weights lack what it holds and it was
    /// fetched from its repo.
    pub companion: Option<PathBuf>,
    /// The checkpoint's [`GENERATION_FILE`], which only replies generated here read.
    pub generation: GenerationFile,
    /// Where they came from, recorded in run files.
    pub origin: Origin,
}

/// Where a model's files came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A local directory given with `--model-path`.
    Directory(PathBuf),
    /// A hub repo at a revision, resolved to a commit.
    Hub { repo: String, revision: String, commit: String },
}

/// The files of a local model directory in either layout (`config.json` means
/// `transformers`', `open_clip_config.json` OpenCLIP's), naming every missing one.
pub fn from_dir(dir: &Path) -> Result<ModelFiles> {
    let layout = if !dir.join(HF_LAYOUT.config).is_file() && dir.join(OPEN_CLIP_LAYOUT.config).is_file() {
        OPEN_CLIP_LAYOUT
    } else {
        HF_LAYOUT
    };
    let layout = layout.with_weights_found(|file| dir.join(file).is_file());
    if layout.config == HF_LAYOUT.config && !dir.join(layout.weights).is_file() {
        // transformers' own fallbacks: PyTorch shards, then one PyTorch file.
        if let Some(weights) = HF_TORCH_WEIGHTS.into_iter().find(|file| dir.join(file).is_file()) {
            return from_dir_with(dir, Layout { weights, ..layout });
        }
    }
    from_dir_with(dir, layout)
}

/// Whether `path` is a PyTorch checkpoint (`torch.save`'s zip archive: a `.ckpt`, `.pth`, `.pt`).
pub fn is_torch_checkpoint(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok()
        && magic == *b"PK\x03\x04"
}

/// The files `--model-path` names: a model directory ([`from_dir`]), a FIBER directory
/// (`config.json` with `"model_type": "fiber"`, its weights as `model.safetensors` or one
/// PyTorch checkpoint), or a checkpoint file itself (FIBER's `.ckpt` release files), whose
/// directory holds the optional `config.json` and the tokenizer.
pub fn from_path(path: &Path) -> Result<ModelFiles> {
    if path.is_file() && is_torch_checkpoint(path) {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        return fiber_files(dir, path.to_path_buf(), path);
    }
    if path.is_dir() && is_fiber_config(&path.join(HF_LAYOUT.config)) {
        let checkpoints: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| {
                Error::caused_by(ErrorKind::MissingFile, format!("read model directory {}: {e}", path.display()), e)
            })?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && is_torch_checkpoint(p))
            .collect();
        let weights = match (path.join(HF_LAYOUT.weights), checkpoints.as_slice()) {
            (safetensors, _) if safetensors.is_file() => safetensors,
            (_, [one]) => one.clone(),
            (_, []) => {
                return Err(Error::new(
                    ErrorKind::MissingFile,
                    format!(
                        "load model directory {}: a FIBER directory holds model.safetensors or one PyTorch checkpoint (.ckpt)",
                        path.display()
                    ),
                ))
            }
            (_, several) => {
                let names: Vec<String> = several.iter().map(|p| p.display().to_string()).collect();
                return Err(Error::new(
                    ErrorKind::MissingFile,
                    format!(
                        "load model directory {}: it holds several checkpoints ({}); pass --model-path with one of them",
                        path.display(),
                        names.join(", ")
                    ),
                ));
            }
        };
        return fiber_files(path, weights, path);
    }
    from_dir(path)
}

/// Whether `config` is a `config.json` naming FIBER.
fn is_fiber_config(config: &Path) -> bool {
    std::fs::read(config)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .is_some_and(|v| v.get("model_type").and_then(|t| t.as_str()) == Some("fiber"))
}

/// A FIBER model's files: `weights`, and from `dir` the optional `config.json` and the RoBERTa
/// tokenizer (`tokenizer.json`, else `vocab.json` with `merges.txt`).
fn fiber_files(dir: &Path, weights: PathBuf, origin: &Path) -> Result<ModelFiles> {
    let tokenizer = [dir.join("tokenizer.json"), dir.join("vocab.json")].into_iter().find(|p| p.is_file()).ok_or_else(
        || {
            Error::new(
                ErrorKind::MissingFile,
                format!(
                    "load model {}: no tokenizer beside it; put roberta-base's tokenizer.json (or vocab.json and merges.txt) in {}, e.g. from https://huggingface.co/FacebookAI/roberta-base",
                    origin.display(),
                    dir.display()
                ),
            )
        },
    )?;
    Ok(ModelFiles {
        config: dir.join(HF_LAYOUT.config),
        weights,
        tokenizer,
        preprocessor: None,
        tokenizer_settings: None,
        companion: None,
        generation: GenerationFile::Absent,
        origin: Origin::Directory(origin.to_path_buf()),
    })
}

/// The files of a local model directory in `layout`, naming every missing one.
pub fn from_dir_with(dir: &Path, layout: Layout) -> Result<ModelFiles> {
    if dir.is_file() {
        return Err(Error::new(
            ErrorKind::MissingFile,
            format!(
                "open model directory {}: it is a file; --model-path takes the directory holding {}",
                dir.display(),
                layout.files().join(", ")
            ),
        ));
    }
    if !dir.is_dir() {
        return Err(Error::new(
            ErrorKind::MissingFile,
            format!("open model directory {}: it does not exist", dir.display()),
        ));
    }
    let required = layout.files();
    let missing: Vec<&str> = required.iter().copied().filter(|f| !dir.join(f).is_file()).collect();
    if !missing.is_empty() {
        return Err(Error::new(
            ErrorKind::MissingFile,
            format!(
                "load model directory {}: missing {} (a model directory holds {})",
                dir.display(),
                missing.join(", "),
                required.join(", ")
            ),
        ));
    }
    Ok(ModelFiles {
        config: dir.join(layout.config),
        weights: dir.join(layout.weights),
        tokenizer: dir.join(layout.tokenizer),
        preprocessor: layout
            .image_settings
            .then(|| IMAGE_SETTINGS_FILES.iter().map(|f| dir.join(f)).find(|p| p.is_file()))
            .flatten(),
        tokenizer_settings: Some(dir.join(TOKENIZER_SETTINGS_FILE))
            .filter(|p| (layout.image_settings || layout.generation) && p.is_file()),
        companion: None,
        generation: if layout.generation { GenerationFile::in_dir(dir) } else { GenerationFile::Absent },

        origin: Origin::Directory(dir.to_path_buf()),
    })
}

/// The hub settings read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    pub cache_dir: PathBuf,
    pub token: Option<String>,
    pub offline: bool,
    pub endpoint: Option<String>,
    /// Timeouts, redirects and sizes of downloads.
    pub limits: NetLimits,
}

impl HubSettings {
    /// Reads `HF_HUB_CACHE`, `HF_HOME`, `HF_TOKEN`, `HF_HUB_OFFLINE` and `HF_ENDPOINT`.
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// As [`HubSettings::from_env`], from any variable lookup (for tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let base = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| var("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".")).join(".cache"));
            base.join("huggingface")
        });
        let cache_dir = var("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| hf_home.join("hub"));
        let token = var("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(hf_home.join("token")).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
        });
        let offline = var("HF_HUB_OFFLINE")
            .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
            .unwrap_or(false);
        Self { cache_dir, token, offline, endpoint: var("HF_ENDPOINT"), limits: NetLimits::default() }
    }
}

/// The files of `repo` at `revision`: from the cache when all are there, else downloaded
/// (unless offline).
pub fn from_hub(repo: &str, revision: &str, settings: &HubSettings) -> Result<ModelFiles> {
    from_hub_with(repo, revision, HF_LAYOUT, settings)
}

/// As [`from_hub`], for the files of `layout`. Where the layout offers a stand-in for the
/// weights or the tokenizer, the repo's own file is taken if it has one: the cache says which
/// an earlier download found, else the download asks the hub.
pub fn from_hub_with(repo: &str, revision: &str, layout: Layout, settings: &HubSettings) -> Result<ModelFiles> {
    let in_cache = |file: &str| cached_file(&settings.cache_dir, repo, revision, file);
    let mut layout = layout.with_weights_found(|file| in_cache(file).is_some());
    let own_tokenizer_cached = in_cache(layout.tokenizer).is_some();
    // Whether the repo has its own tokenizer is known once it is cached or recorded absent.
    let tokenizer_known = layout.tokenizer_instead.is_none()
        || own_tokenizer_cached
        || recorded_absent(&settings.cache_dir, repo, revision, layout.tokenizer);
    if own_tokenizer_cached {
        layout.tokenizer_instead = None;
    }
    let missing = layout.repo_files().into_iter().find(|file| in_cache(file).is_none());
    match missing {
        Some(missing) if settings.offline => {
            return Err(Error::new(
                ErrorKind::MissingFile,
                format!(
                    "find {missing} of {repo}@{revision} in the hub cache {}: HF_HUB_OFFLINE is set, so nothing is downloaded; {}",
                    settings.cache_dir.display(),
                    bring_weights(repo, revision)
                ),
            ))
        }
        None if tokenizer_known || settings.offline => {}
        _ => layout = download_layout(repo, revision, layout, settings)?,
    }
    let mut paths = Vec::new();
    let mut commit = None;
    for file in layout.repo_files() {
        let (path, c) = in_cache(file).ok_or_else(|| {
            Error::new(
                ErrorKind::MissingFile,
                format!("find downloaded {file} of {repo}@{revision} in {}", settings.cache_dir.display()),
            )
        })?;
        commit = Some(c);
        paths.push(path);
    }
    if is_shard_index(layout.weights) {
        fetch_shards(repo, revision, &paths[1], settings)?;
    }
    let tokenizer = match layout.tokenizer_instead {
        None => paths[2].clone(),
        Some(instead) => model_file(instead.repo, instead.commit, instead.file, settings)?,
    };
    let commit = commit.unwrap_or_default();
    let preprocessor =
        if layout.image_settings { image_settings_file(repo, revision, &commit, settings)? } else { None };
    // The settings beside the tokenizer read: the repo's own, or those of the repo the stand-in
    // comes from, at its pinned commit.
    let tokenizer_settings = match layout.tokenizer_instead {
        _ if !(layout.image_settings || layout.generation) => None,
        None => tokenizer_settings_file(repo, revision, &commit, settings),
        Some(instead) => tokenizer_settings_file(instead.repo, instead.commit, instead.commit, settings),
    };
    let generation =
        if layout.generation { generation_file(repo, revision, &commit, settings) } else { GenerationFile::Absent };
    let companion = match layout.companion {
        Some(c) if !weights_hold(&paths[1], c.unless_tensor)? => {
            Some(model_file(c.file.repo, c.file.commit, c.file.file, settings)?)
        }
        _ => None,
    };
    Ok(ModelFiles {
        config: paths[0].clone(),
        weights: paths[1].clone(),
        tokenizer,
        preprocessor,
        tokenizer_settings,
        companion,
        generation,
        origin: Origin::Hub { repo: repo.to_string(), revision: revision.to_string(), commit },
    })
}

/// Downloads `layout`'s files of `repo@revision` into the cache, taking the layout's stand-in
/// for the weights or the tokenizer where the hub answers that the repo lacks its own; returns
/// the layout as the repo has it.
fn download_layout(repo: &str, revision: &str, mut layout: Layout, settings: &HubSettings) -> Result<Layout> {
    let client = client(settings)?;
    let folder = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string()).folder_name();
    let fetch = |file: &str, absent_ok: bool| {
        client
            .download_if_present(&settings.cache_dir, &folder, "", (repo, revision), file, absent_ok)
            .map_err(|e| with_hint(e, settings, "or use --model-path"))
    };
    let absent = |file: &str| {
        Error::new(ErrorKind::MissingFile, format!("download {file} of {repo}@{revision}: the server answered 404"))
    };
    fetch(layout.config, false)?.ok_or_else(|| absent(layout.config))?;
    if fetch(layout.weights, layout.weights_instead.is_some())?.is_none() {
        let instead = layout.weights_instead.filter(|&instead| instead != layout.weights);
        let Some(instead) = instead else { return Err(absent(layout.weights)) };
        if fetch(instead, true)?.is_none() {
            return Err(Error::new(
                ErrorKind::MissingFile,
                format!("download the weights of {repo}@{revision}: it has neither {} nor {instead}", layout.weights),
            ));
        }
        layout.weights = instead;
    }
    match fetch(layout.tokenizer, layout.tokenizer_instead.is_some())? {
        Some(_) => layout.tokenizer_instead = None,
        None if layout.tokenizer_instead.is_none() => return Err(absent(layout.tokenizer)),
        None => {}
    }
    Ok(layout)
}

/// Whether the cache records that `repo@revision` has no `file` (`.no_exist/{commit}/{file}`,
/// written when the hub answered 404, as `huggingface_hub` writes it).
fn recorded_absent(cache_dir: &Path, repo: &str, revision: &str, file: &str) -> bool {
    let folder = cache_dir.join(format!("models--{}", repo.replace('/', "--")));
    let commit = if is_commit_hash(revision) {
        revision.to_string()
    } else {
        match std::fs::read_to_string(folder.join("refs").join(revision)) {
            Ok(commit) => commit.trim().to_string(),
            Err(_) => return false,
        }
    };
    is_commit_hash(&commit) && folder.join(".no_exist").join(commit).join(file).is_file()
}

/// `files` of `repo` at `commit`, the commit `revision` (a branch or tag) resolved to just now,
/// recorded as `revision` and written to the cache's `refs/{revision}`: a branch that moved
/// since an earlier download is followed, not served from the older snapshot.
pub fn from_hub_at(
    repo: &str,
    revision: &str,
    commit: &str,
    layout: Layout,
    settings: &HubSettings,
) -> Result<ModelFiles> {
    let mut files = from_hub_with(repo, commit, layout, settings)?;
    if revision != commit {
        let folder = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string()).folder_name();
        write_ref(&settings.cache_dir.join(folder), revision, commit)?;
    }
    files.origin = Origin::Hub { repo: repo.to_string(), revision: revision.to_string(), commit: commit.to_string() };
    Ok(files)
}

/// `refs/{revision}` of a repo's cache folder, naming `commit`.
fn write_ref(repo_folder: &Path, revision: &str, commit: &str) -> Result<()> {
    let reference = repo_folder.join("refs").join(revision);
    let written =
        reference.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|_| std::fs::write(&reference, commit));
    written.map_err(|e| Error::caused_by(ErrorKind::MissingFile, format!("write {}: {e}", reference.display()), e))
}

/// `file` of `repo@revision` in the cache, with the commit it belongs to. The layout is
/// `models--{org}--{name}/refs/{revision}` (holding the commit) and
/// `models--{org}--{name}/snapshots/{commit}/{file}`; a revision that is a commit hash
/// needs no ref.
pub fn cached_file(cache_dir: &Path, repo: &str, revision: &str, file: &str) -> Option<(PathBuf, String)> {
    let folder = cache_dir.join(format!("models--{}", repo.replace('/', "--")));
    let commit = if is_commit_hash(revision) {
        revision.to_string()
    } else {
        std::fs::read_to_string(folder.join("refs").join(revision)).ok()?.trim().to_string()
    };
    if !is_commit_hash(&commit) {
        return None;
    }
    let path = folder.join("snapshots").join(&commit).join(file);
    path.is_file().then_some((path, commit))
}

/// Every shard the index names, in the cache beside it: downloaded unless there, or, offline,
/// an error naming the first one missing.
fn fetch_shards(repo: &str, revision: &str, index: &Path, settings: &HubSettings) -> Result<()> {
    let names = shard_names(index)?;
    let missing: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|name| cached_file(&settings.cache_dir, repo, revision, name).is_none())
        .collect();
    match missing.first() {
        None => Ok(()),
        Some(first) if settings.offline => Err(Error::new(
            ErrorKind::MissingFile,
            format!(
                "find {first} of {repo}@{revision} in the hub cache {} ({} of {} shards missing): HF_HUB_OFFLINE is set, so nothing is downloaded; {}",
                settings.cache_dir.display(),
                missing.len(),
                names.len(),
                bring_weights(repo, revision)
            ),
        )),
        Some(_) => download(repo, revision, &missing, settings),
    }
}

/// A model repo's commit at `revision` and its file names, as the hub lists them.
pub fn list_model(repo: &str, revision: &str, settings: &HubSettings) -> Result<(String, Vec<String>)> {
    client(settings)?
        .repo_info(RepoKind::Model, repo, revision)
        .map_err(|e| with_hint(e, settings, "or use --model-path"))
}

/// One file of a model repo at `revision`: from the cache, else downloaded (offline, an error
/// saying how to bring it here).
pub fn model_file(repo: &str, revision: &str, file: &str, settings: &HubSettings) -> Result<PathBuf> {
    if let Some((path, _)) = cached_file(&settings.cache_dir, repo, revision, file) {
        return Ok(path);
    }
    if settings.offline {
        return Err(offline_miss(repo, revision, file, settings));
    }
    download(repo, revision, &[file], settings)?;
    cached_file(&settings.cache_dir, repo, revision, file).map(|(path, _)| path).ok_or_else(|| {
        Error::new(
            ErrorKind::MissingFile,
            format!("find downloaded {file} of {repo}@{revision} in {}", settings.cache_dir.display()),
        )
    })
}

/// `file` of `repo@revision` is not in the cache and nothing may be downloaded.
pub fn offline_miss(repo: &str, revision: &str, file: &str, settings: &HubSettings) -> Error {
    Error::new(
        ErrorKind::MissingFile,
        format!(
            "find {file} of {repo}@{revision} in the hub cache {}: HF_HUB_OFFLINE is set, so nothing is downloaded; {}",
            settings.cache_dir.display(),
            bring_weights(repo, revision)
        ),
    )
}

fn download(repo: &str, revision: &str, files: &[&str], settings: &HubSettings) -> Result<()> {
    let client = client(settings)?;
    let folder = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string()).folder_name();
    for file in files {
        client
            .download(&settings.cache_dir, &folder, "", (repo, revision), file)
            .map_err(|e| with_hint(e, settings, "or use --model-path"))?;
    }
    Ok(())
}

/// A dataset repo's files as `fetch` found them: the commit the revision resolved to, the
/// snapshot folder of the hub cache holding that commit's files, and each chosen repo file
/// with its path there.
pub struct DatasetFiles {
    pub commit: String,
    pub snapshot: PathBuf,
    /// Files in the repo at that commit (offline: in the cache's snapshot of it).
    pub listed: usize,
    pub files: Vec<(String, PathBuf)>,
    /// How many of them were downloaded now (the others were in the cache).
    pub downloaded: usize,
}

/// The cache's snapshot of the dataset `repo` at `revision` (a commit, or a branch or tag its
/// `refs/` names), with its commit, if the cache has one.
pub fn cached_dataset(cache_dir: &Path, repo: &str, revision: &str) -> Option<(PathBuf, String)> {
    let folder = cache_dir.join(Repo::with_revision(repo.to_string(), RepoType::Dataset, "main".into()).folder_name());
    let commit = if is_commit_hash(revision) {
        revision.to_string()
    } else {
        check_repo_path(revision).ok()?;
        std::fs::read_to_string(folder.join("refs").join(revision)).ok()?.trim().to_string()
    };
    let snapshot = folder.join("snapshots").join(&commit);
    (is_commit_hash(&commit) && snapshot.is_dir()).then_some((snapshot, commit))
}

/// The files of a dataset repo at `revision` that `select` picks from the repo's file list,
/// in the hub cache: downloaded where the cache lacks them (a part left by a download that
/// stopped is resumed), or, offline (`HF_HUB_OFFLINE`), found in the cache's snapshot of the
/// revision, whose files then stand for the repo's list.
pub fn fetch_dataset(
    repo: &str,
    revision: &str,
    settings: &HubSettings,
    select: &dyn Fn(&[String]) -> Vec<String>,
) -> Result<DatasetFiles> {
    if settings.offline {
        return cached_dataset_files(repo, revision, settings, select);
    }
    let client = client(settings)?;
    let (commit, names) =
        client.repo_info(RepoKind::Dataset, repo, revision).map_err(|e| with_hint(e, settings, ""))?;
    let folder = Repo::with_revision(repo.to_string(), RepoType::Dataset, commit.clone()).folder_name();
    let snapshot = settings.cache_dir.join(&folder).join("snapshots").join(&commit);
    let mut downloaded = 0;
    let files = select(&names)
        .into_iter()
        .map(|name| {
            check_repo_path(&name).map_err(|e| {
                Error::new(ErrorKind::MissingFile, format!("download the dataset {repo}: the hub lists a file {e}"))
            })?;
            // A file of this commit already in the cache is not downloaded again; the others
            // are asked for at the commit, so a branch that moves meanwhile changes nothing.
            let path = match snapshot.join(&name) {
                path if path.is_file() => path,
                _ => {
                    downloaded += 1;
                    let (path, _) = client
                        .download(&settings.cache_dir, &folder, "datasets/", (repo, &commit), &name)
                        .map_err(|e| with_hint(e, settings, ""))?;
                    path
                }
            };
            Ok((name, path))
        })
        .collect::<Result<Vec<_>>>()?;
    if revision != commit {
        write_ref(&settings.cache_dir.join(&folder), revision, &commit)
            .map_err(|e| Error::new(e.kind(), format!("download the dataset {repo}: {e}")))?;
    }
    std::fs::create_dir_all(&snapshot).map_err(|e| {
        Error::caused_by(
            ErrorKind::MissingFile,
            format!("download the dataset {repo}: create {}: {e}", snapshot.display()),
            e,
        )
    })?;
    Ok(DatasetFiles { commit, snapshot, listed: names.len(), files, downloaded })
}

/// [`fetch_dataset`] offline: the cache's snapshot of the revision, its files the list.
fn cached_dataset_files(
    repo: &str,
    revision: &str,
    settings: &HubSettings,
    select: &dyn Fn(&[String]) -> Vec<String>,
) -> Result<DatasetFiles> {
    let Some((snapshot, commit)) = cached_dataset(&settings.cache_dir, repo, revision) else {
        return Err(Error::new(
            ErrorKind::MissingFile,
            format!(
                "find the dataset {repo}@{revision} in the hub cache {}: HF_HUB_OFFLINE is set, so nothing is downloaded; run `benchctl fetch` for it on a machine online and copy its hub cache here (docs/models.md, \"Offline machines\")",
                settings.cache_dir.display()
            ),
        ));
    };
    let mut names = Vec::new();
    files_below(&snapshot, "", &mut names);
    names.sort();
    let files =
        select(&names).into_iter().map(|name| (snapshot.join(&name), name)).map(|(path, name)| (name, path)).collect();
    Ok(DatasetFiles { commit, snapshot, listed: names.len(), files, downloaded: 0 })
}

/// The files below `dir` (links followed to files, as a snapshot's are), `/`-joined names
/// after `prefix`.
fn files_below(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        let path = entry.path();
        if path.is_file() {
            out.push(name);
        } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
            files_below(&path, &format!("{name}/"), out);
        }
    }
}

fn client(settings: &HubSettings) -> Result<Client> {
    let endpoint = settings.endpoint.as_deref().unwrap_or("https://huggingface.co");
    Client::new(endpoint, settings.token.clone(), settings.limits)
}

/// How to bring a model's files to a machine that cannot download them (docs/models.md,
/// "Offline machines").
fn bring_weights(repo: &str, revision: &str) -> String {
    format!(
        "to bring the files here, run `hf download {repo} --revision {revision}` (or this benchctl command) on a machine online and copy its hub cache (`$HF_HOME/hub`, by default ~/.cache/huggingface/hub) to this one's, or put the files in a directory and pass --model-path DIR (docs/models.md, \"Offline machines\")"
    )
}

/// A download's error with the way out: refused access names the token, anything else
/// offline use (and `extra`, e.g. `--model-path`).
fn with_hint(error: Error, settings: &HubSettings, extra: &str) -> Error {
    let extra = if extra.is_empty() { String::new() } else { format!("; {extra}") };
    if error.kind() == ErrorKind::AccessDenied {
        let hint = if settings.token.is_some() {
            "the token in HF_TOKEN was refused: check it has access (gated repos need their terms accepted on huggingface.co)"
        } else {
            "this repo needs a token: accept its terms on huggingface.co and set HF_TOKEN"
        };
        Error::new(ErrorKind::AccessDenied, format!("{error}: {hint}{extra}"))
    } else {
        Error::new(
            error.kind(),
            format!("{error} (offline? set HF_HUB_OFFLINE=1 to use the cache only{extra}; docs/models.md, \"Offline machines\", says how to bring the files here)"),
        )
    }
}
