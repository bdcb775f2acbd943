//! `benchctl compare`: a regression gate. Each run is matched to the baseline run of the same
//! identity (model, score head, dtype, suite, tie rule; complete runs only, never a single
//! shard), or, given one baseline run file and one run file, to that run whatever its model
//! (head to head: same suite and tie rule); every headline metric's change is tabulated with,
//! where both runs' per-item scores and the suite's annotations are at hand, a paired
//! bootstrap 95 % interval of the difference and McNemar's exact test for 0/1 metrics.
//!
//! A **drop** is a change in the worse direction (lower, or higher for diagnostics such as
//! the EqSim deviation). It is a **regression** when it exceeds `--tolerance` points; without
//! a tolerance, when it exceeds 0.5 points or its paired interval lies entirely on the worse
//! side of zero. Any regression makes `compare` exit with code 6.

use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::{higher_is_better, stats};

use crate::results::{Run, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};
use crate::store::Store;
use crate::{Error, ErrorKind, Result};

/// The default largest drop, in points, that is not a regression.
pub const DEFAULT_TOLERANCE: f64 = 0.5;

/// A run with its item scores, when they can be found.
pub struct ComparedRun {
    pub run: Run,
    pub lines: Option<crate::dump::DumpScores>,
    pub source: String,
}

/// One metric's change.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub model: String,
    pub suite: String,
    pub metric: String,
    pub baseline: f64,
    pub current: f64,
    /// The paired interval of `current − baseline`.
    pub interval: Option<(f64, f64)>,
    pub mcnemar_p: Option<f64>,
    pub regression: bool,
    /// The largest absolute change of any item score between the two runs, when both have
    /// item scores for the same items (a silent change shows here even when no metric moves).
    pub max_score_change: Option<f64>,
}

/// Run files named directly or found (`*.json`) in directories, sorted.
fn run_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries =
                std::fs::read_dir(path).map_err(|e| Error::results(format!("read {}: {e}", path.display())))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn read_run_file(path: &Path) -> Result<ComparedRun> {
    let crate::results::RunFile { run, dump } = crate::results::read_run_file(path)?;
    // Without a readable dump the comparison still runs, without paired statistics.
    let lines = dump.and_then(|dump| crate::dump::DumpScores::read_file(&dump).ok());
    Ok(ComparedRun { run, lines, source: path.display().to_string() })
}

/// The changes of every matched run, and whether any is a regression.
/// What `benchctl compare` compares.
#[derive(Debug, Clone)]
pub struct ComparePlan {
    /// A run file or a directory of run files.
    pub baseline: PathBuf,
    /// Run files or directories; empty: the latest stored run of each baseline's model and suite.
    pub runs: Vec<PathBuf>,
    /// The largest drop (metric points) that is not a regression; `None`: 0.5 points or a
    /// paired interval below zero.
    pub tolerance: Option<f64>,
    /// The results store (for the default runs).
    pub results_dir: PathBuf,
}

pub fn run(args: &ComparePlan) -> Result<Vec<Change>> {
    let baselines = run_files(std::slice::from_ref(&args.baseline))?
        .iter()
        .map(|p| read_run_file(p))
        .collect::<Result<Vec<_>>>()?;
    if baselines.is_empty() {
        return Err(Error::results(format!("compare: {} holds no run files", args.baseline.display())));
    }
    let currents: Vec<ComparedRun> = if args.runs.is_empty() {
        let store = Store::open_existing(&args.results_dir)?;
        baselines
            .iter()
            .map(|b| {
                let latest =
                    store.latest_of(&b.run.identity(), &b.run.model.id, &b.run.suite.id)?.ok_or_else(|| {
                        Error::results(format!(
                            "compare: the results store in {} has no complete run of {}",
                            args.results_dir.display(),
                            b.run.identity()
                        ))
                    })?;
                let lines = store.item_scores(latest.id)?;
                Ok(ComparedRun { run: latest.run, lines: Some(lines), source: format!("stored run {}", latest.id) })
            })
            .collect::<Result<_>>()?
    } else {
        run_files(&args.runs)?.iter().map(|p| read_run_file(p)).collect::<Result<_>>()?
    };
    // One baseline run file against one run file is a head-to-head comparison: any two
    // models on the same suite and tie rule (an external model against a zoo one, say).
    let head_to_head = baselines.len() == 1 && currents.len() == 1 && !args.baseline.is_dir();
    let mut changes = Vec::new();
    for current in currents.iter().filter(|c| c.run.is_complete()) {
        let identity = current.run.identity();
        let baseline = match baselines.iter().find(|b| b.run.is_complete() && b.run.identity() == identity) {
            Some(baseline) => baseline,
            None if head_to_head => {
                let baseline = &baselines[0];
                let (a, b) = (&baseline.run.suite, &current.run.suite);
                if !baseline.run.is_complete() || a.id != b.id || a.ties != b.ties {
                    return Err(Error::results(format!(
                        "compare {} with {}: a head-to-head comparison needs two complete runs on the same suite and tie rule",
                        current.source, baseline.source
                    )));
                }
                baseline
            }
            None => {
                return Err(Error::results(format!(
                    "compare {}: the baseline has no complete run of {identity}",
                    current.source
                )))
            }
        };
        changes.extend(compare_pair(baseline, current, args.tolerance)?);
    }
    if changes.is_empty() && currents.iter().any(|c| !c.run.is_complete()) {
        return Err(Error::results(
            "compare: only shard runs were given; merge them first (`benchctl merge`)".to_string(),
        ));
    }
    Ok(changes)
}

