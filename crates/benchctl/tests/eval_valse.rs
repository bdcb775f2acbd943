//! `benchctl eval --suite valse` end to end: the real piece files, trimmed to their first
//! records, with generated images and a fixture model.

mod common;

use benchctl_suites::valse;
use benchctl_testkit::{generated_image, shared};
use common::eval_tiny;

const PER_PIECE: usize = 6;

#[test]
fn real_pieces_end_to_end() {
    let Some(source) = shared("datasets/valse") else { return };
    let data = tempfile::tempdir().unwrap();
    let mut expected_valid = 0;
    for (p, piece) in valse::PIECES.iter().enumerate() {
        let text = std::fs::read_to_string(source.join(format!("{piece}.json"))).unwrap();
        let records: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
        let kept: serde_json::Map<_, _> = records.into_iter().take(PER_PIECE).collect();
        for (r, record) in kept.values().enumerate() {
            // Each image in the folder its source dataset's archive extracts to.
            let (dataset, file) = (record["dataset"].as_str().unwrap(), record["image_file"].as_str().unwrap());
            let folder = valse::image_folders(valse::source(dataset).unwrap(), file)[0];
            let path = data.path().join("images").join(folder).join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            generated_image((p * 100 + r) as u64, 32, 24).save_with_format(&path, image::ImageFormat::Jpeg).unwrap();
            expected_valid += usize::from(record["mturk"]["caption"].as_u64().unwrap() >= 2);
        }
        std::fs::write(data.path().join(format!("{piece}.json")), serde_json::Value::Object(kept).to_string()).unwrap();
    }
    let results = tempfile::tempdir().unwrap();
    let (_, json, _) = eval_tiny("valse", data.path(), results.path(), &[]);
    let report = &json["report"];
    assert_eq!(report["items"].as_u64().unwrap() as usize, expected_valid);
    let pieces = report["breakdowns"]["piece"].as_object().unwrap();
    assert_eq!(pieces.len(), 11);
    // The macro average is the mean of the per-piece accuracies.
    let mean = pieces.values().map(|g| g["acc_r"].as_f64().unwrap()).sum::<f64>() / 11.0;
    assert!((report["metrics"]["acc_r_macro"].as_f64().unwrap() - mean).abs() < 1e-9);
    let micro = report["metrics"]["acc_r"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&micro));
    // `check` finds every image in its source's folder: the only problem is the count.
    let out = common::benchctl(&["check", "--suite", "valse", "--data-dir", data.path().to_str().unwrap()], &[]);
    let report = common::stdout(&out);
    assert!(report.contains("1 problem(s)") && report.contains("the official release has 7702 items"), "{report}");
}
