//! EqBen (Wang et al., "Equivariant Similarity for Vision-Language Foundation Models",
//! ICCV 2023, <https://arxiv.org/abs/2303.14465>; code and download links:
//! <https://github.com/Wangt-CN/EqBen>).
//!
//! Both releases are read exactly as downloaded (Google Drive links in the EqBen README):
//!
//! **Full release** ([`load`]). `eqben_ann/ann_json_finegrained_random.json`: one flat,
//! shuffled JSON list with one entry per image–caption pair,
//! `{"image": "<split folder>/…/<file>", "caption": "…", "private_info": {"dataset":
//! "<split id>", "name": "c0i0|c0i1|c1i0|c1i1", "sample_cnt": <int>}}` (as `EqBenALL` in
//! `src/eqben/eqben_utils.py` reads it). The four entries sharing `(dataset, sample_cnt)`
//! form one 2×2 item: `name[..2]` is the caption slot, `name[2..]` the image slot, and
//! caption k matches image k. When the entries carry no `private_info`, it is rebuilt as the
//! official scorer (`evaluate_eqben_locally.py`) does: entry j's info is
//! `private_info.json[private_random_idx.json[j]]`. Images come from
//! `eqben_image_full.tar.gz`, or from the light release whose `.png` files became `.jpg`
//! (read with no change to the annotations); paths are relative to the archive's extracted
//! root and start with the split folder. YouCook2 frames are `.npy` uint8 arrays in BGR
//! order. The flat list's order is kept ([`crate::PairOrder`]): it is the order of the
//! `prediction.npy` submission the official scorer reads.
//!
//! **10 % subset** ([`load_subset`]). `eqben_subset/eqben_subset_10percent_final.json`, a
//! Winoground-style list of `{image0, caption0, image1, caption1}`, images from
//! `subset_image.tar.gz` under `image_subset/`. The split is the first component of each
//! image path.
//!
//! Both report Winoground's scores per split, their macro average, and the paper's Table 3
//! "Avg" ([`paper_average`]).

mod subset;

pub use subset::{load_subset, SUBSET_FILE, SUBSET_HOW_TO_GET, SUBSET_IMAGES, SUBSET_INFO};

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use benchctl_base::spill::{self, Index, SpillVec};
use benchctl_scoring::metrics::{equivariance, SubsetAverage, Summary, Ties};
use benchctl_scoring::{TagSets, Truth};
use serde::Deserialize;
use serde_json::Value;

use crate::{
    paths, Error, ErrorKind, ImageSource, Item, Items, PairOrder, PairSlot, Problems, Result, Suite, SuiteInfo,
    SuiteKind,
};

/// The suite as [`crate::SUITES`] lists it: its id and headline, written once.
pub const INFO: SuiteInfo = SuiteInfo {
    id: Cow::Borrowed("eqben"),
    description: Cow::Borrowed(
        "251,048 2×2 items of minimally different images and captions in 7 splits (group score, Table 3 Avg, EqSim deviation)",
    ),
    headline: Cow::Borrowed("paper_avg"),
    how_to_get: Cow::Borrowed(HOW_TO_GET),
    expected_items: None,
    official_ties: Ties::Strict,
    kind: SuiteKind::Items { load, summary },
    data_dir: None,
    submission: Some(crate::submission::Submission::EqbenNpy),
};

pub const HOW_TO_GET: &str = "download EqBen's annotation (eqben_ann/ann_json_finegrained_random.json) and its images (eqben_image_full.tar.gz, or the light .jpg release) from the Google Drive links in the README of github.com/Wangt-CN/EqBen, and extract both here";

/// The official splits and their sizes in items (`SUBSET_LENGTH_INFO` of the official
/// `evaluate_eqben_locally.py`), in its order.
pub const SPLITS: [(&str, usize); 7] = [
    ("eqbenag", 195_872),
    ("eqbenyoucook2", 45_849),
    ("eqbengebc", 1_814),
    ("eqbenkubric_loc", 2_000),
    ("eqbenkubric_attr", 2_000),
    ("eqbenkubric_cnt", 2_000),
    ("eqbensd", 1_513),
];

