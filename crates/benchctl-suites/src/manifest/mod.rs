//! Suites from a manifest: a TOML file that maps an annotation file to K×L items, with no
//! code. The reference is `docs/manifests.md`; the bundled manifests (ARO, MMVP-VLM, and
//! Winoground as a manifest) are in `datasets/manifests/`, each beside its dataset card.
//!
//! `benchctl eval --suite path/to/manifest.toml` reads a manifest from a path;
//! `--suite NAME` finds a built-in suite, then a bundled manifest, then
//! `datasets/manifests/NAME.toml` under the working directory. A manifest suite is a suite
//! like any other: the same [`crate::Suite`] of items, so cache, `check`, score files, dumps, the
//! store, leaderboards and intervals work unchanged.
//!
//! Every problem in a manifest is an error that names its key and line; every problem in the
//! annotations names the file, the record, and the manifest key that read it.

mod answers;
mod arrow;
mod cells;
mod item;
mod load;
mod metrics;
mod parquet;
mod pylist;
mod raw;
mod records;
mod sources;
mod template;

pub use answers::ReplyReading;
pub use load::MAX_EXPANDED;
pub use records::{delimited_rows, UnclosedQuote, MAX_COLUMNS};
// Winoground's built-in loader reads its parquet form as a manifest's parquet is read.
pub(crate) use cells::Blobs;
pub(crate) use parquet::read as read_parquet;

use std::borrow::Cow;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use benchctl_scoring::metrics::{Summary, Ties};
use toml::Spanned;

use crate::hub::HubSource;
use crate::submission::Submission;
use crate::{Error, ErrorKind, Result, SuiteInfo, SuiteKind};
use item::ItemSpec;
use raw::RawManifest;
use records::Format;
use sources::Sources;
use template::Template;

/// The manifests compiled into benchctl: (file name, text).
pub const BUNDLED: &[(&str, &str)] = &[
    ("aro-coco-order.toml", include_str!("../../../../datasets/manifests/aro-coco-order.toml")),
    ("aro-flickr30k-order.toml", include_str!("../../../../datasets/manifests/aro-flickr30k-order.toml")),
    ("aro-vg-attribution.toml", include_str!("../../../../datasets/manifests/aro-vg-attribution.toml")),
    ("aro-vg-relation.toml", include_str!("../../../../datasets/manifests/aro-vg-relation.toml")),
    ("bivlc.toml", include_str!("../../../../datasets/manifests/bivlc.toml")),
    ("crepe-productivity.toml", include_str!("../../../../datasets/manifests/crepe-productivity.toml")),
    ("crepe-systematicity-atom.toml", include_str!("../../../../datasets/manifests/crepe-systematicity-atom.toml")),
    ("crepe-systematicity-comp.toml", include_str!("../../../../datasets/manifests/crepe-systematicity-comp.toml")),
    ("colorswap.toml", include_str!("../../../../datasets/manifests/colorswap.toml")),
    ("cola-multiobjects.toml", include_str!("../../../../datasets/manifests/cola-multiobjects.toml")),
    ("imagecode.toml", include_str!("../../../../datasets/manifests/imagecode.toml")),
    ("mmvp-vlm.toml", include_str!("../../../../datasets/manifests/mmvp-vlm.toml")),
    ("naturalbench.toml", include_str!("../../../../datasets/manifests/naturalbench.toml")),
    ("naturalbench-retrieval.toml", include_str!("../../../../datasets/manifests/naturalbench-retrieval.toml")),
    ("sugarcrepe.toml", include_str!("../../../../datasets/manifests/sugarcrepe.toml")),
    ("sugarcrepe-pp.toml", include_str!("../../../../datasets/manifests/sugarcrepe-pp.toml")),
    ("vismin.toml", include_str!("../../../../datasets/manifests/vismin.toml")),
    ("vismin-vqa.toml", include_str!("../../../../datasets/manifests/vismin-vqa.toml")),
    ("whatsup-coco-spatial.toml", include_str!("../../../../datasets/manifests/whatsup-coco-spatial.toml")),
    ("whatsup-controlled-a.toml", include_str!("../../../../datasets/manifests/whatsup-controlled-a.toml")),
    ("whatsup-controlled-b.toml", include_str!("../../../../datasets/manifests/whatsup-controlled-b.toml")),
    ("whatsup-gqa-spatial.toml", include_str!("../../../../datasets/manifests/whatsup-gqa-spatial.toml")),
    ("winoground-manifest.toml", include_str!("../../../../datasets/manifests/winoground-manifest.toml")),
];

