//! A checkpoint's optional files (the tokenizer's settings, the image settings, the generation
//! settings): from the hub cache, else downloaded where the repository has them; what is known
//! absent (the hub's 404, recorded under `.no_exist/` as `huggingface_hub` records it) is not
//! asked again.

use std::path::{Path, PathBuf};

use hf_hub::{Repo, RepoType};

use super::{
    bring_weights, cached_file, client, recorded_absent, with_hint, HubSettings, GENERATION_FILE, IMAGE_SETTINGS_FILES,
    TOKENIZER_SETTINGS_FILE,
};
use crate::{Error, ErrorKind, Result};

/// Whether a checkpoint has a [`GENERATION_FILE`], and where.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GenerationFile {
    Found(PathBuf),
    /// It has none (`transformers` then takes the stop tokens from `config.json`).
    #[default]
    Absent,
    /// Not known: a hub cache read offline holds neither the file nor the hub's answer that
    /// the repo lacks it.
    Unknown,
}

impl GenerationFile {
    /// The file in `dir`, or [`GenerationFile::Absent`].
    pub(super) fn in_dir(dir: &Path) -> Self {
        let path = dir.join(GENERATION_FILE);
        if path.is_file() {
            GenerationFile::Found(path)
        } else {
            GenerationFile::Absent
        }
    }
}

/// The repo's `tokenizer_config.json`, where it has one: from the cache, else downloaded where
/// the repo has it. `--text-prep transformers` needs it, and says so when it is missing; a
/// reply's decoding without it is `transformers`' default; so an offline cache without it, or
/// a failed request, is no error here.
pub(super) fn tokenizer_settings_file(
    repo: &str,
    revision: &str,
    commit: &str,
    settings: &HubSettings,
) -> Option<PathBuf> {
    if let Some((path, _)) = cached_file(&settings.cache_dir, repo, commit, TOKENIZER_SETTINGS_FILE) {
        return Some(path);
    }
    let folder = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string()).folder_name();
    let recorded_absent =
        settings.cache_dir.join(&folder).join(".no_exist").join(commit).join(TOKENIZER_SETTINGS_FILE).is_file();
    if settings.offline || recorded_absent {
        return None;
    }
    let client = client(settings).ok()?;
    let found =
        client.download_if_present(&settings.cache_dir, &folder, "", (repo, commit), TOKENIZER_SETTINGS_FILE, true);
    found.ok().flatten().map(|(path, _)| path)
}

/// The repo's [`GENERATION_FILE`]: from the cache, else downloaded where the repo has one. A
/// failed request, or an offline cache without the hub's answer, leaves it
/// [`GenerationFile::Unknown`]: only generated replies need it, and they refuse to run without
/// knowing it.
pub(super) fn generation_file(repo: &str, revision: &str, commit: &str, settings: &HubSettings) -> GenerationFile {
    if let Some((path, _)) = cached_file(&settings.cache_dir, repo, commit, GENERATION_FILE) {
        return GenerationFile::Found(path);
    }
    if recorded_absent(&settings.cache_dir, repo, commit, GENERATION_FILE) {
        return GenerationFile::Absent;
    }
    if settings.offline {
        return GenerationFile::Unknown;
    }
    let folder = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string()).folder_name();
    let Ok(client) = client(settings) else { return GenerationFile::Unknown };
    match client.download_if_present(&settings.cache_dir, &folder, "", (repo, commit), GENERATION_FILE, true) {
        Ok(Some((path, _))) => GenerationFile::Found(path),
        Ok(None) => GenerationFile::Absent,
        Err(_) => GenerationFile::Unknown,
    }
}

/// The repo's image settings file ([`IMAGE_SETTINGS_FILES`], first found first): from the
/// cache, else downloaded where the repo has one; `None` when the hub answered that it has
/// neither (recorded in the cache's `.no_exist/{commit}/`, which offline runs read).
pub(super) fn image_settings_file(
    repo: &str,
    revision: &str,
    commit: &str,
    settings: &HubSettings,
) -> Result<Option<PathBuf>> {
    let cached = |file: &str| cached_file(&settings.cache_dir, repo, commit, file).map(|(path, _)| path);
    if let Some(path) = IMAGE_SETTINGS_FILES.iter().find_map(|file| cached(file)) {
        return Ok(Some(path));
    }
    let folder = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string()).folder_name();
    let absent = |file: &str| settings.cache_dir.join(&folder).join(".no_exist").join(commit).join(file).is_file();
    if IMAGE_SETTINGS_FILES.iter().all(|file| absent(file)) {
        return Ok(None);
    }
    if settings.offline {
        return Err(Error::new(
            ErrorKind::MissingFile,
            format!(
                "find {} of {repo}@{revision} in the hub cache {}: HF_HUB_OFFLINE is set, so nothing is downloaded; {}",
                IMAGE_SETTINGS_FILES.join(" or "),
                settings.cache_dir.display(),
                bring_weights(repo, revision)
            ),
        ));
    }
    let client = client(settings)?;
    for file in IMAGE_SETTINGS_FILES {
        if absent(file) {
            continue;
        }
        let found = client
            .download_if_present(&settings.cache_dir, &folder, "", (repo, commit), file, true)
            .map_err(|e| with_hint(e, settings, "or use --model-path"))?;
        if let Some((path, _)) = found {
            return Ok(Some(path));
        }
    }
    Ok(None)
}