/// The full release's annotation file, relative to the data directory.
pub const ANNOTATION_FILE: &str = "eqben_ann/ann_json_finegrained_random.json";
/// The official scorer's files that rebuild `private_info` for a list without it.
pub const PRIVATE_INFO_FILE: &str = "private_info.json";
pub const PRIVATE_INDEX_FILE: &str = "private_random_idx.json";
/// The name the official scorer reads the submission under.
pub const SUBMISSION_FILE: &str = "prediction.npy";

/// Tag keys the report breaks down by.
pub const BREAKDOWN_KEYS: &[&str] = &["split"];

/// The paper's Table 3 "Avg": text, image and group score over its five subsets, Kubric being
/// the mean of its three splits (15 numbers; CLIP ViT-B/32: 505.89 / 15 = 33.73).
pub fn paper_average() -> SubsetAverage {
    SubsetAverage::new(
        "paper_avg",
        "split",
        &[
            ("ag", &["eqbenag"]),
            ("youcook2", &["eqbenyoucook2"]),
            ("gebc", &["eqbengebc"]),
            ("kubric", &["eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt"]),
            ("sd", &["eqbensd"]),
        ],
        &["text_score", "image_score", "group_score"],
    )
}

/// How EqBen's metrics are summarised: per split, macro over splits, the paper's average.
pub fn summary() -> Summary {
    Summary {
        subset_average: Some(paper_average()),
        ..Summary::of(equivariance::FAMILY).breakdown(BREAKDOWN_KEYS).macro_over("split")
    }
}

/// One entry of the flat list. Every field is optional here so that a missing key is
/// reported with the entry's index rather than as a parse failure of the whole file.
#[derive(Debug, Deserialize)]
struct FlatEntry {
    image: Option<String>,
    caption: Option<String>,
    private_info: Option<PrivateInfo>,
}

#[derive(Debug, Clone, Deserialize)]
struct PrivateInfo {
    dataset: String,
    name: String,
    sample_cnt: Value,
}

/// The data directory's annotation `relative` (or the same file name directly in the
/// directory), recorded as the suite's annotation file; `None` with the problem (naming the
/// expected path) added to `problems`.
fn annotation_path(
    suite: &mut Suite,
    relative: &str,
    what: &str,
    how_to_get: &str,
    problems: &mut Problems,
) -> Option<PathBuf> {
    let nested = suite.data_dir.join(relative);
    let flat = Path::new(relative).file_name().map(|name| suite.data_dir.join(name));
    let Some(path) = std::iter::once(nested.clone()).chain(flat).find(|p| p.is_file()) else {
        problems.push(Error::new(ErrorKind::MissingData, format!("find {what} {} ({how_to_get})", nested.display())));
        return None;
    };
    suite.annotation_files.push(path.clone());
    Some(path)
}

/// [`annotation_path`]'s file, parsed whole.
fn read_annotation<T: serde::de::DeserializeOwned>(
    suite: &mut Suite,
    relative: &str,
    what: &str,
    how_to_get: &str,
    problems: &mut Problems,
) -> Option<(PathBuf, T)> {
    let path = annotation_path(suite, relative, what, how_to_get, problems)?;
    paths::read_json::<T>(&path, how_to_get, problems).map(|parsed| (path, parsed))
}

/// Loads the full release under `data_dir`; every problem found goes to `problems`, and the
/// items that could be read are kept.
///
/// The list is read as a stream (the full release has a million entries; neither its text nor
/// the parsed list is ever held whole), each entry going straight into the item it belongs
/// to (`Grouping`).
pub fn load(data_dir: &Path, problems: &mut Problems) -> Suite {
    let mut suite = INFO.empty(data_dir);
    let Some(path) = annotation_path(&mut suite, ANNOTATION_FILE, "EqBen's annotation", HOW_TO_GET, problems) else {
        return suite;
    };
    let mut grouping = Grouping::default();
    let mut infos = Infos::Unknown;
    // The first problem that makes the whole list unusable; the entries after it are skipped.
    let mut fatal: Option<Error> = None;
    let annotation_files = &mut suite.annotation_files;
    let streamed = paths::for_each_element::<FlatEntry>(&path, HOW_TO_GET, |j, entry| {
        if fatal.is_some() {
            return;
        }
        if let Some(image) = entry.image.as_deref() {
            grouping.probe.see(image);
        }
        match infos.of(j, entry.private_info, data_dir, &path, annotation_files) {
            Ok(Some(info)) => grouping.add(&path, j, entry.image, entry.caption, &info),
            // Beyond the scorer's files: their sizes are compared with the list's at the end.
            Ok(None) => grouping.slots.push(PairSlot::MISSING),
            Err(e) => fatal = Some(e),
        }
    });
    let complete = streamed.and_then(|entries| match fatal {
        Some(e) => Err(e),
        None => infos.check_count(&path, entries),
    });
    if let Err(e) = complete {
        problems.push(e);
        return suite;
    }
    let (image_root, light) = image_root(data_dir, grouping.probe.chosen(), &[]);
    let (items, order) = grouping.finish(&path, &image_root, light, problems);
    suite.items = items;
    suite.pair_order = Some(PairOrder { file: path, slots: order });
    suite.incomplete = shortfalls(&suite.items);
    suite
}

