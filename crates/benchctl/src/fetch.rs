//! `benchctl fetch`: a suite's data from its Hugging Face dataset repo (Winoground, SPEC),
//! laid out as the loader expects; for suites not on the hub, where and how to get them.
//!
//! Downloads go through the hub cache (`HF_HOME`, `HF_TOKEN`, `HF_ENDPOINT`,
//! `HF_HUB_OFFLINE`); files are then copied into the data directory, a leading `data/` of
//! the repo layout dropped, and `.zip` archives unpacked where they lie.

use std::path::{Component, Path, PathBuf};

use benchctl_models::hub::{self, HubSettings};

use crate::cli::FetchArgs;
use crate::{Error, ErrorKind, Result};

/// Suites with a dataset repo on the hub.
pub const HUB_DATASETS: &[(&str, &str)] = &[("winoground", "facebook/winoground"), ("spec", "wjpoom/SPEC")];

/// Fetches the suite and returns what was done, for the user.
pub fn run(args: &FetchArgs, settings: &HubSettings) -> Result<String> {
    let info = benchctl_suites::find(&args.suite)?;
    let Some((_, repo)) = HUB_DATASETS.iter().find(|(id, _)| *id == info.id) else {
        return Ok(format!("{} is not on the Hugging Face hub; to get it: {}", info.id, info.how_to_get));
    };
    let data_dir = args.data_dir.clone().unwrap_or_else(|| Path::new("datasets").join(info.id));
    // A failed download is a data problem (exit code 3), whatever the hub client calls it.
    let files = hub::fetch_dataset(repo, "main", settings).map_err(|e| Error::new(ErrorKind::Data, e.to_string()))?;
    let mut written = 0;
    for (name, local) in &files {
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
    Ok(format!("fetched {repo} into {} ({} files from {} in the repo)", data_dir.display(), written, files.len()))
}

fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Results, format!("write {}: {e}", path.display()))
}

/// `root/relative`, refusing names that could leave `root`.
fn inside(root: &Path, relative: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Error::new(ErrorKind::Data, format!("accept the repo file name `{relative}`: it would leave {}", root.display())));
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
        // `enclosed_name` refuses absolute paths and `..`.
        let name = entry.enclosed_name().ok_or_else(|| bad(format!("entry {i} would leave {}", dir.display())))?;
        let target = dir.join(name);
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
