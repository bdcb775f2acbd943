//! `benchctl eval --suite spec` end to end on fixtures in the official shape.

mod common;

use benchctl_suites::spec;
use benchctl_testkit::spec_layout;
use common::eval_tiny;

#[test]
fn spec_fixture_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    let (i2t, t2i) = spec_layout(data.path(), &spec::SUBSETS, 4);
    let results = tempfile::tempdir().unwrap();
    let (_, json, _) = eval_tiny("spec", data.path(), results.path(), &["--batch-size", "16"]);
    let report = &json["report"];
    assert_eq!(report["items"].as_u64().unwrap() as usize, i2t + t2i);
    let subsets = report["breakdowns"]["subset"].as_object().unwrap();
    assert_eq!(subsets.len(), 6);
    for direction in ["i2t_accuracy", "t2i_accuracy"] {
        let mean = subsets.values().map(|g| g[direction].as_f64().unwrap()).sum::<f64>() / 6.0;
        let reported = report["metrics"][format!("{direction}_macro")].as_f64().unwrap();
        assert!((reported - mean).abs() < 1e-9, "{direction}: {reported} vs {mean}");
    }
    // Each query image and each candidate image is encoded once.
    assert_eq!(json["counts"]["images_encoded"], json["counts"]["unique_images"]);
}

/// SPEC's release is one `data.zip` whose subsets sit in one folder when unzipped (the
/// README's `zipfile.extractall` recipe): `eval` and `check` read it in place.
#[test]
fn the_unzipped_release_with_its_wrapper_folder_evaluates_and_checks() {
    let data = tempfile::tempdir().unwrap();
    let (i2t, t2i) = spec_layout(&data.path().join("data"), &spec::SUBSETS, 2);
    let results = tempfile::tempdir().unwrap();
    let (_, json, _) = eval_tiny("spec", data.path(), results.path(), &[]);
    assert_eq!(json["report"]["items"].as_u64().unwrap() as usize, i2t + t2i);
    let out = common::benchctl(&["check", "--suite", "spec", "--data-dir", data.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", common::stdout(&out));
    assert!(common::stdout(&out).contains(&format!("{} items", i2t + t2i)), "{}", common::stdout(&out));
}
