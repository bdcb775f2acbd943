//! Winoground (Thrush et al., "Winoground: Probing Vision and Language Models for
//! Visio-Linguistic Compositionality", CVPR 2022, <https://arxiv.org/abs/2204.03162>).
//!
//! The `facebook/winoground` dataset repo has shipped two forms; both are read:
//! - **jsonl** (the original release; earlier revisions of the repo):
//!   `data/examples.jsonl`, one JSON object per line with `id, caption_0, caption_1, image_0,
//!   image_1, tag, secondary_tag, num_main_preds, collapsed_tag`, where `image_k` is the stem
//!   `ex_{id}_img_k`, and the images in `data/images.zip` (`images/<stem>.png`). Placed as
//!   `examples.jsonl` + `images/` in the data directory (`benchctl fetch` drops the `data/`).
//! - **parquet** (the repo's main branch): `data/test-*.parquet` with the same columns,
//!   `image_0` / `image_1` being structs `{bytes, path}` with the PNG embedded. Read when
//!   there is no `examples.jsonl`, from `data/` or the data directory itself, by the manifests'
//!   parquet reader: the PNGs stay in the file, each read when a decoder asks for it.
//!
//! Each example is one 2×2 item: image k matches caption k. `tag` and `secondary_tag` may
//! hold several comma-separated values (66 and 16 of the 400 examples): both are split, and
//! an item counts in the breakdown of each of its values.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::{group, Summary, Ties};
use benchctl_scoring::{TagSets, Truth};
use serde::Deserialize;
use serde_json::Value;

use crate::items::IdIndex;
use crate::manifest::Blobs;
use crate::{paths, EmbeddedImage, Error, ErrorKind, ImageSource, Item, Problems, Result, Suite, SuiteInfo, SuiteKind};

/// The suite as [`crate::SUITES`] lists it: its id and headline, written once.
pub const INFO: SuiteInfo = SuiteInfo {
    id: Cow::Borrowed("winoground"),
    description: Cow::Borrowed(
        "400 pairs of images and captions that differ only in word order (text, image and group score)",
    ),
    headline: Cow::Borrowed("group_score"),
    how_to_get: Cow::Borrowed(HOW_TO_GET),
    expected_items: Some(400),
    official_ties: Ties::Strict,
    kind: SuiteKind::Items { load, summary },
    data_dir: None,
    submission: None,
};

/// The demo that ships in the repository (`datasets/demo/shapes`, made by
/// `scripts/fixtures/train_demo_clip.py`): 200 Winoground-style items of two coloured shapes
/// side by side whose captions swap the colours or the shapes' places, in Winoground's layout
/// and scored as Winoground is.
pub const DEMO_INFO: SuiteInfo = SuiteInfo {
    id: Cow::Borrowed("demo"),
    description: Cow::Borrowed(
        "the shipped demo: 200 Winoground-style pairs of coloured shapes whose captions swap colours or places (text, image and group score)",
    ),
    headline: Cow::Borrowed("group_score"),
    how_to_get: Cow::Borrowed("it ships with benchctl's repository in datasets/demo/shapes (run from the checkout, or give --data-dir)"),
    expected_items: Some(200),
    official_ties: Ties::Strict,
    kind: SuiteKind::Items { load, summary },
    data_dir: Some("demo/shapes"),
    submission: None,
};

pub const HOW_TO_GET: &str = "accept the terms of the gated dataset facebook/winoground on huggingface.co and set HF_TOKEN, then `benchctl fetch --suite winoground` (or download its data/test-*.parquet, or examples.jsonl and images/ from an earlier revision, into this directory)";

/// Tag keys the report breaks down by.
pub const BREAKDOWN_KEYS: &[&str] = &["collapsed_tag", "num_main_preds", "secondary_tag", "tag"];

/// Winoground's text, image and group scores, broken down by its tags.
fn summary() -> Summary {
    Summary::of(group::FAMILY).breakdown(BREAKDOWN_KEYS)
}

