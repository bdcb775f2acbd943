//! GroupMatch against the official code and the paper's definition
//! (`scripts/fixtures/gen_groupmatch_fixture.py`): 309 2 × 2 groups through yinglunz/test-time-matching's
//! `evaluate_model` (random scores, exact ties inside a group, the two matchings tied, margins
//! float32 rounds), and 183 groups of 3 × 3 to 5 × 5 by the definition over all k! matchings,
//! some with a permuted truth; then through a whole summary beside the group score.

use benchctl_scoring::metrics::{evaluate, ItemView, Summary};
use benchctl_scoring::metrics::{group, group_match::group_match};
use benchctl_scoring::{ScoreMatrix, ScoreTensor, Tags, Truth};

struct Case {
    scores: Vec<f32>,
    k: usize,
    truth: Truth,
    group_match: bool,
    official: Option<serde_json::Value>,
}

fn cases() -> Vec<Case> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/group-match/cases.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            let rows = case["scores"].as_array().unwrap();
            let k = rows.len();
            let scores = rows.iter().flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32));
            let texts: Vec<usize> =
                case["truth"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as usize).collect();
            let matches = (0..k * k).map(|c| texts[c / k] == c % k).collect();
            Case {
                scores: scores.collect(),
                k,
                truth: Truth::new(k, k, matches).unwrap(),
                group_match: case["group_match"].as_bool().unwrap(),
                official: case.get("official").cloned(),
            }
        })
        .collect()
}

#[test]
fn group_match_equals_the_official_code_and_the_papers_definition() {
    let cases = cases();
    let (mut twos, mut larger) = (0, 0);
    for case in &cases {
        let scores = ScoreMatrix::new(case.k, case.k, &case.scores).unwrap();
        assert_eq!(group_match(&scores, &case.truth), Some(case.group_match), "{:?} (k = {})", case.scores, case.k);
        if let Some(official) = &case.official {
            // The group score beside it, as the official code computes it too.
            let outcome = group::outcome(&scores, &case.truth);
            assert_eq!(outcome.group(), official["group_score"] == 1.0, "{:?}", case.scores);
            twos += 1;
        } else {
            larger += 1;
        }
    }
    assert_eq!((twos, larger), (309, 183));
    // The fixture holds both verdicts at every size, and groups where float32 and exact
    // arithmetic disagree (the official margin is float32).
    for k in 2..=5 {
        let verdicts: Vec<bool> = cases.iter().filter(|c| c.k == k).map(|c| c.group_match).collect();
        assert!(verdicts.contains(&true) && verdicts.contains(&false), "k = {k}");
    }
    let rounded = cases.iter().filter(|c| c.k == 2).filter(|c| {
        let s: Vec<f64> = c.scores.iter().map(|&v| f64::from(v)).collect();
        ((s[0] + s[3]) - (s[1] + s[2]) > 0.0) != c.group_match
    });
    assert_eq!(rounded.count(), 2);
}

#[test]
fn items_that_are_no_one_to_one_group_have_no_group_match() {
    let scores = [0.9, 0.1, 0.3, 0.2, 0.8, 0.4];
    // 2 × 3, one image per text: no square group.
    let wide = Truth::new(2, 3, vec![true, false, false, false, true, false]).unwrap();
    assert_eq!(group_match(&ScoreMatrix::new(2, 3, &scores).unwrap(), &wide), None);
    // 2 × 2 with two texts for one image.
    let two_texts = Truth::new(2, 2, vec![true, true, false, true]).unwrap();
    assert_eq!(group_match(&ScoreMatrix::new(2, 2, &scores[..4]).unwrap(), &two_texts), None);
    // 1 × 1: no other matching to beat.
    assert_eq!(group_match(&ScoreMatrix::new(1, 1, &[0.5]).unwrap(), &Truth::diagonal(1)), None);
}

/// In a summary GroupMatch is reported beside the group score, over the items it applies to,
/// with a bootstrap interval as every 0/1 metric has.
#[test]
fn group_match_is_summarised_beside_the_group_score() {
    let truth = Truth::diagonal(2);
    let mut scores = ScoreTensor::new();
    // Group right; group wrong but GroupMatch right; both wrong; a tie of the two matchings.
    for item in [[0.9, 0.1, 0.2, 0.8], [0.9, 0.7, 0.2, 0.5], [0.1, 0.9, 0.8, 0.2], [1.0, 0.0, 0.0, 1.0]] {
        scores.push(2, 2, &item).unwrap();
    }
    let mut tie = ScoreTensor::new();
    tie.push(2, 2, &[0.5, 0.5, 0.5, 0.5]).unwrap();
    let tags: Tags = Vec::<(String, Vec<String>)>::new().into();
    let views: Vec<ItemView> = (0..4).map(|_| ItemView { truth: &truth, tags: &tags }).collect();
    let report = evaluate(&Summary::of(group::FAMILY), &scores, &views).unwrap();
    assert_eq!(report.metric("group_score"), Some(50.0));
    assert_eq!(report.metric("group_match"), Some(75.0));
    let names: Vec<&str> = report.metrics.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["text_score", "image_score", "group_score", "group_match"]);
    let report = evaluate(&Summary::of(group::FAMILY), &tie, &views[..1]).unwrap();
    assert_eq!(report.metric("group_match"), Some(0.0), "a tie is a miss");
}
