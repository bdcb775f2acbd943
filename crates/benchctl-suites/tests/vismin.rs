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

/// VisMin's VQA form (the bundled `vismin-vqa` manifest) on the same shards: every question
/// worded, shown and labelled as the official `get_item_mllm` asks it, each question asked only
/// of the candidate the official code shows it with, and the text, image and group score of the
/// options the fixture's log-probabilities choose equal to the official `compute_mllm_score_itg`,
/// overall and per category (`scripts/fixtures/gen_vismin_vqa_fixture.py`).
#[test]
fn vismin_vqa_asks_and_scores_as_its_official_code() {
    let suite = loaded("vismin-vqa", "vismin");
    let prompts = fixture_json("vismin-vqa", "prompts.json");
    assert_eq!(suite.items.len(), prompts.as_array().unwrap().len());
    for (item, official) in suite.items.iter().zip(prompts.as_array().unwrap()) {
        assert_eq!(item.image_count(), 3, "image 0, image 1, both together");
        let ImageSource::Together(both) = item.image(2) else { panic!("the third candidate shows both images") };
        assert_eq!(&both[..], &[item.image(0), item.image(1)]);
        let truth = item.truth();
        for asked in official.as_array().unwrap() {
            let prompt = asked["prompt"].as_str().unwrap();
            let shown: Vec<usize> =
                asked["images"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
            let candidate = if shown.len() == 2 { 2 } else { shown[0] };
            // The texts of this prompt: its options, the label's matching on this candidate.
            let texts: Vec<(usize, &str)> = (0..item.text_count())
                .filter_map(|l| {
                    let (question, option) = benchctl_scoring::metrics::answers::split_asked(item.text(l)).unwrap();
                    (question == prompt).then_some((l, option))
                })
                .collect();
            assert_eq!(texts.len(), 2, "{prompt:?} with its two options");
            for &(l, option) in &texts {
                assert!(truth.is_asked(candidate, l), "{prompt:?} is asked of candidate {candidate}");
                assert_eq!(truth.is_match(candidate, l), option == asked["label"], "{prompt:?} → {option}");
            }
        }
        // Nothing else is asked: 2 single images × 2 options, both together × 2 questions × 2.
        let asked =
            (0..3).flat_map(|k| (0..item.text_count()).map(move |l| (k, l))).filter(|&(k, l)| truth.is_asked(k, l));
        assert_eq!(asked.count(), 8);
    }

    let mut scores = benchctl_scoring::ScoreTensor::of_kind(benchctl_scoring::ScoreKind::LogProbability);
    let rows = fixture_json("vismin-vqa", "scores.json");
    for (item, row) in suite.items.iter().zip(rows.as_array().unwrap()) {
        let values: Vec<f64> = row
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap())
            .map(|v| v.as_f64().unwrap_or(f64::NAN))
            .collect();
        scores.push_exact_asked(item.truth(), &values).unwrap();
    }
    let report = suite.evaluate(&scores).unwrap();
    let official = fixture_json("vismin-vqa", "official.json");
    let metric = |metrics: &[(String, f64)], name: &str| metrics.iter().find(|(n, _)| n == name).unwrap().1;
    let names = [("text_score", "text_score"), ("image_score", "image_score"), ("group_score", "group_score")];
    for (ours, theirs) in names {
        let want = official["overall"]["accuracy"][theirs].as_f64().unwrap();
        assert!(
            (metric(&report.metrics, ours) - want).abs() < 1e-9,
            "{ours}: {} against {want}",
            metric(&report.metrics, ours)
        );
        assert_eq!(official["vqa_accuracy"]["accuracy"][theirs], official["overall"]["accuracy"][theirs]);
    }
    for (category, want) in official["categories"].as_object().unwrap() {
        let group = report.group("category", category).unwrap_or_else(|| panic!("no category {category}"));
        assert_eq!(group.items as u64, want["num_samples"].as_u64().unwrap());
        for (ours, theirs) in names {
            let (got, want) = (metric(&group.metrics, ours), want["accuracy"][theirs].as_f64().unwrap());
            assert!((got - want).abs() < 1e-9, "{category} {ours}: {got} against {want}");
        }
    }
}

