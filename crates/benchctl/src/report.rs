//! `benchctl report RUN [--against OTHER]`: a failure browser. One self-contained HTML page
//! (no server, no network: it opens from disk) with every item of a stored run: its images
//! as thumbnails, its texts, the K×L scores as a heat table with the matches outlined, which
//! per-item metrics it passed and by what margin; filters by tag and outcome, sorting by
//! margin; with `--against`, the other run's scores beside and the items where the two
//! disagree. Written beside the run file as `<run>.report/`:
//!
//! - `index.html` and `page.js`: the page (styles inline) and its script, under a
//!   Content-Security-Policy that lets only scripts beside it run and loads nothing remote;
//! - `data/index.js`: one compact row per item (id, outcome bits, margin, tags), all that
//!   filtering and sorting need, loaded at once;
//! - `data/chunk-NNNN.js`: the items' texts, images and scores, [`CHUNK`] items per file,
//!   loaded by `<script>` tags only when a page shows one of their items (a `file://` page
//!   may not `fetch`), so an EqBen-sized run opens as fast as a small one;
//! - `thumbs/N.jpg`: thumbnails of the first `--max-thumbnails` images.
//!
//! The margin of an item is the smallest gap by which a matching candidate beats a
//! non-matching one, over every image (its texts) and every text (its images) that has
//! both: negative where the item fails a comparison, `null` where it has none.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::PerItemMetric;
use benchctl_scoring::{ScoreMatrix, ScoreTensor, Truth};
use benchctl_suites::Suite;
use serde_json::{json, Value};

use crate::replies::ItemReplies;
use crate::results::{read_run_file, Run};
use crate::{Error, ErrorKind, Result};

/// Items per data chunk.
pub const CHUNK: usize = 500;
/// Thumbnails fit in a square of this many pixels.
const THUMB: u32 = 112;
const PAGE: &str = include_str!("report_page.html");
const PAGE_SCRIPT: &str = include_str!("report_page.js");

/// A run with its suite and scores, ready to show.
struct Shown {
    run: Run,
    suite: Suite,
    scores: ScoreTensor,
    /// The replies the scores were read from, where the run generated them.
    replies: Option<ItemReplies>,
}

fn load(path: &Path, data_dir: Option<&Path>, allow_changed_data: bool) -> Result<Shown> {
    let file = read_run_file(path)?;
    let run = file.run;
    let info = run.suite.info()?;
    if let benchctl_suites::SuiteKind::Galleries = info.kind {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "report {}: {} is a retrieval suite; the failure browser shows K×L item suites",
                path.display(),
                info.id
            ),
        ));
    }
    if run.shard.is_some() {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("report {}: a shard's run covers part of the suite; merge the shards first", path.display()),
        ));
    }
    let dump = file
        .dump
        .ok_or_else(|| Error::bad_results(format!("report {}: the run names no score dump", path.display())))?;
    let given = data_dir.is_some();
    let data_dir = data_dir.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(&run.suite.data_dir));
    if !given && !data_dir.is_dir() {
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "report {}: the run's data directory {} is not there (moved, or recorded relative to another directory); pass --data-dir with where the suite is now",
                path.display(),
                data_dir.display()
            ),
        ));
    }
    let mut suite = info.load(&data_dir)?;
    // The scores belong to the items the run scored: data that changed since would pair
    // them with other texts and images.
    let now = crate::results::fingerprint(&suite)?;
    if !run.data_fingerprint.is_empty() && now != run.data_fingerprint {
        let message = format!(
            "report {}: the data in {} is not the data the run scored (fingerprint {} now, {} in the run); its scores would be shown beside other items",
            path.display(),
            data_dir.display(),
            &now[..12],
            run.data_fingerprint.get(..12).unwrap_or(&run.data_fingerprint)
        );
        if !allow_changed_data {
            return Err(Error::new(ErrorKind::Data, format!("{message} (--allow-changed-data shows it anyway)")));
        }
        benchctl_base::stderr_line!("warning: {message}; shown anyway (--allow-changed-data)");
    }
    suite.summary.ties = benchctl_scoring::metrics::Ties::from_name(&run.suite.ties).unwrap_or_default();
    // Read as a stream into the suite's score tensor, as `merge` reads shard dumps.
    let (scores, replies) = crate::dump::from_dumps(&suite, std::slice::from_ref(&dump), run.model.score_kind())?;
    Ok(Shown { run, suite, scores, replies })
}

