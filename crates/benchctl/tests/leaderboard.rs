//! Snapshots of the generated leaderboard markdown and its SVG chart.

mod common;

use benchctl::leaderboard::{charts, render};
use benchctl::results::Counts;
use benchctl::results::{ModelRecord, Run, SuiteRecord, Timings};
use benchctl_scoring::metrics::stats::Interval;
use benchctl_scoring::{Breakdown, Group, Report};

fn run(model: &str, commit: Option<&str>, started_at: &str, scores: [f64; 3]) -> Run {
    let metrics = vec![
        ("text_score".to_string(), scores[0]),
        ("image_score".to_string(), scores[1]),
        ("group_score".to_string(), scores[2]),
    ];
    Run {
        started_at: started_at.into(),
        model: ModelRecord {
            id: model.into(),
            repo: commit.map(|_| format!("org/{model}")),
            revision: commit.map(String::from),
            commit: commit.map(String::from),
            path: if commit.is_none() { Some(format!("/models/{model}")) } else { None },
            dtype: "f32".into(),
            device: "cpu".into(),
            score: None,
            score_kind: None,
            external: None,
            endpoint: None,
            image_settings: None,
            text_prep: None,
            architecture: None,
            max_patches: None,
            processor_pixels: None,
            answer_rule: None,
            reply_reading: None,
        },
        suite: SuiteRecord {
            id: "winoground".into(),
            data_dir: "datasets/winoground".into(),
            items: 400,
            ties: "strict".into(),
            incomplete: Vec::new(),
            altered_images: None,
            caption_normalisation: None,
            manifest: None,
            shortlist: None,
            hub: None,
        },
        batch_size: 32,
        counts: Counts::default(),
        timings: Timings { load_model_s: 1.0, encode_images_s: 2.0, encode_texts_s: 0.5, score_s: 0.01, total_s: 3.6 },
        report: Report {
            items: 400,
            metrics: metrics.clone(),
            breakdowns: vec![Breakdown {
                key: "collapsed_tag".into(),
                groups: vec![Group { value: "Object".into(), items: 141, metrics: metrics.clone() }],
            }],
        },
        // Intervals of a fixed width per metric, so the snapshot shows the ± column.
        intervals: metrics
            .iter()
            .zip([2.0, 1.5, 1.25])
            .map(|((name, value), half)| Interval {
                metric: name.clone(),
                value: *value,
                low: value - half,
                high: value + half,
                design_effect: None,
            })
            .collect(),
        bootstrap: None,
        tool_commit: "0123456789abcdef".into(),
        data_fingerprint: "f".repeat(64),
        image_fingerprint: "e".repeat(64),
        shard: None,
    }
}

#[test]
fn leaderboard_markdown() {
    let runs = vec![
        run(
            "clip-vit-b32",
            Some("3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268"),
            "2026-11-01T10:00:00Z",
            [30.75, 10.5, 8.25],
        ),
        // A newer run of the same model replaces the older one.
        run(
            "clip-vit-b32",
            Some("3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268"),
            "2026-11-20T10:00:00Z",
            [30.75, 11.0, 8.75],
        ),
        run(
            "clip-vit-l14",
            Some("32bd64288804d66eefd0ccbe215aa642df71cc41"),
            "2026-11-19T09:30:00Z",
            [28.5, 11.25, 8.75],
        ),
        run("my-local-clip", None, "2026-11-21T08:00:00Z", [25.0, 9.0, 6.0]),
    ];
    insta::assert_snapshot!(render(&runs, "results/benchctl.sqlite"));
}

#[test]
fn leaderboard_chart() {
    let runs = vec![
        run(
            "clip-vit-b32",
            Some("3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268"),
            "2026-11-20T10:00:00Z",
            [30.75, 11.0, 8.75],
        ),
        run("my-local-clip", None, "2026-11-21T08:00:00Z", [25.0, 9.0, 6.0]),
    ];
    let charts = charts(&runs);
    assert_eq!(charts.len(), 1);
    assert_eq!(charts[0].0, "winoground.svg");
    insta::assert_snapshot!(charts[0].1);
}

#[test]
fn shard_runs_stay_off_the_leaderboard() {
    let mut shard = run("clip-vit-b32", None, "2026-11-22T00:00:00Z", [99.0, 99.0, 99.0]);
    shard.shard = Some("0/2".into());
    let whole = run("clip-vit-b32", None, "2026-11-21T00:00:00Z", [30.0, 20.0, 10.0]);
    let md = render(&[whole, shard], "s");
    assert!(md.contains("| clip-vit-b32 | contrastive | **30.00** ±2.00 |"), "{md}");
    assert!(!md.contains("99.00"), "{md}");
}

#[test]
fn an_empty_store_says_how_to_fill_it() {
    assert!(render(&[], "s").contains("No runs yet"));
}

#[test]
fn lower_is_better_for_the_eqsim_deviation() {
    let mut a = run("model-a", None, "2026-11-01T00:00:00Z", [10.0, 10.0, 10.0]);
    let mut b = run("model-b", None, "2026-11-01T00:00:00Z", [20.0, 20.0, 20.0]);
    for (r, deviation) in [(&mut a, 0.5), (&mut b, 1.5)] {
        r.suite.id = "eqben".into();
        r.report.metrics.push(("eqsim_deviation_mean".into(), deviation));
    }
    let md = render(&[a, b], "s");
    assert!(md.contains("| model-a | contrastive | 10.00 ±2.00 | 10.00 ±1.50 | 10.00 ±1.25 | **0.50** |"), "{md}");
    assert!(
        md.contains("| model-b | contrastive | **20.00** ±2.00 | **20.00** ±1.50 | **20.00** ±1.25 | 1.50 |"),
        "{md}"
    );
}

