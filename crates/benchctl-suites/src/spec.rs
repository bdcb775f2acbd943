//! SPEC (Peng et al., "Synthesize, Diagnose, and Optimize: Towards Fine-Grained
//! Vision-Language Understanding", CVPR 2024, <https://arxiv.org/abs/2312.00081>; data: the
//! `wjpoom/SPEC` dataset repo).
//!
//! Layout: one folder per subset (`absolute_size`, `relative_size`, `absolute_spatial`,
//! `relative_spatial`, `existence`, `count`), each with
//! - `image2text.json`: a list of `{query: <image path>, keys: [candidate texts], label}`;
//! - `text2image.json`: a list of `{query: <text>, keys: [candidate image paths], label}`;
//!
//! image paths relative to the subset folder (as `spec/dataset.py` reads them). The release is
//! one `data.zip`; the subset folders may sit in the single folder it unzips to. An image-to-text entry is a 1×L item, a
//! text-to-image entry a K×1 item; the candidate at `label` matches.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::{choice, Summary, Ties};
use benchctl_scoring::{TagSets, Truth};
use serde::Deserialize;
use serde_json::Value;

use crate::{paths, Error, ErrorKind, ImageSource, Item, Problems, Result, Suite, SuiteInfo, SuiteKind};

/// The suite as [`crate::SUITES`] lists it: its id and headline, written once.
pub const INFO: SuiteInfo = SuiteInfo {
    id: Cow::Borrowed("spec"),
    description: Cow::Borrowed(
        "6 synthetic subsets probing size, position, existence and count (image-to-text and text-to-image accuracy)",
    ),
    headline: Cow::Borrowed("i2t_accuracy_macro"),
    how_to_get: Cow::Borrowed(HOW_TO_GET),
    expected_items: None,
    official_ties: Ties::First,
    kind: SuiteKind::Items { load, summary },
    data_dir: None,
    submission: None,
};

pub const HOW_TO_GET: &str =
    "download data.zip from the dataset repo wjpoom/SPEC on huggingface.co (or `benchctl fetch --suite spec`) and unzip it here";

/// The subsets, in the paper's order.
pub const SUBSETS: [&str; 6] =
    ["absolute_size", "relative_size", "absolute_spatial", "relative_spatial", "existence", "count"];

/// Tag keys the report breaks down by.
pub const BREAKDOWN_KEYS: &[&str] = &["subset"];

/// SPEC's choice accuracies per subset, macro-averaged over the subsets.
fn summary() -> Summary {
    Summary::of(choice::FAMILY).breakdown(BREAKDOWN_KEYS).macro_over("subset")
}

#[derive(Debug, Deserialize)]
struct Entry {
    query: String,
    keys: Vec<String>,
    label: Value,
}

/// Loads all six subsets under `data_dir`; every problem found goes to `problems`, and the
/// items that could be read are kept.
pub fn load(data_dir: &Path, problems: &mut Problems) -> Suite {
    let root = subsets_root(data_dir);
    let mut items = Vec::new();
    let mut annotation_files = Vec::new();
    for subset in SUBSETS {
        let folder = root.join(subset);
        if !folder.is_dir() {
            problems.push(Error::new(
                ErrorKind::MissingData,
                format!("find SPEC subset folder {} ({HOW_TO_GET})", folder.display()),
            ));
            continue;
        }
        for (file, image_to_text) in [("image2text.json", true), ("text2image.json", false)] {
            let path = folder.join(file);
            items.extend(load_file(&folder, subset, &path, image_to_text, problems));
            annotation_files.push(path);
        }
    }
    Suite { annotation_files, items: items.into(), ..INFO.empty(data_dir) }
}

/// Where the six subset folders are: the data directory, or the one folder inside it that
/// holds them (unzipping `data.zip` adds such a wrapper folder).
fn subsets_root(data_dir: &Path) -> PathBuf {
    let has_subsets = |dir: &Path| SUBSETS.iter().any(|s| dir.join(s).is_dir());
    if has_subsets(data_dir) {
        return data_dir.to_path_buf();
    }
    let subdirs: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    match &subdirs[..] {
        [only] if has_subsets(only) => only.clone(),
        _ => data_dir.to_path_buf(),
    }
}

fn load_file(folder: &Path, subset: &str, path: &Path, image_to_text: bool, problems: &mut Problems) -> Vec<Item> {
    let Some(entries) = paths::read_json::<Vec<Value>>(path, HOW_TO_GET, problems) else {
        return Vec::new();
    };
    let mut items = Vec::new();
    let mut tag_sets = TagSets::default();
    for (index, entry) in entries.into_iter().enumerate() {
        let at = format!("{} entry {index}", path.display());
        match parse_entry(folder, subset, index, entry, image_to_text, &mut tag_sets, &at) {
            Ok(item) => items.push(item),
            Err(e) => problems.push(e),
        }
    }
    items
}

/// One entry as a 1×L (image-to-text) or K×1 (text-to-image) item; `at` names the file and entry.
fn parse_entry(
    folder: &Path,
    subset: &str,
    index: usize,
    entry: Value,
    image_to_text: bool,
    tag_sets: &mut TagSets,
    at: &str,
) -> Result<Item> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("read {at}: {what}"));
    let entry: Entry = serde_json::from_value(entry).map_err(|e| malformed(e.to_string()))?;
    let n = entry.keys.len();
    if n < 2 {
        return Err(malformed(format!("`keys` needs at least 2 candidates, has {n}")));
    }
    let label = entry
        .label
        .as_u64()
        .map(|l| l as usize)
        .filter(|&l| l < n)
        .ok_or_else(|| malformed(format!("`label` {} is not an index into its {n} keys", entry.label)))?;
    let image = |p: &str| paths::inside(folder, p, at).map(ImageSource::File);
    let matches: Vec<bool> = (0..n).map(|i| i == label).collect();
    let (images, texts, truth, direction) = if image_to_text {
        (vec![image(&entry.query)?], entry.keys, Truth::new(1, n, matches), "i2t")
    } else {
        let images = entry.keys.iter().map(|k| image(k)).collect::<Result<Vec<_>>>()?;
        (images, vec![entry.query], Truth::new(n, 1, matches), "t2i")
    };
    Ok(Item {
        id: format!("{subset}/{direction}/{index}"),
        images,
        texts,
        truth: truth.map_err(|e| malformed(e.to_string()))?,
        tags: tag_sets
            .intern(vec![("subset".into(), vec![subset.into()]), ("direction".into(), vec![direction.into()])]),
    })
}
