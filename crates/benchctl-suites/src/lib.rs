//! Suite loading for benchctl: each benchmark read in its official release format and
//! reduced to the one item shape of [`benchctl_scoring`] (K candidate images × L candidate
//! texts with a ground-truth matrix).
//!
//! One module per suite; [`find`] looks a suite up by its id, or finds a suite described by a
//! [`manifest`] (TOML, no code).

pub mod eqben;
pub mod error;
pub mod hub;
pub mod image;
pub mod items;
pub mod manifest;
pub mod paths;
pub mod pattern;
pub mod rococo;
pub mod spec;
pub mod submission;
pub mod valse;
pub mod winoground;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use benchctl_scoring::metrics::{self, ClusterRule, Clusters, ItemView, Summary, Ties};
use benchctl_scoring::{Report, ScoreTensor, Tags, Truth};

pub use error::{Error, ErrorKind, Problems, Result};
pub use image::{CropRegion, CroppedSource, EmbeddedImage, ImageBytes, ImageCell, ImageSource, PilImage};
pub use items::{ItemRef, Items};
pub use manifest::ReplyReading;

/// One benchmark item: K candidate images, L candidate texts and which pairs match, as a
/// loader builds it ([`Items`] stores it compactly).
#[derive(Debug, Clone)]
pub struct Item {
    /// The suite's own id of the item, as written in score dumps.
    pub id: String,
    pub images: Vec<ImageSource>,
    pub texts: Vec<String>,
    pub truth: Truth,
    pub tags: Tags,
}

impl Item {
    pub fn view(&self) -> ItemView<'_> {
        ItemView { truth: &self.truth, tags: &self.tags }
    }
}

/// A loaded suite: its items and how they are scored.
#[derive(Debug, Clone)]
pub struct Suite {
    pub id: String,
    pub data_dir: PathBuf,
    /// Which metrics, breakdowns and averages the suite reports.
    pub summary: Summary,
    /// The annotation files the items were read from.
    pub annotation_files: Vec<PathBuf>,
    pub items: Items,
    /// Records in the annotations that the suite's own validity rule leaves out
    /// (e.g. VALSE's `mturk.caption < 2`).
    pub excluded: usize,
    /// How these annotations fall short of the complete official release (e.g. an EqBen
    /// split with fewer items than the official scorer expects); empty when complete. A
    /// partial release still evaluates; runs and `check` say so.
    pub incomplete: Vec<String>,
    /// The order of the suite's official per-pair submission, when it has one (EqBen's
    /// `prediction.npy`: one score per entry of its flat annotation list).
    pub pair_order: Option<PairOrder>,
    /// The manifest that describes the suite, for a suite read from one.
    pub manifest: Option<Arc<manifest::Manifest>>,
    /// The benchmark's official submission format, if it defines one ([`SuiteInfo::submission`]).
    pub submission: Option<submission::Submission>,
}

/// The official submission order of a suite's (image, text) pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairOrder {
    /// The annotation file whose entries give the order.
    pub file: PathBuf,
    /// For each entry, in file order, the pair it scores (spilled with the suite).
    pub slots: benchctl_base::spill::SpillVec<PairSlot>,
}

/// One (item, image, text) pair of a suite; [`PairSlot::MISSING`] for an entry that could not
/// be read into an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairSlot {
    pub item: u32,
    pub image: u8,
    pub text: u8,
}

impl PairSlot {
    pub const MISSING: PairSlot = PairSlot { item: u32::MAX, image: 0, text: 0 };

    pub fn is_missing(&self) -> bool {
        self.item == u32::MAX
    }
}

impl PairOrder {
    /// Whether every entry of the file names a loaded pair.
    pub fn complete(&self) -> bool {
        !self.slots.iter().any(PairSlot::is_missing)
    }
}

impl Suite {
    /// An empty suite of id `id`, to be filled by its loader (see [`SuiteInfo::empty`]).
    pub fn new(id: &str, data_dir: &Path, summary: Summary) -> Self {
        Suite {
            id: id.to_string(),
            data_dir: data_dir.to_path_buf(),
            summary,
            annotation_files: Vec::new(),
            items: Items::new(),
            excluded: 0,
            incomplete: Vec::new(),
            pair_order: None,
            manifest: None,
            submission: None,
        }
    }