/// A parsed, checked manifest.
#[derive(Debug)]
pub struct Manifest {
    pub id: String,
    /// Where it was read; `None` for a bundled one.
    pub path: Option<PathBuf>,
    /// Its text, part of a run's data fingerprint.
    pub text: String,
    sources: Sources,
    format: Format,
    records: Vec<String>,
    group: usize,
    /// Only the first this many records of each file (`source.first`), as some official
    /// configurations score.
    first: Option<usize>,
    /// Field paths (split at `.`) of the lists each record expands along (`source.expand`).
    expand: Vec<Vec<String>>,
    /// Each record, an object, read as one record per entry (`source.entries`).
    entries: bool,
    item: ItemSpec,
    summary: Summary,
    description: String,
    headline: String,
    how_to_get: String,
    expected_items: Option<usize>,
    official_ties: Ties,
    /// The dataset repo its files come from (`[hub]`).
    hub: Option<HubSource>,
    /// The benchmark's official submission format (`submission`).
    submission: Option<Submission>,
}

/// A value with the manifest key and line it came from, for messages.
#[derive(Debug, Clone)]
struct Keyed<T> {
    value: T,
    key: String,
    line: usize,
}

impl<T> Keyed<T> {
    fn named(&self) -> String {
        format!("`{}` (manifest line {})", self.key, self.line)
    }
}

/// Where each line of a text starts, to name the line of a byte offset in O(log lines): a
/// manifest names a line for every key it checks, and counting from the start each time
/// would take time quadratic in its size (a manifest of many tags).
struct LineStarts(Vec<usize>);

impl LineStarts {
    fn new(text: &str) -> Self {
        Self(std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect())
    }

    /// The 1-based line of byte offset `at`.
    fn line_of(&self, at: usize) -> usize {
        self.0.partition_point(|&start| start <= at)
    }
}

/// What checking a manifest's keys shares: where it came from and its lines, to name the key
/// and line of every problem.
struct Context<'a> {
    origin: &'a str,
    lines: LineStarts,
}

impl Context<'_> {
    /// The line a key's span starts on.
    fn line(&self, span: Range<usize>) -> usize {
        self.lines.line_of(span.start)
    }

    /// A manifest problem at `key` on `line`.
    fn bad(&self, key: &str, line: usize, what: String) -> Error {
        manifest_error(self.origin, key, line, what)
    }

    /// A template key, parsed.
    fn template(&self, key: &str, s: &Spanned<String>) -> Result<Keyed<Template>> {
        let line = self.line(s.span());
        let value = Template::parse(s.get_ref()).map_err(|e| self.bad(key, line, e.to_string()))?;
        Ok(Keyed { value, key: key.to_string(), line })
    }
}