/// Where the entries' `private_info` comes from: their own (every entry has one), or the
/// official scorer's two files (no entry has one), decided by the first entry.
enum Infos {
    Unknown,
    Own,
    Scorer(ScorerInfos),
}

/// `private_info.json` and `private_random_idx.json`: entry j's info is
/// `infos[index[j]]`.
struct ScorerInfos {
    infos: Vec<PrivateInfo>,
    index: Vec<usize>,
    info_path: PathBuf,
    index_path: PathBuf,
}

impl Infos {
    /// Entry `j`'s info (`own` is its own); `None` when the scorer's files have no info for
    /// it (their sizes are compared with the list's by [`Infos::check_count`]).
    fn of<'a>(
        &'a mut self,
        j: usize,
        own: Option<PrivateInfo>,
        data_dir: &Path,
        annotation: &Path,
        annotation_files: &mut Vec<PathBuf>,
    ) -> Result<Option<std::borrow::Cow<'a, PrivateInfo>>> {
        use std::borrow::Cow;
        let mixed = |with: usize, without: usize| {
            Error::new(
                ErrorKind::Malformed,
                format!("read {}: entry {with} has `private_info` but entry {without} has none", annotation.display()),
            )
        };
        if let Infos::Unknown = self {
            *self = match own {
                Some(_) => Infos::Own,
                None => Infos::Scorer(ScorerInfos::read(data_dir, annotation, annotation_files)?),
            };
        }
        match (self, own) {
            (Infos::Own, Some(info)) => Ok(Some(Cow::Owned(info))),
            (Infos::Own, None) => Err(mixed(0, j)),
            (Infos::Scorer(_), Some(_)) => Err(mixed(j, 0)),
            (Infos::Scorer(scorer), None) => {
                Ok(scorer.index.get(j).and_then(|&original| scorer.infos.get(original)).map(Cow::Borrowed))
            }
            (Infos::Unknown, _) => Ok(None),
        }
    }

    /// Fails when the scorer's files do not have one info per entry of the list.
    fn check_count(&self, annotation: &Path, entries: usize) -> Result<()> {
        let Infos::Scorer(scorer) = self else { return Ok(()) };
        if scorer.index.len() == entries && scorer.infos.len() == entries {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Malformed,
            format!(
                "read {}: {entries} entries, but {} has {} and {} has {}",
                annotation.display(),
                scorer.info_path.display(),
                scorer.infos.len(),
                scorer.index_path.display(),
                scorer.index.len()
            ),
        ))
    }
}