/// The smallest gap by which a matching candidate beats a non-matching one (see the module
/// docs); `None` when the item has no such comparison.
pub fn margin(truth: &Truth, scores: &ScoreMatrix<'_>) -> Option<f64> {
    let (k, l) = (truth.images(), truth.texts());
    let mut worst: Option<f64> = None;
    let mut gap = |matching: &mut dyn Iterator<Item = f64>, other: &mut dyn Iterator<Item = f64>| {
        let low = matching.fold(f64::INFINITY, f64::min);
        let high = other.fold(f64::NEG_INFINITY, f64::max);
        if low.is_finite() && high.is_finite() {
            worst = Some(worst.map_or(low - high, |w: f64| w.min(low - high)));
        }
    };
    for image in 0..k {
        let row = |m: bool| (0..l).filter(move |&t| truth.is_match(image, t) == m).map(move |t| scores.get(image, t));
        gap(&mut row(true), &mut row(false));
    }
    for text in 0..l {
        let column = |m: bool| (0..k).filter(move |&i| truth.is_match(i, text) == m).map(move |i| scores.get(i, text));
        gap(&mut column(true), &mut column(false));
    }
    worst
}

/// What the page summarises: the run's headline metric among the per-item ones (its 0/1
/// outcome decides "failed"), or the first 0/1 metric.
fn outcome_metric(suite: &Suite, metrics: &[PerItemMetric]) -> usize {
    let headline = benchctl_suites::find(&suite.id).map(|s| s.headline.into_owned()).unwrap_or_default();
    let base = headline.strip_suffix("_macro").unwrap_or(&headline);
    metrics
        .iter()
        .position(|m| m.binary && m.name == base)
        .or_else(|| metrics.iter().position(|m| m.binary))
        .unwrap_or(0)
}

/// Rounds for the page: 4 significant digits are plenty to read, and keep chunks small.
fn round(v: f64) -> Value {
    if v == 0.0 || !v.is_finite() {
        return json!(v);
    }
    let digits = 3 - v.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits.clamp(-12, 12));
    json!((v * scale).round() / scale)
}

fn matrix_json(m: &ScoreMatrix<'_>) -> Value {
    Value::Array((0..m.images()).map(|k| Value::Array((0..m.texts()).map(|l| round(m.get(k, l))).collect())).collect())
}

/// Writes the report; returns its `index.html`.
/// What `benchctl report` shows.
#[derive(Debug, Clone)]
pub struct ReportPlan {
    /// The run file.
    pub run: PathBuf,
    /// Another run on the same items, shown beside.
    pub against: Option<PathBuf>,
    /// Where to write the page [default: RUN.report/].
    pub out: Option<PathBuf>,
    /// The suite's data, if it moved since the run.
    pub data_dir: Option<PathBuf>,
    /// Show the run on data whose fingerprint changed, with a warning.
    pub allow_changed_data: bool,
    /// Thumbnails of at most this many images.
    pub max_thumbnails: usize,
}

pub fn run(args: &ReportPlan) -> Result<PathBuf> {
    let shown = load(&args.run, args.data_dir.as_deref(), args.allow_changed_data)?;
    let against = match &args.against {
        Some(path) => {
            let other = load(path, args.data_dir.as_deref(), args.allow_changed_data)?;
            if other.run.suite.id != shown.run.suite.id || other.run.data_fingerprint != shown.run.data_fingerprint {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "report {} against {}: the runs must score the same items (same suite and data fingerprint)",
                        args.run.display(),
                        path.display()
                    ),
                ));
            }
            Some(other)
        }
        None => None,
    };
    let out = args.out.clone().unwrap_or_else(|| args.run.with_extension("report"));
    write(&shown, against.as_ref(), &out, args.max_thumbnails)?;
    Ok(out.join("index.html"))
}

/// One image of an item on the page: its path (relative to the data directory) and its
/// thumbnail, made once per distinct image while fewer than `max_thumbnails` are.
fn image_entry(
    source: &benchctl_suites::ImageSource,
    suite: &Suite,
    thumb_ids: &mut HashMap<String, usize>,
    thumbs: &Path,
    max_thumbnails: usize,
) -> Value {
    let name = source.display_name();
    let shown_name = name.strip_prefix(&format!("{}/", suite.data_dir.display())).unwrap_or(&name).to_string();
    let next = thumb_ids.len();
    let id = *thumb_ids.entry(name).or_insert(next);
    let thumb = (id < max_thumbnails).then(|| thumbnail(source, &thumbs.join(format!("{id}.jpg"))));
    match thumb {
        Some(Ok(())) => json!([shown_name, format!("thumbs/{id}.jpg")]),
        _ => json!([shown_name, Value::Null]),
    }
}

