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
        let cell = line.split('┆').nth(8).unwrap().trim();
        let change: f64 = cell.parse().unwrap_or_else(|_| panic!("no score change in {line}"));
        assert!(change < 1e-4, "item scores moved by {change}: {line}");
    }
    // The snapshot is of the table's layout and verdicts; the score-change column is checked
    // above with a tolerance, so its digits (which may differ across CPUs) are masked.
    let masked: Vec<String> = stdout(&out)
        .lines()
        .map(|line| {
            let mut cells: Vec<String> = line.split('┆').map(String::from).collect();
            if cells.len() == 10 && line.contains("winoground") {
                cells[8] = format!(" {:>w$} ", "<1e-4", w = cells[8].chars().count() - 2);
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
    assert!(stderr(&out).contains("4 metric(s) dropped: clip-shapes on winoground text_score"), "{}", stderr(&out));
    let table = stdout(&out);
    let group = table.lines().find(|l| l.contains("clip-shapes") && l.contains("group_score")).unwrap();
    // The drop from 100 to the model's group score, with a paired interval below zero.
    assert!(group.contains("REGRESSION") && group.contains("[-"), "{group}");
    let siglip = table.lines().find(|l| l.contains("siglip-tiny") && l.contains("group_score")).unwrap();
    assert!(siglip.contains(" ok "), "{siglip}");

    // A tolerance wider than the drop lets it pass.
    let mut lenient = args.to_vec();
    lenient.extend(["--tolerance", "100"]);
    assert!(benchctl(&lenient, &[]).status.success());

    // For CI systems: JUnit XML (a test case per model × suite × metric, regressions failing)
    // and a markdown summary, written whatever the verdict.
    let junit = results.path().join("gate.xml");
    let summary = results.path().join("gate.md");
    let mut with_reports = args.to_vec();
    with_reports.extend(["--junit", junit.to_str().unwrap(), "--summary", summary.to_str().unwrap()]);
    assert_eq!(benchctl(&with_reports, &[]).status.code(), Some(6));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let cases = xml.matches("<testcase ").count();
    assert_eq!(cases, table.lines().filter(|l| l.contains("winoground")).count(), "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 4, "{xml}");
    assert!(xml.contains(r#"failures="4""#) && xml.contains(r#"<testcase classname="clip-shapes on winoground" name="group_score"><failure message="group_score dropped from 100.00 to "#), "{xml}");
    assert_eq!(xml.matches("<testcase").count(), xml.matches("</testcase>").count());
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("### Regression gate: **4 regression(s)**"), "{md}");
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
        let change: f64 = line.split('┆').nth(8).unwrap().trim().parse().unwrap();
        assert!(change < 1e-4, "{line}");
    }
}

/// Paired statistics compare runs item by item, so they need the same images, not only the
/// same annotations: two copies of the demo suite whose annotations are equal but one of
/// whose images differs get no paired interval; two identical copies do.
#[test]
fn runs_over_different_image_bytes_are_not_paired() {
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
    let paired_line = |current: &Path| {
        let baseline = results[0].path().join("runs");
        let out = benchctl(
            &[
                "compare",
                "--baseline",
                baseline.to_str().unwrap(),
                "--results-dir",
                current.to_str().unwrap(),
                "--tolerance",
                "100",
            ],
            &[],
        );
        stdout(&out).lines().find(|l| l.contains("group_score")).unwrap().to_string()
    };
    assert!(paired_line(results[1].path()).contains('['), "same images: a paired interval");
    assert!(!paired_line(results[2].path()).contains('['), "different images: no paired interval");
}