impl ScorerInfos {
    /// The two files, beside the annotation, in the data directory, or in the scorer's
    /// `src_file/`; the index checked to be a permutation.
    fn read(data_dir: &Path, annotation: &Path, annotation_files: &mut Vec<PathBuf>) -> Result<Self> {
        let folders =
            [annotation.parent().unwrap_or(data_dir).to_path_buf(), data_dir.to_path_buf(), data_dir.join("src_file")];
        let find = |name: &str| folders.iter().map(|f| f.join(name)).find(|p| p.is_file());
        let (Some(info_path), Some(index_path)) = (find(PRIVATE_INFO_FILE), find(PRIVATE_INDEX_FILE)) else {
            return Err(Error::new(
                ErrorKind::MissingData,
                format!(
                    "find {PRIVATE_INFO_FILE} and {PRIVATE_INDEX_FILE} beside {}: its entries carry no `private_info`, so the items are rebuilt from those two files of the official scorer (github.com/Wangt-CN/EqBen, src_file/)",
                    annotation.display()
                ),
            ));
        };
        let read = |path: &Path| -> Result<String> {
            std::fs::read_to_string(path)
                .map_err(|e| Error::caused_by(ErrorKind::MissingData, format!("read {}: {e}", path.display()), e))
        };
        let parse =
            |path: &Path, text: &str| Error::new(ErrorKind::Malformed, format!("parse {}: {text}", path.display()));
        let infos: Vec<PrivateInfo> =
            serde_json::from_str(&read(&info_path)?).map_err(|e| parse(&info_path, &e.to_string()))?;
        let index: Vec<usize> =
            serde_json::from_str(&read(&index_path)?).map_err(|e| parse(&index_path, &e.to_string()))?;
        annotation_files.extend([info_path.clone(), index_path.clone()]);
        let mut seen = vec![false; index.len()];
        for (j, &original) in index.iter().enumerate() {
            if original >= seen.len() || std::mem::replace(&mut seen[original], true) {
                return Err(parse(
                    &index_path,
                    &format!("position {j} ({original}) makes it no permutation of 0..{}", index.len()),
                ));
            }
        }
        Ok(ScorerInfos { infos, index, info_path, index_path })
    }
}

/// The image that tells where the images are and which release they are: the first `.png`
/// (only those differ between the full and the light release), else the first image; shown
/// the list's images one by one, as the full list is streamed.
#[derive(Debug, Default)]
struct ImageProbe {
    first_png: Option<String>,
    first_image: Option<String>,
}

impl ImageProbe {
    fn see(&mut self, image: &str) {
        if self.first_image.is_none() {
            self.first_image = Some(image.to_string());
        }
        if self.first_png.is_none() && image.to_ascii_lowercase().ends_with(".png") {
            self.first_png = Some(image.to_string());
        }
    }

    fn chosen(&self) -> Option<&str> {
        self.first_png.as_deref().or(self.first_image.as_deref())
    }
}

/// Where the images are: the folder in which the first annotated image (or its light `.jpg`
/// twin) exists, among the data directory, `extra` folders and the data directory's
/// subfolders (the archives' own top folder); the data directory when none has it, so that
/// missing images are named at their expected path. Also whether it is the light release.
fn image_root(data_dir: &Path, first_image: Option<&str>, extra: &[&str]) -> (PathBuf, bool) {
    let Some(rel) = first_image else { return (data_dir.to_path_buf(), false) };
    let mut candidates: Vec<PathBuf> = vec![data_dir.to_path_buf()];
    candidates.extend(extra.iter().map(|e| data_dir.join(e)));
    if let Ok(dir) = std::fs::read_dir(data_dir) {
        let mut subdirs: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
        subdirs.sort();
        candidates.extend(subdirs);
    }
    for root in &candidates {
        let path = root.join(rel);
        if path.is_file() {
            return (root.clone(), false);
        }
        if light_twin(&path) != path && light_twin(&path).is_file() {
            return (root.clone(), true);
        }
    }
    (candidates.into_iter().nth(usize::from(!extra.is_empty())).unwrap_or_else(|| data_dir.to_path_buf()), false)
}

/// The full release's items as its entries arrive (shuffled: an item's four entries are
/// anywhere in the list), then in the official split order and by `sample_cnt`, with where
/// each entry sits in them.
#[derive(Default)]
struct Grouping {
    /// Split names, each held once.
    splits: HashMap<String, u32>,
    split_names: Vec<String>,
    /// The item of each (split, sample): the position in `partials` of the one with that key.
    by_key: Index,
    /// Items being assembled (spilled, like the rest of what grows with the list: the list
    /// is shuffled, so nearly every item is incomplete until its end).
    partials: SpillVec<Partial>,
    /// The partials' images and captions, one after another (not a string each).
    text: SpillVec<u8>,
    /// Each entry's (partial, image slot, caption slot), in list order; [`PairSlot::MISSING`]
    /// for an entry with a problem.
    slots: SpillVec<PairSlot>,
    /// The image that tells where the images are.
    probe: ImageProbe,
    problems: Problems,
}

/// An item being assembled: its images and captions by slot, and the entry that set each.
#[derive(Clone, Copy)]
struct Partial {
    split: u32,
    sample: u64,
    images: [Option<Stored>; 2],
    captions: [Option<Stored>; 2],
    entries: [[Option<u32>; 2]; 2],
}

