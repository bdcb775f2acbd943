//! Winoground (Thrush et al., "Winoground: Probing Vision and Language Models for
//! Visio-Linguistic Compositionality", CVPR 2022, <https://arxiv.org/abs/2204.03162>).
//!
//! Official release layout (the `facebook/winoground` dataset repo):
//! - `examples.jsonl`: one JSON object per line with `id, caption_0, caption_1, image_0,
//!   image_1, tag, secondary_tag, num_main_preds, collapsed_tag`, where `image_k` is the
//!   stem `ex_{id}_img_k`;
//! - `images/<stem>.png`.
//!
//! Each example is one 2×2 item: image k matches caption k.

use std::path::Path;

use benchctl_scoring::metrics::Summary;
use benchctl_scoring::{MetricFamily, Truth};
use serde::Deserialize;
use serde_json::Value;

use crate::{paths, Error, ErrorKind, ImageSource, Item, Result, Suite};

pub const DESCRIPTION: &str = "400 pairs of images and captions that differ only in word order (text, image and group score)";
pub const HOW_TO_GET: &str = "accept the terms of the gated dataset facebook/winoground on huggingface.co, then download examples.jsonl and images/ into this directory";

/// Tag keys the report breaks down by.
pub const BREAKDOWN_KEYS: &[&str] = &["collapsed_tag", "num_main_preds", "secondary_tag", "tag"];

/// One line of `examples.jsonl`. `id` and `num_main_preds` are integers in the release;
/// strings are accepted too.
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

/// Loads `examples.jsonl` and resolves `images/<stem>.png` under `data_dir`; every problem
/// found goes to `problems`, and the items that could be read are kept.
pub fn load(data_dir: &Path, problems: &mut Vec<Error>) -> Suite {
    let annotations = data_dir.join("examples.jsonl");
    let text = std::fs::read_to_string(&annotations).unwrap_or_else(|e| {
        problems.push(Error::new(
            ErrorKind::MissingData,
            format!("read {}: {e} ({HOW_TO_GET})", annotations.display()),
        ));
        String::new()
    });
    let images_dir = data_dir.join("images");
    let mut items: Vec<Item> = Vec::new();
    let mut seen_ids = std::collections::HashSet::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{} line {}", annotations.display(), index + 1);
        match parse_example(line, &images_dir, &at) {
            Ok(item) if !seen_ids.insert(item.id.clone()) => {
                problems.push(Error::new(ErrorKind::Malformed, format!("parse {at}: duplicate id {}", item.id)));
            }
            Ok(item) => items.push(item),
            Err(e) => problems.push(e),
        }
    }
    if items.is_empty() && problems.is_empty() {
        problems.push(Error::new(
            ErrorKind::Malformed,
            format!("load {}: it holds no examples", annotations.display()),
        ));
    }
    Suite {
        id: "winoground",
        data_dir: data_dir.to_path_buf(),
        summary: Summary { family: MetricFamily::Group, breakdown_keys: BREAKDOWN_KEYS, macro_over: None },
        annotation_files: vec![annotations],
        items,
        excluded: 0,
    }
}

/// One line of `examples.jsonl` as an item; `at` names the file and line.
fn parse_example(line: &str, images_dir: &Path, at: &str) -> Result<Item> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("parse {at}: {what}"));
    let example: Example = serde_json::from_str(line).map_err(|e| malformed(e.to_string()))?;
    let id = scalar_to_string(&example.id).ok_or_else(|| malformed("`id` must be a number or string".into()))?;
    let num_main_preds = scalar_to_string(&example.num_main_preds)
        .ok_or_else(|| malformed("`num_main_preds` must be a number or string".into()))?;
    let image = |stem: &str| -> Result<ImageSource> {
        Ok(ImageSource::File(paths::inside(images_dir, &format!("{stem}.png"), at)?))
    };
    let secondary: Vec<String> = example
        .secondary_tag
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect();
    Ok(Item {
        images: vec![image(&example.image_0)?, image(&example.image_1)?],
        texts: vec![example.caption_0, example.caption_1],
        truth: Truth::diagonal(2),
        tags: vec![
            ("collapsed_tag".into(), vec![example.collapsed_tag]),
            ("num_main_preds".into(), vec![num_main_preds]),
            ("secondary_tag".into(), secondary),
            ("tag".into(), vec![example.tag]),
        ],
        id,
    })
}

fn scalar_to_string(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}
