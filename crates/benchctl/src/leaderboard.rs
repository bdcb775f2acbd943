//! `benchctl leaderboard`: `LEADERBOARD.md` and one SVG bar chart per suite
//! (`charts/<suite>.svg`) from the runs in the results store.
//!
//! The output is deterministic for a given set of runs (stable ordering, two decimals),
//! so its diffs review cleanly: suites by id; within a suite, models by the headline
//! metric (best first), ties by model id; only the latest complete (unsharded) run of each
//! model and suite. A value's `±` is half the width of its bootstrap 95 % interval. Each
//! model's score family (contrastive, matching, generative) has its own column, so models
//! scored by embeddings, by a matching head and by a generative model's "Yes" are compared
//! on the same items in one table.

use std::collections::BTreeMap;
use std::fmt::Write;

use std::path::{Path, PathBuf};

use crate::results::Run;
use crate::{Error, Result};

/// The headline metric of a suite: the one its paper ranks by.
fn headline(run: &Run) -> String {
    run.suite
        .info()
        .map(|s| s.headline.to_string())
        .unwrap_or_else(|_| run.report.metrics.first().map(|(n, _)| n.clone()).unwrap_or_default())
}

/// The latest run of each (suite, model), grouped by suite.
fn latest(runs: &[Run]) -> BTreeMap<String, BTreeMap<String, &Run>> {
    let mut by_suite: BTreeMap<String, BTreeMap<String, &Run>> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.shard.is_none()) {
        let slot = by_suite.entry(run.suite.id.clone()).or_default().entry(run.label()).or_insert(run);
        if run.started_at > slot.started_at {
            *slot = run;
        }
    }
    by_suite
}

fn revision(run: &Run) -> String {
    if let Some(external) = &run.model.external {
        return match &external.url {
            Some(url) => match crate::markdown::link_target(url) {
                Some(target) => format!("[external]({target})"),
                None => format!("external ({})", crate::markdown::text(url)),
            },
            None => "external".to_string(),
        };
    }
    if run.model.endpoint.is_some() {
        return "server".to_string();
    }
    match (&run.model.commit, &run.model.path) {
        (Some(commit), _) if !commit.is_empty() => format!("`{}`", &commit[..commit.len().min(12)]),
        (_, Some(_)) => "local".to_string(),
        _ => "-".to_string(),
    }
}

use crate::markdown::text as md;

/// A suite's chart file name without `.svg`: its id with anything but letters, digits, `-`,
/// `_` and `.` replaced, so the markdown's image link cannot be broken out of.
pub fn chart_file_stem(suite: &str) -> String {
    suite.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
}

/// A report page's relative path as a link target (percent-encoded where it could end it).
fn page_target(page: &str) -> String {
    page.bytes()
        .map(|b| match b {
            b'(' | b')' | b'<' | b'>' | b' ' | b'|' | b'\\' | b'"' | b'[' | b']' | b'`' | 0..=0x1F | 0x7F..=0xFF => {
                format!("%{b:02X}")
            }
            b => char::from(b).to_string(),
        })
        .collect()
}

fn title(metric: &str) -> String {
    let spaced = metric.replace('_', " ");
    let mut chars = spaced.chars();
    chars.next().map(|c| c.to_uppercase().collect::<String>() + chars.as_str()).unwrap_or_default()
}

/// Renders the leaderboard markdown of `runs`, read from the store at `store` (named in its
/// heading).
pub fn render(runs: &[Run], store: &str) -> String {
    render_with_reports(runs, store, &|_| None)
}

/// What `benchctl leaderboard` wrote.
pub struct Written {
    pub path: PathBuf,
    pub runs: usize,
}

/// `benchctl leaderboard`: `LEADERBOARD.md` and its charts from the runs stored in
/// `results_dir`, each run linked to its failure browser page where `benchctl report` wrote
/// one; runs that cannot be read are left out with a warning.
pub fn write(results_dir: &Path) -> Result<Written> {
    let (stored, skipped) = crate::store::Store::open_existing(results_dir)?.runs_readable()?;
    for problem in &skipped {
        benchctl_base::stderr_line!("warning: left out of the leaderboard: failed to {problem}");
    }
    let mut pages = std::collections::HashMap::new();
    for s in &stored {
        let Some(file) = &s.run_file else { continue };
        let page = format!("runs/{}.report/index.html", file.trim_end_matches(".json"));
        if results_dir.join(&page).is_file() {
            pages.insert((s.run.started_at.clone(), s.run.label(), s.run.suite.id.clone()), page);
        }
    }
    let runs: Vec<Run> = stored.into_iter().map(|s| s.run).collect();
    let path = results_dir.join("LEADERBOARD.md");
    let report = |r: &Run| pages.get(&(r.started_at.clone(), r.label(), r.suite.id.clone())).cloned();
    let store = results_dir.join(crate::store::FILE_NAME).display().to_string();
    std::fs::write(&path, render_with_reports(&runs, &store, &report))
        .map_err(|e| Error::results(format!("write {}: {e}", path.display())))?;
    let charts_dir = results_dir.join("charts");
    std::fs::create_dir_all(&charts_dir)
        .map_err(|e| Error::results(format!("create {}: {e}", charts_dir.display())))?;
    for (name, svg) in charts(&runs) {
        let chart = charts_dir.join(name);
        std::fs::write(&chart, svg).map_err(|e| Error::results(format!("write {}: {e}", chart.display())))?;
    }
    Ok(Written { path, runs: runs.len() })
}