/// A string of [`Grouping::text`] and the entry that gave it.
#[derive(Clone, Copy)]
struct Stored {
    start: usize,
    end: usize,
    entry: u32,
}

impl Grouping {
    /// Notes an entry's image, for [`probe_image`]'s rule.
    /// Entry `j` of `path`, with its info.
    fn add(&mut self, path: &Path, j: usize, image: Option<String>, caption: Option<String>, info: &PrivateInfo) {
        let parsed = self.place(path, j, image, caption, info);
        let slot = parsed.unwrap_or_else(|e| {
            self.problems.push(e);
            PairSlot::MISSING
        });
        self.slots.push(slot);
    }

    /// Where entry `j` goes: its partial (as `item`), its image and caption slots.
    fn place(
        &mut self,
        path: &Path,
        j: usize,
        image: Option<String>,
        caption: Option<String>,
        info: &PrivateInfo,
    ) -> Result<PairSlot> {
        let malformed =
            |what: String| Error::new(ErrorKind::Malformed, format!("read {} entry {j}: {what}", path.display()));
        let image = image.ok_or_else(|| malformed("missing key `image`".into()))?;
        let caption = caption.ok_or_else(|| malformed("missing key `caption`".into()))?;
        let (c, i) = parse_slot(&info.name).ok_or_else(|| {
            malformed(format!("`private_info.name` is `{}`, expected c0i0, c0i1, c1i0 or c1i1", info.name))
        })?;
        let sample = integer(&info.sample_cnt).ok_or_else(|| {
            malformed(format!("`private_info.sample_cnt` is `{}`, expected an integer", info.sample_cnt))
        })?;
        let split = match self.splits.get(&info.dataset) {
            Some(&split) => split,
            None => {
                let split = self.split_names.len() as u32;
                self.splits.insert(info.dataset.clone(), split);
                self.split_names.push(info.dataset.clone());
                split
            }
        };
        let next = self.partials.len() as u32;
        let partials = &self.partials;
        let is_at = |at: usize| (partials[at].split, partials[at].sample) == (split, sample);
        let p = self.by_key.find_or_add(&(split, sample), next as usize, is_at).unwrap_or(next);
        if p == next {
            self.partials.push(Partial {
                split,
                sample,
                images: [None, None],
                captions: [None, None],
                entries: [[None; 2]; 2],
            });
        }
        let item = format!("{}/{}", info.dataset, sample);
        let partial = &mut self.partials[p as usize];
        if let Some(other) = partial.entries[c][i].replace(j as u32) {
            return Err(malformed(format!("item {item} has `{}` twice (entries {other} and {j})", info.name)));
        }
        for (slot, value, what) in
            [(&mut partial.images[i], image, "image"), (&mut partial.captions[c], caption, "caption")]
        {
            match slot {
                Some(known) if self.text[known.start..known.end] != *value.as_bytes() => {
                    let known_text = String::from_utf8_lossy(&self.text[known.start..known.end]);
                    return Err(malformed(format!(
                        "item {item}: entry {} gives {what} {known_text:?} for this slot, this entry {value:?}",
                        known.entry
                    )));
                }
                Some(_) => {}
                None => {
                    let start = self.text.len();
                    self.text.extend_from_slice(value.as_bytes());
                    *slot = Some(Stored { start, end: self.text.len(), entry: j as u32 });
                }
            }
        }
        Ok(PairSlot { item: p, image: i as u8, text: c as u8 })
    }

