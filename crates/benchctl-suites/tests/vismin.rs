//! VisMin (the bundled `vismin` manifest) on a fixture in its hub release's layout (Arrow shards
//! written by `datasets.save_to_disk`, images inside), scored against the official
//! `compute_contrastive_accuracy` on the same similarities (`scripts/fixtures/gen_vismin_fixture.py`):
//! every category's text, image and group score, to the two decimals it prints.

mod common;

use benchctl_suites::ImageSource;
use common::{fixture_json, loaded, score_rows};

#[test]
fn vismin_matches_its_official_evaluation_per_category() {
    let suite = loaded("vismin", "vismin");
    let official = fixture_json("vismin", "official.json");
    assert_eq!(suite.items.len() as u64, official["items"].as_u64().unwrap());
    let first = suite.items.item(0);
    assert_eq!(first.id(), "0");
    assert!(first.text(1).starts_with("three cups"));
    assert!(matches!(first.image(1), ImageSource::Embedded(e) if e.name == "row 0 image_1"));
    assert_eq!(suite.items.item(12).id(), "12", "the second shard follows the first");

    let report = suite.evaluate(&score_rows(&fixture_json("vismin", "scores.json"), 2, 2)).unwrap();
    let categories = official["categories"].as_object().unwrap();
    assert_eq!(categories.len(), 4);
    for (category, want) in categories {
        let group = report.group("category", category).unwrap_or_else(|| panic!("no category {category}"));
        assert_eq!(group.items as u64, want["count"].as_u64().unwrap());
        for (ours, theirs) in [("text_score", "text"), ("image_score", "image"), ("group_score", "group")] {
            let got = group.metrics.iter().find(|(n, _)| n == ours).unwrap().1;
            let rounded = (got * 100.0).round() / 100.0;
            assert_eq!(rounded, want[theirs].as_f64().unwrap(), "{category} {ours}: {got}");
        }
    }
}