/// The leaderboard with each run's name linked to its failure browser page (`benchctl
/// report`), where `report` gives one (a path relative to the leaderboard).
pub fn render_with_reports(runs: &[Run], store: &str, report: &dyn Fn(&Run) -> Option<String>) -> String {
    let by_suite = latest(runs);
    let mut out = format!("# benchctl leaderboard\n\nGenerated by `benchctl leaderboard` from the results store `{}`. Scores are percentages (EqSim deviations are in score units, lower is better); `±` is half the width of the bootstrap 95 % interval (1,000 resamples of clusters of items, or of items, as each run drew it); bold marks the best value of each column.\n", store.replace('`', "'"));
    if by_suite.is_empty() {
        out.push_str("\nNo runs yet: `benchctl eval --model M --suite S` stores one.\n");
        return out;
    }
    // Overview: models × suites, headline metric each.
    let suites: Vec<&String> = by_suite.keys().collect();
    let mut models: Vec<&String> = by_suite.values().flat_map(|m| m.keys()).collect();
    models.sort();
    models.dedup();
    let _ = writeln!(out, "\n## Overview\n");
    let mut header = String::from("| Model | Score |");
    let mut rule = String::from("|---|---|");
    for suite in &suites {
        let metric = by_suite[*suite].values().next().map(|run| headline(run)).unwrap_or_default();
        let _ = write!(header, " {} ({}) |", md(suite), md(&metric.replace('_', " ")));
        rule.push_str("---:|");
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for model in &models {
        // A label is one model with one head, so every run of it has one score family.
        let family = suites.iter().find_map(|s| by_suite[*s].get(*model)).map_or("-", |run| run.score_family());
        let mut row = format!("| {} | {family} |", md(model));
        for suite in &suites {
            let cell = by_suite[*suite]
                .get(*model)
                .and_then(|run| {
                    let metric = headline(run);
                    run.report.metric(&metric).map(|v| with_interval(format!("{v:.2}"), run, &metric))
                })
                .unwrap_or_else(|| "-".into());
            let _ = write!(row, " {cell} |");
        }
        let _ = writeln!(out, "{row}");
    }
    for (suite, models) in &by_suite {
        let (Some((key, rows)), Some(first)) = (ranked(models), models.values().next()) else { continue };
        let metric_names: Vec<String> = first.report.metrics.iter().map(|(n, _)| n.clone()).collect();
        let best: Vec<Option<f64>> = metric_names
            .iter()
            .map(|m| {
                let values = rows.iter().filter_map(|r| r.report.metric(m));
                if benchctl_scoring::metrics::higher_is_better(m) {
                    values.reduce(f64::max)
                } else {
                    values.reduce(f64::min)
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "\n## {}\n\n![{}: {}](charts/{}.svg)\n",
            md(suite),
            md(suite),
            md(&key.replace('_', " ")),
            chart_file_stem(suite)
        );
        let mut header = String::from("| Model | Score |");
        let mut rule = String::from("|---|---|");
        for m in &metric_names {
            let _ = write!(header, " {} |", md(&title(m)));
            rule.push_str("---:|");
        }
        let _ = writeln!(out, "{header} Items | Revision | Dtype | Date |\n{rule}---:|---|---|---|");
        for run in rows {
            let mut row = match report(run) {
                Some(page) => format!("| [{}]({}) |", md(&run.label()), page_target(&page)),
                None => format!("| {} |", md(&run.label())),
            };
            let _ = write!(row, " {} |", run.score_family());
            for (m, best) in metric_names.iter().zip(&best) {
                let cell = match run.report.metric(m) {
                    Some(v) if Some(v) == *best => with_interval(format!("**{v:.2}**"), run, m),
                    Some(v) => with_interval(format!("{v:.2}"), run, m),
                    None => "-".into(),
                };
                let _ = write!(row, " {cell} |");
            }
            let date = run.started_at.get(..10).unwrap_or(&run.started_at);
            let _ =
                writeln!(row, " {} | {} | {} | {} |", run.report.items, revision(run), md(&run.model.dtype), md(date));
            out.push_str(&row);
        }
    }
    external_models(&mut out, &by_suite);
    out
}

/// The external models on the board (`benchctl score --model-name`): what they are and
/// which score file each row rests on.
fn external_models(out: &mut String, by_suite: &BTreeMap<String, BTreeMap<String, &Run>>) {
    let runs: Vec<&Run> =
        by_suite.values().flat_map(|m| m.values().copied()).filter(|r| r.model.external.is_some()).collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n## External models\n\nScored outside benchctl and stored with `benchctl score --model-name`; benchctl computed their metrics from the score file named here.\n\n| Model | Suite | Description | Score file | SHA-256 |\n|---|---|---|---|---|"
    );
    for run in runs {
        let Some(external) = &run.model.external else { continue };
        let sha = &external.scores_sha256;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ({}) | {} |",
            md(&run.label()),
            md(&run.suite.id),
            md(external.description.as_deref().unwrap_or("-")),
            md(&external.scores_file),
            md(&external.scores_format),
            md(sha.get(..16).unwrap_or(sha))
        );
    }
}

/// A suite's headline metric and its runs, best first (ties by model label).
fn ranked<'a>(models: &BTreeMap<String, &'a Run>) -> Option<(String, Vec<&'a Run>)> {
    let first = models.values().next()?;
    let key = headline(first);
    let mut rows: Vec<&Run> = models.values().copied().collect();
    rows.sort_by(|a, b| {
        let (x, y) = (a.report.metric(&key).unwrap_or(f64::MIN), b.report.metric(&key).unwrap_or(f64::MIN));
        y.total_cmp(&x).then_with(|| a.label().cmp(&b.label()))
    });
    Some((key, rows))
}

