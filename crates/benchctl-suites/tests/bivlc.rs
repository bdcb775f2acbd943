//! BiVLC (the bundled `bivlc` manifest) on a fixture in its hub release's layout (two parquet
//! shards written by `datasets` with the card's features, images inside), scored against what
//! the official `evaluate_BiVLC` gives on the same similarities
//! (`scripts/fixtures/gen_bivlc_fixture.py`): every metric, overall and per type.

mod common;

use benchctl_scoring::Report;
use benchctl_suites::ImageSource;
use common::{fixture_json, loaded, score_rows};

fn metric(report: &Report, by: Option<&str>, name: &str) -> f64 {
    let metrics = match by {
        None => &report.metrics,
        Some(kind) => &report.group("type", kind).unwrap_or_else(|| panic!("no type {kind}")).metrics,
    };
    metrics.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1
}

#[test]
fn bivlc_matches_its_official_evaluation() {
    let suite = loaded("bivlc", "bivlc");
    let official = fixture_json("bivlc", "official.json");
    assert_eq!(suite.items.len() as u64, official["items"].as_u64().unwrap());
    // Shards in order, the COCO image first, its caption first.
    let first = suite.items.item(0);
    assert_eq!(first.id(), "test-00000-of-00002/0");
    assert!(first.text(0).starts_with("caption 0 ") && first.text(1).starts_with("negative caption 0 "));
    assert!(matches!(first.image(1), ImageSource::Embedded(e) if e.name == "row 0 negative_image"));
    assert_eq!(suite.items.item(15).id(), "test-00001-of-00002/0");

    let report = suite.evaluate(&score_rows(&fixture_json("bivlc", "scores.json"), 2, 2)).unwrap();
    let names = ["i2t", "t2i", "group_score", "ipos_2t", "ineg_2t", "tpos_2i", "tneg_2i"];
    for (by, key) in [(None, "overall"), (Some("replace"), "replace"), (Some("swap"), "swap"), (Some("add"), "add")] {
        for name in names {
            let want = official[key][name].as_f64().unwrap();
            let got = metric(&report, by, name);
            assert!((got - want).abs() < 1e-9, "{key} {name}: {got} against the official {want}");
        }
    }
    // Rows 3 and 10 tie (an image's two captions, a caption's two images): equal to the
    // official numbers only because a tie is a miss, as its `>` makes it.
    assert_eq!(report.metrics.iter().map(|(n, _)| n.as_str()).take(7).collect::<Vec<_>>(), names);
}
