//! `benchctl suites`: every suite benchctl can load (built in and bundled manifests) and what
//! this machine has of its data under a root (`datasets/<id>` by default): nothing, the
//! annotations without (some of) their images, or everything, with how to get what is missing.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use benchctl_suites::{rococo, SuiteInfo, SuiteKind};

/// One suite and the state of its data.
pub struct SuiteStatus {
    pub info: SuiteInfo,
    pub data_dir: PathBuf,
    pub data: DataStatus,
}

/// What a suite's data directory holds.
pub enum DataStatus {
    /// No directory.
    Missing,
    /// Annotations that give no item (absent or unreadable): the first problem.
    NoAnnotations { problem: String },
    /// Items, and how many of their distinct image files are missing (with one of them).
    Items { items: usize, images: usize, missing_images: usize, first_missing: Option<PathBuf> },
}

/// Every suite's status under `root`, in `benchctl suites` order.
pub fn statuses(root: &Path) -> Vec<SuiteStatus> {
    benchctl_suites::all()
        .into_iter()
        .map(|info| {
            let data_dir = crate::fetch::default_data_dir(&info, root);
            let data = if data_dir.is_dir() { status(&info, &data_dir) } else { DataStatus::Missing };
            SuiteStatus { info, data_dir, data }
        })
        .collect()
}

fn status(info: &SuiteInfo, data_dir: &Path) -> DataStatus {
    let (items, files): (usize, Vec<PathBuf>) = match info.kind {
        SuiteKind::Galleries => match rococo::load(data_dir) {
            Ok(data) => (data.images.len(), data.images),
            Err(e) => return DataStatus::NoAnnotations { problem: e.to_string() },
        },
        SuiteKind::Items { .. } | SuiteKind::Manifest(_) => match info.load_all(data_dir) {
            Ok((suite, problems)) if suite.items.is_empty() => {
                let problem = problems.into_first().map_or_else(|| "it holds no items".to_string(), |e| e.to_string());
                return DataStatus::NoAnnotations { problem };
            }
            Ok((suite, _)) => {
                let mut seen = HashSet::new();
                let files = suite
                    .items
                    .distinct_sources()
                    .iter()
                    .map(|s| s.path().to_path_buf())
                    .filter(|p| seen.insert(p.clone()));
                (suite.items.len(), files.collect())
            }
            Err(e) => return DataStatus::NoAnnotations { problem: e.to_string() },
        },
    };
    let mut missing = files.iter().filter(|f| !f.is_file());
    let first_missing = missing.next().cloned();
    let missing_images = first_missing.as_ref().map_or(0, |_| 1 + missing.count());
    DataStatus::Items { items, images: files.len(), missing_images, first_missing }
}

impl SuiteStatus {
    /// The state in words, with what to do about what is missing.
    pub fn describe(&self) -> String {
        let info = &self.info;
        let official = |items: usize| match info.expected_items {
            Some(expected) if expected != items => format!(" (the official release has {expected})"),
            _ => String::new(),
        };
        match &self.data {
            DataStatus::Missing => {
                format!("not here ({} does not exist): {}", self.data_dir.display(), info.how_to_get)
            }
            DataStatus::NoAnnotations { problem } => {
                format!("no readable annotations in {}: {problem}; {}", self.data_dir.display(), info.how_to_get)
            }
            DataStatus::Items { items, images, missing_images: 0, .. } => {
                format!("ready: {items} items{}, all {images} images in {}", official(*items), self.data_dir.display())
            }
            DataStatus::Items { items, images, missing_images, first_missing } => format!(
                "annotations only: {items} items{}, {missing_images} of {images} images missing (e.g. {}); {}",
                official(*items),
                first_missing.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
                info.how_to_get
            ),
        }
    }
}