/// `value ±h` where the run has an interval for `metric`.
fn with_interval(value: String, run: &Run, metric: &str) -> String {
    match run.interval(metric) {
        Some(i) => format!("{value} ±{:.2}", (i.high - i.low) / 2.0),
        None => value,
    }
}

/// One SVG bar chart per suite: the headline metric of each model (leaderboard order) with
/// its 95 % interval as a whisker. Returned as `(file name, svg)`, deterministic.
pub fn charts(runs: &[Run]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (suite, models) in latest(runs) {
        let Some((key, rows)) = ranked(&models) else { continue };
        out.push((format!("{}.svg", chart_file_stem(&suite)), bar_chart(&suite, &key, &rows)));
    }
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn bar_chart(suite: &str, metric: &str, rows: &[&Run]) -> String {
    const LABEL_W: f64 = 220.0;
    const PLOT_W: f64 = 460.0;
    const ROW_H: f64 = 28.0;
    const TOP: f64 = 40.0;
    // (model, value, interval) of each row that has the metric.
    type Bar = (String, f64, Option<(f64, f64)>);
    let values: Vec<Bar> = rows
        .iter()
        .filter_map(|r| {
            let v = r.report.metric(metric)?;
            Some((r.label(), v, r.interval(metric).map(|i| (i.low, i.high))))
        })
        .collect();
    // Percentages on a 0–100 axis; other metrics (deviations) on 0 to their largest value.
    let percent = benchctl_scoring::metrics::higher_is_better(metric);
    let max = if percent {
        100.0
    } else {
        values.iter().map(|(_, v, i)| i.map_or(*v, |(_, h)| h.max(*v))).fold(0.0, f64::max).max(1e-9)
    };
    let x = |v: f64| LABEL_W + PLOT_W * (v / max).clamp(0.0, 1.0);
    let height = TOP + ROW_H * values.len() as f64 + 30.0;
    let width = LABEL_W + PLOT_W + 60.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{} — {}</text>"#,
        escape(suite),
        escape(&metric.replace('_', " "))
    );
    for tick in 0..=4 {
        let v = max * tick as f64 / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#ddd"/><text x="{0:.1}" y="{3:.1}" text-anchor="middle" fill="#555">{4:.1}</text>"##,
            x(v),
            TOP - 6.0,
            TOP + ROW_H * values.len() as f64,
            TOP + ROW_H * values.len() as f64 + 16.0,
            v
        );
    }
    for (row, (label, v, interval)) in values.iter().enumerate() {
        let y = TOP + ROW_H * row as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LABEL_W - 8.0,
            y + ROW_H * 0.62,
            escape(label)
        );
        let _ = writeln!(
            svg,
            r##"<rect x="{LABEL_W:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#4c78a8"><title>{} {:.2}</title></rect>"##,
            y + 4.0,
            x(*v) - LABEL_W,
            ROW_H - 8.0,
            escape(label),
            v
        );
        if let Some((low, high)) = interval {
            let mid = y + ROW_H / 2.0;
            let _ = writeln!(
                svg,
                r##"<path d="M{0:.1} {1:.1}H{2:.1}M{0:.1} {3:.1}V{4:.1}M{2:.1} {3:.1}V{4:.1}" stroke="#222" fill="none"/>"##,
                x(*low),
                mid,
                x(*high),
                mid - 5.0,
                mid + 5.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}">{v:.2}</text>"#,
            x(interval.map_or(*v, |(_, h)| h.max(*v))) + 6.0,
            y + ROW_H * 0.62
        );
    }
    svg.push_str("</svg>\n");
    svg
}
