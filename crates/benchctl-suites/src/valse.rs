//! VALSE (Parcalabescu et al., "VALSE: A Task-Independent Benchmark for Vision and Language
//! Models Centered on Linguistic Phenomena", ACL 2022, <https://arxiv.org/abs/2112.07566>;
//! data: <https://github.com/Heidelberg-NLP/VALSE>, `data/`).
//!
//! Layout: the eleven piece files of the release's `data/` folder directly under the data
//! directory (`existence.json`, …), each a JSON object of records keyed by id with at least
//! `dataset`, `image_file`, `caption`, `foil` and `mturk.caption`; images under `images/`, in
//! the folders their source datasets ship (`train2014/`, `val2014/`, `val2017/`,
//! `VisualDialog_val2018/`, `images_512/` for SWiG, `visual7w/`), routed by the record's
//! `dataset` and the image file's prefix (see [`image_folders`]).
//!
//! Only valid records count: at least two of three annotators judged the caption correct
//! (`mturk.caption >= 2`), as the paper does. Each valid record is one 1×2 item: the image
//! with `[caption, foil]`, the caption matching.

use std::borrow::Cow;
use std::path::Path;

use benchctl_scoring::metrics::{pairwise, Summary, Ties};
use benchctl_scoring::{TagSets, Truth};
use serde_json::Value;

use crate::{paths, Error, ErrorKind, ImageSource, Item, Problems, Result, Suite, SuiteInfo, SuiteKind};

/// The suite as [`crate::SUITES`] lists it: its id and headline, written once.
pub const INFO: SuiteInfo = SuiteInfo {
    id: Cow::Borrowed("valse"),
    description: Cow::Borrowed(
        "11 pieces of captions and minimally different foils probing linguistic phenomena (pairwise accuracy)",
    ),
    headline: Cow::Borrowed("acc_r_macro"),
    how_to_get: Cow::Borrowed(HOW_TO_GET),
    expected_items: Some(7_702),
    official_ties: Ties::Strict,
    kind: SuiteKind::Items { load, summary },
    data_dir: None,
    submission: None,
};

pub const HOW_TO_GET: &str = "put the eleven piece files of the data/ folder of github.com/Heidelberg-NLP/VALSE here and extract each image source under images/ as it ships: train2014/, val2014/, val2017/ (COCO), VisualDialog_val2018/, images_512/ (SWiG), visual7w/ (see datasets/valse.md)";

/// The pieces, in the paper's order.
pub const PIECES: [&str; 11] = [
    "existence",
    "plurals",
    "counting-hard",
    "counting-small-quant",
    "counting-adversarial",
    "relations",
    "action-replacement",
    "actant-swap",
    "coreference-standard",
    "coreference-hard",
    "foil-it",
];

/// Tag keys the report breaks down by.
pub const BREAKDOWN_KEYS: &[&str] = &["piece", "source"];

/// VALSE's pairwise accuracies per piece and source, macro-averaged over the pieces.
fn summary() -> Summary {
    Summary::of(pairwise::FAMILY).breakdown(BREAKDOWN_KEYS).macro_over("piece")
}

/// The `source` tag of a record's `dataset` field (which image collection it comes from).
pub fn source(dataset: &str) -> Option<&'static str> {
    match dataset {
        "SWiG" => Some("swig"),
        "VisDial_v1.0" => Some("visdial"),
        "visual7w" => Some("visual7w"),
        "coco2017" | "coco_2017" => Some("coco2017"),
        "FOIL dataset" => Some("coco2014"),
        _ => None,
    }
}

/// The folders under `images/` that may hold an image, first choice first: the folder its
/// source dataset's archive extracts to, chosen by the file name's prefix where the name
/// tells (VisDial v1.0 mixes COCO `train2014`, COCO `val2014` and `VisualDialog_val2018`
/// images), then the source's own folder name.
pub fn image_folders(source: &str, image_file: &str) -> &'static [&'static str] {
    if image_file.starts_with("COCO_train2014_") {
        &["train2014", "coco2014", "visdial"]
    } else if image_file.starts_with("COCO_val2014_") {
        &["val2014", "coco2014", "visdial"]
    } else if image_file.starts_with("VisualDialog_val2018_") {
        &["VisualDialog_val2018", "visdial"]
    } else {
        match source {
            "swig" => &["images_512", "swig"],
            "visual7w" => &["visual7w"],
            "coco2017" => &["val2017", "coco2017"],
            "coco2014" => &["val2014", "coco2014"],
            _ => &["visdial"],
        }
    }
}

