//! `[item]`: how a record becomes one K×L item (its id, candidate images and texts, an
//! optional crop, the truth and the tags), checked when the manifest is read, applied to each
//! record when the suite loads.

use std::path::Path;

use benchctl_scoring::{TagSets, Truth};
use toml::Spanned;

use serde_json::Value;

use super::answers::{AnswerSpec, ReplyReading};
use super::cells::Blobs;
use super::raw::{RawDirs, RawIndex, RawItem, RawTag, RawTruth};
use super::template::{self, Record, Template};
use super::{Context, Keyed};
use crate::image::{CropRegion, CroppedSource, EmbeddedImage};
use crate::{paths, Error, ErrorKind, ImageSource, Item, Result};

/// Where a record's images are: files under `root`, or bytes inside its annotation file
/// (`blobs`), named by the record's `place` in that file (`row 12`) and their field.
pub(super) struct ImagesFrom<'a> {
    /// The folders an image path is looked for in, in order (`item.image_dir`).
    pub roots: &'a [std::path::PathBuf],
    pub blobs: &'a Blobs,
    pub place: &'a str,
}

/// One candidate image as a record gives it: a path, or bytes held in the annotation file.
enum CandidateImage {
    Path(String),
    Bytes { cell: crate::ImageCell, field: String },
}

/// `[item]`, checked.
#[derive(Debug)]
pub(super) struct ItemSpec {
    /// `None`: a record's key in a JSON object keyed by id, else its position.
    id: Option<Keyed<Template>>,
    /// Where image paths are looked for, in order (`item.image_dir`; the data directory itself
    /// when empty).
    pub image_dirs: Vec<String>,
    images: Candidates,
    /// Candidates after the images: each the images at these positions shown together.
    together: Keyed<Vec<Vec<usize>>>,
    crop: Option<[Keyed<Template>; 4]>,
    texts: Texts,
    tags: Vec<(String, Keyed<Template>, Option<String>)>,
}

/// An item's texts and truth: candidate texts with the truth of `item.truth`, or questions
/// with answer options (`[item.answers]`), which give both.
#[derive(Debug)]
enum Texts {
    Candidates { texts: Candidates, truth: Keyed<TruthSpec> },
    Answers(AnswerSpec),
}

#[derive(Debug)]
enum Candidates {
    /// One template per candidate.
    Each(Vec<Keyed<Template>>),
    /// Every element of a list field.
    List(Keyed<Vec<String>>),
    /// The templates' texts, then every element of a list field (texts only: a positive
    /// caption and its list of hard negatives).
    EachThenList(Vec<Keyed<Template>>, Keyed<Vec<String>>),
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

impl ItemSpec {
    /// `[item]` checked; `files_tag` is the tag `source.files` gives each file's stem.
    pub fn parse(item: &RawItem, files_tag: Option<(&str, usize)>, cx: &Context<'_>) -> Result<Self> {
        let images = candidates(&item.images, &item.images_list, "images", false, cx)?;
        let texts = texts(item, cx)?;
        let together = together(item, &images, &texts, cx)?;
        let crop = match &item.crop {
            Some(c) => Some([
                cx.template("item.crop.left", &c.left)?,
                cx.template("item.crop.top", &c.top)?,
                cx.template("item.crop.width", &c.width)?,
                cx.template("item.crop.height", &c.height)?,
            ]),
            None => None,
        };
        let mut tags = Vec::new();
        for (name, spec) in &item.tags {
            let key = format!("item.tags.{name}");
            let (text, split) = match spec.get_ref() {
                RawTag::Plain(t) => (t.clone(), None),
                RawTag::Split { value, split } => (value.clone(), Some(split.clone())),
            };
            let line = cx.line(spec.span());
            let value = Template::parse(&text).map_err(|e| cx.bad(&key, line, e.to_string()))?;
            tags.push((name.clone(), Keyed { value, key: key.clone(), line }, split));
        }
        if let Some((tag, line)) = files_tag {
            if tags.iter().any(|(name, _, _)| name == tag) {
                return Err(cx.bad(
                    "source.tag",
                    line,
                    format!("`{tag}` is also a tag of `[item.tags]`; name the files' tag otherwise"),
                ));
            }
            let value = Template::parse("{_source}").map_err(|e| cx.bad("source.tag", 1, e.to_string()))?;
            tags.push((tag.to_string(), Keyed { value, key: "source.tag".into(), line: 1 }, None));
        }
        let id = item.id.as_ref().map(|t| cx.template("item.id", t)).transpose()?;
        let image_dirs = match &item.image_dir {
            Some(dirs) => {
                let listed = match dirs.get_ref() {
                    RawDirs::One(dir) => vec![dir.clone()],
                    RawDirs::Several(dirs) => dirs.clone(),
                };
                // Images are found under them: each must stay inside the data directory, as each
                // image path must.
                for dir in listed.iter().filter(|d| !d.is_empty()) {
                    paths::inside(Path::new(""), dir, "the manifest").map_err(|_| {
                        cx.bad(
                            "item.image_dir",
                            cx.line(dirs.span()),
                            "must be a path inside the data directory".into(),
                        )
                    })?;
                }
                listed
            }
            None => Vec::new(),
        };
        Ok(ItemSpec { id, image_dirs, images, together, crop, texts, tags })
    }