fn write(shown: &Shown, against: Option<&Shown>, out: &Path, max_thumbnails: usize) -> Result<()> {
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |e: std::io::Error| Error::results(format!("write {what}: {e}"))
    };
    let data = out.join("data");
    let thumbs = out.join("thumbs");
    std::fs::create_dir_all(&data).map_err(io(&data))?;
    let suite = &shown.suite;
    let views = suite.item_views();
    let values = benchctl_scoring::metrics::per_item_values(&suite.summary, &shown.scores, &views)?;
    let other_values = against
        .map(|o| benchctl_scoring::metrics::per_item_values(&o.suite.summary, &o.scores, &o.suite.item_views()))
        .transpose()?;
    let outcome = outcome_metric(suite, &values);
    // Outcome bits: bit m set when 0/1 metric m is 1 for the item.
    let bits = |metrics: &[PerItemMetric], i: usize| -> u32 {
        metrics.iter().enumerate().filter(|(_, m)| m.binary && m.values[i] == Some(1.0)).map(|(m, _)| 1u32 << m).sum()
    };

    // Tags as (key, value) pairs numbered once.
    let mut tag_ids: HashMap<(String, String), usize> = HashMap::new();
    let mut tag_list: Vec<Value> = Vec::new();
    let mut thumb_ids: HashMap<String, usize> = HashMap::new();
    let mut rows = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut chunk = Vec::new();
    let mut against_scores = against.map(|o| o.scores.iter());
    for (i, (item, matrix)) in suite.items.iter().zip(shown.scores.iter()).enumerate() {
        let tags: Vec<usize> = item
            .tags()
            .iter()
            .flat_map(|(k, vs)| vs.iter().map(move |v| (k.clone(), v.clone())))
            .map(|pair| {
                let next = tag_ids.len();
                *tag_ids.entry(pair.clone()).or_insert_with(|| {
                    tag_list.push(json!([pair.0, pair.1]));
                    next
                })
            })
            .collect();
        rows.0.push(json!(item.id()));
        rows.1.push(json!(bits(&values, i)));
        rows.2.push(margin(item.truth(), &matrix).map_or(Value::Null, round));
        rows.3.push(json!(tags));
        if let Some(other) = &other_values {
            rows.4.push(json!(bits(other, i)));
        }
        let images: Vec<Value> =
            item.images().map(|source| image_entry(&source, suite, &mut thumb_ids, &thumbs, max_thumbnails)).collect();
        let truth: String = (0..item.image_count() * item.text_count())
            .map(|p| if item.truth().is_match(p / item.text_count(), p % item.text_count()) { '1' } else { '0' })
            .collect();
        let per_metric: Vec<Value> = values.iter().map(|m| m.values[i].map_or(Value::Null, round)).collect();
        let texts: Vec<String> = item.texts().map(shown_text).collect();
        let mut entry = json!({"texts": texts, "images": images, "scores": matrix_json(&matrix), "truth": truth, "values": per_metric});
        if let Some(m) = against_scores.as_mut().and_then(Iterator::next) {
            entry["against"] = matrix_json(&m);
        }
        if let Some(texts) = shown.scores.text_scores(i) {
            entry["text_scores"] = matrix_json(&texts);
        }
        // Checked when read from the dump: K rows of L strings or nulls.
        for (key, run) in [("replies", Some(shown)), ("against_replies", against)] {
            if let Some(replies) = run.and_then(|r| r.replies.as_ref()).and_then(|r| r.json(i)) {
                entry[key] = serde_json::from_str(replies).unwrap_or(Value::Null);
            }
        }
        chunk.push(entry);
        if chunk.len() == CHUNK || i + 1 == suite.items.len() {
            let path = data.join(format!("chunk-{:04}.js", i / CHUNK));
            let text =
                format!("BENCH_CHUNK({}, {});\n", i / CHUNK, script_json(&Value::Array(std::mem::take(&mut chunk))));
            std::fs::write(&path, text).map_err(io(&path))?;
        }
    }
    let describe = |r: &Run| json!({"label": r.label(), "suite": r.suite.id, "started_at": r.started_at, "dtype": r.model.dtype, "score_kind": r.model.score_kind().name()});
    let index = json!({
        "run": describe(&shown.run),
        "headline": headline(&shown.run, against.map(|o| &o.run)),
        "against": against.map(|o| describe(&o.run)),
        "report": shown.run.report.to_json(),
        "metrics": values.iter().map(|m| m.name).collect::<Vec<_>>(),
        "binary": values.iter().map(|m| m.binary).collect::<Vec<_>>(),
        "outcome": outcome,
        "chunk": CHUNK,
        "tags": tag_list,
        "ids": rows.0,
        "bits": rows.1,
        "margin": rows.2,
        "itemTags": rows.3,
        "againstBits": if against.is_some() { Value::Array(rows.4) } else { Value::Null },
    });
    let path = data.join("index.js");
    let mut file = std::fs::File::create(&path).map_err(io(&path))?;
    writeln!(file, "BENCH_INDEX = {};", script_json(&index)).map_err(io(&path))?;
    let script = out.join("page.js");
    std::fs::write(&script, PAGE_SCRIPT).map_err(io(&script))?;
    let page = out.join("index.html");
    std::fs::write(&page, PAGE).map_err(io(&page))
}

