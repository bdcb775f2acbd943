//! `benchctl fetch`: a suite's data, or any dataset repo, from the Hugging Face hub.
//!
//! - A manifest with a `[hub]` section names its repo, revision and files: they are
//!   downloaded into the hub cache and the suite is read there, from the cache's snapshot of
//!   the revision (`--data-dir` places them in a directory instead).
//! - `--dataset ORG/NAME[@REV]` does the same for any dataset repo (`--include` picks files).
//! - The built-in suites on the hub (Winoground, SPEC) are laid out as their loaders expect:
//!   copied into the data directory, a leading `data/` of the repo layout dropped, `.zip`
//!   archives unpacked where they lie.
//!
//! Downloads go through the hub cache (`HF_HOME`, `HF_TOKEN`, `HF_ENDPOINT`), resume a part a
//! stopped download left, and record the commit the revision resolved to; offline
//! (`HF_HUB_OFFLINE=1`) the cache's snapshot is read instead. A data directory filled here
//! holds [`ORIGIN_FILE`], so that runs record the commit (a snapshot names it itself).

use std::path::{Component, Path, PathBuf};

use benchctl_models::hub::{self, DatasetFiles, HubSettings};
use benchctl_suites::hub::{HubOrigin, HubSource, ORIGIN_FILE};
use benchctl_suites::SuiteInfo;

use crate::{Error, ErrorKind, Result};

/// Built-in suites with a dataset repo on the hub (manifests name theirs in `[hub]`).
pub const HUB_DATASETS: &[(&str, &str)] = &[("winoground", "facebook/winoground"), ("spec", "wjpoom/SPEC")];

/// The repo files a built-in suite needs, from the repo's file list: Winoground's parquet
/// shards (`data/test-*.parquet`, the main branch) or, at revisions before them,
/// `examples.jsonl` and `images.zip`; SPEC's `data.zip`. Nothing else (READMEs, licences,
/// statistics).
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

/// What `benchctl fetch` downloads.
#[derive(Debug, Clone)]
pub struct FetchPlan {
    pub target: FetchTarget,
    /// Where to put the data [default: a manifest's suite and `--dataset` stay in the hub
    /// cache; a built-in suite goes to datasets/SUITE].
    pub data_dir: Option<PathBuf>,
    /// The repo's branch, tag or commit [default: the manifest's `hub.revision`, else main].
    pub revision: Option<String>,
}

/// A suite by id, or a dataset repo by id with the patterns of the files wanted.
#[derive(Debug, Clone)]
pub enum FetchTarget {
    Suite(String),
    Dataset { repo: String, include: Vec<String> },
}

impl FetchTarget {
    /// `--dataset ORG/NAME[@REV]` with its `--include` patterns (default: every file): the
    /// target and the revision the id names.
    pub fn dataset(id: &str, include: &[String]) -> Result<(Self, Option<String>)> {
        let (repo, revision) = match id.split_once('@') {
            Some((repo, rev)) => (repo, Some(rev.to_string())),
            None => (id, None),
        };
        if !benchctl_suites::hub::is_repo_id(repo) || revision.as_deref() == Some("") {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("use --dataset {id}: a dataset is named ORG/NAME or ORG/NAME@REVISION, as on huggingface.co"),
            ));
        }
        let include = if include.is_empty() { vec!["*".to_string()] } else { include.to_vec() };
        Ok((FetchTarget::Dataset { repo: repo.to_string(), include }, revision))
    }
}

/// Fetches what the plan names and returns what was done, for the user.
pub fn run(plan: &FetchPlan, settings: &HubSettings) -> Result<String> {
    match &plan.target {
        FetchTarget::Dataset { repo, include } => {
            let hub = HubSource {
                repo: repo.clone(),
                revision: plan.revision.clone().unwrap_or_else(|| "main".into()),
                files: include.clone(),
                gated: false,
                unpack: false,
            };
            fetch_repo(&hub, plan.data_dir.as_deref(), settings, None)
        }
        FetchTarget::Suite(id) => {
            let info = benchctl_suites::find(id)?;
            if let Some(hub) = info.hub() {
                let hub = HubSource {
                    revision: plan.revision.clone().unwrap_or_else(|| hub.revision.clone()),
                    ..hub.clone()
                };
                if hub.unpack {
                    let data_dir =
                        plan.data_dir.clone().unwrap_or_else(|| info.default_data_dir(Path::new("datasets")));
                    return fetch_and_unpack(&hub, &data_dir, settings, &info);
                }
                return fetch_repo(&hub, plan.data_dir.as_deref(), settings, Some(&info));
            }
            fetch_builtin(&info, plan, settings)
        }
    }
}

