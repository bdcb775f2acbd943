//! The regression gate CI runs: the fixture models on the demo suite, compared with the
//! committed baseline in `results/baselines/` (rewritten only by `just baselines`). A change
//! that silently alters scores fails here.

mod common;

use std::path::{Path, PathBuf};

use common::{benchctl, demo_suite, stderr, stdout, stored_run};

fn baselines() -> PathBuf {
    benchctl_testkit::workspace_root().join("results/baselines")
}

/// Evaluates the fixture models of the baseline into a fresh store.
fn current_runs(results: &Path) {
    for model in ["clip-tiny-a", "siglip-tiny"] {
        let path = benchctl_testkit::fixture_model(model).display().to_string();
        stored_run(&benchctl(
            &[
                "eval",
                "--model-path",
                &path,
                "--suite",
                "winoground",
                "--data-dir",
                demo_suite().to_str().unwrap(),
                "--results-dir",
                results.to_str().unwrap(),
            ],
            &[],
        ));
    }
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
    // Beyond the metrics (all 0 for random-weight models on the demo), every item score must
    // be what it was: the table's `max |Δ item score|` column.
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

/// A copy of the baseline whose clip-tiny-a run is better than what the model scores: as if
/// the code had changed and lowered every score.
fn improved_baseline(dir: &Path) {
    for entry in std::fs::read_dir(baselines()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let run_path = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("clip-tiny-a_winoground.json"))
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
            demo_suite().to_str().unwrap(),
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
    assert!(stderr(&out).contains("3 metric(s) dropped: clip-tiny-a on winoground text_score"), "{}", stderr(&out));
    let table = stdout(&out);
    let group = table.lines().find(|l| l.contains("clip-tiny-a") && l.contains("group_score")).unwrap();
    // A drop of 100 points on 8 items: paired interval strictly below zero, McNemar p = 2/2⁸.
    assert!(
        group.contains("-100.00")
            && group.contains("[-100.00, -100.00]")
            && group.contains("0.008")
            && group.contains("REGRESSION"),
        "{group}"
    );
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
    assert_eq!(xml.matches("<failure ").count(), 3, "{xml}");
    assert!(xml.contains(r#"failures="3""#) && xml.contains(r#"<testcase classname="clip-tiny-a on winoground" name="group_score"><failure message="group_score dropped from 100.00 to 0.00">"#), "{xml}");
    assert_eq!(xml.matches("<testcase").count(), xml.matches("</testcase>").count());
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("### Regression gate: **3 regression(s)**"), "{md}");
    assert!(md.contains("| clip-tiny-a | winoground | group_score | 100.00 | 0.00 | -100.00 | [-100.00, -100.00] | 0.008 | **REGRESSION** |"), "{md}");
}

/// Runs are matched by their whole identity: a newer run of the same model in another dtype,
/// or a single shard's run, is not what the gate compares the baseline with.
#[test]
fn the_gate_matches_runs_by_their_whole_identity() {
    let results = tempfile::tempdir().unwrap();
    current_runs(results.path());
    let model = benchctl_testkit::fixture_model("clip-tiny-a").display().to_string();
    let demo = demo_suite();
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
    for line in stdout(&out).lines().filter(|l| l.contains("clip-tiny-a")) {
        let change: f64 = line.split('┆').nth(8).unwrap().trim().parse().unwrap();
        assert!(change < 1e-4, "{line}");
    }
}

/// Paired statistics compare runs item by item, so they need the same images, not only the
/// same annotations: two copies of the demo suite whose annotations are equal but one of
/// whose images differs get no paired interval; two identical copies do.
#[test]
fn runs_over_different_image_bytes_are_not_paired() {
    let eval_into = |data: &Path, results: &Path| {
        let model = benchctl_testkit::fixture_model("clip-tiny-a").display().to_string();
        stored_run(&benchctl(
            &[
                "eval",
                "--model-path",
                &model,
                "--suite",
                "winoground",
                "--data-dir",
                data.to_str().unwrap(),
                "--results-dir",
                results.to_str().unwrap(),
            ],
            &[],
        ))
        .1
    };
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