/// One example. `id` and `num_main_preds` are integers in the release; strings are accepted.
#[derive(Debug, Deserialize)]
struct Example {
    id: Value,
    caption_0: String,
    caption_1: String,
    image_0: String,
    image_1: String,
    tag: String,
    secondary_tag: String,
    num_main_preds: Value,
    collapsed_tag: String,
}

/// Loads the jsonl form when `examples.jsonl` is present, else the parquet files; every
/// problem found goes to `problems`, and the items that could be read are kept.
pub fn load(data_dir: &Path, problems: &mut Problems) -> Suite {
    let mut suite = INFO.empty(data_dir);
    let jsonl = data_dir.join("examples.jsonl");
    let parquet = parquet_files(data_dir);
    let mut tag_sets = TagSets::default();
    let is_jsonl = jsonl.exists() || parquet.is_empty();
    // Each example as it is read, with the file (an index into `annotation_files`) and the line
    // or row it is on: stored at once, a duplicate id refused.
    let mut ids = IdIndex::default();
    let annotation_files = &mut suite.annotation_files;
    let items = &mut suite.items;
    let mut duplicates = Vec::new();
    let mut accept = |file: usize, place: usize, item: Item| match ids.earlier(items, &item.id) {
        Some(_) => duplicates.push((file, place, item.id)),
        None => items.push(item),
    };
    if is_jsonl {
        annotation_files.push(jsonl.clone());
        read_jsonl(&jsonl, &data_dir.join("images"), &mut tag_sets, &mut accept, problems);
    } else {
        annotation_files.extend(parquet.iter().cloned());
        for (f, file) in parquet.iter().enumerate() {
            read_parquet(file, f, &mut tag_sets, &mut accept, problems);
        }
    }
    for (file, place, id) in duplicates {
        let file = suite.annotation_files[file].display();
        let at = if is_jsonl { format!("{file} line {place}") } else { format!("{file} row {place}") };
        problems.push(Error::new(ErrorKind::Malformed, format!("read {at}: duplicate id {id}")));
    }
    if suite.items.is_empty() && problems.is_empty() {
        let files: Vec<String> = suite.annotation_files.iter().map(|f| f.display().to_string()).collect();
        problems.push(Error::new(ErrorKind::Malformed, format!("load {}: it holds no examples", files.join(", "))));
    }
    suite
}

/// `data/test-*.parquet` (or `test-*.parquet` in the data directory), sorted by name.
fn parquet_files(data_dir: &Path) -> Vec<PathBuf> {
    for dir in [data_dir.join("data"), data_dir.to_path_buf()] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                name.starts_with("test-") && name.ends_with(".parquet")
            })
            .collect();
        if !files.is_empty() {
            files.sort();
            return files;
        }
    }
    Vec::new()
}

/// The items of `examples.jsonl` (file 0), each with its line number, given to `accept`.
fn read_jsonl(
    path: &Path,
    images_dir: &Path,
    tag_sets: &mut TagSets,
    accept: &mut dyn FnMut(usize, usize, Item),
    problems: &mut Problems,
) {
    let read = paths::for_each_line(path, HOW_TO_GET, |number, line| {
        if line.trim().is_empty() {
            return Ok(());
        }
        let at = format!("{} line {number}", path.display());
        let parsed = serde_json::from_str::<Example>(line)
            .map_err(|e| Error::caused_by(ErrorKind::Malformed, format!("parse {at}: {e}"), e))
            .and_then(|example| {
                let image = |stem: &str| -> Result<ImageSource> {
                    Ok(ImageSource::File(paths::inside(images_dir, &format!("{stem}.png"), &at)?))
                };
                let images = [image(&example.image_0)?, image(&example.image_1)?];
                item(example, images, tag_sets, &at)
            });
        // A bad line is one problem among others, not the end of the file.
        match parsed {
            Ok(item) => accept(0, number, item),
            Err(e) => problems.push(e),
        }
        Ok(())
    });
    if let Err(e) = read {
        problems.push(e);
    }
}