    /// Whether its texts are questions with answer options (`[item.answers]`).
    pub fn asks_questions(&self) -> bool {
        matches!(self.texts, Texts::Answers(_))
    }

    /// How a generated reply to its questions is read (`item.answers.reply`).
    pub fn reply_reading(&self) -> ReplyReading {
        match &self.texts {
            Texts::Answers(answers) => answers.reply,
            Texts::Candidates { .. } => ReplyReading::default(),
        }
    }

    /// The tag names every item carries.
    pub fn tag_names(&self) -> Vec<&str> {
        self.tags.iter().map(|(n, _, _)| n.as_str()).collect()
    }

    /// The item a record describes; `default_id` is its id when `item.id` is not given.
    pub fn item(
        &self,
        record: &Record<'_>,
        default_id: impl FnOnce() -> String,
        images_from: &ImagesFrom<'_>,
        tag_sets: &mut TagSets,
        at: &str,
    ) -> Result<Item> {
        let fail =
            |named: String, what: String| Error::new(ErrorKind::Malformed, format!("read {at}: {named}: {what}"));
        let render = |t: &Keyed<Template>| t.value.render(record).map_err(|e| fail(t.named(), e.to_string()));
        let id = match &self.id {
            Some(template) => render(template)?,
            None => default_id(),
        };
        let candidates = self.image_candidates(record, images_from.blobs, &fail)?;
        let crop = match &self.crop {
            Some(fields) => Some(crop(fields, record, &fail)?),
            None => None,
        };
        let images = candidates
            .into_iter()
            .map(|candidate| match candidate {
                CandidateImage::Path(p) => {
                    let path = image_path(images_from.roots, &p, at)?;
                    Ok(match crop {
                        Some(region) => ImageSource::Cropped(Box::new(CroppedSource { file: path, region })),
                        None => ImageSource::from_path(path),
                    })
                }
                CandidateImage::Bytes { field, .. } if crop.is_some() => {
                    Err(fail(format!("`{field}`"), "holds image bytes, and `item.crop` crops image files only".into()))
                }
                CandidateImage::Bytes { cell, field } => Ok(ImageSource::Embedded(Box::new(EmbeddedImage {
                    file: images_from.blobs.file.clone(),
                    name: format!("{} {field}", images_from.place),
                    cell,
                }))),
            })
            .collect::<Result<Vec<_>>>()?;
        let images = self.with_together(images, &fail)?;
        let (texts, truth) = match &self.texts {
            Texts::Candidates { texts, truth } => {
                let texts = self.candidates(texts, record, &fail)?;
                let truth = truth_of(truth, record, images.len(), texts.len(), &fail)?;
                (texts, truth)
            }
            Texts::Answers(spec) => spec.texts_and_truth(record, images.len(), &fail)?,
        };
        let mut tags = Vec::new();
        for (name, template, split) in &self.tags {
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
}

/// The truth of an item of `k` images and `l` texts.
fn truth_of(
    truth: &Keyed<TruthSpec>,
    record: &Record<'_>,
    k: usize,
    l: usize,
    fail: &dyn Fn(String, String) -> Error,
) -> Result<Truth> {
    let truth_at = || truth.named();
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
    match &truth.value {
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
    Truth::new(k, l, matches).map_err(|e| fail(truth_at(), e.to_string()))
}

/// `item.together`, checked: each list names two or more distinct images of `item.images`
/// (their count known where they are templates), and the texts are questions.
fn together(item: &RawItem, images: &Candidates, texts: &Texts, cx: &Context<'_>) -> Result<Keyed<Vec<Vec<usize>>>> {
    let key = "item.together";
    let Some(raw) = &item.together else { return Ok(Keyed { value: Vec::new(), key: key.into(), line: 0 }) };
    let line = cx.line(raw.span());
    if !matches!(texts, Texts::Answers(_)) {
        let what = "shows images together to a model asked questions: it needs `[item.answers]`";
        return Err(cx.bad(key, line, what.into()));
    }
    let known = match images {
        Candidates::Each(templates) => Some(templates.len()),
        _ => None,
    };
    for (n, list) in raw.get_ref().iter().enumerate() {
        let repeated = list.iter().enumerate().any(|(i, k)| list[..i].contains(k));
        if list.len() < 2 || repeated {
            return Err(cx.bad(key, line, format!("list {n} must name two or more distinct images, got {list:?}")));
        }
        if let Some((k, count)) = known.and_then(|count| list.iter().find(|&&k| k >= count).map(|&k| (k, count))) {
            return Err(cx.bad(key, line, format!("list {n} names image {k}, and `item.images` gives {count}")));
        }
    }
    Ok(Keyed { value: raw.get_ref().clone(), key: key.into(), line })
}

impl ItemSpec {
    /// `images`, then each candidate of `item.together`: its images shown together.
    fn with_together(
        &self,
        mut images: Vec<ImageSource>,
        fail: &dyn Fn(String, String) -> Error,
    ) -> Result<Vec<ImageSource>> {
        let count = images.len();
        for list in &self.together.value {
            let shown: Option<Vec<ImageSource>> = list.iter().map(|&k| images.get(k).cloned()).collect();
            let shown = shown.ok_or_else(|| {
                fail(self.together.named(), format!("names image {list:?}, and the record gives {count} image(s)"))
            })?;
            images.push(ImageSource::Together(shown.into()));
        }
        Ok(images)
    }

    /// The candidate images: a template that is one field holding image bytes (a binary cell,
    /// or the `datasets` Image struct `{bytes, path}`) gives those bytes, any other template
    /// a path; a list field's elements likewise.
    fn image_candidates(
        &self,
        record: &Record<'_>,
        blobs: &Blobs,
        fail: &dyn Fn(String, String) -> Error,
    ) -> Result<Vec<CandidateImage>> {
        match &self.images {
            // `item.images` takes templates or a list field, never both (refused when read).
            Candidates::EachThenList(..) => {
                Err(fail("`item.images`".into(), "templates and a list field together".into()))
            }
            Candidates::Each(templates) => templates
                .iter()
                .map(|t| {
                    let lone = t.value.lone_field().and_then(|path| {
                        let value = template::lookup(record, path).ok()?;
                        image_value(value, blobs, &path.join(".")).transpose()
                    });
                    match lone {
                        Some(image) => image.map_err(|what| fail(t.named(), what)),
                        None => {
                            t.value.render(record).map(CandidateImage::Path).map_err(|e| fail(t.named(), e.to_string()))
                        }
                    }
                })
                .collect(),
            Candidates::List(field) => {
                let value = template::lookup(record, &field.value).map_err(|e| fail(field.named(), e.to_string()))?;
                let name = field.value.join(".");
                let list = value
                    .as_array()
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| fail(field.named(), format!("`{name}` must be a non-empty list")))?;
                list.iter()
                    .enumerate()
                    .map(|(i, v)| match image_value(v, blobs, &format!("{name}.{i}")) {
                        Ok(Some(image)) => Ok(image),
                        Ok(None) => template::scalar_text(v)
                            .map(CandidateImage::Path)
                            .map_err(|what| fail(field.named(), format!("an element is {what}"))),
                        Err(what) => Err(fail(field.named(), what)),
                    })
                    .collect()
            }
        }
    }

    fn candidates(
        &self,
        spec: &Candidates,
        record: &Record<'_>,
        fail: &dyn Fn(String, String) -> Error,
    ) -> Result<Vec<String>> {
        let each = |templates: &[Keyed<Template>]| -> Result<Vec<String>> {
            templates.iter().map(|t| t.value.render(record).map_err(|e| fail(t.named(), e.to_string()))).collect()
        };
        match spec {
            Candidates::Each(templates) => each(templates),
            Candidates::List(field) => list_texts(field, record, false, fail),
            Candidates::EachThenList(templates, field) => {
                let mut texts = each(templates)?;
                texts.extend(list_texts(field, record, true, fail)?);
                Ok(texts)
            }
        }
    }
}

/// The elements of a record's list field as texts: a JSON list, or text holding a Python list
/// of strings (as a CSV cell holds `str(list)`); empty only where `may_be_empty`.
fn list_texts(
    field: &Keyed<Vec<String>>,
    record: &Record<'_>,
    may_be_empty: bool,
    fail: &dyn Fn(String, String) -> Error,
) -> Result<Vec<String>> {
    let name = field.value.join(".");
    let value = template::lookup(record, &field.value).map_err(|e| fail(field.named(), e.to_string()))?;
    let texts: Vec<String> = match value {
        Value::Array(list) => list
            .iter()
            .map(|v| template::scalar_text(v).map_err(|what| fail(field.named(), format!("an element is {what}"))))
            .collect::<Result<_>>()?,
        Value::String(text) => super::pylist::python_strings(text).ok_or_else(|| {
            fail(field.named(), format!("`{name}` holds text that is not a list (a JSON list, or a Python list of strings as a CSV cell holds one)"))
        })?,
        _ => return Err(fail(field.named(), format!("`{name}` must be a list"))),
    };
    if texts.is_empty() && !may_be_empty {
        return Err(fail(field.named(), format!("`{name}` must be a non-empty list")));
    }
    Ok(texts)
}

/// Where the image `relative` is: under the first of `roots` that holds it, else (missing,
/// and named so) under the first; paths that leave the data directory are refused.
fn image_path(roots: &[std::path::PathBuf], relative: &str, at: &str) -> Result<std::path::PathBuf> {
    let mut first = None;
    for root in roots {
        let path = paths::inside(root, relative, at)?;
        if roots.len() == 1 || path.is_file() {
            return Ok(path);
        }
        first.get_or_insert(path);
    }
    first.ok_or_else(|| Error::new(ErrorKind::Malformed, format!("read {at}: no folder to look for `{relative}` in")))
}

/// The image a field's value holds, when it holds one rather than a path: image bytes, or the
/// `datasets` Image struct (its bytes; without bytes, its `path` as a file). `None`: text or a
/// number, read as a path. The error says why a struct or empty cell holds no image.
fn image_value(value: &Value, blobs: &Blobs, field: &str) -> std::result::Result<Option<CandidateImage>, String> {
    let bytes = |cell: crate::ImageCell| Some(CandidateImage::Bytes { cell, field: field.to_string() });
    if let Some(b) = blobs.get(value) {
        return Ok(bytes(b));
    }
    match value {
        Value::Object(map) => {
            let shape = || {
                let keys: Vec<String> = map.keys().map(|k| format!("`{k}`")).collect();
                format!(
                    "`{field}` is a struct of {}, not an image: an image field holds image bytes, or a struct of `bytes` and `path` (the `datasets` Image feature)",
                    if keys.is_empty() { "no fields".to_string() } else { keys.join(", ") }
                )
            };
            if let Some(held) = map.get("bytes").and_then(|b| blobs.get(b)) {
                return Ok(bytes(held));
            }
            match (map.get("bytes"), map.get("path")) {
                (Some(Value::Null), Some(Value::String(path))) if !path.is_empty() => {
                    Ok(Some(CandidateImage::Path(path.clone())))
                }
                (Some(Value::Null), Some(Value::Null) | None) => {
                    Err(format!("`{field}` holds neither image bytes nor a path (both null)"))
                }
                (Some(other), _) if !other.is_null() => Err(format!(
                    "`{field}.bytes` is {}, not image bytes (a binary column)",
                    if other.is_string() { "text" } else { "not binary" }
                )),
                _ => Err(shape()),
            }
        }
        Value::Null => Err(format!("`{field}` is null: the record has no image there")),
        _ => Ok(None),
    }
}

/// `item.<what>` (templates) or `item.<what>_list` (a list field), one of them, or (where
/// `both` may be given) both: the templates' candidates, then the list's.
fn candidates(
    list: &Option<Spanned<Vec<Spanned<String>>>>,
    from: &Option<Spanned<String>>,
    what: &str,
    both: bool,
    cx: &Context<'_>,
) -> Result<Candidates> {
    if let (true, Some(_), Some(_)) = (both, list, from) {
        let Candidates::Each(each) = candidates(list, &None, what, false, cx)? else { return unreachable_shape() };
        let Candidates::List(field) = candidates(&None, from, what, false, cx)? else { return unreachable_shape() };
        return Ok(Candidates::EachThenList(each, field));
    }
    match (list, from) {
        (Some(list), None) => {
            if list.get_ref().is_empty() {
                return Err(cx.bad(&format!("item.{what}"), cx.line(list.span()), "lists no candidate".into()));
            }
            let each = list
                .get_ref()
                .iter()
                .enumerate()
                .map(|(i, t)| cx.template(&format!("item.{what}[{i}]"), t))
                .collect::<Result<_>>()?;
            Ok(Candidates::Each(each))
        }
        (None, Some(field)) => {
            let key = format!("item.{what}_list");
            let line = cx.line(field.span());
            let parsed = Template::parse(&format!("{{{}}}", field.get_ref()))
                .ok()
                .and_then(|t| t.lone_field().map(<[String]>::to_vec))
                .ok_or_else(|| cx.bad(&key, line, "must name a field (such as `caption_options`)".into()))?;
            Ok(Candidates::List(Keyed { value: parsed, key, line }))
        }
        (Some(list), Some(_)) => Err(cx.bad(
            &format!("item.{what}"),
            cx.line(list.span()),
            format!("give `item.{what}` or `item.{what}_list`, not both"),
        )),
        (None, None) => Err(Error::new(
            ErrorKind::Manifest,
            format!("read manifest {}: `[item]` needs `{what}` (templates) or `{what}_list` (a list field)", cx.origin),
        )),
    }
}

/// `item.texts` (or `item.texts_list`) with `item.truth`, or `[item.answers]` alone.
fn texts(item: &RawItem, cx: &Context<'_>) -> Result<Texts> {
    match (&item.answers, &item.truth) {
        (Some(answers), None) if item.texts.is_none() && item.texts_list.is_none() => {
            Ok(Texts::Answers(AnswerSpec::parse(answers, cx)?))
        }
        (Some(_), _) => Err(Error::new(
            ErrorKind::Manifest,
            format!(
                "read manifest {}: `[item.answers]` gives the texts and the truth: drop `item.texts`, `item.texts_list` and `item.truth`",
                cx.origin
            ),
        )),
        (None, Some(raw)) => {
            let texts = candidates(&item.texts, &item.texts_list, "texts", true, cx)?;
            let line = cx.line(raw.span());
            let value = truth(raw.get_ref(), line, cx)?;
            Ok(Texts::Candidates { texts, truth: Keyed { value, key: "item.truth".into(), line } })
        }
        (None, None) => Err(Error::new(
            ErrorKind::Manifest,
            format!("read manifest {}: `[item]` needs `truth` (which candidates match), or `[item.answers]`", cx.origin),
        )),
    }
}

/// The error for a candidate form [`candidates`] never returns where it is asked for.
fn unreachable_shape<T>() -> Result<T> {
    Err(Error::new(ErrorKind::Manifest, "read the manifest: a candidate list took an unexpected form"))
}

/// `item.truth`: `"diagonal"`, or exactly one of `text`, `image` or `pairs`.
fn truth(raw: &RawTruth, line: usize, cx: &Context<'_>) -> Result<TruthSpec> {
    let index = |raw: &RawIndex, key: &str| -> Result<IndexSpec> {
        Ok(match raw {
            RawIndex::Fixed(i) => IndexSpec::Fixed(*i),
            RawIndex::From(t) => IndexSpec::From(Template::parse(t).map_err(|e| cx.bad(key, line, e.to_string()))?),
        })
    };
    Ok(match raw {
        RawTruth::Named(name) if name == "diagonal" => TruthSpec::Diagonal,
        RawTruth::Named(name) => {
            return Err(cx.bad(
                "item.truth",
                line,
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
                return Err(cx.bad(
                    "item.truth",
                    line,
                    "give exactly one of `text` (the matching text's index), `image` or `pairs` (non-empty)".into(),
                ))
            }
        },
    })
}

/// The crop box as PIL's `Image.crop` takes it: (left, top, left + width, top + height),
/// each rounded half to even (Python's `round`).
fn crop(
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
