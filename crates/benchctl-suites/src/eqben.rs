//! EqBen (Wang et al., "Equivariant Similarity for Vision-Language Foundation Models",
//! ICCV 2023, <https://arxiv.org/abs/2303.14465>; data: <https://github.com/Wangt-CN/EqBen>).
//!
//! Layout: `annotations/<split>.json` for the seven splits and the images under `images/`,
//! annotation paths being relative to `images/`. The splits' official shapes:
//! - `eqbenag`: `{video: {subject: [entry, …]}}`, captions are lists (the first is used);
//! - `eqbenyoucook2`, `eqbengebc`: `{video: [entry, …]}`;
//! - `eqbenkubric_loc`, `eqbenkubric_attr`, `eqbenkubric_cnt`, `eqbensd`: `[entry, …]`;
//!
//! where an entry is `{image0, image1, caption0, caption1}`. YouCook2 frames are `.npy`
//! uint8 arrays in BGR order. The "light" release ships `.jpg` where the annotations say
//! `.png`: a split whose first annotated image is missing but whose `.jpg` twin exists is
//! read as light, with no change to the annotations.
//!
//! Each entry is a 2×2 item: image k matches caption k. Item ids are `<split>/<index>`, the
//! index counting entries in file order.

use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::Summary;
use benchctl_scoring::{MetricFamily, Truth};
use serde_json::Value;

use crate::{paths, Error, ErrorKind, ImageSource, Item, Result, Suite};

pub const DESCRIPTION: &str =
    "251,048 pairs of minimally different images and captions in 7 splits (group score, EqSim deviation)";
pub const HOW_TO_GET: &str = "request EqBen from its authors (github.com/Wangt-CN/EqBen), put the split annotations in annotations/<split>.json and the images under images/";

/// The splits, the nesting depth of their entries, and their official sizes.
pub const SPLITS: [(&str, usize, usize); 7] = [
    ("eqbenag", 2, 195_872),
    ("eqbenyoucook2", 1, 45_849),
    ("eqbengebc", 1, 1_814),
    ("eqbenkubric_loc", 0, 2_000),
    ("eqbenkubric_attr", 0, 2_000),
    ("eqbenkubric_cnt", 0, 2_000),
    ("eqbensd", 0, 1_513),
];

/// Tag keys the report breaks down by.
pub const BREAKDOWN_KEYS: &[&str] = &["split"];

/// The annotation file of the public 10 % subset.
pub const SUBSET_FILE: &str = "eqben_subset.json";

pub const SUBSET_DESCRIPTION: &str = "EqBen's public 10 % subset: shuffled 2×2 items without split labels (group score, EqSim deviation)";
pub const SUBSET_HOW_TO_GET: &str = "download EqBen's public 10 % subset (github.com/Wangt-CN/EqBen): its annotation list as eqben_subset.json here and its images under images/";

/// Loads the public 10 % subset: one list of entries in `eqben_subset.json`, images under
/// `images/`. Without split labels it is reported as a whole.
pub fn load_subset(data_dir: &Path, problems: &mut Vec<Error>) -> Suite {
    let path = data_dir.join(SUBSET_FILE);
    let items = if path.is_file() {
        load_split(&data_dir.join("images"), "subset", 0, &path, problems)
    } else {
        problems.push(Error::new(
            ErrorKind::MissingData,
            format!("find {} ({SUBSET_HOW_TO_GET})", path.display()),
        ));
        Vec::new()
    };
    Suite {
        id: "eqben-subset",
        data_dir: data_dir.to_path_buf(),
        summary: Summary { family: MetricFamily::Equivariance, breakdown_keys: &[], macro_over: None },
        annotation_files: vec![path],
        items,
        excluded: 0,
    }
}

