//! `benchctl eval --suite eqben` end to end on fixtures in all official shapes.

mod common;

use benchctl_suites::eqben;
use benchctl_testkit::eqben_layout;
use common::{benchctl, eval_tiny, tiny_model};

#[test]
fn eqben_fixture_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    let splits: Vec<&str> = eqben::SPLITS.iter().map(|(s, _, _)| *s).collect();
    eqben_layout(data.path(), &splits, 4, true);
    let results = tempfile::tempdir().unwrap();
    let (_, json, _) = eval_tiny("eqben", data.path(), results.path(), &[]);
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

#[test]
fn scores_export_in_the_official_submission_order() {
    let data = tempfile::tempdir().unwrap();
    let splits: Vec<&str> = eqben::SPLITS.iter().map(|(s, _, _)| *s).collect();
    eqben_layout(data.path(), &splits, 2, true);
    // The authors' flat list: every (image, caption) pair of every item, shuffled. The light
    // split's pairs keep the annotations' .png names.
    let suite = benchctl_suites::find("eqben").unwrap().load(data.path()).unwrap();
    let root = data.path().join("images");
    let pairs = common::eqben_pairs(data.path());
    let n = pairs.len();
    let shuffled: Vec<serde_json::Value> = (0..n).map(|i| pairs[(i * 17 + 5) % n].clone()).collect();
    let flat = data.path().join("flat.json");
    std::fs::write(&flat, serde_json::Value::from(shuffled.clone()).to_string()).unwrap();

    let results = tempfile::tempdir().unwrap();
    let (run_path, json, _) = eval_tiny("eqben", data.path(), results.path(), &["--eqben-submission", flat.to_str().unwrap()]);
    let npy = std::fs::read(run_path.with_extension("eqben_submission.npy")).unwrap();
    let exported: Vec<f32> = npyz::NpyFile::new(&npy[..]).unwrap().into_vec().unwrap();
    assert_eq!(exported.len(), n);
    // Each exported value is that pair's score in the per-item dump.
    let dump = benchctl::results::read_scores(&common::dump_path(&run_path, &json)).unwrap();
    for (entry, value) in shuffled.iter().zip(&exported) {
        let (i, k, l) = suite
            .items
            .iter()
            .enumerate()
            .find_map(|(i, item)| {
                let k = item.images.iter().position(|im| {
                    im.path().strip_prefix(&root).unwrap().to_str().unwrap().replace(".jpg", ".png") == entry["image"].as_str().unwrap()
                })?;
                let l = item.texts.iter().position(|t| t == entry["caption"].as_str().unwrap())?;
                Some((i, k, l))
            })
            .unwrap();
        assert_eq!(dump[i].1[k][l], *value);
    }
}

#[test]
fn submission_export_needs_eqben_and_a_readable_list() {
    let out = benchctl(
        &["eval", "--model-path", &tiny_model(), "--suite", "winoground", "--eqben-submission", "flat.json"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let out = benchctl(
        &["eval", "--model-path", &tiny_model(), "--suite", "eqben", "--eqben-submission", "/nonexistent/flat.json"],
        &[],
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(common::stderr(&out).contains("/nonexistent/flat.json"), "{}", common::stderr(&out));
}

#[test]
fn eqben_subset_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    eqben_layout(data.path(), &["eqbenkubric_attr", "eqbengebc"], 4, false);
    let mut entries = serde_json::from_str::<Vec<serde_json::Value>>(
        &std::fs::read_to_string(data.path().join("annotations/eqbenkubric_attr.json")).unwrap(),
    )
    .unwrap();
    let gebc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.path().join("annotations/eqbengebc.json")).unwrap()).unwrap();
    for video in gebc.as_object().unwrap().values() {
        entries.extend(video.as_array().unwrap().iter().cloned());
    }
    std::fs::write(data.path().join(eqben::SUBSET_FILE), serde_json::Value::from(entries).to_string()).unwrap();
    let results = tempfile::tempdir().unwrap();
    let (_, json, _) = eval_tiny("eqben-subset", data.path(), results.path(), &[]);
    assert_eq!(json["report"]["items"], 8);
    assert!(json["report"]["metrics"]["eqsim_deviation_median"].as_f64().unwrap() >= 0.0);
    assert!(json["report"]["breakdowns"].as_object().unwrap().is_empty());
}
