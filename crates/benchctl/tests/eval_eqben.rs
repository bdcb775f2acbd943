//! `benchctl eval --suite eqben` end to end on small copies of the real releases, and the
//! `prediction.npy` it writes checked the way the official `evaluate_eqben_locally.py` reads
//! it.

mod common;

use std::collections::HashMap;

use benchctl_suites::eqben;
use benchctl_testkit::{eqben_release, eqben_subset_release, EqbenEntry};
use common::{benchctl, eval_tiny, tiny_model};

fn small() -> Vec<(&'static str, usize)> {
    eqben::SPLITS.iter().map(|(s, _)| (*s, 3)).collect()
}

#[test]
fn full_release_end_to_end_with_the_papers_average() {
    let data = tempfile::tempdir().unwrap();
    eqben_release(data.path(), &small(), true, false);
    let results = tempfile::tempdir().unwrap();
    let (_, json, out) = eval_tiny("eqben", data.path(), results.path(), &[]);
    let report = &json["report"];
    assert_eq!(report["items"], 21);
    let per_split = report["breakdowns"]["split"].as_object().unwrap();
    assert_eq!(per_split.len(), 7);
    for (split, group) in per_split {
        assert_eq!(group["items"], 3, "{split}");
        let (q1, median, q3) = (
            group["eqsim_deviation_q1"].as_f64().unwrap(),
            group["eqsim_deviation_median"].as_f64().unwrap(),
            group["eqsim_deviation_q3"].as_f64().unwrap(),
        );
        assert!(0.0 <= q1 && q1 <= median && median <= q3, "{split}");
    }
    let metric = |split: &str, m: &str| per_split[split][m].as_f64().unwrap();
    let metrics = &report["metrics"];
    // Kubric is the mean of its three splits; the paper's Avg the mean of 15 numbers.
    let mut fifteen = Vec::new();
    for m in ["text_score", "image_score", "group_score"] {
        let kubric =
            ["eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt"].iter().map(|s| metric(s, m)).sum::<f64>() / 3.0;
        assert!((metrics[format!("{m}_kubric")].as_f64().unwrap() - kubric).abs() < 1e-9);
        fifteen.extend([
            metric("eqbenag", m),
            metric("eqbenyoucook2", m),
            metric("eqbengebc", m),
            kubric,
            metric("eqbensd", m),
        ]);
    }
    assert!((metrics["paper_avg"].as_f64().unwrap() - fifteen.iter().sum::<f64>() / 15.0).abs() < 1e-9);
    let macro_mean = per_split.values().map(|g| g["group_score"].as_f64().unwrap()).sum::<f64>() / 7.0;
    assert!((metrics["group_score_macro"].as_f64().unwrap() - macro_mean).abs() < 1e-9);
    // The paper's average has a bootstrap interval like every headline metric.
    let interval = json["intervals"]["paper_avg"].as_array().expect("an interval of paper_avg");
    let (low, high) = (interval[0].as_f64().unwrap(), interval[1].as_f64().unwrap());
    assert!(low <= metrics["paper_avg"].as_f64().unwrap() && metrics["paper_avg"].as_f64().unwrap() <= high);
    // A partial release evaluates, and says so in the record and the report.
    let incomplete = json["suite"]["incomplete"].as_array().unwrap();
    assert_eq!(incomplete.len(), 7);
    assert!(
        common::stdout(&out).contains("partial release (not the complete official data"),
        "{}",
        common::stdout(&out)
    );
    assert_eq!(json["suite"]["ties"], "strict");
}

/// The official scorer's computation, from `prediction.npy` and the entries' private info:
/// per split, text = s(c0,i0) > s(c1,i0) and s(c1,i1) > s(c0,i1); image = s(c0,i0) > s(c0,i1)
/// and s(c1,i1) > s(c1,i0); group = both.
fn official_scores(prediction: &[f32], entries: &[EqbenEntry]) -> HashMap<String, [f64; 3]> {
    let mut by_item: HashMap<(String, usize), HashMap<String, f32>> = HashMap::new();
    for (entry, score) in entries.iter().zip(prediction) {
        by_item.entry((entry.split.clone(), entry.sample_cnt)).or_default().insert(entry.name.clone(), *score);
    }
    let mut out: HashMap<String, (usize, [usize; 3])> = HashMap::new();
    for ((split, _), s) in by_item {
        let text = s["c0i0"] > s["c1i0"] && s["c1i1"] > s["c0i1"];
        let image = s["c0i0"] > s["c0i1"] && s["c1i1"] > s["c1i0"];
        let e = out.entry(split).or_default();
        e.0 += 1;
        for (k, hit) in [text, image, text && image].into_iter().enumerate() {
            e.1[k] += usize::from(hit);
        }
    }
    out.into_iter().map(|(split, (n, hits))| (split, hits.map(|h| 100.0 * h as f64 / n as f64))).collect()
}

