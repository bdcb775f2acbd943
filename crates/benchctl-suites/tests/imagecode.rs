//! ImageCoDe's validation split (the bundled `imagecode` manifest) on a fixture in its official
//! layout (`valid_data.json` of image sets' descriptions, `image-sets/<set>/imgN.jpg`), scored
//! against what the official `baselines/clip/zero_shot.py` prints for the same similarities
//! (`scripts/fixtures/gen_imagecode_fixture.py`): overall, video and static accuracy.

mod common;

use benchctl_scoring::ScoreTensor;
use common::{fixture_json, loaded};

#[test]
fn imagecode_matches_its_official_zero_shot_accuracies() {
    let suite = loaded("imagecode", "imagecode");
    let official = fixture_json("imagecode", "official.json");
    assert_eq!(suite.items.len() as u64, official["items"].as_u64().unwrap());
    let table = fixture_json("imagecode", "scores.json");
    let mut scores = ScoreTensor::new();
    for item in suite.items.iter() {
        // One description over its set's 10 frames, the target's frame the match.
        assert_eq!((item.image_count(), item.text_count()), (10, 1));
        let (set, target) = item.id().rsplit_once('/').unwrap();
        let target: usize = target.parse().unwrap();
        assert!((0..10).all(|k| item.truth().is_match(k, 0) == (k == target)), "{}", item.id());
        assert!(item.image(3).path().ends_with(format!("image-sets/{set}/img3.jpg")));
        let kind = if set.contains("open-images") { "static" } else { "video" };
        assert!(item.tags().iter().any(|(name, values)| name == "kind" && values == &[kind]), "{}", item.id());
        let values: Vec<f64> = table[item.id()].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        scores.push_exact(10, 1, &values).unwrap();
    }
    let report = suite.evaluate(&scores).unwrap();
    let accuracy = |group: Option<&str>| -> f64 {
        let metrics = match group {
            None => &report.metrics,
            Some(kind) => &report.group("kind", kind).unwrap().metrics,
        };
        metrics.iter().find(|(n, _)| n == "t2i_accuracy").unwrap().1
    };
    // The official script prints fractions rounded to 4 digits.
    for (group, key) in [(None, "overall"), (Some("video"), "video"), (Some("static"), "static")] {
        let got = (accuracy(group) / 100.0 * 1e4).round() / 1e4;
        assert_eq!(got, official[key].as_f64().unwrap(), "{key}");
    }
}

/// A set whose value is not an object of descriptions is a problem naming it; the other sets'
/// descriptions are kept.
#[test]
fn a_set_that_is_not_an_object_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        r#"{"open-images-1_a": {"3": "a red cup"}, "broken-set": "not an object", "video-2_b": {"0": "x", "9": "y"}}"#;
    std::fs::write(dir.path().join("valid_data.json"), text).unwrap();
    let (suite, problems) = benchctl_suites::find("imagecode").unwrap().load_all(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 3);
    let message = problems.message(0);
    assert!(message.contains("key \"broken-set\"") && message.contains("`source.entries`"), "{message}");
}
