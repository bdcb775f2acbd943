//! The gate's outputs: the terminal table, JUnit XML for CI systems, and a markdown summary.

use super::{Change, Gate, Verdict};

fn interval(c: &Change) -> String {
    c.interval.map(|(l, h)| format!("[{l:+.2}, {h:+.2}]")).unwrap_or_else(|| "–".into())
}

fn p_value(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 1e-4 => format!("{p:.0e}"),
        Some(p) => format!("{p:.4}"),
        None => "–".into(),
    }
}

fn detectable(c: &Change) -> String {
    match c.detectable {
        Some(d) if d.is_finite() => format!("{d:.2}"),
        Some(_) => "∞".into(),
        None => "–".into(),
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.2}")
    }
}

fn delta(c: &Change) -> String {
    let d = c.current - c.baseline;
    // Numbers over different data are not a change.
    if d.is_nan() || c.verdict == Verdict::NotComparable {
        "–".into()
    } else {
        format!("{d:+.2}")
    }
}

/// The comparison table (rows in baseline order), the rule, and a note per row that is not
/// comparable or has no current run.
pub fn table(gate: &Gate) -> String {
    let mut table = crate::table::new([
        "model",
        "suite",
        "metric",
        "baseline",
        "current",
        "Δ",
        "Δ 95% CI",
        "p (adj.)",
        "detectable Δ",
        "max |Δ item score|",
        "verdict",
    ]);
    for c in &gate.changes {
        let right = crate::table::right;
        table.add_row(vec![
            comfy_table::Cell::new(&c.model),
            comfy_table::Cell::new(&c.suite),
            comfy_table::Cell::new(c.metric_label()),
            right(number(c.baseline)),
            right(number(c.current)),
            right(delta(c)),
            right(interval(c)),
            right(p_value(c.adjusted_p)),
            right(detectable(c)),
            right(c.max_score_change.map(|d| format!("{d:.1e}")).unwrap_or_else(|| "–".into())),
            comfy_table::Cell::new(c.verdict.label()),
        ]);
    }
    let mut out = table.to_string();
    out.push_str(&format!("\n{}", gate.rule_text()));
    for note in gate.changes.iter().filter_map(|c| c.note.as_ref()) {
        out.push_str(&format!("\n{note}"));
    }
    out
}

/// The verdict as JUnit XML: one `<testcase>` per row, named `<metric>` (with its group) in
/// class `<model> on <suite>`, with a `<failure>` for a row that fails the gate and the row's
/// statistics as properties.
pub fn junit(gate: &Gate) -> String {
    let failures = gate.failures().count();
    let rows = gate.changes.len();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"benchctl compare\" tests=\"{rows}\" failures=\"{failures}\">\n<testsuite name=\"regression gate\" tests=\"{rows}\" failures=\"{failures}\">\n  <properties><property name=\"rule\" value=\"{}\"/></properties>\n",
        xml_escape(&gate.rule_text())
    ));
    for c in &gate.changes {
        out.push_str(&format!(
            "  <testcase classname=\"{}\" name=\"{}\">",
            xml_escape(&format!("{} on {}", c.model, c.suite)),
            xml_escape(&c.metric_label())
        ));
        let properties = [
            ("verdict", Some(c.verdict.label().to_string())),
            ("p_value", c.p_value.map(|p| format!("{p:e}"))),
            ("adjusted_p", c.adjusted_p.map(|p| format!("{p:e}"))),
            ("detectable_difference", c.detectable.map(|d| format!("{d}"))),
        ];
        out.push_str("<properties>");
        for (name, value) in properties.iter().filter_map(|(n, v)| v.as_ref().map(|v| (n, v))) {
            out.push_str(&format!("<property name=\"{name}\" value=\"{}\"/>", xml_escape(value)));
        }
        out.push_str("</properties>");
        if c.verdict.fails(&gate.rule) {
            let message = match c.verdict {
                Verdict::Regression => {
                    format!("{} dropped from {:.2} to {:.2}", c.metric_label(), c.baseline, c.current)
                }
                _ => c.note.clone().unwrap_or_else(|| c.verdict.label().to_string()),
            };
            out.push_str(&format!(
                "<failure message=\"{}\">{}</failure>",
                xml_escape(&message),
                xml_escape(&describe(c))
            ));
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n</testsuites>\n");
    out
}

/// The verdict as markdown for a CI job's summary page: the outcome first, then the table.
pub fn markdown(gate: &Gate) -> String {
    let failures = gate.failures().count();
    let underpowered = gate.changes.iter().filter(|c| c.verdict == Verdict::Underpowered).count();
    let rows = gate.changes.len();
    let mut out = if failures == 0 {
        format!("### Regression gate: passed\n\nNo row of {rows} failed")
    } else {
        format!("### Regression gate: **{failures} failure(s)** of {rows} row(s)\n\nSee the verdicts below")
    };
    if underpowered > 0 {
        out.push_str(&format!("; {underpowered} row(s) underpowered (a drop of the tolerance could go unseen)"));
    }
    out.push_str(&format!(".\n\nRule: {}.\n\n", gate.rule_text()));
    out.push_str("| model | suite | metric | baseline | current | Δ | Δ 95% CI | p | p (adj.) | detectable Δ | verdict |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for c in &gate.changes {
        let cell = crate::markdown::text;
        let verdict =
            if c.verdict.fails(&gate.rule) { format!("**{}**", c.verdict.label()) } else { c.verdict.label().into() };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            cell(&c.model),
            cell(&c.suite),
            cell(&c.metric_label()),
            number(c.baseline),
            number(c.current),
            delta(c),
            interval(c),
            p_value(c.p_value),
            p_value(c.adjusted_p),
            detectable(c),
            verdict
        ));
    }
    for note in gate.changes.iter().filter_map(|c| c.note.as_ref()) {
        out.push_str(&format!("\n- {}", crate::markdown::text(note)));
    }
    out
}

/// One row in words, for a JUnit failure's body.
fn describe(c: &Change) -> String {
    let mut text = format!(
        "{} on {}: {} {} -> {} ({})",
        c.model,
        c.suite,
        c.metric_label(),
        number(c.baseline),
        number(c.current),
        delta(c)
    );
    if let Some((low, high)) = c.interval {
        text.push_str(&format!(", paired 95% CI [{low:+.2}, {high:+.2}]"));
    }
    if let (Some(p), Some(adjusted)) = (c.p_value, c.adjusted_p) {
        text.push_str(&format!(", one-sided p {p:.3e} ({adjusted:.3e} adjusted)"));
    }
    if let Some(d) = c.detectable {
        text.push_str(&format!(", detectable drop {d:.2}"));
    }
    if let Some(note) = &c.note {
        text.push_str(&format!(": {note}"));
    }
    text
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}
