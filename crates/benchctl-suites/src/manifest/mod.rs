//! Suites from a manifest: a TOML file that maps an annotation file to K×L items, with no
//! code. The reference is `docs/manifests.md`; the bundled manifests (ARO, MMVP-VLM, and
//! Winoground as a manifest) are in `datasets/manifests/`, each beside its dataset card.
//!
//! `benchctl eval --suite path/to/manifest.toml` reads a manifest from a path;
//! `--suite NAME` finds a built-in suite, then a bundled manifest, then
//! `datasets/manifests/NAME.toml` under the working directory. A manifest suite is a suite
//! like any other: the same [`Suite`] of items, so cache, `check`, score files, dumps, the
//! store, leaderboards and intervals work unchanged.
//!
//! Every problem in a manifest is an error that names its key and line; every problem in the
//! annotations names the file, the record, and the manifest key that read it.

mod records;
mod sources;

pub use records::MAX_COLUMNS;
mod template;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use benchctl_scoring::metrics::{AllOf, GroupFilter, SubsetAverage, Summary, Ties};
use benchctl_scoring::{MetricFamily, TagSets, Truth};
use serde::Deserialize;
use toml::Spanned;

use crate::image::{CropRegion, CroppedSource};
use crate::{paths, Error, ErrorKind, ImageSource, Item, Problems, Result, Suite, SuiteInfo, SuiteKind};
use records::Format;
use sources::Sources;
use template::{Record, Template};

/// The manifests compiled into benchctl: (file name, text).
pub const BUNDLED: &[(&str, &str)] = &[
    ("aro-coco-order.toml", include_str!("../../../../datasets/manifests/aro-coco-order.toml")),
    ("aro-flickr30k-order.toml", include_str!("../../../../datasets/manifests/aro-flickr30k-order.toml")),
    ("aro-vg-attribution.toml", include_str!("../../../../datasets/manifests/aro-vg-attribution.toml")),
    ("aro-vg-relation.toml", include_str!("../../../../datasets/manifests/aro-vg-relation.toml")),
    ("cola-multiobjects.toml", include_str!("../../../../datasets/manifests/cola-multiobjects.toml")),
    ("mmvp-vlm.toml", include_str!("../../../../datasets/manifests/mmvp-vlm.toml")),
    ("sugarcrepe.toml", include_str!("../../../../datasets/manifests/sugarcrepe.toml")),
    ("sugarcrepe-pp.toml", include_str!("../../../../datasets/manifests/sugarcrepe-pp.toml")),
    ("whatsup-coco-spatial.toml", include_str!("../../../../datasets/manifests/whatsup-coco-spatial.toml")),
    ("whatsup-controlled-a.toml", include_str!("../../../../datasets/manifests/whatsup-controlled-a.toml")),
    ("whatsup-controlled-b.toml", include_str!("../../../../datasets/manifests/whatsup-controlled-b.toml")),
    ("whatsup-gqa-spatial.toml", include_str!("../../../../datasets/manifests/whatsup-gqa-spatial.toml")),
    ("winoground-manifest.toml", include_str!("../../../../datasets/manifests/winoground-manifest.toml")),
];

/// A parsed, checked manifest.
#[derive(Debug)]
pub struct Manifest {
    pub id: &'static str,
    /// Where it was read; `None` for a bundled one.
    pub path: Option<PathBuf>,
    /// Its text, part of a run's data fingerprint.
    pub text: String,
    sources: Sources,
    format: Format,
    records: Vec<String>,
    group: usize,
    /// Field paths (split at `.`) of the lists each record expands along (`source.expand`).
    expand: Vec<Vec<String>>,
    item: ItemSpec,
    summary: Summary<'static>,
    description: &'static str,
    headline: &'static str,
    how_to_get: &'static str,
    expected_items: Option<usize>,
    official_ties: Ties,
}

#[derive(Debug)]
struct ItemSpec {
    /// `None`: a record's key in a JSON object keyed by id, else its position.
    id: Option<Keyed<Template>>,
    image_dir: String,
    images: Candidates,
    crop: Option<[Keyed<Template>; 4]>,
    texts: Candidates,
    truth: Keyed<TruthSpec>,
    tags: Vec<(String, Keyed<Template>, Option<String>)>,
}

/// A value with the manifest key and line it came from, for messages.
#[derive(Debug)]
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

#[derive(Debug)]
enum Candidates {
    /// One template per candidate.
    Each(Vec<Keyed<Template>>),
    /// Every element of a list field.
    List(Keyed<Vec<String>>),
}