    /// This suite with other items (a shard's slice), without copying the suite's own.
    pub fn with_items(&self, items: Items) -> Self {
        // Destructured so that a new field must be decided on here.
        let Suite {
            id,
            data_dir,
            summary,
            annotation_files,
            items: _,
            excluded,
            incomplete,
            pair_order,
            manifest,
            submission,
        } = self;
        Suite {
            id: id.clone(),
            data_dir: data_dir.clone(),
            summary: summary.clone(),
            annotation_files: annotation_files.clone(),
            items,
            excluded: *excluded,
            incomplete: incomplete.clone(),
            pair_order: pair_order.clone(),
            manifest: manifest.clone(),
            submission: *submission,
        }
    }

    /// Every item's truth and tags, for the metrics (spilled with the suite).
    pub fn item_views(&self) -> benchctl_base::spill::SpillVec<ItemView<'_>> {
        self.items.iter().map(ItemRef::view).collect()
    }

    /// The suite's published metrics for scores of its items (in item order).
    pub fn evaluate(&self, scores: &ScoreTensor) -> benchctl_scoring::Result<Report> {
        metrics::evaluate(&self.summary, scores, &self.item_views())
    }

    /// The items' clusters by the suite's [`ClusterRule`]: items sharing an image file (or an
    /// embedded image), or a value of a tag, are one cluster, transitively. `None` where every
    /// item is its own cluster, or the run resamples items (`--bootstrap items`).
    pub fn clusters(&self) -> Option<Clusters> {
        self.clusters_knowing(&|_| None)
    }

    /// [`Suite::clusters`], given the content key (a hash of its bytes) of each embedded
    /// image the caller already holds (a run's cache keys): those are not read again to be
    /// hashed. Every embedded image's key must come from the same hash (all from
    /// `content_key`, or none).
    pub fn clusters_knowing(&self, content_key: &ContentKeys<'_>) -> Option<Clusters> {
        let rule = self.summary.clusters.as_ref()?;
        let n = self.items.len();
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut owner: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let sources = self.items.distinct_sources();
        let source_keys: Vec<String> = match rule {
            ClusterRule::SharedImages => {
                // Embedded images are keyed by their content: the caller's keys, or their bytes
                // hashed on all cores.
                use rayon::prelude::*;
                (0..sources.len()).into_par_iter().map(|i| image_key(&sources.get(i), content_key)).collect()
            }
            ClusterRule::Tag(_) => Vec::new(),
        };
        for (i, item) in self.items.iter().enumerate() {
            let keys: Vec<&str> = match rule {
                ClusterRule::SharedImages => {
                    item.source_indices().iter().map(|&s| source_keys[s as usize].as_str()).collect()
                }
                ClusterRule::Tag(key) => item
                    .tags()
                    .iter()
                    .filter(|(k, _)| k == key)
                    .flat_map(|(_, values)| values.iter().map(String::as_str))
                    .collect(),
            };
            for key in keys {
                match owner.get(key) {
                    Some(&other) => {
                        let (a, b) = (root(&mut parent, i), root(&mut parent, other));
                        parent[a.max(b)] = a.min(b);
                    }
                    None => {
                        owner.insert(key.to_string(), i);
                    }
                }
            }
        }
        let labels: Vec<usize> = (0..n).map(|i| root(&mut parent, i)).collect();
        let clusters = Clusters::from_labels(&labels);
        (!clusters.all_single()).then_some(clusters)
    }

    /// [`Suite::missing_images`] grouped by the folder each was expected in, folders in the
    /// order of their first missing file: a release whose images sit elsewhere is one line,
    /// not one per image.
    pub fn missing_images_by_folder(&self) -> Vec<MissingImages> {
        let mut groups: Vec<MissingImages> = Vec::new();
        for path in self.missing_images() {
            let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
            match groups.iter_mut().find(|g| g.folder == folder) {
                Some(group) => group.count += 1,
                None => groups.push(MissingImages { folder_exists: folder.is_dir(), folder, count: 1, first: path }),
            }
        }
        groups
    }

    /// Every image file the items refer to that does not exist, in item order (something else
    /// in its place, a folder or a FIFO, is there: decoding names it).
    pub fn missing_images(&self) -> Vec<PathBuf> {
        // The store holds each source once, in first-seen order; two sources can share a
        // file (a crop and the whole image), which is named once.
        let mut seen = std::collections::HashSet::new();
        self.items
            .distinct_sources()
            .iter()
            .map(|source| source.path().to_path_buf())
            .filter(|path| !path.exists() && seen.insert(path.clone()))
            .collect()
    }
}

