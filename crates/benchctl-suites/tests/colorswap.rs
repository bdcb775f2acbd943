//! ColorSwap (the bundled `colorswap` manifest) on a fixture in its hub release's layout (a
//! train and a test parquet split written by `datasets` with the release's features, images
//! inside), scored against what test-time-matching's own loader and scorer give on the same
//! similarities (`scripts/fixtures/gen_colorswap_fixture.py`): every metric, per split.

mod common;

use benchctl_scoring::Report;
use benchctl_suites::{find, ImageSource};
use common::{fixture_json, loaded, score_rows};

fn metric(report: &Report, split: &str, name: &str) -> f64 {
    let group = report.group("split", split).unwrap_or_else(|| panic!("no split {split}"));
    group.metrics.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1
}

#[test]
fn colorswap_matches_the_official_scores_per_split() {
    let info = find("colorswap").unwrap();
    assert_eq!(info.hub().map(|h| (h.repo.as_str(), h.gated)), Some(("stanfordnlp/colorswap", true)));
    let suite = loaded("colorswap", "colorswap");
    let official = fixture_json("colorswap", "official.json");
    assert_eq!(suite.items.len() as u64, official["items"].as_u64().unwrap());
    // Train first (the manifest's order), ids from the release, image 1 with caption 1.
    let first = suite.items.item(0);
    assert_eq!(first.id(), "0");
    assert!(first.text(0).ends_with("(0)") && first.text(0).starts_with("a red cup"));
    assert!(matches!(first.image(1), ImageSource::Embedded(e) if e.name == "row 0 image_2"));
    assert_eq!(suite.items.item(14).id(), "14");

    let report = suite.evaluate(&score_rows(&fixture_json("colorswap", "scores.json"), 2, 2)).unwrap();
    for split in ["train", "test"] {
        let group = report.group("split", split).unwrap();
        assert_eq!(group.items as u64, if split == "train" { 14 } else { 10 });
        for (ours, theirs) in [
            ("text_score", "text_score"),
            ("image_score", "image_score"),
            ("group_score", "group_score"),
            ("group_match", "group_match_score"),
        ] {
            let want = official[split][theirs].as_f64().unwrap();
            let got = metric(&report, split, ours);
            assert!((got - want).abs() < 1e-9, "{split} {ours}: {got} against the official {want}");
        }
    }
}