/// The manifest keys of questions asked of some candidates only, and of images shown together,
/// refuse what cannot be scored, naming the key and its line.
#[test]
fn answers_and_together_errors_name_the_key_and_the_line() {
    let bundled = benchctl_suites::manifest::BUNDLED.iter().find(|(name, _)| *name == "vismin-vqa.toml").unwrap().1;
    let good = bundled.replace("id = \"vismin-vqa\"", "id = \"my-vqa\"");
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("together = [[0, 1]]", "together = [[0, 0]]", "`item.together` (line"),
        ("together = [[0, 1]]", "together = [[0, 2]]", "`item.together` (line"),
        ("together = [[0, 1]]", "together = [[1]]", "`item.together` (line"),
        (
            "options = [[\"A\", \"B\"], [\"First\", \"Second\"]",
            "options = [[\"A\", \"B\"], [\"First\", \"Second\", \"Third\"]",
            "`item.answers.options` (line",
        ),
        (
            "options = [[\"A\", \"B\"], [\"First\", \"Second\"], [\"First\", \"Second\"]]",
            "options = [[\"A\", \"B\"], [\"First\", \"Second\"]]",
            "`item.answers.options` (line",
        ),
        (
            "options = [[\"A\", \"B\"], [\"First\", \"Second\"], [\"First\", \"Second\"]]",
            "options = [\"A\"]",
            "`item.answers.options` (line",
        ),
        (
            "options = [[\"A\", \"B\"], [\"First\", \"Second\"], [\"First\", \"Second\"]]",
            "options = [[\"A\", 2], [\"First\", \"Second\"], [\"First\", \"Second\"]]",
            "`item.answers.options` (line",
        ),
        ("asked_of = [[0, 1], [2], [2]]", "asked_of = [[0, 1], [2]]", "`item.answers.asked_of` (line"),
        ("asked_of = [[0, 1], [2], [2]]", "asked_of = [[0, 1], [2], [2, 3]]", "`item.answers.asked_of` (line"),
        (
            "right = [[\"A\"], [\"B\"], [\"First\", \"Second\"]]",
            "right = [[\"A\"], [\"B\"], [\"First\"]]",
            "`item.answers.right[2]` (line",
        ),
        ("reply = \"label-in-reply\"", "reply = \"label\"", "`item.answers.reply` (line"),
    ];
    for (i, (from, to, expected)) in cases.iter().enumerate() {
        assert!(good.contains(from), "{from}");
        let changed = good.replacen(from, to, 1);
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, &changed).unwrap();
        let err = benchctl_suites::find(path.to_str().unwrap()).err().unwrap_or_else(|| panic!("{to} was accepted"));
        assert_eq!(err.kind(), benchctl_suites::ErrorKind::Manifest, "{err}");
        let line = changed.lines().position(|l| l.contains(to)).unwrap() + 1;
        let message = err.to_string();
        assert!(message.contains(expected) && message.contains(&format!("line {line}")), "{message} (line {line})");
    }
    // Images shown together are for questions: a manifest of captions and a truth refuses them.
    let captions = benchctl_suites::manifest::BUNDLED.iter().find(|(name, _)| *name == "vismin.toml").unwrap().1;
    let changed = captions.replace("id = \"vismin\"", "id = \"my-vismin\"").replace(
        "images = [\"{image_0}\", \"{image_1}\"]",
        "images = [\"{image_0}\", \"{image_1}\"]\ntogether = [[0, 1]]",
    );
    let path = dir.path().join("together.toml");
    std::fs::write(&path, &changed).unwrap();
    let message = benchctl_suites::find(path.to_str().unwrap()).err().unwrap().to_string();
    assert!(message.contains("`item.together` (line") && message.contains("[item.answers]"), "{message}");
}
