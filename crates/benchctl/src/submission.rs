//! Scores in a benchmark's official submission layout.
//!
//! EqBen's evaluation server takes one score per (image, caption) pair, in the order of the
//! authors' flat randomized annotation list `[{"image": <path>, "caption": <text>}, …]`, as a
//! float32 `.npy` vector. Image paths are relative to the suite's `images/` folder.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use benchctl_scoring::ScoreTensor;
use benchctl_suites::Suite;
use serde::Deserialize;

use crate::{Error, ErrorKind, Result};

/// One entry of EqBen's flat annotation list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Pair {
    pub image: String,
    pub caption: String,
}

/// Reads EqBen's flat randomized annotation list (before any model work, so a bad file
/// costs nothing).
pub fn read_eqben_flat_list(flat_list: &Path) -> Result<Vec<Pair>> {
    let bad = |what: String| Error::new(ErrorKind::Data, what);
    let text = std::fs::read_to_string(flat_list).map_err(|e| bad(format!("read {}: {e}", flat_list.display())))?;
    serde_json::from_str(&text).map_err(|e| bad(format!("parse {}: {e}", flat_list.display())))
}

/// (image path relative to `images/`, caption) → (item, image, text) indices.
pub type Slots = HashMap<(PathBuf, String), (usize, usize, usize)>;

/// Where each (image relative to `images/`, caption) pair of an EqBen suite sits: item,
/// image and text index. The light release's `.jpg` images answer to their `.png` names too.
pub fn eqben_slots(suite: &Suite) -> Result<Slots> {
    let image_root = suite.data_dir.join("images");
    let mut slots = HashMap::new();
    for (i, item) in suite.items.iter().enumerate() {
        for (k, image) in item.images.iter().enumerate() {
            let rel = image.path().strip_prefix(&image_root).unwrap_or(image.path());
            for (l, caption) in item.texts.iter().enumerate() {
                slots.insert((rel.to_path_buf(), caption.clone()), (i, k, l));
                if rel.extension().is_some_and(|e| e == "jpg") {
                    slots.insert((rel.with_extension("png"), caption.clone()), (i, k, l));
                }
            }
        }
    }
    Ok(slots)
}

/// The scores of every pair, in the list's order.
pub fn eqben_scores(suite: &Suite, scores: &ScoreTensor, pairs: &[Pair], flat_list: &Path) -> Result<Vec<f32>> {
    let slots = eqben_slots(suite)?;
    pairs
        .iter()
        .enumerate()
        .map(|(i, pair)| {
            let &(item, k, l) = slots.get(&(PathBuf::from(&pair.image), pair.caption.clone())).ok_or_else(|| {
                Error::new(
                    ErrorKind::Data,
                    format!(
                        "find entry {i} of {} (image {:?}, caption {:?}) among the evaluated items",
                        flat_list.display(),
                        pair.image,
                        pair.caption
                    ),
                )
            })?;
            Ok(scores.item(item).get(k, l))
        })
        .collect()
}

/// Writes a float32 vector as a `.npy` file.
pub fn write_npy_f32(path: &Path, values: &[f32]) -> Result<()> {
    npyz::to_file_1d(path, values.iter().copied())
        .map_err(|e| Error::results(format!("write {}: {e}", path.display())))
}