/// Where a suite's data is read by default under `root`: `root/<id>` (`datasets/<id>`), or,
/// for a suite whose manifest names a hub repo, where that directory does not exist, the hub
/// cache's snapshot of its revision when the cache has one (not for a release of archives,
/// which `fetch` unpacks into `root/<id>`).
pub fn default_data_dir(info: &SuiteInfo, root: &Path) -> PathBuf {
    let local = info.default_data_dir(root);
    match info.hub() {
        Some(hub) if !local.exists() && !hub.unpack => {
            hub::cached_dataset(&HubSettings::from_env().cache_dir, &hub.repo, &hub.revision)
                .map_or(local, |(snapshot, _)| snapshot)
        }
        _ => local,
    }
}

/// A repo's files into the hub cache (and into `data_dir` where given): every pattern of
/// `hub.files` must match a file. `suite` is the suite they are for, if any.
fn fetch_repo(
    hub: &HubSource,
    data_dir: Option<&Path>,
    settings: &HubSettings,
    suite: Option<&SuiteInfo>,
) -> Result<String> {
    let fetched = download(hub, settings, suite)?;
    let placed = match data_dir {
        Some(dir) => {
            for (name, local) in &fetched.files {
                place(local, &inside(dir, name)?)?;
            }
            write_origin(dir, &HubOrigin { repo: hub.repo.clone(), commit: fetched.commit.clone() })?;
            dir.to_path_buf()
        }
        None => fetched.snapshot.clone(),
    };
    Ok(describe(hub, &fetched, &placed, settings.offline, suite))
}

/// A manifest's release of archives (`hub.unpack`): its files into the hub cache, then each
/// `.zip` unpacked into `data_dir` where it lies in the repo, the other files placed beside.
/// The origin is written last, so a stopped unpack leaves no directory that passes for the
/// release (fetching again unpacks it anew).
fn fetch_and_unpack(hub: &HubSource, data_dir: &Path, settings: &HubSettings, suite: &SuiteInfo) -> Result<String> {
    let fetched = download(hub, settings, Some(suite))?;
    let origin = data_dir.join(ORIGIN_FILE);
    if let Err(e) = std::fs::remove_file(&origin) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(write_error(&origin, e));
        }
    }
    let (mut archives, mut written) = (0, 0);
    for (name, local) in &fetched.files {
        let target = inside(data_dir, name)?;
        if name.ends_with(".zip") {
            written += unzip(local, target.parent().unwrap_or(data_dir))?;
            archives += 1;
        } else {
            place(local, &target)?;
            written += 1;
        }
    }
    write_origin(data_dir, &HubOrigin { repo: hub.repo.clone(), commit: fetched.commit.clone() })?;
    let read = if data_dir == suite.default_data_dir(Path::new("datasets")) {
        "reads it there".to_string()
    } else {
        format!("reads it with --data-dir {}", data_dir.display())
    };
    Ok(format!(
        "{}\nunpacked {archives} archive(s) into {} ({written} files written)\n`benchctl eval --suite {}` {read}",
        describe(hub, &fetched, &fetched.snapshot, settings.offline, None),
        data_dir.display(),
        suite.id,
    ))
}