/// The items of one parquet file (file `file`), each with its row number, given to `accept`.
/// Read as a manifest's parquet is ([`crate::manifest::read_parquet`]): its images stay in the
/// file, each read when a decoder asks for it.
fn read_parquet(
    path: &Path,
    file: usize,
    tag_sets: &mut TagSets,
    accept: &mut dyn FnMut(usize, usize, Item),
    problems: &mut Problems,
) {
    let blobs = Blobs::new(path);
    let records = match crate::manifest::read_parquet(path, HOW_TO_GET, &blobs) {
        Ok(records) => records,
        Err(e) => {
            problems.push(e);
            return;
        }
    };
    for (index, record) in records.iter().enumerate() {
        let at = format!("{} {}", path.display(), record.at);
        match parquet_item(path, &record.value, &blobs, tag_sets, &at) {
            Ok(item) => accept(file, index, item),
            Err(e) => problems.push(e),
        }
    }
}

/// One parquet row as an item: scalar columns as in the jsonl form, images embedded.
fn parquet_item(path: &Path, row: &Value, blobs: &Blobs, tag_sets: &mut TagSets, at: &str) -> Result<Item> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("read {at}: {what}"));
    let column = |name: &str| row.get(name).ok_or_else(|| malformed(format!("missing column `{name}`")));
    let text = |name: &str| match column(name)? {
        Value::String(s) => Ok(s.clone()),
        other => Err(malformed(format!("column `{name}` must be a string, is {other}"))),
    };
    let scalar = |name: &str| -> Result<Value> {
        match column(name)? {
            value @ (Value::String(_) | Value::Number(_)) => Ok(value.clone()),
            other => Err(malformed(format!("column `{name}` must be an integer or a string, is {other}"))),
        }
    };
    let id = scalar("id")?;
    let id_text = scalar_to_string(&id).unwrap_or_default();
    let stem = |k: usize| format!("ex_{id_text}_img_{k}");
    let image = |k: usize| -> Result<ImageSource> {
        let name = format!("image_{k}");
        let Value::Object(image) = column(&name)? else {
            return Err(malformed(format!("column `{name}` must be an image struct {{bytes, path}}")));
        };
        let cell = image.get("bytes").and_then(|bytes| blobs.get(bytes));
        let cell = cell.ok_or_else(|| malformed(format!("column `{name}` holds no image bytes")))?;
        Ok(ImageSource::Embedded(Box::new(EmbeddedImage { file: path.to_path_buf(), name: stem(k), cell })))
    };
    let example = Example {
        caption_0: text("caption_0")?,
        caption_1: text("caption_1")?,
        image_0: stem(0),
        image_1: stem(1),
        tag: text("tag")?,
        secondary_tag: text("secondary_tag")?,
        num_main_preds: scalar("num_main_preds")?,
        collapsed_tag: text("collapsed_tag")?,
        id,
    };
    item(example, [image(0)?, image(1)?], tag_sets, at)
}

/// An example as an item; `at` names the file and line or row.
fn item(example: Example, images: [ImageSource; 2], tag_sets: &mut TagSets, at: &str) -> Result<Item> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("parse {at}: {what}"));
    let id = scalar_to_string(&example.id).ok_or_else(|| malformed("`id` must be a number or string".into()))?;
    let num_main_preds = scalar_to_string(&example.num_main_preds)
        .ok_or_else(|| malformed("`num_main_preds` must be a number or string".into()))?;
    Ok(Item {
        images: images.into(),
        texts: vec![example.caption_0, example.caption_1],
        truth: Truth::diagonal(2),
        tags: tag_sets.intern(vec![
            ("collapsed_tag".into(), vec![example.collapsed_tag]),
            ("num_main_preds".into(), vec![num_main_preds]),
            ("secondary_tag".into(), split_tags(&example.secondary_tag)),
            ("tag".into(), split_tags(&example.tag)),
        ]),
        id,
    })
}

/// A comma-separated tag field as its values (`"Negation, Scope"` → both).
pub fn split_tags(field: &str) -> Vec<String> {
    field.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect()
}

fn scalar_to_string(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}