/// The missing image files of a suite that one folder was to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingImages {
    pub folder: PathBuf,
    /// Whether the folder itself exists (else every image expected in it is missing).
    pub folder_exists: bool,
    pub count: usize,
    /// The first missing file, in item order.
    pub first: PathBuf,
}

impl MissingImages {
    /// One line for the group: the folder when it is absent, else the files.
    pub fn describe(&self) -> String {
        match (self.folder_exists, self.count) {
            (false, n) => format!(
                "find the image folder {}: it does not exist, and {n} image(s) of the suite are expected in it (e.g. {})",
                self.folder.display(),
                self.first.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            ),
            (true, 1) => format!("find image {}", self.first.display()),
            (true, n) => format!("find {n} images in {} (e.g. {})", self.folder.display(), self.first.display()),
        }
    }
}

/// A suite benchctl knows: its id, what it is, how it is scored, and its loader. Each
/// built-in suite's is declared once, beside its loader (`INFO`), and listed in [`SUITES`];
/// a manifest's is made from it ([`manifest::Manifest`]).
#[derive(Clone)]
pub struct SuiteInfo {
    pub id: Cow<'static, str>,
    pub description: Cow<'static, str>,
    /// The metric leaderboards rank by: one the suite's summary reports.
    pub headline: Cow<'static, str>,
    /// Where to get the data, printed when it is missing.
    pub how_to_get: Cow<'static, str>,
    /// Items in the complete official release, when known and not checked by the loader
    /// itself (see [`Suite::incomplete`]); `check` compares against it.
    pub expected_items: Option<usize>,
    /// How the suite's official scorer counts ties: [`Ties::First`] where it takes an argmax
    /// or a ranking (`--ties first` is offered to reproduce it), else [`Ties::Strict`].
    pub official_ties: Ties,
    /// How the suite is read.
    pub kind: SuiteKind,
    /// Where its data is by default under the data root (`datasets/`), where that is not the
    /// suite's id (the shipped demo's `demo/shapes`).
    pub data_dir: Option<&'static str>,
    /// The file its benchmark's own scorer reads from a model, if it defines one
    /// ([`submission`]): `eval` writes it beside each run, `score` reads one.
    pub submission: Option<submission::Submission>,
}

/// How a suite is read.
#[derive(Clone)]
pub enum SuiteKind {
    /// Into K×L items by `load` (every problem goes to the list, readable items are kept),
    /// summarised as `summary` says.
    Items { load: fn(&Path, &mut Problems) -> Suite, summary: fn() -> Summary },
    /// Into galleries that every query is ranked against (RoCOCO, see [`rococo`]).
    Galleries,
    /// Into K×L items, as a [`manifest`] describes them.
    Manifest(Arc<manifest::Manifest>),
}

impl SuiteInfo {
    /// Where the suite's data is by default under `root` (`datasets/` for `eval`, `check`,
    /// `score` and `fetch`; `--data-root` for `suites`).
    pub fn default_data_dir(&self, root: &Path) -> PathBuf {
        root.join(self.data_dir.unwrap_or(&self.id))
    }

    /// The dataset repo on the Hugging Face hub its files come from (a manifest's `[hub]`).
    pub fn hub(&self) -> Option<&hub::HubSource> {
        match &self.kind {
            SuiteKind::Manifest(manifest) => manifest.hub(),
            _ => None,
        }
    }

    /// How a generated reply to the suite's questions is read, as its official code reads
    /// replies (a manifest's `item.answers.reply`; the built-in suites ask no questions).
    pub fn reply_reading(&self) -> ReplyReading {
        match &self.kind {
            SuiteKind::Manifest(manifest) => manifest.reply_reading(),
            _ => ReplyReading::default(),
        }
    }

    /// How the suite's items are summarised; `None` for a suite of galleries.
    pub fn summary(&self) -> Option<Summary> {
        match &self.kind {
            SuiteKind::Items { summary, .. } => Some(summary()),
            SuiteKind::Manifest(manifest) => Some(manifest.summary().clone()),
            SuiteKind::Galleries => None,
        }
    }

    /// An empty suite of this id and summary under `data_dir`, for its loader to fill.
    pub fn empty(&self, data_dir: &Path) -> Suite {
        let summary = self.summary().unwrap_or_else(|| Summary::of(metrics::group::FAMILY));
        Suite::new(&self.id, data_dir, summary)
    }

