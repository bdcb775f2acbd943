//! The regression gate CI runs: the trained demo CLIP on the shapes suite and a random-weight
//! SigLIP on the Winoground-layout demo, compared with the committed baseline in
//! `results/baselines/` (rewritten only by `just baselines`). A change that silently alters
//! scores fails here, and so does a slightly perturbed model.

mod common;

use std::path::{Path, PathBuf};

use common::{benchctl, demo_suite, stderr, stdout, stored_run};

fn baselines() -> PathBuf {
    benchctl_testkit::workspace_root().join("results/baselines")
}

fn shapes_suite() -> PathBuf {
    benchctl_testkit::workspace_root().join("datasets/demo/shapes")
}

/// Evaluates `model_dir` on `suite` into the store under `results`.
fn eval_into(results: &Path, model_dir: &Path, suite: &Path) {
    common::eval_model(model_dir, "winoground", suite, results, &[], &[]);
}

/// Evaluates the models of the baseline into a fresh store.
fn current_runs(results: &Path) {
    eval_into(results, &benchctl_testkit::fixture_model("clip-shapes"), &shapes_suite());
    eval_into(results, &benchctl_testkit::fixture_model("siglip-tiny"), &demo_suite());
}

#[test]
fn the_fixture_models_match_the_committed_baseline() {
    let results = tempfile::tempdir().unwrap();
    current_runs(results.path());
    let out = benchctl(
        &["compare", "--baseline", baselines().to_str().unwrap(), "--results-dir", results.path().to_str().unwrap()],
        &[],
    );
    assert!(
        out.status.success(),
        "the scores changed against results/baselines (rewrite with `just baselines` only if intended):\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    // Beyond the metrics, every item score must be what it was: the table's
    // `max |Δ item score|` column.
    for line in stdout(&out).lines().filter(|l| l.contains("winoground")) {
        let cell = line.split('┆').nth(9).unwrap().trim();
        let change: f64 = cell.parse().unwrap_or_else(|_| panic!("no score change in {line}"));
        assert!(change < 1e-4, "item scores moved by {change}: {line}");
    }
    // The snapshot is of the table's layout and verdicts; the score-change column is checked
    // above with a tolerance, so its digits (which may differ across CPUs) are masked.
    let masked: Vec<String> = stdout(&out)
        .lines()
        .map(|line| {
            let mut cells: Vec<String> = line.split('┆').map(String::from).collect();
            if cells.len() == 11 && line.contains("winoground") {
                cells[9] = format!(" {:>w$} ", "<1e-4", w = cells[9].chars().count() - 2);
            }
            cells.join("┆")
        })
        .collect();
    insta::assert_snapshot!(masked.join("\n"));
}

/// A copy of the baseline whose clip-shapes run is better than what the model scores: as if
/// the code had changed and lowered every score.
fn improved_baseline(dir: &Path) {
    for entry in std::fs::read_dir(baselines()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let run_path = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("clip-shapes_winoground.json"))
        .unwrap();
    let mut run: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&run_path).unwrap()).unwrap();
    let dump = run_path.with_file_name(run["scores_file"].as_str().unwrap());
    // Every item right: a strong diagonal.
    let lines: Vec<String> = std::fs::read_to_string(&dump)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            serde_json::json!({"id": v["id"], "scores": [[1.0, 0.0], [0.0, 1.0]]}).to_string()
        })
        .collect();
    std::fs::write(&dump, lines.join("\n") + "\n").unwrap();
    // The report `benchctl score` computes from that dump becomes the baseline's report.
    let out = benchctl(
        &[
            "score",
            "--suite",
            "winoground",
            "--data-dir",
            shapes_suite().to_str().unwrap(),
            "--scores",
            dump.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let report: serde_json::Value = serde_json::from_str(&text[text.find("\n{").unwrap()..]).unwrap();
    assert_eq!(report["metrics"]["group_score"], 100.0);
    run["report"] = report;
    run.as_object_mut().unwrap().remove("intervals");
    std::fs::write(&run_path, serde_json::to_string_pretty(&run).unwrap()).unwrap();
}

#[test]
fn a_changed_score_fails_the_gate() {
    let results = tempfile::tempdir().unwrap();
    current_runs(results.path());
    let baseline = tempfile::tempdir().unwrap();
    improved_baseline(baseline.path());
    let args =
        ["compare", "--baseline", baseline.path().to_str().unwrap(), "--results-dir", results.path().to_str().unwrap()];
    let out = benchctl(&args, &[]);
    assert_eq!(out.status.code(), Some(6), "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("13 row(s) failed: clip-shapes on winoground text_score dropped"),
        "{}",
        stderr(&out)
    );
    let table = stdout(&out);
    let row = |model: &str, metric: &str| {
        table.lines().find(|l| l.contains(model) && l.contains(&format!("┆ {metric} "))).unwrap().to_string()
    };
    // The drop from 100 to the model's group score (37 of 200 items turned), with a paired
    // interval below zero.
    let group = row("clip-shapes", "group_score");
    assert!(group.contains("REGRESSION") && group.contains("[-"), "{group}");
    // GroupMatch drops by 1.5 points (3 items, none the other way): beyond the tolerance, but
    // McNemar's one-sided p is 1/8 before any adjustment, so no regression; at 200 items and
    // 52 rows the gate could not have seen a 0.5-point drop: underpowered.
    let group_match = row("clip-shapes", "group_match");
    assert!(group_match.contains("underpowered") && group_match.contains("-1.50"), "{group_match}");
    // Eight items detect nothing.
    let siglip = row("siglip-tiny", "group_score");
    assert!(siglip.contains("underpowered") && siglip.contains('∞'), "{siglip}");
    assert!(table.contains("Holm-adjusted one-sided p-value over 52 tested row(s)"), "{table}");

    // A tolerance wider than the drop lets it pass; failing on underpowered rows does not.
    let mut lenient = args.to_vec();
    lenient.extend(["--tolerance", "100"]);
    assert!(benchctl(&lenient, &[]).status.success());
    lenient.push("--fail-underpowered");
    let strict = benchctl(&lenient, &[]);
    assert_eq!(strict.status.code(), Some(6));
    assert!(stderr(&strict).contains("group_match is underpowered"), "{}", stderr(&strict));

    // For CI systems: JUnit XML (a test case per row, failing rows as failures, each row's
    // statistics as properties) and a markdown summary, written whatever the verdict.
    let junit = results.path().join("gate.xml");
    let summary = results.path().join("gate.md");
    let mut with_reports = args.to_vec();
    with_reports.extend(["--junit", junit.to_str().unwrap(), "--summary", summary.to_str().unwrap()]);
    assert_eq!(benchctl(&with_reports, &[]).status.code(), Some(6));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let cases = xml.matches("<testcase ").count();
    assert_eq!(cases, table.lines().filter(|l| l.contains("winoground")).count(), "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 13, "{xml}");
    let case = xml
        .lines()
        .find(|l| l.contains(r#"<testcase classname="clip-shapes on winoground" name="group_score">"#))
        .unwrap();
    assert!(case.contains(r#"<failure message="group_score dropped from 100.00 to "#), "{case}");
    assert!(
        case.contains(r#"<property name="verdict" value="REGRESSION"/>"#)
            && case.contains(r#"<property name="adjusted_p" value=""#),
        "{case}"
    );
    assert!(
        xml.contains(r#"failures="13""#) && xml.contains(r#"<property name="rule" value="a drop beyond 0.50"#),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase").count(), xml.matches("</testcase>").count());
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("### Regression gate: **13 failure(s)** of 52 row(s)"), "{md}");
    let row = md.lines().find(|l| l.starts_with("| clip-shapes | winoground | group_score | 100.00 |")).expect(&md);
    assert!(row.ends_with("| **REGRESSION** |"), "{row}");
}

/// The gate has teeth on the metrics themselves: the trained demo model with its weights
/// perturbed slightly (each value plus uniform noise with a fifth of its tensor's spread, from
/// a fixed seed) fails
/// the gate on metrics, not only on item scores.
#[test]
fn a_slightly_perturbed_model_fails_the_gate_on_its_metrics() {
    // Named as the model, so the gate matches it with the baseline's run.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("clip-shapes");
    common::copy_tree(&benchctl_testkit::fixture_model("clip-shapes"), &model);
    let weights = model.join("model.safetensors");
    let tensors = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu).unwrap();
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut rng = benchctl_scoring::metrics::stats::SplitMix64::new(17);
    let mut draws: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for name in names {
        draws.insert(name.clone(), rng.next_u64());
    }
    let perturbed: std::collections::HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(|(name, t)| {
            let f = t.to_dtype(candle_core::DType::F32).unwrap();
            let spread = f.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let mean = spread.iter().sum::<f32>() / spread.len() as f32;
            let std = (spread.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / spread.len() as f32).sqrt();
            // Uniform on ±√3·σ has standard deviation σ = a fifth of the tensor's spread.
            let half_width = 3f32.sqrt() * 0.2 * std.max(1e-3);
            let mut noise = benchctl_scoring::metrics::stats::SplitMix64::new(draws[&name]);
            let values: Vec<f32> = spread
                .iter()
                .map(|x| x + half_width * ((noise.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0))
                .collect();
            let t2 = candle_core::Tensor::from_vec(values, f.shape(), &candle_core::Device::Cpu).unwrap();
            (name, t2.to_dtype(t.dtype()).unwrap())
        })
        .collect();
    candle_core::safetensors::save(&perturbed, &weights).unwrap();
    let results = tempfile::tempdir().unwrap();
    eval_into(results.path(), &model, &shapes_suite());
    eval_into(results.path(), &benchctl_testkit::fixture_model("siglip-tiny"), &demo_suite());
    let out = benchctl(
        &["compare", "--baseline", baselines().to_str().unwrap(), "--results-dir", results.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}
{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains("clip-shapes on winoground group_score"), "{}", stderr(&out));
}

/// Runs are matched by their whole identity: a newer run of the same model in another dtype,
/// or a single shard's run, is not what the gate compares the baseline with.
#[test]
fn the_gate_matches_runs_by_their_whole_identity() {
    let results = tempfile::tempdir().unwrap();
    current_runs(results.path());
    let model = benchctl_testkit::fixture_model("clip-shapes").display().to_string();
    let demo = shapes_suite();
    for extra in [["--dtype", "f16"], ["--shard", "0/2"]] {
        let mut args = vec![
            "eval",
            "--model-path",
            &model,
            "--suite",
            "winoground",
            "--data-dir",
            demo.to_str().unwrap(),
            "--results-dir",
            results.path().to_str().unwrap(),
        ];
        args.extend(extra);
        stored_run(&benchctl(&args, &[]));
    }
    let out = benchctl(
        &["compare", "--baseline", baselines().to_str().unwrap(), "--results-dir", results.path().to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    // Every item score is the f32 run's: the newer f16 and shard runs were not taken.
    for line in stdout(&out).lines().filter(|l| l.contains("clip-shapes")) {
        let change: f64 = line.split('┆').nth(9).unwrap().trim().parse().unwrap();
        assert!(change < 1e-4, "{line}");
    }
}

/// Two runs are compared only on the same data, images included: two copies of the demo
/// suite whose annotations are equal but one of whose images differs are not comparable (the
/// gate fails, naming both image fingerprints); asked to compare them anyway, the gate does so
/// without paired statistics. Two identical copies pair.
#[test]
fn runs_over_different_image_bytes_are_not_comparable() {
    let eval_into = |data: &Path, results: &Path| common::eval_tiny("winoground", data, results, &[]).1;
    let copies: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for copy in &copies {
        common::copy_tree(&demo_suite(), copy.path());
    }
    // The third copy has one image with other pixels (same name, same annotations).
    let changed = copies[2].path().join("images/ex_0_img_0.png");
    let mut img = image::open(&changed).unwrap().to_rgb8();
    img.pixels_mut().for_each(|p| p.0 = [255 - p.0[0], p.0[1], p.0[2]]);
    img.save(&changed).unwrap();
    let results: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let runs: Vec<serde_json::Value> =
        copies.iter().zip(&results).map(|(c, r)| eval_into(c.path(), r.path())).collect();
    assert_eq!(runs[0]["data_fingerprint"], runs[2]["data_fingerprint"], "the annotations and paths are the same");
    assert_eq!(runs[0]["image_fingerprint"], runs[1]["image_fingerprint"]);
    assert_ne!(runs[0]["image_fingerprint"], runs[2]["image_fingerprint"]);
    let compare = |current: &Path, extra: &[&str]| {
        let baseline = results[0].path().join("runs");
        let mut args = vec![
            "compare",
            "--baseline",
            baseline.to_str().unwrap(),
            "--results-dir",
            current.to_str().unwrap(),
            "--tolerance",
            "100",
        ];
        args.extend(extra);
        benchctl(&args, &[])
    };
    let group_line = |out: &std::process::Output| {
        stdout(out).lines().find(|l| l.contains("┆ group_score ")).map(String::from).unwrap_or_default()
    };
    let same = compare(results[1].path(), &[]);
    assert!(
        same.status.success() && group_line(&same).contains('['),
        "same images: a paired interval\n{}",
        stdout(&same)
    );
    let different = compare(results[2].path(), &[]);
    assert_eq!(different.status.code(), Some(6), "{}", stdout(&different));
    let short = |run: &serde_json::Value| run["image_fingerprint"].as_str().unwrap()[..12].to_string();
    let message = stderr(&different);
    assert!(
        message.contains("different images")
            && message.contains(&short(&runs[0]))
            && message.contains(&short(&runs[2])),
        "{message}"
    );
    assert!(stdout(&different).contains("NOT COMPARABLE"), "{}", stdout(&different));
    let allowed = compare(results[2].path(), &["--allow-different-data"]);
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    assert!(
        !group_line(&allowed).contains('[') && group_line(&allowed).contains(" ok "),
        "different images, allowed: no paired interval\n{}",
        stdout(&allowed)
    );
}

/// The README's gate on the shipped baselines with a current run over other data (the 200-item
/// shapes suite where the baseline scored the 8-item Winoground demo) fails, naming both data
/// fingerprints; a baseline run with no current run is a failing row of its own, whether the
/// runs come from the store or are given as files.
#[test]
fn the_gate_never_passes_on_different_data_or_a_missing_run() {
    let results = tempfile::tempdir().unwrap();
    eval_into(results.path(), &benchctl_testkit::fixture_model("clip-shapes"), &shapes_suite());
    eval_into(results.path(), &benchctl_testkit::fixture_model("siglip-tiny"), &shapes_suite());
    let baselines = baselines();
    let args =
        ["compare", "--baseline", baselines.to_str().unwrap(), "--results-dir", results.path().to_str().unwrap()];
    let out = benchctl(&args, &[]);
    assert_eq!(out.status.code(), Some(6), "{}\n{}", stdout(&out), stderr(&out));
    let message = stderr(&out);
    assert!(message.contains("1 row(s) failed: different annotations"), "{message}");
    assert!(message.contains("(8 items in") && message.contains("(200 items in"), "{message}");
    let siglip = stdout(&out)
        .lines()
        .filter(|l| l.starts_with('│') && l.contains("siglip-tiny"))
        .map(String::from)
        .collect::<Vec<_>>();
    assert_eq!(siglip.len(), 1, "one row for the pair: {siglip:?}");
    assert!(siglip[0].contains("NOT COMPARABLE"), "{}", siglip[0]);

    // Only the clip-shapes run given as a file: the siglip-tiny baseline has no current run.
    let clip_run = std::fs::read_dir(results.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("clip-shapes_winoground.json"))
        .unwrap();
    let files = benchctl(&["compare", "--baseline", baselines.to_str().unwrap(), clip_run.to_str().unwrap()], &[]);
    assert_eq!(files.status.code(), Some(6), "{}\n{}", stdout(&files), stderr(&files));
    assert!(
        stderr(&files).contains("no current run for baseline") && stderr(&files).contains("siglip-tiny"),
        "{}",
        stderr(&files)
    );
    assert!(stdout(&files).contains("NO CURRENT RUN"), "{}", stdout(&files));
    // The same through an empty store.
    let empty = tempfile::tempdir().unwrap();
    eval_into(empty.path(), &benchctl_testkit::fixture_model("clip-shapes"), &shapes_suite());
    let store = benchctl(
        &["compare", "--baseline", baselines.to_str().unwrap(), "--results-dir", empty.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(store.status.code(), Some(6), "{}", stderr(&store));
    assert!(
        stderr(&store).contains("no current run for baseline") && stderr(&store).contains("in the results store"),
        "{}",
        stderr(&store)
    );
}

/// `benchctl power`: the items a drop needs at each discordance against the suite's own count
/// (here the shapes demo's 200 items), the detectable drop at that count, the seeds a
/// comparison of means needs (13 per model for one standard deviation at 5 % and 80 %, as
/// statsmodels' NormalIndPower says), and a clear usage error where nothing gives the count.
#[test]
fn power_says_what_a_suite_can_detect() {
    use benchctl_scoring::metrics::power::{mcnemar_detectable, mcnemar_items_needed};
    let shapes = shapes_suite();
    let out = benchctl(
        &[
            "power",
            "--suite",
            "winoground",
            "--difference",
            "5",
            "--data-dir",
            shapes.to_str().unwrap(),
            "--discordance",
            "0.2",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("winoground: 200 items (from the annotations in"), "{text}");
    let row = text.lines().find(|l| l.contains("20.0 %")).expect(&text);
    let needed = mcnemar_items_needed(0.05, 0.2, 0.05, 0.8).unwrap();
    let detectable = 100.0 * mcnemar_detectable(200.0, 0.2, 0.05, 0.8).unwrap();
    assert!(row.contains(&format!(" {needed} ")) && row.contains(&format!("{} short", needed - 200)), "{row}");
    assert!(row.contains(&format!("{detectable:.2} points")), "{row}");

    let seeds =
        benchctl(&["power", "--suite", "winoground", "--difference", "1", "--seed-sd", "1", "--items", "400"], &[]);
    assert!(stdout(&seeds).contains("seeds: 13 run(s) of each model"), "{}", stdout(&seeds));

    let missing = tempfile::tempdir().unwrap();
    let nowhere = missing.path().join("eqben");
    let out =
        benchctl(&["power", "--suite", "eqben", "--difference", "2", "--data-dir", nowhere.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("give --items or --data-dir"), "{}", stderr(&out));
    let out = benchctl(&["power", "--suite", "winoground", "--difference", "2", "--alpha", "1.5"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