/// The run's headline metrics for the page's header: each value with its bootstrap interval
/// and design effect, the other run's value beside (`--against`), and what the intervals
/// resampled.
fn headline(run: &Run, against: Option<&Run>) -> Value {
    let rows: Vec<Value> = run
        .report
        .metrics
        .iter()
        .map(|(metric, value)| {
            let interval = run.intervals.iter().find(|i| &i.metric == metric);
            json!({
                "metric": metric,
                "value": round(*value),
                "low": interval.map(|i| round(i.low)),
                "high": interval.map(|i| round(i.high)),
                "design_effect": interval.and_then(|i| i.design_effect).map(round),
                "against": against.and_then(|o| o.report.metric(metric)).map(round),
            })
        })
        .collect();
    let resampled = match &run.bootstrap {
        Some(b) if b.unit == crate::plan::BootstrapUnit::Clusters => {
            format!("clusters of items ({})", b.rule.as_deref().unwrap_or("the suite's rule"))
        }
        Some(_) => "items".to_string(),
        None => "items".to_string(),
    };
    json!({"rows": rows, "resampled": resampled, "has_intervals": !run.intervals.is_empty()})
}

/// `value` as JSON that is also inert wherever a script could be embedded: `<`, `>` and `&`
/// (which could close a `<script>` element or open a comment) and the line separators
/// U+2028 and U+2029 (line breaks to older JavaScript) are written as `\u` escapes. They can
/// only occur inside JSON strings, where the escape means the same character.
fn script_json(value: &Value) -> String {
    let mut out = String::new();
    for c in value.to_string().chars() {
        match c {
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A JPEG thumbnail of one image; an image that cannot be read gets none (the page shows
/// its path).
fn thumbnail(source: &benchctl_suites::ImageSource, path: &Path) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    let small_of = |source: &benchctl_suites::ImageSource| -> Result<image::RgbImage> {
        Ok(image::DynamicImage::ImageRgb8(source.load_rgb()?).thumbnail(THUMB, THUMB).to_rgb8())
    };
    // Images shown together: side by side, in order.
    let parts = source.shown().iter().map(small_of).collect::<Result<Vec<_>>>()?;
    let mut small = image::RgbImage::new(
        parts.iter().map(|p| p.width()).sum::<u32>().max(1),
        parts.iter().map(|p| p.height()).max().unwrap_or(1).max(1),
    );
    let mut left = 0;
    for part in &parts {
        image::imageops::replace(&mut small, part, i64::from(left), 0);
        left += part.width();
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::results(format!("create {}: {e}", dir.display())))?;
    }
    small
        .save_with_format(path, image::ImageFormat::Jpeg)
        .map_err(|e| Error::results(format!("write {}: {e}", path.display())))
}

/// A text as the report shows it: a question with an answer option as the question and the
/// option it scores.
fn shown_text(text: &str) -> String {
    match benchctl_scoring::metrics::answers::split_asked(text) {
        Some((question, option)) => format!("{question} → {option}"),
        None => text.to_string(),
    }
}