/// The paired statistics of two runs on the same items, when both have item scores and
/// the suite's annotations load from the current run's data directory.
fn paired(baseline: &ComparedRun, current: &ComparedRun) -> Option<Vec<stats::Paired>> {
    let (a, b) = (baseline.lines.as_ref()?, current.lines.as_ref()?);
    // Paired statistics need the same items over the same images, not only the same
    // annotations. An external model's images are unknown (its scores came from a file): its
    // run pairs on the annotations alone.
    let external_images = |r: &ComparedRun| r.run.model.external.is_some() && r.run.image_fingerprint.is_empty();
    if baseline.run.data_fingerprint != current.run.data_fingerprint
        || baseline.run.data_fingerprint.is_empty()
        || (baseline.run.image_fingerprint != current.run.image_fingerprint
            && !external_images(baseline)
            && !external_images(current))
    {
        return None;
    }
    let suite = current.run.suite.info().ok()?.load(Path::new(&current.run.suite.data_dir)).ok()?;
    // Each run's scores as what they are (a head-to-head pair may mix similarities and logits).
    let sa = crate::dump::from_lines(&suite, a, &baseline.source, baseline.run.model.score_kind()).ok()?;
    let sb = crate::dump::from_lines(&suite, b, &current.source, current.run.model.score_kind()).ok()?;
    let views = suite.item_views();
    // Clusters as the current run drew its intervals (items where it asked for items).
    let clustered = current.run.bootstrap.as_ref().is_some_and(|b| b.unit == crate::plan::BootstrapUnit::Clusters);
    let clusters = if clustered { suite.clusters() } else { None };
    let unit = clusters.as_ref().map_or(stats::Unit::Items, stats::Unit::Clusters);
    stats::paired_by(&suite.summary, &sa, &sb, &views, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, unit).ok()
}

/// The largest absolute difference between two runs' item scores, if they score the same
/// items with the same shapes.
fn max_score_change(baseline: &ComparedRun, current: &ComparedRun) -> Option<f64> {
    let (a, b) = (baseline.lines.as_ref()?, current.lines.as_ref()?);
    if a.len() != b.len() {
        return None;
    }
    let mut max = 0.0f64;
    for i in 0..a.len() {
        let (x, y) = (a.flat(i), b.flat(i));
        if a.id(i) != b.id(i) || x.len() != y.len() {
            return None;
        }
        max = x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(max, f64::max);
    }
    Some(max)
}

fn compare_pair(baseline: &ComparedRun, current: &ComparedRun, tolerance: Option<f64>) -> Result<Vec<Change>> {
    let paired = paired(baseline, current);
    // Item scores of two different models are on different scales: no comparison of those.
    let same_model = baseline.run.label() == current.run.label();
    let max_score_change = if same_model { max_score_change(baseline, current) } else { None };
    Ok(baseline
        .run
        .report
        .metrics
        .iter()
        .map(|(metric, base)| {
            let base = *base;
            let now = current.run.report.metric(metric).unwrap_or(f64::NAN);
            let p = paired.as_ref().and_then(|ps| ps.iter().find(|p| &p.metric == metric));
            let interval = p.map(|p| (p.low, p.high));
            let sign = if higher_is_better(metric) { 1.0 } else { -1.0 };
            let drop = sign * (base - now);
            let significant = interval.is_some_and(|(low, high)| if sign > 0.0 { high < 0.0 } else { low > 0.0 });
            let regression = now.is_nan()
                || match tolerance {
                    Some(t) => drop > t,
                    None => drop > DEFAULT_TOLERANCE || (drop > 0.0 && significant),
                };
            // Head to head, the row names both models.
            let model = if same_model {
                current.run.label()
            } else {
                format!("{} vs {}", current.run.label(), baseline.run.label())
            };
            Change {
                model,
                suite: current.run.suite.id.clone(),
                metric: metric.clone(),
                baseline: base,
                current: now,
                interval,
                mcnemar_p: p.and_then(|p| p.mcnemar.map(|(_, _, p)| p)),
                regression,
                max_score_change,
            }
        })
        .collect())
}