#[derive(Debug)]
enum TruthSpec {
    Diagonal,
    Text(IndexSpec),
    Image(IndexSpec),
    Pairs(Vec<(usize, usize)>),
}

#[derive(Debug)]
enum IndexSpec {
    Fixed(usize),
    From(Template),
}

// The TOML form. Spans give each key's line.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    id: Spanned<String>,
    description: String,
    #[serde(default)]
    how_to_get: Option<String>,
    #[serde(default)]
    expected_items: Option<usize>,
    /// The dataset card beside the manifest (documentation only).
    #[serde(default)]
    #[allow(dead_code)]
    card: Option<String>,
    source: RawSource,
    item: RawItem,
    metrics: RawMetrics,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    #[serde(default)]
    file: Option<Spanned<String>>,
    #[serde(default)]
    files: Option<Spanned<Vec<Spanned<String>>>>,
    /// With `files`: the tag each file's stem becomes (default `subset`).
    #[serde(default)]
    tag: Option<Spanned<String>>,
    format: Spanned<String>,
    #[serde(default)]
    records: Option<Spanned<String>>,
    #[serde(default)]
    group: Option<Spanned<usize>>,
    /// Lists of each record expanded together into one item per element.
    #[serde(default)]
    expand: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawItem {
    #[serde(default)]
    id: Option<Spanned<String>>,
    #[serde(default)]
    image_dir: Option<Spanned<String>>,
    #[serde(default)]
    images: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    images_list: Option<Spanned<String>>,
    #[serde(default)]
    crop: Option<RawCrop>,
    #[serde(default)]
    texts: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    texts_list: Option<Spanned<String>>,
    truth: Spanned<RawTruth>,
    #[serde(default)]
    tags: BTreeMap<String, Spanned<RawTag>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCrop {
    left: Spanned<String>,
    top: Spanned<String>,
    width: Spanned<String>,
    height: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawTruth {
    Named(String),
    Table(RawTruthTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTruthTable {
    #[serde(default)]
    text: Option<RawIndex>,
    #[serde(default)]
    image: Option<RawIndex>,
    #[serde(default)]
    pairs: Option<Vec<[usize; 2]>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawIndex {
    Fixed(usize),
    From(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawTag {
    Plain(String),
    Split { value: String, split: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    family: Spanned<String>,
    #[serde(default)]
    breakdown: Vec<Spanned<String>>,
    #[serde(default)]
    macro_over: Option<Spanned<String>>,
    #[serde(default)]
    macro_min_items: usize,
    #[serde(default)]
    macro_exclude: Vec<String>,
    #[serde(default)]
    ties: Option<Spanned<String>>,
    #[serde(default)]
    headline: Option<Spanned<String>>,
    #[serde(default)]
    average: Option<RawAverage>,
    /// Accuracies over groups (name → the tag whose values are the groups): a group counts
    /// when all its items are right.
    #[serde(default)]
    all_of: BTreeMap<String, Spanned<String>>,
}

/// `[metrics.average]`: a paper's average over named groups of one tag's values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAverage {
    name: Spanned<String>,
    over: Spanned<String>,
    groups: Spanned<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    metrics: Option<Spanned<Vec<String>>>,
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

/// Parses and checks a manifest; `origin` names it in messages (its path, or `bundled NAME`).
pub fn parse(text: &str, origin: &str, path: Option<PathBuf>) -> Result<Manifest> {
    let bad = |key: &str, line: usize, what: String| manifest_error(origin, key, line, what);
    let raw: RawManifest = toml::from_str(text)
        .map_err(|e| Error::caused_by(ErrorKind::Manifest, format!("read manifest {origin}: {e}"), e))?;
    let lines = LineStarts::new(text);
    let line = |span: std::ops::Range<usize>| lines.line_of(span.start);
    let template = |key: &str, s: &Spanned<String>| -> Result<Keyed<Template>> {
        let value = Template::parse(s.get_ref()).map_err(|e| bad(key, line(s.span()), e.to_string()))?;
        Ok(Keyed { value, key: key.to_string(), line: line(s.span()) })
    };

    let id = raw.id.get_ref().clone();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') {
        return Err(bad("id", line(raw.id.span()), format!("{id:?} must be letters, digits, `-`, `_` or `.`")));
    }
    if crate::SUITES.iter().any(|s| s.id == id) {
        return Err(bad("id", line(raw.id.span()), format!("`{id}` is a built-in suite's id; choose another")));
    }
    // Runs name their suite by id: a changed copy of a bundled manifest must not pass for it.
    if path.is_some() && bundled(&id).is_some() {
        return Err(bad(
            "id",
            line(raw.id.span()),
            format!(
                "`{id}` is a bundled manifest's id, and this file differs from it; give the changed copy its own id"
            ),
        ));
    }

    let format = Format::from_name(raw.source.format.get_ref()).ok_or_else(|| {
        bad(
            "source.format",
            line(raw.source.format.span()),
            format!("unknown format {:?} (one of {})", raw.source.format.get_ref(), Format::NAMES),
        )
    })?;
    let records: Vec<String> = match &raw.source.records {
        Some(r) if format != Format::Json => {
            return Err(bad("source.records", line(r.span()), "only a JSON file has records inside it".into()))
        }
        Some(r) => r.get_ref().split('.').map(str::to_string).collect(),
        None => Vec::new(),
    };
    let group = match &raw.source.group {
        Some(g) if *g.get_ref() == 0 => return Err(bad("source.group", line(g.span()), "must be at least 1".into())),
        Some(g) => *g.get_ref(),
        None => 1,
    };
    let expand = match &raw.source.expand {
        None => Vec::new(),
        Some(list) if list.get_ref().is_empty() => {
            return Err(bad("source.expand", line(list.span()), "names no list to expand".into()))
        }
        Some(list) => list
            .get_ref()
            .iter()
            .map(|path| {
                let parts: Vec<String> = path.get_ref().split('.').map(str::to_string).collect();
                if parts.iter().any(String::is_empty) {
                    return Err(bad(
                        "source.expand",
                        line(path.span()),
                        format!("{:?} is not a field path", path.get_ref()),
                    ));
                }
                Ok(parts)
            })
            .collect::<Result<_>>()?,
    };
    let sources = Sources::parse(&raw.source, origin, &line)?;

    let candidates = |list: &Option<Spanned<Vec<Spanned<String>>>>,
                      from: &Option<Spanned<String>>,
                      what: &str|
     -> Result<Candidates> {
        match (list, from) {
            (Some(list), None) => {
                if list.get_ref().is_empty() {
                    return Err(bad(&format!("item.{what}"), line(list.span()), "lists no candidate".into()));
                }
                let each = list
                    .get_ref()
                    .iter()
                    .enumerate()
                    .map(|(i, t)| template(&format!("item.{what}[{i}]"), t))
                    .collect::<Result<_>>()?;
                Ok(Candidates::Each(each))
            }
            (None, Some(field)) => {
                let key = format!("item.{what}_list");
                let parsed = Template::parse(&format!("{{{}}}", field.get_ref()))
                    .ok()
                    .and_then(|t| t.lone_field().map(<[String]>::to_vec))
                    .ok_or_else(|| {
                        bad(&key, line(field.span()), "must name a field (such as `caption_options`)".into())
                    })?;
                Ok(Candidates::List(Keyed { value: parsed, key, line: line(field.span()) }))
            }
            (Some(list), Some(_)) => Err(bad(
                &format!("item.{what}"),
                line(list.span()),
                format!("give `item.{what}` or `item.{what}_list`, not both"),
            )),
            (None, None) => Err(Error::new(
                ErrorKind::Manifest,
                format!("read manifest {origin}: `[item]` needs `{what}` (templates) or `{what}_list` (a list field)"),
            )),
        }
    };
    let item = &raw.item;
    let images = candidates(&item.images, &item.images_list, "images")?;
    let texts = candidates(&item.texts, &item.texts_list, "texts")?;
    let crop = match &item.crop {
        Some(c) => Some([
            template("item.crop.left", &c.left)?,
            template("item.crop.top", &c.top)?,
            template("item.crop.width", &c.width)?,
            template("item.crop.height", &c.height)?,
        ]),
        None => None,
    };
    let truth_line = line(item.truth.span());
    let index = |raw: &RawIndex, key: &str| -> Result<IndexSpec> {
        Ok(match raw {
            RawIndex::Fixed(i) => IndexSpec::Fixed(*i),
            RawIndex::From(t) => IndexSpec::From(Template::parse(t).map_err(|e| bad(key, truth_line, e.to_string()))?),
        })
    };
    let truth = match item.truth.get_ref() {
        RawTruth::Named(name) if name == "diagonal" => TruthSpec::Diagonal,
        RawTruth::Named(name) => {
            return Err(bad(
                "item.truth",
                truth_line,
                format!("unknown truth {name:?}: `\"diagonal\"`, or a table with `text`, `image` or `pairs`"),
            ))
        }
        RawTruth::Table(t) => match (&t.text, &t.image, &t.pairs) {
            (Some(text), None, None) => TruthSpec::Text(index(text, "item.truth.text")?),
            (None, Some(image), None) => TruthSpec::Image(index(image, "item.truth.image")?),
            (None, None, Some(pairs)) if !pairs.is_empty() => {
                TruthSpec::Pairs(pairs.iter().map(|[i, t]| (*i, *t)).collect())
            }
            _ => {
                return Err(bad(
                    "item.truth",
                    truth_line,
                    "give exactly one of `text` (the matching text's index), `image` or `pairs` (non-empty)".into(),
                ))
            }
        },
    };
    let mut tags = Vec::new();
    for (name, spec) in &item.tags {
        let key = format!("item.tags.{name}");
        let (text, split) = match spec.get_ref() {
            RawTag::Plain(t) => (t.clone(), None),
            RawTag::Split { value, split } => (value.clone(), Some(split.clone())),
        };
        let value = Template::parse(&text).map_err(|e| bad(&key, line(spec.span()), e.to_string()))?;
        tags.push((name.clone(), Keyed { value, key: key.clone(), line: line(spec.span()) }, split));
    }
    if let Some(tag) = &sources.tag {
        if tags.iter().any(|(name, _, _)| name == tag) {
            return Err(bad(
                "source.tag",
                sources.tag_span.clone().map_or(1, &line),
                format!("`{tag}` is also a tag of `[item.tags]`; name the files' tag otherwise"),
            ));
        }
        let value = Template::parse("{_source}").map_err(|e| bad("source.tag", 1, e.to_string()))?;
        tags.push((tag.clone(), Keyed { value, key: "source.tag".into(), line: 1 }, None));
    }
    let id_template = item.id.as_ref().map(|t| template("item.id", t)).transpose()?;
    let image_dir = match &item.image_dir {
        Some(dir) if !dir.get_ref().is_empty() => {
            // Images are found under it: it must stay inside the data directory, as each
            // image path must.
            paths::inside(Path::new(""), dir.get_ref(), "the manifest").map_err(|_| {
                bad("item.image_dir", line(dir.span()), "must be a path inside the data directory".into())
            })?;
            dir.get_ref().clone()
        }
        _ => String::new(),
    };

    // Metrics.
    let m = &raw.metrics;
    let family = match m.family.get_ref().as_str() {
        "group" => MetricFamily::Group,
        "choice" => MetricFamily::Choice,
        "pairwise" => MetricFamily::Pairwise,
        "positives" => MetricFamily::Positives,
        other => {
            return Err(bad(
                "metrics.family",
                line(m.family.span()),
                format!("unknown family {other:?} (group: text/image/group score; choice: image-to-text and text-to-image accuracy; pairwise: caption above its foil; positives: every positive above every negative)"),
            ))
        }
    };
    let tag_names: Vec<&str> = tags.iter().map(|(n, _, _)| n.as_str()).collect();
    let known_tag = |key: &str, name: &Spanned<String>| -> Result<&'static str> {
        if tag_names.contains(&name.get_ref().as_str()) {
            Ok(leak(name.get_ref()))
        } else {
            Err(bad(
                key,
                line(name.span()),
                format!("`{}` is not a tag of `[item.tags]` (it has: {})", name.get_ref(), tag_names.join(", ")),
            ))
        }
    };
    let breakdown: Vec<&'static str> =
        m.breakdown.iter().map(|b| known_tag("metrics.breakdown", b)).collect::<Result<_>>()?;
    let macro_over = m.macro_over.as_ref().map(|k| known_tag("metrics.macro_over", k)).transpose()?;
    let official_ties = match m.ties.as_ref().map(|t| (t.get_ref().as_str(), line(t.span()))) {
        None | Some(("strict", _)) => Ties::Strict,
        Some(("first", _)) if family == MetricFamily::Choice => Ties::First,
        Some(("first", at)) => {
            return Err(bad("metrics.ties", at, "`first` applies to the choice family only (an argmax)".into()))
        }
        Some((other, at)) => {
            return Err(bad("metrics.ties", at, format!("unknown tie rule {other:?} (strict or first)")))
        }
    };
    let names: &[&str] = match family {
        MetricFamily::Group => &benchctl_scoring::metrics::group::NAMES,
        MetricFamily::Choice => &benchctl_scoring::metrics::choice::NAMES,
        MetricFamily::Positives => &benchctl_scoring::metrics::positives::NAMES,
        _ => &benchctl_scoring::metrics::pairwise::NAMES,
    };
    let mut metric_names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    if family == MetricFamily::Pairwise {
        metric_names.push("acc".into());
    }
    if macro_over.is_some() {
        metric_names.extend(metric_names.clone().iter().map(|n| format!("{n}_macro")));
    }
    let base = match family {
        MetricFamily::Group => "group_score",
        MetricFamily::Choice => "i2t_accuracy",
        MetricFamily::Positives => "accuracy",
        _ => "acc_r",
    };
    let average = match &m.average {
        None => None,
        Some(a) => {
            let parsed = average(a, known_tag("metrics.average.over", &a.over)?, names, base, &bad, &line)?;
            metric_names.extend(parsed.reported());
            Some(&*Box::leak(Box::new(parsed)))
        }
    };
    let mut all_of = Vec::new();
    for (name, tag) in &m.all_of {
        let key = known_tag("metrics.all_of", tag)?;
        if metric_names.contains(name) {
            return Err(bad("metrics.all_of", line(tag.span()), format!("`{name}` is already a metric of this suite")));
        }
        metric_names.push(name.clone());
        all_of.push(AllOf { name: leak(name), key, metric: leak(base) });
    }
    let headline = match &m.headline {
        Some(h) if metric_names.contains(h.get_ref()) => h.get_ref().clone(),
        Some(h) => {
            return Err(bad(
                "metrics.headline",
                line(h.span()),
                format!("`{}` is not a metric of this suite (it has: {})", h.get_ref(), metric_names.join(", ")),
            ))
        }
        None => {
            if macro_over.is_some() {
                format!("{base}_macro")
            } else {
                base.to_string()
            }
        }
    };
    let exclude: Vec<&'static str> = m.macro_exclude.iter().map(|s| leak(s)).collect();
    let summary = Summary {
        breakdown_keys: Box::leak(breakdown.into_boxed_slice()),
        macro_over,
        macro_groups: GroupFilter { min_items: m.macro_min_items, exclude: Box::leak(exclude.into_boxed_slice()) },
        subset_average: average,
        all_of: Box::leak(all_of.into_boxed_slice()),
        ..Summary::of(family)
    };

    let id: &'static str = leak(&id);
    let how_to_get = raw.how_to_get.clone().unwrap_or_else(|| {
        format!(
            "place {} and its images in this directory, as the manifest {origin} describes",
            sources.patterns.join(", ")
        )
    });
    Ok(Manifest {
        id,
        path,
        text: text.to_string(),
        sources,
        format,
        records,
        group,
        expand,
        item: ItemSpec {
            id: id_template,
            image_dir,
            images,
            crop,
            texts,
            truth: Keyed { value: truth, key: "item.truth".into(), line: truth_line },
            tags,
        },
        summary,
        description: leak(&raw.description),
        headline: leak(&headline),
        how_to_get: leak(&how_to_get),
        expected_items: raw.expected_items,
        official_ties,
    })
}

/// `[metrics.average]` checked: its groups named, each with values, its metrics the family's.
fn average(
    raw: &RawAverage,
    key: &'static str,
    family_metrics: &[&str],
    base: &str,
    bad: &dyn Fn(&str, usize, String) -> Error,
    line: &dyn Fn(std::ops::Range<usize>) -> usize,
) -> Result<SubsetAverage<'static>> {
    let groups = raw.groups.get_ref();
    if groups.is_empty() || groups.values().any(Vec::is_empty) {
        return Err(bad(
            "metrics.average.groups",
            line(raw.groups.span()),
            "needs at least one group, each naming at least one value of the tag".into(),
        ));
    }
    let metrics: Vec<&'static str> = match &raw.metrics {
        None => vec![leak(base)],
        Some(list) => {
            let unknown = list.get_ref().iter().find(|m| !family_metrics.contains(&m.as_str()));
            if let Some(m) = unknown {
                return Err(bad(
                    "metrics.average.metrics",
                    line(list.span()),
                    format!("`{m}` is not a metric of this family (it has: {})", family_metrics.join(", ")),
                ));
            }
            list.get_ref().iter().map(|m| leak(m)).collect()
        }
    };
    let name = raw.name.get_ref();
    if name.is_empty() || family_metrics.contains(&name.as_str()) {
        return Err(bad("metrics.average.name", line(raw.name.span()), format!("{name:?} must be a new metric name")));
    }
    let subsets: Vec<(&'static str, &'static [&'static str])> = groups
        .iter()
        .map(|(group, values)| {
            let values: Vec<&'static str> = values.iter().map(|v| leak(v)).collect();
            (leak(group), &*Box::leak(values.into_boxed_slice()))
        })
        .collect();
    Ok(SubsetAverage {
        name: leak(name),
        key,
        subsets: Box::leak(subsets.into_boxed_slice()),
        metrics: Box::leak(metrics.into_boxed_slice()),
    })
}

/// A manifest problem, naming the manifest, the key and its line.
/// A record as the items it holds: itself (no `expand`), or one record per element of its
/// `expand` lists (all of one length), each list replaced by that element. A record whose
/// lists are empty holds no item.
fn expanded(
    value: serde_json::Value,
    paths: &[Vec<String>],
) -> std::result::Result<Vec<(Option<usize>, serde_json::Value)>, String> {
    use serde_json::Value;
    if paths.is_empty() {
        return Ok(vec![(None, value)]);
    }
    fn at<'v>(value: &'v mut Value, path: &[String]) -> std::result::Result<&'v mut Value, String> {
        let mut node = value;
        for (depth, part) in path.iter().enumerate() {
            let so_far = path[..=depth].join(".");
            node = match node {
                Value::Object(map) => map.get_mut(part).ok_or_else(|| format!("the record has no field `{so_far}`"))?,
                Value::Array(list) => {
                    let len = list.len();
                    let index: usize = part
                        .parse()
                        .map_err(|_| format!("`{so_far}`: `{part}` indexes a list, so it must be a number"))?;
                    list.get_mut(index).ok_or_else(|| format!("`{so_far}`: the list has {len} element(s)"))?
                }
                _ => return Err(format!("`{so_far}`: not an object or list")),
            };
        }
        Ok(node)
    }
    let mut template = value;
    let mut lists = Vec::with_capacity(paths.len());
    for path in paths {
        match at(&mut template, path)? {
            Value::Array(list) => lists.push(std::mem::take(list)),
            _ => return Err(format!("`{}` is not a list", path.join("."))),
        }
    }
    let len = lists[0].len();
    if let Some((path, list)) = paths.iter().zip(&lists).find(|(_, l)| l.len() != len) {
        return Err(format!(
            "`{}` has {len} element(s) but `{}` has {}: lists expanded together must be of one length",
            paths[0].join("."),
            path.join("."),
            list.len()
        ));
    }
    (0..len)
        .map(|i| {
            let mut value = template.clone();
            for (path, list) in paths.iter().zip(&lists) {
                *at(&mut value, path)? = list[i].clone();
            }
            Ok((Some(i), value))
        })
        .collect()
}

fn manifest_error(origin: &str, key: &str, line: usize, what: String) -> Error {
    Error::new(ErrorKind::Manifest, format!("read manifest {origin}: `{key}` (line {line}): {what}"))
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

/// Manifests loaded in this process, by the name or path they were asked for. A manifest is
/// parsed once; its suite description lives as long as the process.
static REGISTRY: Mutex<Vec<(String, &'static Manifest, &'static SuiteInfo)>> = Mutex::new(Vec::new());

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
pub fn find(spec: &str) -> Result<Option<&'static SuiteInfo>> {
    let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, _, info)) = registry.iter().find(|(asked, _, _)| asked == spec) {
        return Ok(Some(info));
    }
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
    let manifest: &'static Manifest = Box::leak(Box::new(parse(&text, &origin, path)?));
    let info: &'static SuiteInfo = Box::leak(Box::new(manifest.info()));
    registry.push((spec.to_string(), manifest, info));
    Ok(Some(info))
}

/// The bundled manifest with id `name` (each is saved as `<id>.toml`).
fn bundled(name: &str) -> Option<(&'static str, &'static str)> {
    BUNDLED.iter().copied().find(|(file, _)| file.strip_suffix(".toml") == Some(name))
}

/// Every bundled manifest's suite.
pub fn bundled_suites() -> Vec<&'static SuiteInfo> {
    BUNDLED.iter().filter_map(|(file, _)| find(file.trim_end_matches(".toml")).ok().flatten()).collect()
}

/// What loading one manifest's files shares: the ids seen (and where), where images are, and
/// the tag sets the items share.
struct LoadState {
    seen: std::collections::HashMap<String, String>,
    images_root: PathBuf,
    tag_sets: TagSets,
}

impl Manifest {
    /// The suite's description, as the built-in suites have theirs.
    fn info(&'static self) -> SuiteInfo {
        SuiteInfo {
            id: self.id,
            description: self.description,
            headline: self.headline,
            how_to_get: self.how_to_get,
            expected_items: self.expected_items,
            official_ties: self.official_ties,
            kind: SuiteKind::Manifest(self),
        }
    }

    /// Reads the items under `data_dir`: every problem goes to `problems`, readable items are kept.
    pub fn load(&'static self, data_dir: &Path, problems: &mut Problems) -> Suite {
        let mut suite = Suite::new(self.id, data_dir, self.summary);
        suite.manifest = Some(self);
        let files = match self.sources.files(data_dir) {
            Ok(files) => files,
            Err(e) => {
                problems.push(e);
                return suite;
            }
        };
        let mut state = LoadState {
            seen: Default::default(),
            images_root: data_dir.join(&self.item.image_dir),
            tag_sets: TagSets::default(),
        };
        for file in &files {
            suite.annotation_files.push(file.clone());
            self.load_file(file, &mut state, &mut suite, problems);
        }
        if suite.items.is_empty() && problems.is_empty() {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            problems.push(Error::new(ErrorKind::Malformed, format!("load {}: it holds no records", names.join(", "))));
        }
        suite
    }

    /// The items of one annotation file, into `suite`.
    fn load_file(&self, file: &Path, state: &mut LoadState, suite: &mut Suite, problems: &mut Problems) {
        let how_to_get = format!("the manifest's `{}` {}", self.sources.key(), sources::stem(file));
        let records = match records::read(file, self.format, &self.records, &how_to_get) {
            Ok(records) => records,
            Err(e) => {
                problems.push(e);
                return;
            }
        };
        if records.len() % self.group != 0 {
            problems.push(Error::new(
                ErrorKind::Malformed,
                format!(
                    "read {}: {} record(s) do not make whole groups of {} (`source.group`); the last {} left out",
                    file.display(),
                    records.len(),
                    self.group,
                    records.len() % self.group
                ),
            ));
        }
        let source = sources::stem(file);
        for (index, chunk) in records.chunks_exact(self.group).enumerate() {
            let (value, key, at) = if self.group == 1 {
                (chunk[0].value.clone(), chunk[0].key.as_deref(), chunk[0].at.clone())
            } else {
                let list = chunk.iter().map(|r| r.value.clone()).collect();
                (serde_json::Value::Array(list), None, format!("{} to {}", chunk[0].at, chunk[chunk.len() - 1].at))
            };
            let at = format!("{} {at}", file.display());
            let elements = match expanded(value, &self.expand) {
                Ok(elements) => elements,
                Err(what) => {
                    problems.push(Error::new(ErrorKind::Malformed, format!("read {at}: `source.expand`: {what}")));
                    continue;
                }
            };
            for (element, value) in elements {
                let at = element.map_or_else(|| at.clone(), |e| format!("{at} element {e}"));
                let record = Record { value: &value, index, key, source: &source, element };
                match self.item(&record, &state.images_root, &mut state.tag_sets, &at) {
                    Ok(item) => match state.seen.get(&item.id) {
                        Some(first) => problems.push(Error::new(
                            ErrorKind::Malformed,
                            format!("read {at}: duplicate item id {:?} (`item.id`), first at {first}", item.id),
                        )),
                        None => {
                            state.seen.insert(item.id.clone(), at);
                            suite.items.push(item);
                        }
                    },
                    Err(e) => problems.push(e),
                }
            }
        }
    }

    fn item(&self, record: &Record<'_>, images_root: &Path, tag_sets: &mut TagSets, at: &str) -> Result<Item> {
        let fail =
            |named: String, what: String| Error::new(ErrorKind::Malformed, format!("read {at}: {named}: {what}"));
        let render = |t: &Keyed<Template>| t.value.render(record).map_err(|e| fail(t.named(), e.to_string()));
        let id = match &self.item.id {
            Some(template) => render(template)?,
            None => {
                let mut own = record.key.map(str::to_string).unwrap_or_else(|| record.index.to_string());
                // An expanded record's items: one per element.
                if let Some(element) = record.element {
                    own = format!("{own}/{element}");
                }
                // Several files number their records alike: the file's stem keeps ids apart.
                if self.sources.tag.is_some() {
                    format!("{}/{own}", record.source)
                } else {
                    own
                }
            }
        };
        let texts = self.candidates(&self.item.texts, record, &fail)?;
        let paths = self.candidates(&self.item.images, record, &fail)?;
        let crop = match &self.item.crop {
            Some(fields) => Some(self.crop(fields, record, &fail)?),
            None => None,
        };
        let images = paths
            .iter()
            .map(|p| {
                let path = paths::inside(images_root, p, at)?;
                Ok(match crop {
                    Some(region) => ImageSource::Cropped(Box::new(CroppedSource { file: path, region })),
                    None => ImageSource::from_path(path),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let (k, l) = (images.len(), texts.len());
        let truth_at = || self.item.truth.named();
        let index_of = |spec: &IndexSpec, bound: usize, what: &str| -> Result<usize> {
            let i = match spec {
                IndexSpec::Fixed(i) => *i,
                IndexSpec::From(t) => {
                    let text = t.render(record).map_err(|e| fail(truth_at(), e.to_string()))?;
                    text.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.fract() == 0.0 && *x >= 0.0)
                        .map(|x| x as usize)
                        .ok_or_else(|| fail(truth_at(), format!("the {what} index {text:?} is not a whole number")))?
                }
            };
            if i >= bound {
                return Err(fail(truth_at(), format!("{what} {i} of an item with {bound} {what}(s)")));
            }
            Ok(i)
        };
        let mut matches = vec![false; k * l];
        match &self.item.truth.value {
            TruthSpec::Diagonal if k == l => (0..k).for_each(|i| matches[i * l + i] = true),
            TruthSpec::Diagonal => {
                return Err(fail(truth_at(), format!("`diagonal` needs as many images as texts, got {k}×{l}")))
            }
            TruthSpec::Text(spec) => {
                let t = index_of(spec, l, "text")?;
                (0..k).for_each(|i| matches[i * l + t] = true);
            }
            TruthSpec::Image(spec) => {
                let i = index_of(spec, k, "image")?;
                (0..l).for_each(|t| matches[i * l + t] = true);
            }
            TruthSpec::Pairs(pairs) => {
                for &(i, t) in pairs {
                    if i >= k || t >= l {
                        return Err(fail(truth_at(), format!("pair ({i}, {t}) is outside an item of {k}×{l}")));
                    }
                    matches[i * l + t] = true;
                }
            }
        }
        let truth = Truth::new(k, l, matches).map_err(|e| fail(truth_at(), e.to_string()))?;
        let mut tags = Vec::new();
        for (name, template, split) in &self.item.tags {
            let value = render(template)?;
            let values = match split {
                Some(sep) => {
                    value.split(sep.as_str()).map(str::trim).filter(|v| !v.is_empty()).map(String::from).collect()
                }
                None => vec![value],
            };
            tags.push((name.clone(), values));
        }
        Ok(Item { id, images, texts, truth, tags: tag_sets.intern(tags) })
    }

    fn candidates(
        &self,
        spec: &Candidates,
        record: &Record<'_>,
        fail: &dyn Fn(String, String) -> Error,
    ) -> Result<Vec<String>> {
        match spec {
            Candidates::Each(templates) => {
                templates.iter().map(|t| t.value.render(record).map_err(|e| fail(t.named(), e.to_string()))).collect()
            }
            Candidates::List(field) => {
                let value = template::lookup(record, &field.value).map_err(|e| fail(field.named(), e.to_string()))?;
                let list = value.as_array().filter(|l| !l.is_empty()).ok_or_else(|| {
                    fail(field.named(), format!("`{}` must be a non-empty list", field.value.join(".")))
                })?;
                list.iter()
                    .map(|v| {
                        template::scalar_text(v).map_err(|what| fail(field.named(), format!("an element is {what}")))
                    })
                    .collect()
            }
        }
    }

    /// The crop box as PIL's `Image.crop` takes it: (left, top, left + width, top + height),
    /// each rounded half to even (Python's `round`).
    fn crop(
        &self,
        fields: &[Keyed<Template>; 4],
        record: &Record<'_>,
        fail: &dyn Fn(String, String) -> Error,
    ) -> Result<CropRegion> {
        let mut values = [0f64; 4];
        for (value, field) in values.iter_mut().zip(fields) {
            let text = field.value.render(record).map_err(|e| fail(field.named(), e.to_string()))?;
            *value = text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && v.abs() < 1e9)
                .ok_or_else(|| fail(field.named(), format!("{text:?} is not a number")))?;
        }
        let [left, top, width, height] = values;
        let round = |v: f64| v.round_ties_even() as i64;
        let region =
            CropRegion { left: round(left), top: round(top), right: round(left + width), bottom: round(top + height) };
        if region.right <= region.left || region.bottom <= region.top {
            return Err(fail(fields[2].named(), format!("the crop box {region:?} is empty")));
        }
        Ok(region)
    }
}