/// The committed leaderboard is exactly what `benchctl leaderboard` renders from the
/// committed demo runs alone (the store rebuilt from `results/runs/`): the trained demo
/// CLIP, its untrained twin and a random-weight SigLIP (contrastive), a random-weight FIBER's
/// ITM head (matching) and a random-weight Gemma 3's VQAScore (generative), with intervals.
#[test]
fn the_bundled_leaderboard_is_rendered_from_the_committed_runs() {
    let root = benchctl_testkit::workspace_root().join("results");
    let dir = tempfile::tempdir().unwrap();
    common::copy_tree(&root.join("runs"), &dir.path().join("runs"));
    let out = common::benchctl(&["leaderboard", "--results-dir", dir.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let rendered = std::fs::read_to_string(dir.path().join("LEADERBOARD.md")).unwrap();
    // The heading names the store it read, here the temporary one.
    let store = dir.path().join("benchctl.sqlite").display().to_string();
    assert!(rendered.contains(&format!("from the results store `{store}`")), "{rendered}");
    let rendered = rendered.replace(&store, "results/benchctl.sqlite");
    assert_eq!(
        rendered,
        std::fs::read_to_string(root.join("LEADERBOARD.md")).unwrap(),
        "rerun `just demo-leaderboard`"
    );
    // Three score families on the same items.
    for (model, family) in [
        ("clip-shapes", "contrastive"),
        ("clip-shapes-untrained", "contrastive"),
        ("siglip-tiny", "contrastive"),
        ("fiber-micro (itm)", "matching"),
        ("gemma3-tiny", "generative"),
    ] {
        assert!(rendered.contains(&format!("| {model} | {family} | ")), "{model} ({family}) missing");
    }
    // The trained model is clearly better than chance and clearly not perfect.
    let group = |model: &str| -> f64 {
        let row = rendered.lines().find(|l| l.starts_with(&format!("| {model} | "))).unwrap();
        row.split('|').nth(3).unwrap().split_whitespace().next().unwrap().trim_matches('*').parse().unwrap()
    };
    assert!((50.0..95.0).contains(&group("clip-shapes")), "{}", group("clip-shapes"));
    assert!(group("clip-shapes-untrained") < 10.0);
}

/// Names, descriptions and URLs are what users typed: in the markdown they stay text. A `|`
/// or a line break cannot add a column or a row, HTML is escaped, and only http(s) URLs
/// become links (their `)` percent-encoded). The same holds for `compare --summary`.
#[test]
fn hostile_names_and_urls_stay_text_in_generated_markdown() {
    let evil = "evil|<script>alert(1)</script>\n| injected | row |";
    let mut plain = run(evil, Some("abc123"), "2026-01-01T00:00:00Z", [10.0, 20.0, 5.0]);
    plain.suite.id = "wino|<b>".into();
    let mut external = run("ext", None, "2026-01-02T00:00:00Z", [11.0, 21.0, 6.0]);
    external.suite.id = plain.suite.id.clone();
    external.model.external = Some(benchctl::results::ExternalModel {
        description: Some("desc | with\nnewline <img src=x onerror=alert(1)>".into()),
        url: Some("javascript:alert(1)".into()),
        scores_file: "s`|.jsonl".into(),
        scores_sha256: "0".repeat(64),
        scores_format: "dump".into(),
    });
    let mut linked = run("ext2", None, "2026-01-03T00:00:00Z", [12.0, 22.0, 7.0]);
    linked.suite.id = plain.suite.id.clone();
    linked.model.external = Some(benchctl::results::ExternalModel {
        url: Some("https://example.org/a) [x](javascript:alert(1)".into()),
        ..external.model.external.clone().unwrap()
    });
    let board = render(&[plain, external, linked], "s");
    assert!(!board.contains("<script") && !board.contains("<img") && !board.contains("<b>"), "{board}");
    assert!(!board.contains("](javascript"), "{board}");
    assert!(board.contains("[external](https://example.org/a%29%20%5Bx%5D%28javascript:alert%281%29)"), "{board}");
    // Every table row has exactly its header's cells: unescaped `|` only as separators.
    let cells = |line: &str| line.replace("\\|", "").matches('|').count();
    for table in board.split("\n\n").filter(|block| block.starts_with('|')) {
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines.iter().all(|l| l.starts_with('|') && cells(l) == cells(lines[0])), "{table}");
    }
    assert!(!board.lines().any(|l| l.starts_with("| injected")), "{board}");
    let chart_names: Vec<String> = charts(&[run("m", None, "2026-01-01", [1.0, 2.0, 3.0])])
        .into_iter()
        .map(|(name, _)| name)
        .chain([format!("{}.svg", benchctl::leaderboard::chart_file_stem("a/../b c)"))])
        .collect();
    assert!(chart_names.iter().all(|n| !n.contains('/') && !n.contains(' ') && !n.contains(')')), "{chart_names:?}");

    let summary = benchctl::compare::markdown(&benchctl::compare::Gate {
        changes: vec![benchctl::compare::Change {
            model: evil.into(),
            suite: "s".into(),
            metric: "group_score".into(),
            group: Some(("tag".into(), evil.into())),
            baseline: 1.0,
            current: 2.0,
            interval: None,
            p_value: None,
            adjusted_p: None,
            detectable: None,
            verdict: benchctl::compare::Verdict::NotComparable,
            max_score_change: None,
            note: Some(evil.into()),
        }],
        rule: benchctl::compare::GateRule::default(),
    });
    assert!(!summary.contains("<script"), "{summary}");
    let rows: Vec<&str> = summary.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 3, "header, rule and one row: {summary}");
    assert!(rows.iter().all(|l| cells(l) == cells(rows[0])), "{summary}");
}