/// Parses and checks a manifest; `origin` names it in messages (its path, or `bundled NAME`).
pub fn parse(text: &str, origin: &str, path: Option<PathBuf>) -> Result<Manifest> {
    let raw: RawManifest = toml::from_str(text)
        .map_err(|e| Error::caused_by(ErrorKind::Manifest, format!("read manifest {origin}: {e}"), e))?;
    let cx = Context { origin, lines: LineStarts::new(text) };
    let id = check_id(&raw.id, path.is_some(), &cx)?;
    let source = &raw.source;
    let format = Format::from_name(source.format.get_ref()).ok_or_else(|| {
        cx.bad(
            "source.format",
            cx.line(source.format.span()),
            format!("unknown format {:?} (one of {})", source.format.get_ref(), Format::NAMES),
        )
    })?;
    let records: Vec<String> = match &source.records {
        Some(r) if format != Format::Json => {
            return Err(cx.bad("source.records", cx.line(r.span()), "only a JSON file has records inside it".into()))
        }
        Some(r) => r.get_ref().split('.').map(str::to_string).collect(),
        None => Vec::new(),
    };
    let group = match &source.group {
        Some(g) if *g.get_ref() == 0 => {
            return Err(cx.bad("source.group", cx.line(g.span()), "must be at least 1".into()))
        }
        Some(g) => *g.get_ref(),
        None => 1,
    };
    let first = match &source.first {
        Some(n) if *n.get_ref() == 0 => {
            return Err(cx.bad("source.first", cx.line(n.span()), "must be at least 1".into()))
        }
        Some(n) => Some(*n.get_ref()),
        None => None,
    };
    let expand = expand_paths(source.expand.as_ref(), &cx)?;
    let entries = source.entries.as_ref().is_some_and(|e| *e.get_ref());
    if let Some(e) = source.entries.as_ref().filter(|_| entries && format != Format::Json) {
        return Err(cx.bad(
            "source.entries",
            cx.line(e.span()),
            "only a JSON file's records are objects of entries".into(),
        ));
    }
    let sources = Sources::parse(source, origin, &|span| cx.line(span))?;
    let files_tag = sources.tag.as_deref().map(|tag| (tag, sources.tag_span.clone().map_or(1, |s| cx.line(s))));
    let item = ItemSpec::parse(&raw.item, files_tag, &cx)?;
    let metrics = metrics::Metrics::parse(&raw.metrics, &item.tag_names(), &cx)?;
    // Answer options are scored by the family that reads them, and only by it.
    if metrics.summary.family.facts().asks_questions != item.asks_questions() {
        let family = metrics.summary.family.facts().id;
        let what = if item.asks_questions() {
            format!(
                "`{family}` scores candidate texts; the items of `[item.answers]` are scored by the `answers` family"
            )
        } else {
            format!("`{family}` scores questions with answer options: give them in `[item.answers]`")
        };
        return Err(cx.bad("metrics.family", cx.line(raw.metrics.family.span()), what));
    }
    let hub = raw.hub.as_ref().map(|h| hub_source(h, &sources, &cx)).transpose()?;
    let submission = raw.submission.as_ref().map(|s| submission(s, &metrics.summary, &cx)).transpose()?;
    let how_to_get = raw.how_to_get.clone().unwrap_or_else(|| default_how_to_get(&id, hub.as_ref(), &sources, origin));
    Ok(Manifest {
        id,
        path,
        text: text.to_string(),
        sources,
        format,
        records,
        group,
        first,
        expand,
        entries,
        item,
        summary: metrics.summary,
        description: raw.description.clone(),
        headline: metrics.headline,
        how_to_get,
        expected_items: raw.expected_items,
        official_ties: metrics.official_ties,
        hub,
        submission,
    })
}

/// The `submission` key: a format the suite's items can be written in.
fn submission(name: &Spanned<String>, summary: &Summary, cx: &Context) -> Result<Submission> {
    let line = cx.line(name.span());
    let format = Submission::from_name(name.get_ref()).ok_or_else(|| {
        cx.bad("submission", line, format!("`{}` is none of {}", name.get_ref(), Submission::NAMES.join(", ")))
    })?;
    let family = summary.family;
    let fits = match format {
        // Its order is the built-in loader's, read from EqBen's own annotation list.
        Submission::EqbenNpy => false,
        Submission::NaturalbenchOutputs => family.facts().asks_questions,
        Submission::VisminCsv => {
            use benchctl_scoring::metrics::{answered_group, group};
            [group::FAMILY, answered_group::FAMILY].contains(&family)
        }
    };
    if !fits {
        let what = match format {
            Submission::EqbenNpy => "`eqben-npy` is written in the order the built-in `eqben` suite reads".to_string(),
            _ => format!("`{}` does not fit the `{}` family's items", format.name(), family.id()),
        };
        return Err(cx.bad("submission", line, what));
    }
    Ok(format)
}

/// How to get a manifest's data when it does not say: `fetch` for a hub release (unpacked into
/// the data directory, or read in the hub cache), else its files as the manifest names them.
fn default_how_to_get(id: &str, hub: Option<&HubSource>, sources: &Sources, origin: &str) -> String {
    let Some(hub) = hub else {
        return format!(
            "place {} and its images in this directory, as the manifest {origin} describes",
            sources.patterns.join(", ")
        );
    };
    let gated =
        if hub.gated { " (the repo is gated: accept its terms on huggingface.co and set HF_TOKEN)" } else { "" };
    let placed = if hub.unpack {
        "and unpacks it into this directory"
    } else {
        "into the hub cache, where the suite is then read"
    };
    format!(
        "run `benchctl fetch --suite {id}`: it downloads {} of the dataset {} from the Hugging Face hub {placed}{gated}",
        hub.files.join(", "),
        hub.repo
    )
}

