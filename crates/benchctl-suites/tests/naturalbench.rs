//! NaturalBench's VQA form (the bundled `naturalbench` manifest) on a fixture in its hub
//! release's layout (`datasets` parquet with the release's features, images inside): every
//! prompt as the official code asks it, and Q-Acc, I-Acc, Acc and G-Acc as its `get_scores`
//! gives them for the options the fixture's log-probabilities choose
//! (`scripts/fixtures/gen_naturalbench_fixture.py`).

mod common;

use benchctl_scoring::metrics::answers;
use benchctl_scoring::ScoreTensor;
use benchctl_suites::{find, ImageSource};
use common::{fixture_json, loaded, score_rows};

fn json(name: &str) -> serde_json::Value {
    fixture_json("naturalbench", name)
}

/// The fixture's per-row log-probabilities ([image][q0 first, q0 second, q1 first, q1 second])
/// as a score tensor.
fn tensor(rows: &serde_json::Value) -> ScoreTensor {
    score_rows(rows, 2, 4)
}

#[test]
fn naturalbench_asks_and_scores_as_its_official_code() {
    assert!(find("naturalbench").unwrap().summary().unwrap().family.facts().asks_questions);
    let suite = loaded("naturalbench", "naturalbench");
    let official = json("official.json");
    assert_eq!(suite.items.len() as u64, official["items"].as_u64().unwrap());
    // Each question with each option, question by question; the prompt is the official one.
    for (r, prompts) in official["prompts"].as_array().unwrap().iter().enumerate() {
        let item = suite.items.item(r);
        assert_eq!(item.id(), r.to_string());
        let texts: Vec<(&str, &str)> = (0..4).map(|l| answers::split_asked(item.text(l)).unwrap()).collect();
        // The official samples are (q0, i0), (q0, i1), (q1, i0), (q1, i1).
        assert_eq!(texts[0].0, prompts[0].as_str().unwrap());
        assert_eq!(texts[2].0, prompts[2].as_str().unwrap());
        let options: Vec<&str> = texts.iter().map(|(_, o)| *o).collect();
        let multiple_choice = r % 3 == 0;
        assert_eq!(options, if multiple_choice { ["A", "B", "A", "B"] } else { ["Yes", "No", "Yes", "No"] });
        // The release's pattern: image 0 answers question 0 with the first option and
        // question 1 with the second; image 1 the other way.
        let truth = item.truth();
        let matches: Vec<bool> =
            (0..2).flat_map(|k| (0..4).map(move |l| (k, l))).map(|(k, l)| truth.is_match(k, l)).collect();
        assert_eq!(matches, [true, false, false, true, false, true, true, false], "row {r}");
    }

    let report = suite.evaluate(&tensor(&json("scores.json"))).unwrap();
    let got = |name: &str| report.metrics.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1;
    for (ours, theirs) in [("q_acc", "Q_Acc"), ("i_acc", "I_Acc"), ("acc", "Acc"), ("g_acc", "G_Acc")] {
        let want = 100.0 * official["scores"][theirs].as_f64().unwrap();
        assert!((got(ours) - want).abs() < 1e-9, "{ours}: {} against the official {want}", got(ours));
    }
    assert!(report.group("type", "yes_no").is_some() && report.group("source", "DOCCI").is_some());
}

/// An option tied with the right one is a miss, as a tie is everywhere else (the official
/// code extracts one answer from a generated reply, so it has no tie to break).
#[test]
fn a_tie_between_options_is_a_miss() {
    let suite = loaded("naturalbench", "naturalbench");
    let mut rows = json("scores.json");
    let all_right = serde_json::json!([[-0.1, -2.0, -2.0, -0.1], [-2.0, -0.1, -0.1, -2.0]]);
    for row in rows.as_array_mut().unwrap() {
        *row = all_right.clone();
    }
    let perfect = suite.evaluate(&tensor(&rows)).unwrap();
    assert_eq!(perfect.metrics.iter().find(|(n, _)| n == "g_acc").unwrap().1, 100.0);
    rows[0] = serde_json::json!([[-0.5, -0.5, -2.0, -0.1], [-2.0, -0.1, -0.1, -2.0]]);
    let tied = suite.evaluate(&tensor(&rows)).unwrap();
    let value = |name: &str| tied.metrics.iter().find(|(n, _)| n == name).unwrap().1;
    // One cell of 48 wrong: Acc 47/48; its question and image of 24 each; its item of 12.
    assert!((value("acc") - 100.0 * 47.0 / 48.0).abs() < 1e-9);
    assert!((value("q_acc") - 100.0 * 23.0 / 24.0).abs() < 1e-9);
    assert!((value("i_acc") - 100.0 * 23.0 / 24.0).abs() < 1e-9);
    assert!((value("g_acc") - 100.0 * 11.0 / 12.0).abs() < 1e-9);
}

/// NaturalBench's retrieval form (the bundled `naturalbench-retrieval` manifest) on its
/// release's unzipped layout: the items and captions t2v_metrics' own `NaturalBench_Retrieval`
/// reads, and its `evaluate_scores` on the same similarities
/// (`scripts/fixtures/gen_naturalbench_retrieval_fixture.py`).
#[test]
fn naturalbench_retrieval_reads_and_scores_as_t2v_metrics() {
    let suite = loaded("naturalbench-retrieval", "naturalbench-retrieval");
    let official = fixture_json("naturalbench-retrieval", "official.json");
    assert_eq!(suite.items.len() as u64, official["items"].as_u64().unwrap());
    let texts = official["texts"].as_array().unwrap();
    let images = official["images"].as_array().unwrap();
    for (i, (texts, images)) in texts.iter().zip(images).enumerate() {
        let item = suite.items.item(i);
        assert_eq!(item.id(), i.to_string());
        for l in 0..2 {
            assert_eq!(item.text(l), texts[l].as_str().unwrap(), "item {i} caption {l}");
        }
        for k in 0..2 {
            let ImageSource::File(path) = item.image(k) else { panic!("item {i} image {k} is not a file") };
            assert_eq!(path.file_name().unwrap().to_str(), images[k].as_str(), "item {i} image {k}");
            assert!(path.exists(), "{}", path.display());
        }
    }
    let scores = score_rows(&fixture_json("naturalbench-retrieval", "scores.json"), 2, 2);
    let report = suite.evaluate(&scores).unwrap();
    for (ours, theirs) in [("text_score", "text"), ("image_score", "image"), ("group_score", "group")] {
        // t2v_metrics' fractions; benchctl reports percentages.
        let want = 100.0 * official["all"][theirs].as_f64().unwrap();
        let got = report.metric(ours).unwrap();
        assert!((got - want).abs() < 1e-9, "{ours}: {got} against t2v_metrics' {want}");
    }
    // The fixture has items right, wrong and tied on each score.
    assert!(report.metric("group_score").unwrap() > 0.0 && report.metric("text_score").unwrap() < 100.0);
}