/// The comparison table: fixed formatting, rows in baseline order.
pub fn table(changes: &[Change]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED).set_header([
        "model",
        "suite",
        "metric",
        "baseline",
        "current",
        "Δ",
        "Δ 95% CI",
        "McNemar p",
        "max |Δ item score|",
        "verdict",
    ]);
    for c in changes {
        let right = |s: String| comfy_table::Cell::new(s).set_alignment(comfy_table::CellAlignment::Right);
        table.add_row(vec![
            comfy_table::Cell::new(&c.model),
            comfy_table::Cell::new(&c.suite),
            comfy_table::Cell::new(&c.metric),
            right(format!("{:.2}", c.baseline)),
            right(format!("{:.2}", c.current)),
            right(format!("{:+.2}", c.current - c.baseline)),
            right(c.interval.map(|(l, h)| format!("[{l:+.2}, {h:+.2}]")).unwrap_or_else(|| "–".into())),
            right(c.mcnemar_p.map(|p| format!("{p:.3}")).unwrap_or_else(|| "–".into())),
            right(c.max_score_change.map(|d| format!("{d:.1e}")).unwrap_or_else(|| "–".into())),
            comfy_table::Cell::new(if c.regression { "REGRESSION" } else { "ok" }),
        ]);
    }
    table.to_string()
}

/// An error (exit code 6) naming the regressions, if any.
pub fn verdict(changes: &[Change]) -> Result<()> {
    let regressions: Vec<String> =
        changes.iter().filter(|c| c.regression).map(|c| format!("{} on {} {}", c.model, c.suite, c.metric)).collect();
    if regressions.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Regression,
            format!("pass the regression gate: {} metric(s) dropped: {}", regressions.len(), regressions.join(", ")),
        ))
    }
}

/// The verdict as JUnit XML: one `<testcase>` per model × suite × metric, named
/// `<metric>` in class `<model> on <suite>`, with a `<failure>` for a regression.
pub fn junit(changes: &[Change]) -> String {
    let failures = changes.iter().filter(|c| c.regression).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"benchctl compare\" tests=\"{}\" failures=\"{failures}\">\n<testsuite name=\"regression gate\" tests=\"{}\" failures=\"{failures}\">\n",
        changes.len(),
        changes.len()
    ));
    for c in changes {
        out.push_str(&format!(
            "  <testcase classname=\"{}\" name=\"{}\">",
            xml_escape(&format!("{} on {}", c.model, c.suite)),
            xml_escape(&c.metric)
        ));
        if c.regression {
            out.push_str(&format!(
                "<failure message=\"{}\">{}</failure>",
                xml_escape(&format!("{} dropped from {:.2} to {:.2}", c.metric, c.baseline, c.current)),
                xml_escape(&describe(c))
            ));
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n</testsuites>\n");
    out
}

/// The verdict as markdown for a CI job's summary page: the outcome first, then the table.
pub fn markdown(changes: &[Change]) -> String {
    let regressions = changes.iter().filter(|c| c.regression).count();
    let mut out = if regressions == 0 {
        format!("### Regression gate: passed\n\nAll {} metric(s) within tolerance.\n\n", changes.len())
    } else {
        format!("### Regression gate: **{regressions} regression(s)** of {} metric(s)\n\n", changes.len())
    };
    out.push_str("| model | suite | metric | baseline | current | Δ | Δ 95% CI | McNemar p | verdict |\n|---|---|---|---:|---:|---:|---:|---:|---|\n");
    for c in changes {
        let cell = crate::markdown::text;
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:+.2} | {} | {} | {} |\n",
            cell(&c.model),
            cell(&c.suite),
            cell(&c.metric),
            c.baseline,
            c.current,
            c.current - c.baseline,
            c.interval.map(|(l, h)| format!("[{l:+.2}, {h:+.2}]")).unwrap_or_else(|| "–".into()),
            c.mcnemar_p.map(|p| format!("{p:.3}")).unwrap_or_else(|| "–".into()),
            if c.regression { "**REGRESSION**" } else { "ok" }
        ));
    }
    out
}

/// One change in words, for a JUnit failure's body.
fn describe(c: &Change) -> String {
    let mut text = format!(
        "{} on {}: {} {:.2} -> {:.2} ({:+.2})",
        c.model,
        c.suite,
        c.metric,
        c.baseline,
        c.current,
        c.current - c.baseline
    );
    if let Some((low, high)) = c.interval {
        text.push_str(&format!(", paired 95% CI [{low:+.2}, {high:+.2}]"));
    }
    if let Some(p) = c.mcnemar_p {
        text.push_str(&format!(", McNemar p {p:.3}"));
    }
    text
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}