/// The image's path: in the first of its [`image_folders`] that has it, else in the first
/// (so that a missing image is named where it is expected).
fn image_path(images: &Path, source: &str, image_file: &str, at: &str) -> Result<std::path::PathBuf> {
    let folders = image_folders(source, image_file);
    let mut first = None;
    for folder in folders {
        let path = paths::inside(&images.join(folder), image_file, at)?;
        if path.is_file() {
            return Ok(path);
        }
        first.get_or_insert(path);
    }
    first.ok_or_else(|| Error::new(ErrorKind::Malformed, format!("read {at}: no image folder for `{image_file}`")))
}

/// Loads every piece under `data_dir`; every problem found goes to `problems`, and the
/// items that could be read are kept.
pub fn load(data_dir: &Path, problems: &mut Problems) -> Suite {
    let mut items = Vec::new();
    let mut annotation_files = Vec::new();
    let mut excluded = 0;
    for piece in PIECES {
        let path = data_dir.join(format!("{piece}.json"));
        if !path.is_file() {
            problems.push(Error::new(
                ErrorKind::MissingData,
                format!("find VALSE piece file {} ({HOW_TO_GET})", path.display()),
            ));
            continue;
        }
        let (valid, invalid) = load_piece(data_dir, piece, &path, problems);
        items.extend(valid);
        excluded += invalid;
        annotation_files.push(path);
    }
    Suite { annotation_files, items: items.into(), excluded, ..INFO.empty(data_dir) }
}

/// The valid records of one piece file as items, in file order, and how many were invalid.
pub fn load_piece(data_dir: &Path, piece: &str, path: &Path, problems: &mut Problems) -> (Vec<Item>, usize) {
    let Some(paths::Entries(records)) = paths::read_json::<paths::Entries>(path, HOW_TO_GET, problems) else {
        return (Vec::new(), 0);
    };
    let mut items = Vec::new();
    let mut invalid = 0;
    let mut first_at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut tag_sets = TagSets::default();
    for (position, (key, record)) in records.iter().enumerate() {
        if let Some(first) = first_at.insert(key, position) {
            problems.push(Error::new(
                ErrorKind::Malformed,
                format!(
                    "read {}: record key `{key}` appears twice (records {} and {}); ids must be unique",
                    path.display(),
                    first + 1,
                    position + 1
                ),
            ));
            continue;
        }
        match parse_record(data_dir, piece, path, key, record, &mut tag_sets) {
            Ok(Some(item)) => items.push(item),
            Ok(None) => invalid += 1,
            Err(e) => problems.push(e),
        }
    }
    (items, invalid)
}

/// One record as an item, or `None` when annotators did not validate its caption.
fn parse_record(
    data_dir: &Path,
    piece: &str,
    path: &Path,
    key: &str,
    record: &Value,
    tag_sets: &mut TagSets,
) -> Result<Option<Item>> {
    let at = |field: &str| format!("{} record `{key}` key `{field}`", path.display());
    let text_field = |field: &str| -> Result<String> {
        record
            .get(field)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| Error::new(ErrorKind::Malformed, format!("read {}: expected a string", at(field))))
    };
    // A count of votes: an integer, also when written as a float without fraction (`3.0`).
    let votes = record
        .pointer("/mturk/caption")
        .and_then(|v| {
            v.as_u64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && (0.0..1e6).contains(f)).map(|f| f as u64))
        })
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Malformed,
                format!(
                    "read {}: expected a count of votes (0 to 3), got {}",
                    at("mturk.caption"),
                    record.pointer("/mturk/caption").map_or("nothing".to_string(), |v| v.to_string())
                ),
            )
        })?;
    if votes < 2 {
        return Ok(None);
    }
    let dataset = text_field("dataset")?;
    let folder = source(&dataset).ok_or_else(|| {
        Error::new(ErrorKind::Malformed, format!("read {}: unknown image source `{dataset}`", at("dataset")))
    })?;
    let image = image_path(&data_dir.join("images"), folder, &text_field("image_file")?, &at("image_file"))?;
    Ok(Some(Item {
        id: format!("{piece}/{key}"),
        images: vec![ImageSource::File(image)],
        texts: vec![text_field("caption")?, text_field("foil")?],
        truth: Truth::first_text_matches(2),
        tags: tag_sets.intern(vec![("piece".into(), vec![piece.into()]), ("source".into(), vec![folder.into()])]),
    }))
}