#[test]
fn prediction_npy_is_what_the_official_scorer_reads() {
    let data = tempfile::tempdir().unwrap();
    let entries = eqben_release(data.path(), &small(), false, false);
    let results = tempfile::tempdir().unwrap();
    let (run_path, json, out) = eval_tiny("eqben", data.path(), results.path(), &[]);
    let path = common::prediction_path(&run_path);
    assert!(common::stdout(&out).contains("prediction.npy"), "{}", common::stdout(&out));
    let bytes = std::fs::read(&path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    // np.load's view: '<f4', C order, shape (4 × items,).
    assert_eq!(npy.dtype().descr(), "'<f4'");
    assert_eq!(npy.order(), npyz::Order::C);
    assert_eq!(npy.shape(), [4 * 21]);
    let prediction: Vec<f32> = npy.into_vec().unwrap();
    // Each value is that entry's pair in the per-item dump (rows = images, columns = texts).
    let dump = benchctl::results::read_scores(&common::dump_path(&run_path, &json)).unwrap();
    let ids: HashMap<String, usize> = dump.iter().enumerate().map(|(i, (id, _))| (id.clone(), i)).collect();
    for (entry, value) in entries.iter().zip(&prediction) {
        let item = ids[&format!("{}/{}", entry.split, entry.sample_cnt)];
        let (c, i) = (entry.name[1..2].parse::<usize>().unwrap(), entry.name[3..4].parse::<usize>().unwrap());
        assert_eq!(dump[item].1[i][c], *value, "{entry:?}");
    }
    // The official computation on the vector gives eval's per-split numbers.
    for (split, [text, image, group]) in official_scores(&prediction, &entries) {
        let g = &json["report"]["breakdowns"]["split"][&split];
        let ours =
            [g["text_score"].as_f64().unwrap(), g["image_score"].as_f64().unwrap(), g["group_score"].as_f64().unwrap()];
        for (a, b) in ours.iter().zip([text, image, group]) {
            assert!((a - b).abs() < 1e-9, "{split}: {ours:?} vs {:?}", [text, image, group]);
        }
    }
}

#[test]
fn subset_end_to_end_per_split() {
    let data = tempfile::tempdir().unwrap();
    eqben_subset_release(data.path(), &["eqbengebc", "eqbenkubric_attr"], 8);
    let results = tempfile::tempdir().unwrap();
    let (run_path, json, _) = eval_tiny("eqben-subset", data.path(), results.path(), &[]);
    assert_eq!(json["report"]["items"], 8);
    assert!(json["report"]["metrics"]["eqsim_deviation_median"].as_f64().unwrap() >= 0.0);
    let per_split = json["report"]["breakdowns"]["split"].as_object().unwrap();
    assert_eq!(per_split.keys().collect::<Vec<_>>(), ["eqbengebc", "eqbenkubric_attr"]);
    assert_eq!(per_split["eqbengebc"]["items"], 4);
    // Three of the paper's five subsets are absent: no Avg that would differ from the paper's.
    assert!(json["report"]["metrics"].get("paper_avg").is_none());
    assert!(!common::prediction_path(&run_path).exists(), "the subset has no official submission");
}

#[test]
fn ties_first_is_refused_where_the_official_scorer_is_strict() {
    let data = tempfile::tempdir().unwrap();
    eqben_release(data.path(), &[("eqbensd", 1)], true, false);
    let out = benchctl(
        &[
            "eval",
            "--model-path",
            &tiny_model(),
            "--suite",
            "eqben",
            "--data-dir",
            data.path().to_str().unwrap(),
            "--ties",
            "first",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("its official scorer compares strictly"), "{}", common::stderr(&out));
    // The refusal names every suite that takes `first`: manifests that say so too.
    for suite in ["spec", "rococo", "aro-vg-relation", "whatsup-controlled-a"] {
        assert!(common::stderr(&out).contains(suite), "{suite}: {}", common::stderr(&out));
    }
    // And `eval --help` says the same, and where the per-item scores go.
    let help = common::stdout(&benchctl(&["eval", "--help"], &[]));
    assert!(help.contains("ties = \"first\"") && !help.contains("only for those suites"), "{help}");
    assert!(help.contains(".scores.jsonl"), "{help}");
}

#[test]
fn check_names_the_missing_annotation_and_every_short_split() {
    let data = tempfile::tempdir().unwrap();
    let out = benchctl(&["check", "--suite", "eqben", "--data-dir", data.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3));
    let expected = data.path().join("eqben_ann/ann_json_finegrained_random.json");
    assert!(common::stdout(&out).contains(&expected.display().to_string()), "{}", common::stdout(&out));

    eqben_release(data.path(), &small(), true, false);
    let out = benchctl(&["check", "--suite", "eqben", "--data-dir", data.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3));
    let report = common::stdout(&out);
    assert!(report.contains("21 items, 42 images, 7 problem(s)"), "{report}");
    assert!(report.contains("not the complete official release: eqbenyoucook2 has 3 of its 45849 items"), "{report}");
}

/// Shards write no submission (each scores a slice); their merge writes the one the
/// unsharded run writes, byte for byte.
#[test]
fn merged_shards_write_the_unsharded_prediction() {
    let data = tempfile::tempdir().unwrap();
    eqben_release(data.path(), &small(), true, false);
    let whole = tempfile::tempdir().unwrap();
    let (whole_run, _, _) = eval_tiny("eqben", data.path(), whole.path(), &[]);
    let mut shard_runs = Vec::new();
    let shards: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    for (i, dir) in shards.iter().enumerate() {
        let (run, _, _) = eval_tiny("eqben", data.path(), dir.path(), &["--shard", &format!("{i}/2")]);
        assert!(!common::prediction_path(&run).exists(), "a shard writes no submission");
        shard_runs.push(run.display().to_string());
    }
    let merged = tempfile::tempdir().unwrap();
    let mut args = vec!["merge"];
    args.extend(shard_runs.iter().map(String::as_str));
    args.extend(["--data-dir", data.path().to_str().unwrap(), "--results-dir", merged.path().to_str().unwrap()]);
    let (merged_run, _) = common::stored_run(&benchctl(&args, &[]));
    assert_eq!(
        std::fs::read(common::prediction_path(&merged_run)).unwrap(),
        std::fs::read(common::prediction_path(&whole_run)).unwrap()
    );
}

/// Two items that share an (image, caption) pair are legal in the official scorer, which
/// reads scores by position: `score` takes each entry's score where it stands.
#[test]
fn items_sharing_an_image_caption_pair_are_scored() {
    let data = tempfile::tempdir().unwrap();
    let entry = |image: &str, caption: &str, name: &str, cnt: u64| serde_json::json!({"image": image, "caption": caption, "private_info": {"dataset": "eqbensd", "name": name, "sample_cnt": cnt}});
    // Items 0 and 1 both contain (eqbensd/a.png, "a red cube").
    let list = serde_json::json!([
        entry("eqbensd/a.png", "a red cube", "c0i0", 0),
        entry("eqbensd/b.png", "a red cube", "c0i1", 0),
        entry("eqbensd/a.png", "a blue cube", "c1i0", 0),
        entry("eqbensd/b.png", "a blue cube", "c1i1", 0),
        entry("eqbensd/a.png", "a red cube", "c0i0", 1),
        entry("eqbensd/c.png", "a red cube", "c0i1", 1),
        entry("eqbensd/a.png", "a green cube", "c1i0", 1),
        entry("eqbensd/c.png", "a green cube", "c1i1", 1),
    ]);
    std::fs::create_dir_all(data.path().join("eqben_ann")).unwrap();
    std::fs::write(data.path().join(eqben::ANNOTATION_FILE), list.to_string()).unwrap();
    // By position in the list: item 0 is right, item 1 misses its text score (c1i1 < c0i1).
    let scores: [f32; 8] = [0.9, 0.1, 0.2, 0.8, 0.9, 0.95, 0.1, 0.05];
    let npy = data.path().join("prediction.npy");
    npyz::to_file_1d(&npy, scores.iter().copied()).unwrap();
    let out = benchctl(
        &["score", "--suite", "eqben", "--data-dir", data.path().to_str().unwrap(), "--scores", npy.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    let report: serde_json::Value = serde_json::from_str(&text[text.find("\n{").unwrap()..]).unwrap();
    assert_eq!(report["items"], 2);
    assert_eq!(report["metrics"]["group_score"], 50.0, "{report}");
}
