//! Helpers shared by the suites' tests of bundled hub releases.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use benchctl_scoring::ScoreTensor;
use benchctl_suites::{find, Suite};

/// `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// `tests/fixtures/<name>/<file>`, read as JSON.
pub fn fixture_json(name: &str, file: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join(file)).unwrap()).unwrap()
}

/// The suite `id` loaded from its fixture `name`, which must have no problem.
pub fn loaded(id: &str, name: &str) -> Suite {
    let (suite, problems) = find(id).unwrap().load_all(&fixture(name)).unwrap();
    assert!(problems.is_empty(), "{}", problems.message(0));
    suite
}

/// A fixture's scores, one row per item of `images` × `texts` values (image rows), as a score
/// tensor of exact values.
pub fn score_rows(rows: &serde_json::Value, images: usize, texts: usize) -> ScoreTensor {
    let mut scores = ScoreTensor::new();
    for row in rows.as_array().unwrap() {
        let values: Vec<f64> =
            row.as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap()).map(|v| v.as_f64().unwrap()).collect();
        scores.push_exact(images, texts, &values).unwrap();
    }
    scores
}