    /// The items, in the official split order then any other split by name, within a split by
    /// sample; and each entry's slot in them. An item that lacks an entry, or whose image path
    /// is refused, is a problem, and its entries have no slot.
    fn finish(
        self,
        path: &Path,
        image_root: &Path,
        light: bool,
        problems: &mut Problems,
    ) -> (Items, SpillVec<PairSlot>) {
        let Grouping { split_names, partials, text, slots, problems: found, .. } = self;
        problems.append(found);
        // Each split's place: the official splits in order, then any other by name.
        let rank = |split: &str| SPLITS.iter().position(|(s, _)| *s == split).unwrap_or(SPLITS.len());
        let mut by_rank: Vec<usize> = (0..split_names.len()).collect();
        by_rank.sort_by_key(|&s| (rank(&split_names[s]), &split_names[s]));
        let mut place = vec![0u32; split_names.len()];
        by_rank.iter().enumerate().for_each(|(at, &s)| place[s] = at as u32);
        // Sorted in bounded memory (a million partials would not fit a sort's working set).
        let mut order: SpillVec<(u32, u64, u32)> = partials
            .iter()
            .enumerate()
            .map(|(p, partial)| (place[partial.split as usize], partial.sample, p as u32))
            .collect();
        spill::sort_by_key(&mut order, |&(place, sample, _)| (place, sample));
        let mut item_of = SpillVec::from_elem(u32::MAX, partials.len());
        let mut items = Items::new();
        items.reserve(partials.len());
        let mut tag_sets = TagSets::default();
        // Only whole `&str`s were pushed, and each `Stored` spans one: valid UTF-8.
        let stored = |s: &Option<Stored>| {
            s.map_or(std::borrow::Cow::Borrowed(""), |s| String::from_utf8_lossy(&text[s.start..s.end]))
        };
        for &(_, _, p) in order.iter() {
            // Partials are read in sorted order, at random.
            let p = p as usize;
            let partial = &partials[p];
            let split = &split_names[partial.split as usize];
            let id = format!("{split}/{}", partial.sample);
            let missing: Vec<String> = (0..2)
                .flat_map(|c| (0..2).map(move |i| (c, i)))
                .filter(|&(c, i)| partial.entries[c][i].is_none())
                .map(|(c, i)| format!("c{c}i{i}"))
                .collect();
            if !missing.is_empty() {
                problems.push(Error::new(
                    ErrorKind::Malformed,
                    format!("read {}: item {id} lacks the entries {}", path.display(), missing.join(", ")),
                ));
                continue;
            }
            let image = |k: usize| -> Result<ImageSource> {
                let path =
                    paths::inside(image_root, &stored(&partial.images[k]), &format!("{} item {id}", path.display()))?;
                Ok(ImageSource::from_path(if light { light_twin(&path) } else { path }))
            };
            let images = match (image(0), image(1)) {
                (Ok(a), Ok(b)) => vec![a, b],
                (Err(e), _) | (_, Err(e)) => {
                    problems.push(e);
                    continue;
                }
            };
            item_of[p] = items.len() as u32;
            items.push(Item {
                id,
                images,
                texts: partial.captions.iter().map(|c| stored(c).into_owned()).collect(),
                truth: Truth::diagonal(2),
                tags: tag_sets.intern(vec![("split".into(), vec![split.clone()])]),
            });
        }
        // Entries of items that could not be built have no slot; the order then covers only
        // part of the list, which [`PairOrder::complete`] tells.
        let order = slots
            .iter()
            .map(|slot| match slot.is_missing() {
                true => PairSlot::MISSING,
                false => PairSlot { item: item_of[slot.item as usize], ..*slot },
            })
            .collect();
        (items, order)
    }
}

/// `c<k>i<m>` as (caption k, image m).
fn parse_slot(name: &str) -> Option<(usize, usize)> {
    match name.as_bytes() {
        [b'c', c @ (b'0' | b'1'), b'i', i @ (b'0' | b'1')] => Some(((c - b'0') as usize, (i - b'0') as usize)),
        _ => None,
    }
}

/// A non-negative integer, written as an integer or as a float with no fraction (`3.0`).
fn integer(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| value.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9e15).map(|f| f as u64))
}

/// How each official split's item count differs from `SUBSET_LENGTH_INFO`.
fn shortfalls(items: &crate::Items) -> Vec<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for item in items {
        for value in item.tags().iter().filter(|(k, _)| k == "split").flat_map(|(_, v)| v) {
            *counts.entry(value).or_default() += 1;
        }
    }
    let mut out: Vec<String> = SPLITS
        .iter()
        .filter(|(split, official)| counts.get(split).copied().unwrap_or(0) != *official)
        .map(|(split, official)| {
            format!("{split} has {} of its {official} items", counts.get(split).copied().unwrap_or(0))
        })
        .collect();
    let mut unknown: Vec<&&str> = counts.keys().filter(|s| !SPLITS.iter().any(|(o, _)| o == *s)).collect();
    unknown.sort();
    out.extend(unknown.into_iter().map(|s| format!("{s} is not an official split ({} items)", counts[*s])));
    out
}

fn light_twin(path: &Path) -> PathBuf {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        path.with_extension("jpg")
    } else {
        path.to_path_buf()
    }
}
