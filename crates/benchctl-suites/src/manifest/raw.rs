//! The TOML form of a manifest, as serde reads it: every key spanned, so a problem names its
//! line (`docs/manifests.md` is the reference).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManifest {
    pub(super) id: Spanned<String>,
    pub(super) description: String,
    #[serde(default)]
    pub(super) how_to_get: Option<String>,
    #[serde(default)]
    pub(super) expected_items: Option<usize>,
    /// The dataset card beside the manifest (documentation only).
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) card: Option<String>,
    /// The dataset repo on the Hugging Face hub the files come from.
    #[serde(default)]
    pub(super) hub: Option<RawHub>,
    /// The benchmark's official submission format (a name of `Submission::NAMES`).
    #[serde(default)]
    pub(super) submission: Option<Spanned<String>>,
    pub(super) source: RawSource,
    pub(super) item: RawItem,
    pub(super) metrics: RawMetrics,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHub {
    pub(super) repo: Spanned<String>,
    #[serde(default)]
    pub(super) revision: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) files: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) gated: bool,
    #[serde(default)]
    pub(super) unpack: Option<Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    #[serde(default)]
    pub(super) file: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) files: Option<Spanned<Vec<Spanned<String>>>>,
    /// With `files`: the tag each file's stem becomes (default `subset`).
    #[serde(default)]
    pub(super) tag: Option<Spanned<String>>,
    pub(super) format: Spanned<String>,
    #[serde(default)]
    pub(super) records: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) group: Option<Spanned<usize>>,
    /// Each record that is a JSON object read as one record per entry, `{"key": …, "value": …}`
    /// (the outer record's key stays `{_key}`).
    #[serde(default)]
    pub(super) entries: Option<Spanned<bool>>,
    /// Only the first this many records of each file (before grouping and expansion).
    #[serde(default)]
    pub(super) first: Option<Spanned<usize>>,
    /// Lists of each record expanded together into one item per element.
    #[serde(default)]
    pub(super) expand: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawItem {
    #[serde(default)]
    pub(super) id: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) image_dir: Option<Spanned<RawDirs>>,
    #[serde(default)]
    pub(super) images: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) images_list: Option<Spanned<String>>,
    /// Candidates after the images, each some of them (by position) shown together in one
    /// prompt (with `answers` only).
    #[serde(default)]
    pub(super) together: Option<Spanned<Vec<Vec<usize>>>>,
    #[serde(default)]
    pub(super) crop: Option<RawCrop>,
    #[serde(default)]
    pub(super) texts: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) texts_list: Option<Spanned<String>>,
    /// Which candidates match (not with `answers`).
    #[serde(default)]
    pub(super) truth: Option<Spanned<RawTruth>>,
    /// Questions with answer options, instead of `texts` and `truth`.
    #[serde(default)]
    pub(super) answers: Option<super::answers::RawAnswers>,
    #[serde(default)]
    pub(super) tags: BTreeMap<String, Spanned<RawTag>>,
}

/// `item.image_dir`: one folder, or several looked in in order.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawDirs {
    One(String),
    Several(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCrop {
    pub(super) left: Spanned<String>,
    pub(super) top: Spanned<String>,
    pub(super) width: Spanned<String>,
    pub(super) height: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawTruth {
    Named(String),
    Table(RawTruthTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTruthTable {
    #[serde(default)]
    pub(super) text: Option<RawIndex>,
    #[serde(default)]
    pub(super) image: Option<RawIndex>,
    #[serde(default)]
    pub(super) pairs: Option<Vec<[usize; 2]>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawIndex {
    Fixed(usize),
    From(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawTag {
    Plain(String),
    Split { value: String, split: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) family: Spanned<String>,
    #[serde(default)]
    pub(super) breakdown: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) macro_over: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) macro_min_items: usize,
    #[serde(default)]
    pub(super) macro_exclude: Vec<String>,
    #[serde(default)]
    pub(super) ties: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) headline: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) average: Option<RawAverage>,
    /// Accuracies over groups (name → the tag whose values are the groups): a group counts
    /// when all its items are right.
    #[serde(default)]
    pub(super) all_of: BTreeMap<String, Spanned<String>>,
    /// The tag whose shared values make items one cluster for the bootstrap (default: items
    /// sharing an image).
    #[serde(default)]
    pub(super) cluster_by: Option<Spanned<String>>,
}

/// `[metrics.average]`: a paper's average over named groups of one tag's values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAverage {
    pub(super) name: Spanned<String>,
    pub(super) over: Spanned<String>,
    pub(super) groups: Spanned<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    pub(super) metrics: Option<Spanned<Vec<String>>>,
}
