//! EqBen's public 10 % subset: shuffled 2×2 items in Winoground's form, each item's split read
//! from its image path.

use std::borrow::Cow;
use std::path::Path;

use benchctl_scoring::metrics::Ties;
use benchctl_scoring::{TagSets, Truth};
use serde::Deserialize;
use serde_json::Value;

use super::{image_root, light_twin, read_annotation, summary, ImageProbe};
use crate::{paths, Error, ErrorKind, ImageSource, Item, Problems, Result, Suite, SuiteInfo, SuiteKind};

/// The subset's annotation file, relative to the data directory.
pub const SUBSET_FILE: &str = "eqben_subset/eqben_subset_10percent_final.json";
/// Where the subset's images are extracted.
pub const SUBSET_IMAGES: &str = "image_subset";

/// The suite as [`crate::SUITES`] lists it: its id and headline, written once.
pub const SUBSET_INFO: SuiteInfo = SuiteInfo {
    id: Cow::Borrowed("eqben-subset"),
    description: Cow::Borrowed(
        "EqBen's public 10 % subset: shuffled 2×2 items, split read from the image path (group score per split)",
    ),
    headline: Cow::Borrowed("group_score"),
    how_to_get: Cow::Borrowed(SUBSET_HOW_TO_GET),
    expected_items: None,
    official_ties: Ties::Strict,
    kind: SuiteKind::Items { load: load_subset, summary },
    data_dir: None,
    submission: None,
};

pub const SUBSET_HOW_TO_GET: &str = "download EqBen's 10 % subset annotation (eqben_subset/eqben_subset_10percent_final.json) and images (subset_image.tar.gz, which extracts to image_subset/) from the Google Drive links in the README of github.com/Wangt-CN/EqBen, here";

/// One entry of the 10 % subset.
#[derive(Debug, Deserialize)]
struct SubsetEntry {
    image0: Option<String>,
    image1: Option<String>,
    caption0: Option<Value>,
    caption1: Option<Value>,
}

/// Loads the public 10 % subset: `eqben_subset/eqben_subset_10percent_final.json`, images
/// under `image_subset/`; every problem found goes to `problems`, and the items that could
/// be read are kept.
pub fn load_subset(data_dir: &Path, problems: &mut Problems) -> Suite {
    let mut suite = SUBSET_INFO.empty(data_dir);
    let Some((path, entries)) = read_annotation::<Vec<SubsetEntry>>(
        &mut suite,
        SUBSET_FILE,
        "EqBen's subset annotation",
        SUBSET_HOW_TO_GET,
        problems,
    ) else {
        return suite;
    };
    let mut probe = ImageProbe::default();
    entries.iter().filter_map(|e| e.image0.as_deref()).for_each(|image| probe.see(image));
    let (image_root, light) = image_root(data_dir, probe.chosen(), &[SUBSET_IMAGES]);
    let mut tag_sets = TagSets::default();
    for (index, entry) in entries.iter().enumerate() {
        let at = format!("{} entry {index}", path.display());
        match subset_item(entry, index, &image_root, light, &mut tag_sets, &at) {
            Ok(item) => suite.items.push(item),
            Err(e) => problems.push(e),
        }
    }
    suite
}

fn subset_item(
    entry: &SubsetEntry,
    index: usize,
    image_root: &Path,
    light: bool,
    tag_sets: &mut TagSets,
    at: &str,
) -> Result<Item> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("read {at}: {what}"));
    let image = |name: &str, rel: &Option<String>| -> Result<(ImageSource, String)> {
        let rel = rel.as_deref().ok_or_else(|| malformed(format!("missing key `{name}`")))?;
        let path = paths::inside(image_root, rel, at)?;
        let split = Path::new(rel).components().next().map(|c| c.as_os_str().to_string_lossy().into_owned());
        let split = split.filter(|_| Path::new(rel).components().count() > 1).unwrap_or_else(|| "unknown".into());
        Ok((ImageSource::from_path(if light { light_twin(&path) } else { path }), split))
    };
    // Winoground style: a caption, or (as the full per-split annotations have it) a list whose
    // first caption is used.
    let caption = |name: &str, value: &Option<Value>| -> Result<String> {
        let value = value.as_ref().ok_or_else(|| malformed(format!("missing key `{name}`")))?;
        let first = match value {
            Value::Array(list) => list.first(),
            other => Some(other),
        };
        first
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| malformed(format!("`{name}` must be a caption or a non-empty list of them")))
    };
    let (image0, split) = image("image0", &entry.image0)?;
    let (image1, _) = image("image1", &entry.image1)?;
    Ok(Item {
        id: index.to_string(),
        images: vec![image0, image1],
        texts: vec![caption("caption0", &entry.caption0)?, caption("caption1", &entry.caption1)?],
        truth: Truth::diagonal(2),
        tags: tag_sets.intern(vec![("split".into(), vec![split])]),
    })
}