/// `[hub]`: a repo id as the hub writes them, a revision that is a path inside the repo's
/// refs (default `main`), and the files (default: the source's patterns).
fn hub_source(raw: &raw::RawHub, sources: &Sources, cx: &Context<'_>) -> Result<HubSource> {
    let repo = raw.repo.get_ref();
    if !crate::hub::is_repo_id(repo) {
        let what = format!("{repo:?} is not a hub repo id (ORG/NAME: letters, digits, `-`, `_`, `.`)");
        return Err(cx.bad("hub.repo", cx.line(raw.repo.span()), what));
    }
    let revision = match &raw.revision {
        Some(r) => {
            if !benchctl_base::hub_names::is_repo_path(r.get_ref()) {
                let what = format!("{:?} is not a branch, tag or commit", r.get_ref());
                return Err(cx.bad("hub.revision", cx.line(r.span()), what));
            }
            r.get_ref().clone()
        }
        None => "main".to_string(),
    };
    let files = match &raw.files {
        Some(files) if files.get_ref().is_empty() => {
            return Err(cx.bad("hub.files", cx.line(files.span()), "lists no file".into()))
        }
        Some(files) => {
            for f in files.get_ref() {
                if f.get_ref().is_empty() || f.get_ref().starts_with('/') || f.get_ref().split('/').any(|p| p == "..") {
                    let what = format!("{:?} is not a file name or pattern inside the repo", f.get_ref());
                    return Err(cx.bad("hub.files", cx.line(f.span()), what));
                }
            }
            files.get_ref().iter().map(|f| f.get_ref().clone()).collect()
        }
        None => sources.patterns.clone(),
    };
    let unpack = raw.unpack.as_ref().is_some_and(|u| *u.get_ref());
    if let Some(u) = raw.unpack.as_ref().filter(|_| unpack && !files.iter().any(|f| f.ends_with(".zip"))) {
        let what = "is true, but no file of `hub.files` is a `.zip` archive to unpack".to_string();
        return Err(cx.bad("hub.unpack", cx.line(u.span()), what));
    }
    Ok(HubSource { repo: repo.clone(), revision, files, gated: raw.gated, unpack })
}

/// `id`: letters, digits, `-`, `_` or `.`, not a built-in suite's, and (for a file) not a
/// bundled manifest's: runs name their suite by id, so a changed copy must not pass for it.
fn check_id(raw: &Spanned<String>, from_file: bool, cx: &Context<'_>) -> Result<String> {
    let (id, line) = (raw.get_ref().clone(), cx.line(raw.span()));
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') {
        return Err(cx.bad("id", line, format!("{id:?} must be letters, digits, `-`, `_` or `.`")));
    }
    if crate::SUITES.iter().any(|s| s.id == id) {
        return Err(cx.bad("id", line, format!("`{id}` is a built-in suite's id; choose another")));
    }
    if from_file && bundled(&id).is_some() {
        return Err(cx.bad(
            "id",
            line,
            format!(
                "`{id}` is a bundled manifest's id, and this file differs from it; give the changed copy its own id"
            ),
        ));
    }
    Ok(id)
}

/// `source.expand`: field paths, split at `.`.
fn expand_paths(list: Option<&Spanned<Vec<Spanned<String>>>>, cx: &Context<'_>) -> Result<Vec<Vec<String>>> {
    let Some(list) = list else { return Ok(Vec::new()) };
    if list.get_ref().is_empty() {
        return Err(cx.bad("source.expand", cx.line(list.span()), "names no list to expand".into()));
    }
    list.get_ref()
        .iter()
        .map(|path| {
            let parts: Vec<String> = path.get_ref().split('.').map(str::to_string).collect();
            if parts.iter().any(String::is_empty) {
                return Err(cx.bad(
                    "source.expand",
                    cx.line(path.span()),
                    format!("{:?} is not a field path", path.get_ref()),
                ));
            }
            Ok(parts)
        })
        .collect()
}

/// A manifest problem, naming the manifest, the key and its line.
fn manifest_error(origin: &str, key: &str, line: usize, what: String) -> Error {
    Error::new(ErrorKind::Manifest, format!("read manifest {origin}: `{key}` (line {line}): {what}"))
}

