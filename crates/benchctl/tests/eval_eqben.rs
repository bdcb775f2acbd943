//! `benchctl eval --suite eqben` end to end on fixtures in all official shapes.

mod common;

use benchctl_suites::eqben;
use benchctl_testkit::eqben_layout;
use common::{benchctl, stored_run, tiny_model};

#[test]
fn eqben_fixture_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    let splits: Vec<&str> = eqben::SPLITS.iter().map(|(s, _, _)| *s).collect();
    eqben_layout(data.path(), &splits, 4, true);
    let results = tempfile::tempdir().unwrap();
    let out = benchctl(
        &[
            "eval", "--model-path", &tiny_model(), "--suite", "eqben",
            "--data-dir", data.path().to_str().unwrap(),
            "--results-dir", results.path().to_str().unwrap(),
        ],
        &[],
    );
    let (_, json) = stored_run(&out);
    let report = &json["report"];
    assert_eq!(report["items"], 28);
    let per_split = report["breakdowns"]["split"].as_object().unwrap();
    assert_eq!(per_split.len(), 7);
    for (split, group) in per_split {
        assert_eq!(group["items"], 4, "{split}");
        let (q1, median, q3) = (
            group["eqsim_deviation_q1"].as_f64().unwrap(),
            group["eqsim_deviation_median"].as_f64().unwrap(),
            group["eqsim_deviation_q3"].as_f64().unwrap(),
        );
        assert!(0.0 <= q1 && q1 <= median && median <= q3, "{split}");
    }
    let mean = per_split.values().map(|g| g["group_score"].as_f64().unwrap()).sum::<f64>() / 7.0;
    assert!((report["metrics"]["group_score_macro"].as_f64().unwrap() - mean).abs() < 1e-9);
}
