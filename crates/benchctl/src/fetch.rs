//! `benchctl fetch`: a suite's data from its Hugging Face dataset repo (Winoground, SPEC),
//! laid out as the loader expects; for suites not on the hub, where and how to get them.
//!
//! Downloads go through the hub cache (`HF_HOME`, `HF_TOKEN`, `HF_ENDPOINT`,
//! `HF_HUB_OFFLINE`); files are then copied into the data directory, a leading `data/` of
//! the repo layout dropped, and `.zip` archives unpacked where they lie.

use std::path::{Component, Path, PathBuf};

use benchctl_models::hub::{self, HubSettings};

use crate::{Error, ErrorKind, Result};

/// Suites with a dataset repo on the hub.
pub const HUB_DATASETS: &[(&str, &str)] = &[("winoground", "facebook/winoground"), ("spec", "wjpoom/SPEC")];

/// The repo files a suite needs, from the repo's file list: Winoground's parquet shards
/// (`data/test-*.parquet`, the main branch) or, at revisions before them, `examples.jsonl` and
/// `images.zip`; SPEC's `data.zip`. Nothing else (READMEs, licences, statistics).
pub fn needed_files(suite: &str, names: &[String]) -> Vec<String> {
    let base = |n: &String| n.rsplit('/').next().unwrap_or(n).to_string();
    match suite {
        "winoground" => {
            let parquet: Vec<String> =
                names.iter().filter(|n| base(n).starts_with("test-") && n.ends_with(".parquet")).cloned().collect();
            if !parquet.is_empty() {
                return parquet;
            }
            names.iter().filter(|n| ["examples.jsonl", "images.zip"].contains(&base(n).as_str())).cloned().collect()
        }
        "spec" => names.iter().filter(|n| base(n) == "data.zip").cloned().collect(),
        _ => Vec::new(),
    }
}

/// Fetches the suite and returns what was done, for the user.
/// What `benchctl fetch` downloads.
#[derive(Debug, Clone)]
pub struct FetchPlan {
    pub suite: String,
    /// Where to put the data [default: datasets/SUITE].
    pub data_dir: Option<std::path::PathBuf>,
    /// The dataset repo's branch, tag or commit [default: main].
    pub revision: Option<String>,
}

pub fn run(args: &FetchPlan, settings: &HubSettings) -> Result<String> {
    let info = benchctl_suites::find(&args.suite)?;
    let Some((_, repo)) = HUB_DATASETS.iter().find(|(id, _)| *id == info.id) else {
        return Ok(format!("{} is not on the Hugging Face hub; to get it: {}", info.id, info.how_to_get));
    };
    let data_dir = args.data_dir.clone().unwrap_or_else(|| info.default_data_dir(Path::new("datasets")));
    // A failed download is a data problem (exit code 3), whatever the hub client calls it.
    let revision = args.revision.as_deref().unwrap_or("main");
    let select = |names: &[String]| needed_files(&info.id, names);
    let fetched = hub::fetch_dataset(repo, revision, settings, &select)
        .map_err(|e| Error::new(ErrorKind::Data, e.to_string()))?;
    if fetched.files.is_empty() {
        return Err(Error::new(
            ErrorKind::Data,
            format!("fetch {repo}@{revision}: none of its {} files is one {} needs", fetched.listed, info.id),
        ));
    }
    let mut written = 0;
    for (name, local) in &fetched.files {
        let relative = name.strip_prefix("data/").unwrap_or(name);
        let target = inside(&data_dir, relative)?;
        if relative.ends_with(".zip") {
            written += unzip(local, target.parent().unwrap_or(&data_dir))?;
        } else {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| write_error(parent, e))?;
            }
            std::fs::copy(local, &target).map_err(|e| write_error(&target, e))?;
            written += 1;
        }
    }
    let names: Vec<&str> = fetched.files.iter().map(|(n, _)| n.as_str()).collect();
    Ok(format!(
        "fetched {repo} at commit {} (revision {revision}) into {}: {} of its {} files ({}), {written} files written",
        fetched.commit,
        data_dir.display(),
        names.len(),
        fetched.listed,
        names.join(", ")
    ))
}

fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Results, format!("write {}: {e}", path.display()))
}

/// `root/relative`, refusing names that could leave `root`.
fn inside(root: &Path, relative: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Error::new(
            ErrorKind::Data,
            format!("accept the repo file name `{relative}`: it would leave {}", root.display()),
        ));
    }
    Ok(root.join(rel))
}

/// Unpacks a zip archive into `dir`; returns the number of files written.
fn unzip(archive: &Path, dir: &Path) -> Result<usize> {
    let bad = |e: String| Error::new(ErrorKind::Data, format!("unpack {}: {e}", archive.display()));
    let file = std::fs::File::open(archive).map_err(|e| bad(e.to_string()))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut written = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| bad(e.to_string()))?;
        let shown = entry.name().map(|n| n.into_owned()).unwrap_or_else(|_| format!("#{i}"));
        // `enclosed_name` refuses `..` that leaves and turns an absolute name relative; an
        // absolute name is refused here rather than silently moved.
        let absolute = shown.starts_with(['/', '\\']) || shown.get(1..2) == Some(":");
        let name = entry
            .enclosed_name()
            .filter(|_| !absolute)
            .ok_or_else(|| bad(format!("entry `{shown}` would leave {}", dir.display())))?;
        let target = dir.join(name);
        // A link could point anywhere, and a later entry written through it would land there.
        if entry.is_symlink() {
            return Err(bad(format!("entry `{shown}` is a symbolic link; a dataset archive holds files")));
        }
        if entry.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| write_error(&target, e))?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| write_error(parent, e))?;
        }
        let mut out = std::fs::File::create(&target).map_err(|e| write_error(&target, e))?;
        std::io::copy(&mut entry, &mut out).map_err(|e| bad(format!("entry `{}`: {e}", target.display())))?;
        written += 1;
    }
    Ok(written)
}