/// The most bytes a manifest may have: one describes a dataset, it does not hold one (a
/// manifest of 10⁶ keys is 9 MB, and its TOML document takes ≈ 50 times that in memory).
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// A manifest's text: a regular file (a FIFO or device is refused before it is opened) of at
/// most [`MAX_MANIFEST_BYTES`].
fn read_manifest(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            return Err(std::io::Error::other("it is not a regular file"));
        }
    }
    let mut text = String::new();
    std::fs::File::open(path)?.take(MAX_MANIFEST_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(std::io::Error::other(format!("it has more than {MAX_MANIFEST_BYTES} bytes")));
    }
    Ok(text)
}

/// The suite of a manifest: `spec` is a path to a `.toml` file, a bundled manifest's id
/// (its file stem), or the stem of `datasets/manifests/<spec>.toml` under the working directory.
/// `Ok(None)` when `spec` names no manifest.
pub fn find(spec: &str) -> Result<Option<SuiteInfo>> {
    let as_path = Path::new(spec);
    let (text, origin, path) = if spec.ends_with(".toml") || spec.contains('/') {
        let text = read_manifest(as_path).map_err(|e| {
            // No such file names no suite; a file that cannot be read is a broken manifest.
            let kind =
                if e.kind() == std::io::ErrorKind::NotFound { ErrorKind::UnknownSuite } else { ErrorKind::Manifest };
            Error::caused_by(kind, format!("read manifest {spec}: {e}"), e)
        })?;
        if let Some((name, bundled_text)) = BUNDLED.iter().find(|(_, bundled)| *bundled == text) {
            // A bundled manifest's own file (`datasets/manifests/` of a checkout): that suite.
            (bundled_text.to_string(), format!("bundled {name}"), None)
        } else {
            let absolute = std::path::absolute(as_path).unwrap_or_else(|_| as_path.to_path_buf());
            (text, spec.to_string(), Some(absolute))
        }
    } else if let Some((name, text)) = bundled(spec) {
        (text.to_string(), format!("bundled {name}"), None)
    } else {
        let local = Path::new("datasets/manifests").join(format!("{spec}.toml"));
        match read_manifest(&local) {
            Ok(text) => {
                let absolute = std::path::absolute(&local).unwrap_or(local.clone());
                (text, local.display().to_string(), Some(absolute))
            }
            Err(_) => return Ok(None),
        }
    };
    Ok(Some(Arc::new(parse(&text, &origin, path)?).info()))
}

/// The bundled manifest with id `name` (each is saved as `<id>.toml`).
fn bundled(name: &str) -> Option<(&'static str, &'static str)> {
    BUNDLED.iter().copied().find(|(file, _)| file.strip_suffix(".toml") == Some(name))
}

/// Every bundled manifest's suite.
pub fn bundled_suites() -> Vec<SuiteInfo> {
    BUNDLED.iter().filter_map(|(file, _)| find(file.trim_end_matches(".toml")).ok().flatten()).collect()
}

impl Manifest {
    /// Whether its annotation files can hold images (parquet and Arrow cells).
    pub fn reads_cells(&self) -> bool {
        matches!(self.format, Format::Parquet | Format::Arrow)
    }

    /// The dataset repo its files come from, when the manifest has a `[hub]` section.
    pub fn hub(&self) -> Option<&HubSource> {
        self.hub.as_ref()
    }

    /// The benchmark's official submission format (`submission`).
    pub fn submission(&self) -> Option<Submission> {
        self.submission
    }

    /// How a generated reply to its questions is read (`item.answers.reply`).
    pub fn reply_reading(&self) -> ReplyReading {
        self.item.reply_reading()
    }

    /// How the suite's items are summarised.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The suite's description, as the built-in suites have theirs.
    pub fn info(self: &Arc<Self>) -> SuiteInfo {
        SuiteInfo {
            id: Cow::Owned(self.id.clone()),
            description: Cow::Owned(self.description.clone()),
            headline: Cow::Owned(self.headline.clone()),
            how_to_get: Cow::Owned(self.how_to_get.clone()),
            expected_items: self.expected_items,
            official_ties: self.official_ties,
            kind: SuiteKind::Manifest(Arc::clone(self)),
            data_dir: None,
            submission: self.submission,
        }
    }
}