/// Loads every split under `data_dir`; every problem found goes to `problems`, and the
/// items that could be read are kept.
pub fn load(data_dir: &Path, problems: &mut Vec<Error>) -> Suite {
    let image_root = data_dir.join("images");
    let mut items = Vec::new();
    let mut annotation_files = Vec::new();
    for (split, depth, _) in SPLITS {
        let path = data_dir.join("annotations").join(format!("{split}.json"));
        if !path.is_file() {
            problems.push(Error::new(
                ErrorKind::MissingData,
                format!("find EqBen annotation file {} ({HOW_TO_GET})", path.display()),
            ));
            continue;
        }
        items.extend(load_split(&image_root, split, depth, &path, problems));
        annotation_files.push(path);
    }
    Suite {
        id: "eqben",
        data_dir: data_dir.to_path_buf(),
        summary: Summary { family: MetricFamily::Equivariance, breakdown_keys: BREAKDOWN_KEYS, macro_over: Some("split") },
        annotation_files,
        items,
        excluded: 0,
    }
}

/// The items of one split file whose entries sit `depth` objects deep.
pub fn load_split(image_root: &Path, split: &str, depth: usize, path: &Path, problems: &mut Vec<Error>) -> Vec<Item> {
    let Some(root) = paths::read_json::<Value>(path, HOW_TO_GET, problems) else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    if let Err(e) = collect_entries(&root, depth, String::new(), path, &mut entries) {
        problems.push(e);
        return Vec::new();
    }
    let light = entries.first().map(|(_, e)| is_light(image_root, e)).unwrap_or(false);
    let mut items = Vec::new();
    for (index, (at, entry)) in entries.iter().enumerate() {
        let at = format!("{} at {at}", path.display());
        match parse_entry(image_root, light, entry, &at) {
            Ok((images, texts)) => items.push(Item {
                id: format!("{split}/{index}"),
                images,
                texts,
                truth: Truth::diagonal(2),
                tags: vec![("split".into(), vec![split.into()])],
            }),
            Err(e) => problems.push(e),
        }
    }
    items
}

/// The two images and two captions of an entry; `at` names the file and position.
fn parse_entry(image_root: &Path, light: bool, entry: &Value, at: &str) -> Result<(Vec<ImageSource>, Vec<String>)> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("read {at}: {what}"));
    let field = |name: &str| entry.get(name).ok_or_else(|| malformed(format!("missing key `{name}`")));
    let caption = |name: &str| -> Result<String> {
        let first = match field(name)? {
            Value::Array(list) => list.first(),
            other => Some(other),
        };
        first
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| malformed(format!("`{name}` must be a caption or a non-empty list of them")))
    };
    let image = |name: &str| -> Result<ImageSource> {
        let rel = field(name)?.as_str().ok_or_else(|| malformed(format!("`{name}` must be an image path")))?;
        let path = paths::inside(image_root, rel, at)?;
        Ok(ImageSource::from_path(if light { light_twin(&path) } else { path }))
    };
    Ok((vec![image("image0")?, image("image1")?], vec![caption("caption0")?, caption("caption1")?]))
}

/// Entries `depth` objects below `value`, in file order, with where each was found.
fn collect_entries<'a>(
    value: &'a Value,
    depth: usize,
    at: String,
    path: &Path,
    out: &mut Vec<(String, &'a Value)>,
) -> Result<()> {
    match (depth, value) {
        (0, Value::Array(list)) => {
            out.extend(list.iter().enumerate().map(|(i, e)| (format!("{at}[{i}]"), e)));
            Ok(())
        }
        (d, Value::Object(map)) if d > 0 => {
            for (key, child) in map {
                collect_entries(child, d - 1, format!("{at}/{key}"), path, out)?;
            }
            Ok(())
        }
        _ => Err(Error::new(
            ErrorKind::Malformed,
            format!(
                "read {} at `{}`: expected {}",
                path.display(),
                if at.is_empty() { "/" } else { &at },
                if depth == 0 { "a list of entries".to_string() } else { format!("an object nested {depth} deep") }
            ),
        )),
    }
}

/// Whether a split's images come from the light release: its first `.png` is absent and its
/// `.jpg` twin present.
fn is_light(image_root: &Path, entry: &Value) -> bool {
    let Some(rel) = entry.get("image0").and_then(Value::as_str) else { return false };
    let path = image_root.join(rel);
    !path.exists() && light_twin(&path) != path && light_twin(&path).is_file()
}

fn light_twin(path: &Path) -> PathBuf {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        path.with_extension("jpg")
    } else {
        path.to_path_buf()
    }
}
