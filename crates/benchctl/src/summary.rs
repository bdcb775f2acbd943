//! Tables printed on stdout.

use comfy_table::{Cell, Table};

use crate::bench::PartResult;
use crate::results::Run;
use benchctl_scoring::Report;

fn table(header: Vec<String>) -> Table {
    crate::table::new(header)
}

fn right(text: String) -> Cell {
    crate::table::right(text)
}

/// The metrics of a run, overall and per breakdown group.
pub fn run_table(run: &Run) -> String {
    let title = format!(
        "{} on {} ({} items, {} images and {} texts encoded, {} and {} from the cache, {:.1} s)",
        run.model.id,
        run.suite.id,
        run.report.items,
        run.counts.images_encoded,
        run.counts.texts_encoded,
        run.counts.images_cached,
        run.counts.texts_cached,
        run.timings.total_s
    );
    let mut text = report_table(&title, &run.report);
    if !run.intervals.is_empty() {
        let cis: Vec<String> = run
            .intervals
            .iter()
            .map(|i| format!("{} {:.2} [{:.2}, {:.2}]", i.metric, i.value, i.low, i.high))
            .collect();
        text.push_str(&format!("\nbootstrap 95% intervals: {}", cis.join("; ")));
    }
    text.push_str(&format!("\nties: {}", ties_line(&run.suite.ties)));
    if run.counts.captions_truncated > 0 {
        text.push_str(&format!(
            "\nlong captions: {} of {} unique caption(s) exceed the model's {}-token context and were truncated, as the reference pipeline does (--on-long-caption error refuses them)",
            run.counts.captions_truncated, run.counts.unique_texts, run.counts.text_context
        ));
    }
    if let Some(altered) = &run.suite.altered_images {
        text.push_str(&format!("\naltered images: {altered}"));
    }
    if !run.suite.incomplete.is_empty() {
        text.push_str(&format!(
            "\npartial release (not the complete official data; metrics cover these items only): {}",
            run.suite.incomplete.join("; ")
        ));
    }
    text
}

/// What a run's tie rule means, in words.
pub fn ties_line(ties: &str) -> String {
    match ties {
        "first" => "first (the first of tied candidates wins, as the official argmax/argsort does)".into(),
        "shared" => {
            "shared (every answer option tied at the top counts, unless none was given, as VisMin's reply matching does)"
                .into()
        }
        other => format!("{other} (a tie for the top score is a miss)"),
    }
}

/// A report's metrics, overall and per breakdown group, under a title line.
pub fn report_table(title: &str, report: &Report) -> String {
    let mut header = vec!["group".to_string(), "items".to_string()];
    header.extend(report.metrics.iter().map(|(n, _)| n.clone()));
    let mut t = table(header);
    let mut row = vec![Cell::new("all"), right(report.items.to_string())];
    row.extend(report.metrics.iter().map(|(_, v)| right(format!("{v:.2}"))));
    t.add_row(row);
    for breakdown in &report.breakdowns {
        for group in &breakdown.groups {
            let mut row = vec![Cell::new(format!("{}={}", breakdown.key, group.value)), right(group.items.to_string())];
            row.extend(group.metrics.iter().map(|(_, v)| right(format!("{v:.2}"))));
            t.add_row(row);
        }
    }
    format!("{title}\n{t}")
}

