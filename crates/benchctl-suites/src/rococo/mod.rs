//! RoCOCO (Park et al., "RoCOCO: Robustness Benchmark of MS-COCO to Stress-test Image-Text
//! Matching Models", 2023, <https://arxiv.org/abs/2304.10727>; data:
//! <https://github.com/pseulki/rococo>, folder `annotations/`).
//!
//! Layout: `annotations/coco_karpathy_test.json` (COCO 5K test of the Karpathy split: a list
//! of `{image, caption: [...]}`) and the four altered caption sets `annotations/<set>.json`
//! (`rand_voca`, `same_concept`, `diff_concept`, `danger`), whose record i repeats test
//! record i's image and original captions, then adds one altered caption per original (the
//! few records with six originals get five). Images are COCO val2014 files under `images/`
//! at the path the annotations name (`val2014/COCO_val2014_….jpg`).
//!
//! RoCOCO is a retrieval benchmark: every query is ranked against a whole gallery, so it is
//! read into galleries ([`Rococo`]) rather than K×L items; [`altered`] makes the visually
//! altered images of the text-to-image gallery. The runner scores each gallery with one
//! blocked matrix product and `benchctl_scoring::metrics::retrieval`.

pub mod altered;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::Ties;
use serde::Deserialize;

use crate::{paths, Error, ErrorKind, Result, SuiteInfo, SuiteKind};

/// The suite as [`crate::SUITES`] lists it: its id and headline, written once.
pub const INFO: SuiteInfo = SuiteInfo {
    id: Cow::Borrowed("rococo"),
    description: Cow::Borrowed(
        "COCO 5K retrieval against semantically altered captions and visually altered images (R@k, drop rate, RSMS)",
    ),
    headline: Cow::Borrowed("i2t_r1_altered_mean"),
    how_to_get: Cow::Borrowed(HOW_TO_GET),
    expected_items: Some(5_000),
    official_ties: Ties::First,
    kind: SuiteKind::Galleries,
    data_dir: None,
    submission: None,
};
pub const HOW_TO_GET: &str =
    "put the annotations/ folder of github.com/pseulki/rococo here and the COCO val2014 images under images/val2014/";

/// The four altered caption sets.
pub const CAPTION_SETS: [&str; 4] = ["rand_voca", "same_concept", "diff_concept", "danger"];

#[derive(Debug, Deserialize)]
struct Record {
    image: String,
    caption: Vec<String>,
}

/// A caption gallery: every caption with the test image it describes and whether it is altered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptionGallery {
    pub name: String,
    pub captions: Vec<String>,
    /// Index into [`Rococo::images`] of the image each caption belongs to.
    pub image_of: Vec<usize>,
    pub altered: Vec<bool>,
}

/// RoCOCO's test images and caption galleries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rococo {
    pub images: Vec<PathBuf>,
    /// The clean COCO 5K caption gallery (25,010 captions), no caption altered.
    pub clean: CaptionGallery,
    /// The four altered caption sets, in [`CAPTION_SETS`] order.
    pub caption_sets: Vec<CaptionGallery>,
}

fn read_records(path: &Path) -> Result<Vec<Record>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::caused_by(ErrorKind::MissingData, format!("read {}: {e}", path.display()), e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::caused_by(ErrorKind::Malformed, format!("parse {}: {e}", path.display()), e))
}

/// Where the annotation files are: `annotations/` when present, else the data directory itself.
fn annotations_dir(data_dir: &Path) -> PathBuf {
    let nested = data_dir.join("annotations");
    if nested.is_dir() {
        nested
    } else {
        data_dir.to_path_buf()
    }
}