    /// Whether a larger value of `metric` is better, as the suite's metric family declares it.
    pub fn higher_is_better(&self, metric: &str) -> bool {
        match self.summary() {
            Some(summary) => summary.family.higher_is_better(metric),
            None => metrics::retrieval::higher_is_better(metric),
        }
    }

    /// Loads the suite from its official layout under `data_dir`, failing on the first
    /// problem (its message says how many more `benchctl check` would list).
    pub fn load(&self, data_dir: &Path) -> Result<Suite> {
        let (suite, problems) = self.load_all(data_dir)?;
        let more = problems.len().saturating_sub(1);
        let Some(first) = problems.into_first() else { return Ok(suite) };
        if more == 0 {
            return Err(first);
        }
        Err(Error::new(
            first.kind(),
            format!(
                "{first} (and {} more problem(s); `benchctl check --suite {} --data-dir {}` lists them all)",
                more,
                self.id,
                data_dir.display()
            ),
        ))
    }

    /// Loads what can be read and lists every problem in the annotations (not the images:
    /// see [`Suite::missing_images`]). Fails only when the data directory is missing.
    pub fn load_all(&self, data_dir: &Path) -> Result<(Suite, Problems)> {
        if !data_dir.is_dir() {
            return Err(Error::new(
                ErrorKind::MissingData,
                format!("find the {} data directory {}: {}", self.id, data_dir.display(), self.how_to_get),
            ));
        }
        let mut problems = Problems::new();
        let suite = match &self.kind {
            // One loader may serve several suites (Winoground's reads the demo): each is its own id.
            SuiteKind::Items { load, .. } => Suite { id: self.id.to_string(), ..load(data_dir, &mut problems) },
            SuiteKind::Manifest(manifest) => manifest.load(data_dir, &mut problems),
            SuiteKind::Galleries => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("read {} as K×L items: it is a retrieval suite, scored against whole galleries", self.id),
                ))
            }
        };
        Ok((Suite { submission: self.submission, ..suite }, problems))
    }
}

/// Every built-in suite, each declared beside its loader.
pub const SUITES: &[SuiteInfo] =
    &[eqben::INFO, eqben::SUBSET_INFO, rococo::INFO, spec::INFO, valse::INFO, winoground::INFO, winoground::DEMO_INFO];

/// The suite with this id, a bundled manifest's, or the manifest at this path (see
/// [`manifest::find`]); else an error listing the known ones.
pub fn find(id: &str) -> Result<SuiteInfo> {
    if let Some(info) = SUITES.iter().find(|s| s.id == id) {
        return Ok(info.clone());
    }
    manifest::find(id)?.ok_or_else(|| {
        let known: Vec<String> = all().iter().map(|s| s.id.to_string()).collect();
        Error::new(
            ErrorKind::UnknownSuite,
            format!("find suite `{id}`: known suites are {}, or give a manifest's path (`.toml`)", known.join(", ")),
        )
    })
}

/// The built-in suites, then the bundled manifests' suites.
pub fn all() -> Vec<SuiteInfo> {
    SUITES.iter().cloned().chain(manifest::bundled_suites()).collect()
}

/// The content key of an embedded image, where the caller holds one ([`Suite::clusters_knowing`]).
pub type ContentKeys<'a> = dyn Fn(&EmbeddedImage) -> Option<[u8; 32]> + Sync + 'a;

/// What identifies an image for clustering: its file (a crop's or an altered image's first),
/// or an embedded image's content (a release that embeds one photo in several rows shows the
/// same image in each): the caller's key for it, else a hash of its bytes.
fn image_key(source: &ImageSource, content_key: &ContentKeys<'_>) -> String {
    let ImageSource::Embedded(e) = source else {
        return source.files().first().map(|p| p.display().to_string()).unwrap_or_default();
    };
    if let Some(key) = content_key(e) {
        // 128 of its bits, as many as the hash of the bytes below.
        let half: [u8; 16] = key[..16].try_into().unwrap_or_default();
        return format!("embedded:{:032x}", u128::from_le_bytes(half));
    }
    match e.bytes() {
        Ok(bytes) => {
            // Fixed seeds: the same bytes, the same key. 128 bits (two seeds) make a collision
            // between a suite's images negligible.
            let hash = |seed: u64| ahash::RandomState::with_seeds(seed, 1, 2, 3).hash_one(&bytes[..]);
            format!("embedded:{:016x}{:016x}:{}", hash(0), hash(7), bytes.len())
        }
        // Its own cluster: reading it for the run fails, naming the cell.
        Err(_) => format!("unread:{}", source.display_name()),
    }
}