/// The files of `hub.files` at `hub.revision` into the hub cache (found there offline), every
/// pattern matching a file; `suite` is the suite they are for, if any.
fn download(hub: &HubSource, settings: &HubSettings, suite: Option<&SuiteInfo>) -> Result<DatasetFiles> {
    let (repo, revision) = (hub.repo.as_str(), hub.revision.as_str());
    let failed = |e: benchctl_models::Error| Error::new(ErrorKind::Data, format!("fetch {}: {e}", what(hub, suite)));
    if hub.gated && settings.token.is_none() && !settings.offline {
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "fetch {}: the dataset {repo} is gated: accept its terms on https://huggingface.co/datasets/{repo} and set HF_TOKEN to a token of that account",
                what(hub, suite)
            ),
        ));
    }
    let fetched = hub::fetch_dataset(repo, revision, settings, &|names| hub.select(names)).map_err(failed)?;
    let found: Vec<String> = fetched.files.iter().map(|(n, _)| n.clone()).collect();
    if let Some(unmatched) =
        hub.files.iter().find(|p| benchctl_suites::hub::select(&[p.to_string()], &found).is_empty())
    {
        let place = if settings.offline { "the hub cache's snapshot" } else { "the repo" };
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "fetch {}: no file of {place} at commit {} matches `{unmatched}` ({} files listed)",
                what(hub, suite),
                fetched.commit,
                fetched.listed
            ),
        ));
    }
    Ok(fetched)
}

/// The suite or dataset a fetch is for, in messages.
fn what(hub: &HubSource, suite: Option<&SuiteInfo>) -> String {
    match suite {
        Some(info) => format!("the suite {} (dataset {}@{})", info.id, hub.repo, hub.revision),
        None => format!("the dataset {}@{}", hub.repo, hub.revision),
    }
}

/// What a fetch did, and where the data is read from now.
fn describe(hub: &HubSource, fetched: &DatasetFiles, at: &Path, offline: bool, suite: Option<&SuiteInfo>) -> String {
    let names: Vec<&str> = fetched.files.iter().map(|(n, _)| n.as_str()).collect();
    let how = if offline {
        "found in the hub cache (HF_HUB_OFFLINE is set)".to_string()
    } else {
        format!(
            "fetched ({} downloaded, {} already in the hub cache)",
            fetched.downloaded,
            names.len() - fetched.downloaded
        )
    };
    let mut said = format!(
        "{} at commit {} (revision {}): {} of its {} files {how}: {}\nin {}",
        hub.repo,
        fetched.commit,
        hub.revision,
        names.len(),
        fetched.listed,
        names.join(", "),
        at.display()
    );
    if let Some(info) = suite {
        let default = default_data_dir(info, Path::new("datasets"));
        let read = if std::path::absolute(&default).ok() == std::path::absolute(at).ok() {
            format!("\n`benchctl eval --suite {}` reads it there", info.id)
        } else {
            format!(
                "\n`benchctl eval --suite {}` reads {} by default; pass --data-dir {} to read these",
                info.id,
                default.display(),
                at.display()
            )
        };
        said.push_str(&read);
    }
    said
}

/// A built-in suite from its dataset repo, laid out as its loader expects.
fn fetch_builtin(info: &SuiteInfo, args: &FetchPlan, settings: &HubSettings) -> Result<String> {
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
            place(local, &target)?;
            written += 1;
        }
    }
    write_origin(&data_dir, &HubOrigin { repo: repo.to_string(), commit: fetched.commit.clone() })?;
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

/// `local` (a file of the hub cache) at `target`: a hard link to its blob where the file
/// system allows one (no second copy of gigabytes), else a copy.
fn place(local: &Path, target: &Path) -> Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| write_error(parent, e))?;
    }
    let _ = std::fs::remove_file(target);
    let blob = std::fs::canonicalize(local).unwrap_or_else(|_| local.to_path_buf());
    if std::fs::hard_link(&blob, target).is_ok() {
        return Ok(());
    }
    std::fs::copy(&blob, target).map(|_| ()).map_err(|e| write_error(target, e))
}

/// [`ORIGIN_FILE`] in `dir`: the repo and commit its files came from.
fn write_origin(dir: &Path, origin: &HubOrigin) -> Result<()> {
    let path = dir.join(ORIGIN_FILE);
    std::fs::create_dir_all(dir).map_err(|e| write_error(dir, e))?;
    let text = serde_json::to_string_pretty(origin).unwrap_or_default();
    std::fs::write(&path, text).map_err(|e| write_error(&path, e))
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