/// Loads the test split and the four altered caption sets, checking that each set repeats
/// the test split's images and original captions.
pub fn load(data_dir: &Path) -> Result<Rococo> {
    if !data_dir.is_dir() {
        return Err(Error::new(
            ErrorKind::MissingData,
            format!("find the rococo data directory {}: {HOW_TO_GET}", data_dir.display()),
        ));
    }
    let dir = annotations_dir(data_dir);
    let test_path = dir.join("coco_karpathy_test.json");
    let test = read_records(&test_path)?;
    let image_root = data_dir.join("images");
    let images = test
        .iter()
        .enumerate()
        .map(|(i, r)| paths::inside(&image_root, &r.image, &format!("{} record {i}", test_path.display())))
        .collect::<Result<Vec<_>>>()?;
    let mut clean =
        CaptionGallery { name: "clean".into(), captions: Vec::new(), image_of: Vec::new(), altered: Vec::new() };
    for (i, r) in test.iter().enumerate() {
        for caption in &r.caption {
            clean.captions.push(caption.clone());
            clean.image_of.push(i);
            clean.altered.push(false);
        }
    }
    let caption_sets = CAPTION_SETS
        .iter()
        .map(|set| {
            let path = dir.join(format!("{set}.json"));
            let records = read_records(&path)?;
            if records.len() != test.len() {
                return Err(Error::new(
                    ErrorKind::Malformed,
                    format!(
                        "read {}: {} records, but the test split has {}",
                        path.display(),
                        records.len(),
                        test.len()
                    ),
                ));
            }
            let mut gallery = CaptionGallery {
                name: set.to_string(),
                captions: Vec::new(),
                image_of: Vec::new(),
                altered: Vec::new(),
            };
            for (i, (record, original)) in records.iter().zip(&test).enumerate() {
                let n = original.caption.len();
                let at = format!("{} record {i}", path.display());
                if record.image != original.image || record.caption.get(..n) != Some(&original.caption[..]) {
                    return Err(Error::new(
                        ErrorKind::Malformed,
                        format!("read {at}: its image and first {n} captions must repeat test record {i}"),
                    ));
                }
                if record.caption.len() > 2 * n {
                    return Err(Error::new(
                        ErrorKind::Malformed,
                        format!("read {at}: {} altered captions for {n} originals", record.caption.len() - n),
                    ));
                }
                for (k, caption) in record.caption.iter().enumerate() {
                    gallery.captions.push(caption.clone());
                    gallery.image_of.push(i);
                    gallery.altered.push(k >= n);
                }
            }
            Ok(gallery)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Rococo { images, clean, caption_sets })
}

/// The folder RoCOCO's `mix_images.py` writes a method's altered images to:
/// `<COCO image root>/<method>_<λ>/`, λ printed as Python prints the float (`mix_0.9`,
/// `patch_0.85`), each image under its test image's file name.
pub fn release_folder(image_root: &Path, method: altered::Method, lambda_milli: u16) -> PathBuf {
    image_root.join(format!("{}_{}", method.name(), python_float(lambda_milli)))
}

/// λ in thousandths as Python's `str(float)`: `900` → `0.9`, `1000` → `1.0`, `850` → `0.85`.
pub fn python_float(milli: u16) -> String {
    let (whole, frac) = (milli / 1000, milli % 1000);
    let digits = format!("{frac:03}");
    let trimmed = digits.trim_end_matches('0');
    format!("{whole}.{}", if trimmed.is_empty() { "0" } else { trimmed })
}

/// BLIP's caption normalisation (`pre_caption` in BLIP's `data/utils.py`, which its COCO
/// retrieval evaluation applies with `max_words=30`): lower-case; each of `.!"()*#:;~`
/// becomes a space; every run of two or more whitespace characters becomes one space;
/// trailing newlines and surrounding spaces are stripped; then at most `max_words` words
/// separated by single spaces are kept.
pub fn pre_caption(caption: &str, max_words: usize) -> String {
    let replaced: String =
        caption.to_lowercase().chars().map(|c| if ".!\"()*#:;~".contains(c) { ' ' } else { c }).collect();
    let mut collapsed = String::with_capacity(replaced.len());
    let chars: Vec<char> = replaced.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            let run = chars[i..].iter().take_while(|c| c.is_whitespace()).count();
            if run >= 2 {
                collapsed.push(' ');
            } else {
                collapsed.push(chars[i]);
            }
            i += run;
        } else {
            collapsed.push(chars[i]);
            i += 1;
        }
    }
    let stripped = collapsed.trim_end_matches('\n').trim_matches(' ');
    let words: Vec<&str> = stripped.split(' ').collect();
    if words.len() > max_words {
        words[..max_words].join(" ")
    } else {
        stripped.to_string()
    }
}

/// The words BLIP's COCO retrieval evaluation keeps per caption.
pub const BLIP_MAX_WORDS: usize = 30;