/// Benchmark results.
pub fn bench_table(model: &str, results: &[PartResult], peak_rss_mib: Option<f64>) -> String {
    let mut t =
        table(["part", "batch", "items/s", "p50 ms/batch", "p90 ms/batch", "max ms/batch"].map(String::from).to_vec());
    for r in results {
        t.add_row(vec![
            Cell::new(r.part),
            right(r.batch.to_string()),
            right(format!("{:.2}", r.per_second)),
            right(if r.p50_ms.is_finite() { format!("{:.1}", r.p50_ms) } else { "–".into() }),
            right(if r.p90_ms.is_finite() { format!("{:.1}", r.p90_ms) } else { "–".into() }),
            right(if r.max_ms.is_finite() { format!("{:.1}", r.max_ms) } else { "–".into() }),
        ]);
    }
    let rss = peak_rss_mib.map(|m| format!(", peak RSS {m:.0} MiB")).unwrap_or_default();
    let extras: Vec<String> =
        results.iter().flat_map(|r| r.extra.iter().map(move |(k, v)| format!("{} {k} = {v:.3}", r.part))).collect();
    let extras = if extras.is_empty() { String::new() } else { format!("\n{}", extras.join("\n")) };
    let tiers = format!(
        "; CPU tier {}, matrix products {}",
        benchctl_cpu::Tier::current().isa(),
        benchctl_models::kernels::gemm_isa()
    );
    format!("{model} (random weights){rss}{tiers}\n{t}{extras}")
}

/// `benchctl suites`: every suite's id and description, then what this machine has of its data.
pub fn suites_list(statuses: &[crate::catalog::SuiteStatus]) -> String {
    let mut table = table(vec!["suite".into(), "what it is, and its data here".into()]);
    for s in statuses {
        let submission = match s.info.submission {
            Some(format) => format!("\nsubmission: {} (written beside each run; `score` reads one)", format.name()),
            None => String::new(),
        };
        table.add_row([s.info.id.to_string(), format!("{}\ndata: {}{submission}", s.info.description, s.describe())]);
    }
    table.to_string()
}

/// `benchctl models`: every zoo entry with what it needs and offers.
pub fn models_table() -> String {
    let header = [
        "model",
        "hub repo @ revision",
        "architecture",
        "scores (default first)",
        "preprocessing",
        "activation",
        "tokenizer",
    ];
    let mut table = table(header.iter().map(|h| h.to_string()).collect());
    for m in benchctl_models::registry::MODELS {
        let heads: Vec<&str> = m.architecture.heads().iter().map(|h| h.name()).collect();
        let spec = m.architecture.spec();
        let replies = if spec.generates_replies { " (or generated replies)" } else { "" };
        // The run options that change how its images are sized.
        let sizing = match (spec.patch_budget, spec.processor_pixels) {
            (true, _) => "; another budget: --max-patches",
            (_, true) => "; resized again by the processor: --min-pixels, --max-pixels",
            _ => "",
        };
        table.add_row([
            m.id.to_string(),
            format!("{}@{}", m.repo, m.revision_label()),
            m.architecture.name().to_string(),
            format!("{}{replies}", heads.join(", ")),
            format!("{}{sizing}", m.preprocessing),
            m.activation.to_string(),
            m.tokenizer.to_string(),
        ]);
    }
    // Checkpoints that are not on the hub: where to download them (then `--model-path FILE`).
    for m in benchctl_models::registry::FIBER_CHECKPOINTS {
        let heads: Vec<&str> = m.heads.iter().map(|h| h.name()).collect();
        table.add_row([
            m.id.to_string(),
            format!("download {} (then --model-path FILE)", m.url),
            m.architecture.name().to_string(),
            heads.join(", "),
            m.preprocessing.to_string(),
            "gelu".to_string(),
            m.tokenizer.to_string(),
        ]);
    }
    let types: Vec<&str> =
        benchctl_models::registry::ARCHITECTURES.iter().flat_map(|a| a.spec().model_types.iter().copied()).collect();
    let note = format!(
        "Any other hub checkpoint: --model hf:ORG/NAME[@REVISION] (its config.json's model_type one of {}, or an OpenCLIP repo with open_clip_config.json); the commit it resolves to is recorded in the run.",
        types.join(", ")
    );
    format!("{table}\n{}", wrapped(&note, 96))
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrapped(text: &str, width: usize) -> String {
    let (mut lines, mut line) = (Vec::new(), String::new());
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.join("\n")
}
