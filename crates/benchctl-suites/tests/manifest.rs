//! Suites from manifests: the bundled manifests on copies of their official layouts, scored
//! against the metrics the benchmarks' own code computes (`scripts/fixtures/gen_manifest_fixtures.py`);
//! Winoground as a manifest against the built-in loader on the real annotations; crops against
//! PIL; and every manifest error naming its key and line.

use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::Ties;
use benchctl_scoring::{Report, ScoreTensor};
use benchctl_suites::{find, ErrorKind, ImageSource, Suite, SuiteKind};
use benchctl_testkit::{read_winoground_tsv, shared, winoground_layout};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifests").join(name)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The fixture's scores (item by item, K×L rows of images) for the suite's items.
fn fixture_scores(dir: &Path, suite: &Suite) -> ScoreTensor {
    scores_in(&dir.join("scores.json"), suite)
}

/// The scores of `path` (item by item, K×L rows of images) for the suite's items.
fn scores_in(path: &Path, suite: &Suite) -> ScoreTensor {
    let rows = json(path);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), suite.items.len(), "one score matrix per item, in the official order");
    let mut scores = ScoreTensor::new();
    for (item, matrix) in suite.items.iter().zip(rows) {
        let values: Vec<f64> = matrix
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
            .collect();
        scores.push_exact(item.image_count(), item.text_count(), &values).unwrap();
    }
    scores
}

/// The fixture's scores keyed by item id (`{"<id>": [[row of the image]]}`), in the suite's
/// item order.
fn keyed_scores(dir: &Path, suite: &Suite) -> ScoreTensor {
    let keyed = json(&dir.join("scores.json"));
    let mut scores = ScoreTensor::new();
    for item in &suite.items {
        let row = &keyed[item.id()][0];
        let values: Vec<f64> = row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        scores.push_exact(1, item.text_count(), &values).unwrap();
    }
    scores
}

/// The bundled manifest `id` on its fixture, scored with its official tie rule.
fn official_run(id: &str) -> (Suite, Report, serde_json::Value) {
    let dir = fixture(id);
    let info = find(id).unwrap();
    let mut suite = info.load(&dir).unwrap();
    suite.summary.ties = info.official_ties;
    let report = suite.evaluate(&fixture_scores(&dir, &suite)).unwrap();
    (suite, report, json(&dir.join("official.json")))
}

fn group_value(report: &Report, key: &str, value: &str, metric: &str) -> f64 {
    let breakdown = report.breakdowns.iter().find(|b| b.key == key).unwrap();
    let group = breakdown.groups.iter().find(|g| g.value == value).unwrap_or_else(|| panic!("no group {value}"));
    group.metrics.iter().find(|(n, _)| n == metric).unwrap().1
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn aro_vg_relation_matches_the_official_evaluation() {
    let (suite, report, official) = official_run("aro-vg-relation");
    assert_eq!(suite.items.len(), 36);
    for (relation, accuracy) in official["groups"].as_object().unwrap() {
        let ours = group_value(&report, "relation", relation, "i2t_accuracy");
        assert!(close(ours, 100.0 * accuracy.as_f64().unwrap()), "{relation}: {ours}");
    }
    // The headline leaves out the notebook's symmetric relations (near, next to, attached to).
    let headline = report.metric("i2t_accuracy_macro").unwrap();
    assert!(close(headline, 100.0 * official["macro_accuracy"].as_f64().unwrap()), "{headline}");
    assert!(!close(headline, mean(&report, "relation")), "the exclusion changes the number here");
    // Each item is the box of its image, against [false caption, true caption].
    let first = &suite.items.item(0);
    let record = &json(&fixture("aro-vg-relation/visual_genome_relation.json"))[0];
    assert_eq!(
        first.texts().collect::<Vec<_>>(),
        [record["false_caption"].as_str().unwrap(), record["true_caption"].as_str().unwrap()]
    );
    assert!(first.truth().is_match(0, 1) && !first.truth().is_match(0, 0));
    let ImageSource::Cropped(cropped) = &first.image(0) else { panic!("{:?}", first.image(0)) };
    let (x, y) = (record["bbox_x"].as_i64().unwrap(), record["bbox_y"].as_i64().unwrap());
    assert_eq!((cropped.region.left, cropped.region.top), (x, y));
    assert_eq!(cropped.region.right, x + record["bbox_w"].as_i64().unwrap());
}

/// The unweighted mean of a metric over every group of a breakdown.
fn mean(report: &Report, key: &str) -> f64 {
    let groups = &report.breakdowns.iter().find(|b| b.key == key).unwrap().groups;
    groups.iter().map(|g| g.metrics.iter().find(|(n, _)| n == "i2t_accuracy").unwrap().1).sum::<f64>()
        / groups.len() as f64
}

#[test]
fn aro_vg_attribution_averages_only_pairs_with_25_items() {
    let (suite, report, official) = official_run("aro-vg-attribution");
    assert_eq!(suite.items.len(), 70);
    let reported = official["groups"].as_object().unwrap();
    assert_eq!(reported.len(), 2, "the official evaluation reports the two pairs with ≥ 25 items");
    for (pair, accuracy) in reported {
        assert!(close(group_value(&report, "attributes", pair, "i2t_accuracy"), 100.0 * accuracy.as_f64().unwrap()));
    }
    let headline = report.metric("i2t_accuracy_macro").unwrap();
    assert!(close(headline, 100.0 * official["macro_accuracy"].as_f64().unwrap()), "{headline}");
    // Smaller pairs are still broken down, only left out of the average.
    assert_eq!(report.breakdowns[0].groups.len(), 4);
}

#[test]
fn aro_order_suites_match_the_official_precision_at_1() {
    for id in ["aro-coco-order", "aro-flickr30k-order"] {
        let (suite, report, official) = official_run(id);
        assert_eq!(suite.items.len(), 14);
        assert_eq!(suite.items.item(0).text_count(), 5);
        let official = 100.0 * official["precision_at_1"].as_f64().unwrap();
        assert!(close(report.metric("i2t_accuracy").unwrap(), official), "{id}");
        // The official argmax credits a tie to the first (true) caption; strict does not, and
        // the fixture's first two items are ties.
        let mut strict = suite.clone();
        strict.summary.ties = Ties::Strict;
        let strict = strict.evaluate(&fixture_scores(&fixture(id), &suite)).unwrap();
        assert!(close(strict.metric("i2t_accuracy").unwrap(), official - 200.0 / 14.0), "{id}");
    }
}

/// The Order suites on what `scripts/fixtures/export_aro_order.py` wrote: the official loaders'
/// test cases (spaCy's tagger, numpy's and Python's generators, BLIP's `pre_caption`) read item
/// for item in the loader's order, and the official precision@1 on them.
#[test]
fn aro_order_suites_read_the_official_loaders_export() {
    for (id, cases) in
        [("aro-coco-order", "coco_order_test.json"), ("aro-flickr30k-order", "flickr30k_order_test.json")]
    {
        let dir = fixture(&format!("{id}-export"));
        let info = find(id).unwrap();
        let mut suite = info.load(&dir).unwrap();
        let exported = json(&dir.join(cases));
        let exported = exported.as_array().unwrap();
        assert_eq!(suite.items.len(), exported.len(), "{id}: one item per caption of the annotation file");
        assert_eq!(exported.len(), 20);
        for (item, case) in suite.items.iter().zip(exported) {
            assert_eq!(item.image_count(), 1);
            assert_eq!(item.image(0).path(), dir.join(case["image"].as_str().unwrap()));
            let options: Vec<&str> =
                case["caption_options"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
            assert_eq!((0..item.text_count()).map(|t| item.text(t)).collect::<Vec<_>>(), options, "{id} {}", item.id());
        }
        assert!(suite.missing_images().is_empty(), "{id}");
        suite.summary.ties = info.official_ties;
        let report = suite.evaluate(&fixture_scores(&dir, &suite)).unwrap();
        let official = 100.0 * json(&dir.join("official.json"))["precision_at_1"].as_f64().unwrap();
        assert!(close(report.metric("i2t_accuracy").unwrap(), official), "{id}");
    }
}

#[test]
fn mmvp_vlm_matches_the_official_script_per_pattern() {
    let (suite, report, official) = official_run("mmvp-vlm");
    assert_eq!(suite.items.len(), 135);
    // The official script names its categories by position (15 pairs each, in file order);
    // the release's Type folders are in the same order.
    let types = official["types"].as_array().unwrap();
    let accuracy = official["pair_accuracy"].as_array().unwrap();
    for (t, a) in types.iter().zip(accuracy) {
        let ours = group_value(&report, "pattern", t.as_str().unwrap(), "image_score");
        assert!(close(ours, a.as_f64().unwrap()), "{t}: {ours} vs {a}");
    }
    let mean = accuracy.iter().map(|a| a.as_f64().unwrap()).sum::<f64>() / 9.0;
    assert!(close(report.metric("image_score_macro").unwrap(), mean));
    // Both images come from the first row's Type folder, with the "a photo of" prompt.
    let item = &suite.items.item(0);
    assert_eq!(item.id(), "1-2");
    assert_eq!(item.image(1).path(), fixture("mmvp-vlm").join("MLLM_VLM Images/Orientation/2.jpg"));
    assert_eq!(item.text(1), "a photo of the orientation 0, seen from the right, closely");
    assert!(suite.missing_images().is_empty());
}

/// SugarCrepe's seven files as one suite: each subset's accuracy is the official `evaluate`'s
/// on the same scores (exact ties included: the official comparison is strict), the macro
/// mean is the mean of the seven, and the category means are those of their subsets.
#[test]
fn sugarcrepe_matches_the_official_evaluation_per_subset() {
    let dir = fixture("sugarcrepe");
    let info = find("sugarcrepe").unwrap();
    let suite = info.load(&dir).unwrap();
    assert_eq!(info.official_ties, Ties::Strict);
    assert_eq!(suite.items.len(), 31);
    assert_eq!(suite.annotation_files.len(), 7);
    // Scores keyed by item id: `<file stem>/<key>`.
    let report = suite.evaluate(&keyed_scores(&dir, &suite)).unwrap();
    let official = json(&dir.join("official.json"));
    let subsets = official["subsets"].as_object().unwrap();
    assert_eq!(subsets.len(), 7);
    for (subset, accuracy) in subsets {
        let ours = group_value(&report, "subset", subset, "i2t_accuracy");
        assert!(close(ours, 100.0 * accuracy.as_f64().unwrap()), "{subset}: {ours} vs {accuracy}");
    }
    let of = |s: &str| 100.0 * subsets[s].as_f64().unwrap();
    let mean = |names: &[&str]| names.iter().map(|s| of(s)).sum::<f64>() / names.len() as f64;
    let all: Vec<&str> = subsets.keys().map(String::as_str).collect();
    assert!(close(report.metric("i2t_accuracy_macro").unwrap(), mean(&all)));
    let replace = mean(&["replace_obj", "replace_att", "replace_rel"]);
    let (swap, add) = (mean(&["swap_obj", "swap_att"]), mean(&["add_obj", "add_att"]));
    assert!(close(report.metric("i2t_accuracy_replace").unwrap(), replace));
    assert!(close(report.metric("i2t_accuracy_swap").unwrap(), swap));
    assert!(close(report.metric("i2t_accuracy_add").unwrap(), add));
    assert!(close(report.metric("category_avg").unwrap(), (replace + swap + add) / 3.0));
    // The item as the official code reads it: the image under val2017/, caption first.
    let item = suite.items.iter().find(|i| i.id() == "swap_att/0").unwrap();
    let record = &json(&dir.join("swap_att.json"))["0"];
    assert_eq!(item.text(0), record["caption"].as_str().unwrap());
    assert_eq!(item.text(1), record["negative_caption"].as_str().unwrap());
    assert_eq!(item.image(0).path(), dir.join("val2017").join(record["filename"].as_str().unwrap()));
    assert!(suite.missing_images().is_empty());
}

/// SugarCrepe++: per subset (file), ITT, the two positives alone and the text-only task (on
/// the text–text cosines the script compares) equal the official `VLMs/test_Variants_CLIP.py`
/// run unchanged on the fixture (ties with the negative included, misses), and the headline is
/// their mean over subsets. Without text–text scores the text-only task is not reported.
#[test]
fn sugarcrepe_pp_matches_the_official_evaluation_per_subset() {
    let dir = fixture("sugarcrepe-pp");
    let info = find("sugarcrepe-pp").unwrap();
    let suite = info.load(&dir).unwrap();
    assert_eq!(info.official_ties, Ties::Strict);
    assert_eq!(suite.items.len(), 24);
    assert_eq!(suite.annotation_files.len(), 5);
    let image_only = suite.evaluate(&keyed_scores(&dir, &suite)).unwrap();
    assert!(image_only.metric("text_only_accuracy").is_none() && image_only.metric("accuracy").is_some());
    let mut scores = ScoreTensor::new();
    let (image_text, text_text) = (json(&dir.join("scores.json")), json(&dir.join("text_scores.json")));
    let flat = |rows: &serde_json::Value| -> Vec<f64> {
        rows.as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
            .collect()
    };
    for item in &suite.items {
        scores.push_exact(1, 3, &flat(&image_text[item.id()])).unwrap();
        scores.push_text_scores(&flat(&text_text[item.id()])).unwrap();
    }
    let report = suite.evaluate(&scores).unwrap();
    let official = json(&dir.join("official.json"));
    let subsets = official["subsets"].as_object().unwrap();
    assert_eq!(subsets.len(), 5);
    for (subset, printed) in subsets {
        for (ours, theirs) in [
            ("accuracy", "Accuracy image-to-text task"),
            ("positive_1_accuracy", "Accuracy Image-P1-Neg"),
            ("positive_2_accuracy", "Accuracy Image-P2-Neg"),
            ("text_only_accuracy", "Accuracy text-only task"),
        ] {
            let value = group_value(&report, "subset", subset, ours);
            let expected = 100.0 * printed[theirs].as_f64().unwrap();
            assert!(close(value, expected), "{subset} {ours}: {value} vs {expected}");
        }
    }
    let mean_of = |printed: &str| {
        let values: Vec<f64> = subsets.values().map(|p| 100.0 * p[printed].as_f64().unwrap()).collect();
        values.iter().sum::<f64>() / values.len() as f64
    };
    assert!(close(report.metric("accuracy_macro").unwrap(), mean_of("Accuracy image-to-text task")));
    assert!(close(report.metric("text_only_accuracy_macro").unwrap(), mean_of("Accuracy text-only task")));
    // The item as the official script reads it: images/<filename>, caption, caption2, negative.
    let item = suite.items.iter().find(|i| i.id() == "swap_obj/3").unwrap();
    let record = &json(&dir.join("data/swap_obj.json"))[3];
    assert_eq!(item.text(0), record["caption"].as_str().unwrap());
    assert_eq!(item.text(1), record["caption2"].as_str().unwrap());
    assert_eq!(item.text(2), record["negative_caption"].as_str().unwrap());
    assert_eq!(item.image(0).path(), dir.join("images").join(record["filename"].as_str().unwrap()));
    assert!(suite.missing_images().is_empty());
}

/// Cola's multi-object pairs: each item is the official `ColaMultiObjAcc` on the same 2×2
/// scores (ties included), the images found by their links' file names.
#[test]
fn cola_multiobjects_matches_the_official_accuracy() {
    let (suite, report, official) = official_run("cola-multiobjects");
    assert_eq!(suite.items.len(), 12);
    let correct: Vec<bool> = official["correct"].as_array().unwrap().iter().map(|c| c.as_bool().unwrap()).collect();
    let scores = fixture_scores(&fixture("cola-multiobjects"), &suite);
    let per_item = benchctl_scoring::metrics::per_item_values(&suite.summary, &scores, &suite.item_views()).unwrap();
    let image_score = per_item.iter().find(|m| m.name == "image_score").unwrap();
    let ours: Vec<bool> = image_score.values.iter().map(|v| *v == Some(1.0)).collect();
    assert_eq!(ours, correct, "item by item");
    let share = 100.0 * correct.iter().filter(|&&c| c).count() as f64 / correct.len() as f64;
    assert!(close(report.metric("image_score").unwrap(), share), "{report:?}");
    assert!(close(share, 100.0 * official["accuracy"].as_f64().unwrap()));
    let records = json(&fixture("cola-multiobjects").join("COLA_multiobjects_matching_benchmark.json"));
    let (item, record) = (suite.items.item(3), &records[3]);
    assert_eq!(item.id(), "3");
    let file_of = |link: &serde_json::Value| link.as_str().unwrap().rsplit('/').next().unwrap().to_string();
    assert_eq!(item.image(1).path(), fixture("cola-multiobjects").join("vg_gqa_images").join(file_of(&record[2])));
    assert_eq!((item.text(0), item.text(1)), (record[1].as_str().unwrap(), record[3].as_str().unwrap()));
    assert!(suite.missing_images().is_empty());
}

/// What'sUp's four sets from one `data` folder, against the official `evaluate_scores`:
/// individual accuracy (`np.argmax`: a tie goes to the first option, the right one), per
/// preposition, pair and set accuracy of the controlled sets, and the one- and two-object
/// accuracies of the spatial sets with their mean.
#[test]
fn whatsup_matches_the_official_evaluation() {
    let dir = fixture("whatsup");
    let official = json(&dir.join("official.json"));
    let run = |id: &str| {
        let info = find(id).unwrap();
        assert_eq!(info.official_ties, Ties::First, "{id}");
        let mut suite = info.load(&dir).unwrap();
        suite.summary.ties = info.official_ties;
        let report = suite.evaluate(&scores_in(&dir.join(format!("scores-{id}.json")), &suite)).unwrap();
        assert!(suite.missing_images().is_empty(), "{id}");
        (suite, report, &official["suites"][id])
    };
    for id in ["whatsup-controlled-a", "whatsup-controlled-b"] {
        let (suite, report, expected) = run(id);
        assert_eq!(suite.items.len(), 12);
        for (ours, theirs) in
            [("i2t_accuracy", "accuracy"), ("pair_accuracy", "pair_accuracy"), ("set_accuracy", "set_accuracy")]
        {
            let (a, b) = (report.metric(ours).unwrap(), expected[theirs].as_f64().unwrap());
            assert!(close(a, b), "{id} {ours}: {a} vs {b}");
        }
        for (preposition, accuracy) in expected["prepositions"].as_object().unwrap() {
            let ours = group_value(&report, "preposition", preposition, "i2t_accuracy");
            assert!(close(ours, 100.0 * accuracy.as_f64().unwrap()), "{id} {preposition}: {ours}");
        }
    }
    for (id, prefix) in [("whatsup-coco-spatial", "coco_qa"), ("whatsup-gqa-spatial", "vg_qa")] {
        let (suite, report, expected) = run(id);
        let records = |file: &str| json(&dir.join(format!("{prefix}_{file}.json"))).as_array().unwrap().len();
        assert_eq!(suite.items.len(), records("one_obj") + records("two_obj"), "{id}");
        for (count, file) in [("one", "one_obj"), ("two", "two_obj")] {
            let ours = group_value(&report, "subset", &format!("{prefix}_{file}"), "i2t_accuracy");
            assert!(close(ours, expected[count].as_f64().unwrap()), "{id} {count}: {ours}");
        }
        assert!(close(report.metric("i2t_accuracy_macro").unwrap(), expected["macro"].as_f64().unwrap()), "{id}");
    }
    // COCO's file names are the ids zero-padded to 12 digits.
    let (suite, _, _) = run("whatsup-coco-spatial");
    let first = json(&dir.join("coco_qa_one_obj.json"))[0][0].as_u64().unwrap();
    assert_eq!(suite.items.item(0).image(0).path(), dir.join("val2017").join(format!("{first:012}.jpg")));
}

/// `source.expand`: a record holding lists of candidates (here one image and paired lists of
/// positives and negatives) becomes one item per element,
/// its lists replaced by that element; ids default to `<index>/<element>`, `{_element}` is the
/// element; lists of different lengths are a problem of that record, named; empty lists hold
/// no item.
#[test]
fn nested_records_expand_into_one_item_per_element() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("attribute.json"),
        r#"[["a.png", {"POS": ["a red car", "a big car"], "NEG": ["a blue car", "a small car"]}],
            ["b.png", {"POS": ["a dog"], "NEG": ["a cat"]}],
            ["c.png", {"POS": ["x"], "NEG": ["y", "z"]}],
            ["d.png", {"POS": [], "NEG": []}]]"#,
    )
    .unwrap();
    let manifest = |expand: &str| {
        format!(
            "id = \"nested{}\"\ndescription = \"d\"\n[source]\nfile = \"attribute.json\"\nformat = \"json\"\nexpand = {expand}\n\
             [item]\nimages = [\"{{0}}\"]\ntexts = [\"{{1.POS}}\", \"{{1.NEG}}\"]\ntruth = {{ text = 0 }}\n\
             [item.tags]\nelement = \"{{_element}}\"\n[metrics]\nfamily = \"choice\"\n",
            expand.len()
        )
    };
    let path = dir.path().join("nested.toml");
    std::fs::write(&path, manifest("[\"1.POS\", \"1.NEG\"]")).unwrap();
    let (suite, problems) = find(path.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    let items: Vec<(String, String, String, String)> = suite
        .items
        .iter()
        .map(|i| (i.id().to_string(), i.text(0).to_string(), i.text(1).to_string(), i.tags()[0].1[0].clone()))
        .collect();
    let expected = [
        ("0/0", "a red car", "a blue car", "0"),
        ("0/1", "a big car", "a small car", "1"),
        ("1/0", "a dog", "a cat", "0"),
    ];
    assert_eq!(items, expected.map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string())));
    assert!(suite.items.item(1).image(0).path().ends_with("a.png"));
    assert_eq!(problems.len(), 1);
    let message = problems.message(0).to_string();
    assert!(message.contains("entry 2") && message.contains("`1.POS` has 1 element(s) but `1.NEG` has 2"), "{message}");
    // A path that is not a list, and an empty list of paths.
    let not_a_list = dir.path().join("not-a-list.toml");
    std::fs::write(&not_a_list, manifest("[\"0\"]")).unwrap();
    let (_, problems) = find(not_a_list.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    assert!(problems.message(0).to_string().contains("`0` is not a list"), "{}", problems.message(0));
    let nothing = dir.path().join("nothing.toml");
    std::fs::write(&nothing, manifest("[]")).unwrap();
    let err = find(nothing.to_str().unwrap()).err().unwrap().to_string();
    assert!(err.contains("source.expand") && err.contains("names no list"), "{err}");
}

/// VL-CheckList as its official `evaluate.py` reads it (om-ai-lab/VL-CheckList: `texts_pos[0]`
/// against `texts_neg[0]` per record): the first element of each list named in the templates,
/// no `expand`, one item per record however long its lists; a record without a first element
/// is a problem of that record, the others kept (docs/manifests.md, "Nested records").
#[test]
fn the_first_element_of_each_list_is_one_item_per_record() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("attribute.json"),
        r#"[["a.png", {"POS": ["a red car", "a big car"], "NEG": ["a blue car", "a small car"]}],
            ["b.png", {"POS": ["a dog"], "NEG": ["a cat"]}],
            ["d.png", {"POS": [], "NEG": []}]]"#,
    )
    .unwrap();
    let path = dir.path().join("vl-checklist.toml");
    std::fs::write(
        &path,
        "id = \"vl-checklist-attribute\"\ndescription = \"d\"\n[source]\nfile = \"attribute.json\"\nformat = \"json\"\n\
         [item]\nimages = [\"{0}\"]\ntexts = [\"{1.POS.0}\", \"{1.NEG.0}\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\n",
    )
    .unwrap();
    let (suite, problems) = find(path.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    let items: Vec<(String, String)> =
        suite.items.iter().map(|i| (i.text(0).to_string(), i.text(1).to_string())).collect();
    assert_eq!(items, [("a red car", "a blue car"), ("a dog", "a cat")].map(|(p, n)| (p.to_string(), n.to_string())));
    assert_eq!(problems.len(), 1, "the record with empty lists");
    assert!(problems.message(0).to_string().contains("entry 2"), "{}", problems.message(0));
}

/// Two annotation files with one stem in different folders (`a/color.json`, `b/color.json`)
/// are told apart by their path below the data directory: their tags and default ids differ,
/// and no item is refused as a duplicate; files with their own stems keep them.
#[test]
fn files_sharing_a_stem_are_named_by_their_path() {
    let dir = tempfile::tempdir().unwrap();
    for (folder, caption) in [("a", "red"), ("b", "blue"), ("c", "green")] {
        std::fs::create_dir(dir.path().join(folder)).unwrap();
        let name = if folder == "c" { "shape.json" } else { "color.json" };
        std::fs::write(
            dir.path().join(folder).join(name),
            format!(r#"[{{"image": "x.png", "pos": "a {caption} car", "neg": "a car"}}]"#),
        )
        .unwrap();
    }
    let path = dir.path().join("colors.toml");
    std::fs::write(
        &path,
        "id = \"colors\"\ndescription = \"d\"\n[source]\nfiles = [\"a/color.json\", \"b/color.json\", \"c/shape.json\"]\nformat = \"json\"\n\
         [item]\nimages = [\"{image}\"]\ntexts = [\"{pos}\", \"{neg}\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\nbreakdown = [\"subset\"]\n",
    )
    .unwrap();
    let (suite, problems) = find(path.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    assert!(problems.is_empty(), "{}", problems.message(0));
    let items: Vec<(String, String)> =
        suite.items.iter().map(|i| (i.id().to_string(), i.tags()[0].1[0].clone())).collect();
    let expected = [("a/color/0", "a/color"), ("b/color/0", "b/color"), ("shape/0", "shape")];
    assert_eq!(items, expected.map(|(id, tag)| (id.to_string(), tag.to_string())));
}

/// A file that gives no item (here an empty list) leaves the macro average over the files' tag
/// to the others: the suite says so (`incomplete`, which runs record and `check` prints).
#[test]
fn an_average_over_only_some_files_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for (name, records) in [
        ("one", r#"[{"image": "x.png", "pos": "a", "neg": "b"}]"#),
        ("two", "[]"),
        ("three", r#"[{"image": "y.png", "pos": "c", "neg": "d"}]"#),
    ] {
        std::fs::write(dir.path().join(format!("{name}.json")), records).unwrap();
    }
    let path = dir.path().join("some.toml");
    std::fs::write(
        &path,
        "id = \"some\"\ndescription = \"d\"\n[source]\nfiles = [\"one.json\", \"two.json\", \"three.json\"]\nformat = \"json\"\n\
         [item]\nimages = [\"{image}\"]\ntexts = [\"{pos}\", \"{neg}\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\nmacro_over = \"subset\"\n",
    )
    .unwrap();
    let (suite, problems) = find(path.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    assert!(problems.is_empty());
    assert_eq!(suite.items.len(), 2);
    assert_eq!(suite.incomplete.len(), 1, "{:?}", suite.incomplete);
    let said = &suite.incomplete[0];
    assert!(
        said.contains("1 of 3 annotation files give no item")
            && said.contains("two.json")
            && said.contains("`subset` cover the other 2"),
        "{said}"
    );
}

/// `source.first = N`: only each file's first N records become items (before grouping), the
/// rest not read into items, even malformed; 0 is refused, naming the key and line.
#[test]
fn only_the_first_records_of_each_file_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let record = |c: &str| format!(r#"{{"image": "x.png", "pos": "{c}", "neg": "n"}}"#);
    std::fs::write(
        dir.path().join("one.json"),
        format!("[{}, {}, {}, {{\"broken\": 1}}]", record("a"), record("b"), record("c")),
    )
    .unwrap();
    std::fs::write(dir.path().join("two.json"), format!("[{}, {}, {}]", record("d"), record("e"), record("f")))
        .unwrap();
    let manifest = |first: &str| {
        format!(
            "id = \"head\"\ndescription = \"d\"\n[source]\nfiles = [\"one.json\", \"two.json\"]\nformat = \"json\"\nfirst = {first}\n\
             [item]\nimages = [\"{{image}}\"]\ntexts = [\"{{pos}}\", \"{{neg}}\"]\ntruth = {{ text = 0 }}\n[metrics]\nfamily = \"choice\"\n"
        )
    };
    let path = dir.path().join("head.toml");
    std::fs::write(&path, manifest("2")).unwrap();
    let (suite, problems) = find(path.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    assert!(problems.is_empty(), "{}", problems.message(0));
    let texts: Vec<String> = suite.items.iter().map(|i| i.text(0).to_string()).collect();
    assert_eq!(texts, ["a", "b", "d", "e"]);
    std::fs::write(&path, manifest("0")).unwrap();
    let err = find(path.to_str().unwrap()).err().unwrap().to_string();
    assert!(err.contains("source.first") && err.contains("line 6") && err.contains("at least 1"), "{err}");
}

/// `source.files` patterns: `*` in the file name matches in name order, a pattern nothing
/// matches names itself, and `{_source}` is the file's stem.
#[test]
fn several_files_are_read_in_order_and_tagged_by_stem() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("b_part.jsonl", "{\"img\": \"x.png\", \"t\": \"one\"}\n{\"img\": \"x.png\", \"t\": \"two\"}\n");
    write("a_part.jsonl", "{\"img\": \"x.png\", \"t\": \"three\"}\n");
    write("c_other.json", "[]");
    let manifest = |files: &str| {
        format!(
            "id = \"parts\"\ndescription = \"d\"\n[source]\nfiles = {files}\nformat = \"jsonl\"\ntag = \"part\"\n\
             [item]\nimages = [\"{{img}}\"]\ntexts = [\"{{t}} from {{_source}}\", \"no\"]\ntruth = {{ text = 0 }}\n\
             [metrics]\nfamily = \"choice\"\nbreakdown = [\"part\"]\n"
        )
    };
    let path = dir.path().join("parts.toml");
    std::fs::write(&path, manifest("[\"*_part.jsonl\"]")).unwrap();
    let suite = find(path.to_str().unwrap()).unwrap().load(dir.path()).unwrap();
    let ids: Vec<&str> = suite.items.iter().map(|i| i.id()).collect();
    assert_eq!(ids, ["a_part/0", "b_part/0", "b_part/1"]);
    assert_eq!(suite.items.item(2).text(0), "two from b_part");
    let tags = suite.items.item(2).tags();
    assert!(tags.iter().any(|(k, v)| k == "part" && v == &["b_part".to_string()]), "{tags:?}");
    let unmatched = dir.path().join("unmatched.toml");
    std::fs::write(&unmatched, manifest("[\"*.csv\"]").replace("id = \"parts\"", "id = \"parts2\"")).unwrap();
    let err = find(unmatched.to_str().unwrap()).unwrap().load(dir.path()).err().unwrap().to_string();
    assert!(err.contains("`*.csv`") && err.contains("no file"), "{err}");
}

#[test]
fn crops_match_pil_inside_and_beyond_the_image() {
    let dir = fixture("crop");
    let boxes = json(&dir.join("boxes.json"));
    let image = ImageSource::File(dir.join("image.png")).load_rgb().unwrap();
    for (i, b) in boxes.as_array().unwrap().iter().enumerate() {
        let b: Vec<f64> = b.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let region = benchctl_suites::CropRegion {
            left: b[0].round_ties_even() as i64,
            top: b[1].round_ties_even() as i64,
            right: b[2].round_ties_even() as i64,
            bottom: b[3].round_ties_even() as i64,
        };
        let expected = ImageSource::File(dir.join(format!("crop_{i}.png"))).load_rgb().unwrap();
        assert_eq!(region.cut(&image).unwrap(), expected, "box {b:?}");
    }
}

/// Winoground as a manifest gives the built-in loader's items and report on the real 400
/// annotations: ids, texts, images, truth, every tag (split as the built-in splits them),
/// and every metric and breakdown for the same scores.
#[test]
fn winoground_as_a_manifest_gives_the_built_in_report() {
    let Some(tsv) = shared("datasets/winoground/winoground_annotations.tsv") else { return };
    let dir = tempfile::tempdir().unwrap();
    winoground_layout(&read_winoground_tsv(&tsv), dir.path());
    let built_in = find("winoground").unwrap().load(dir.path()).unwrap();
    let manifest = find("winoground-manifest").unwrap().load(dir.path()).unwrap();
    assert_eq!(manifest.items.len(), 400);
    for (a, b) in built_in.items.iter().zip(&manifest.items) {
        assert_eq!(
            (&a.id(), &a.texts().collect::<Vec<_>>(), &a.images().collect::<Vec<_>>(), &a.truth(), &a.tags()),
            (&b.id(), &b.texts().collect::<Vec<_>>(), &b.images().collect::<Vec<_>>(), &b.truth(), &b.tags())
        );
    }
    let mut scores = ScoreTensor::new();
    let mut state = 7u64;
    for _ in 0..400 {
        let values: Vec<f32> = (0..4)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 40) % 7) as f32 // few values: ties happen
            })
            .collect();
        scores.push(2, 2, &values).unwrap();
    }
    assert_eq!(built_in.evaluate(&scores).unwrap(), manifest.evaluate(&scores).unwrap());
    assert_eq!(find("winoground-manifest").unwrap().headline, find("winoground").unwrap().headline);
}

/// Every bundled manifest is found by its id, which is its file's stem, and parses.
#[test]
fn bundled_manifests_are_found_by_their_id() {
    for (file, text) in benchctl_suites::manifest::BUNDLED {
        let id = file.strip_suffix(".toml").unwrap();
        assert!(text.lines().any(|l| l == format!("id = \"{id}\"")), "{file} declares the id {id}");
        assert_eq!(find(id).unwrap().id, id);
    }
    assert_eq!(benchctl_suites::manifest::bundled_suites().len(), benchctl_suites::manifest::BUNDLED.len());
}

/// Every problem in a manifest is refused with its key and line. A bundled manifest's own file
/// is that bundled suite.
#[test]
fn manifest_errors_name_the_key_and_the_line() {
    let good = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/manifests/winoground-manifest.toml"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("family = \"group\"", "family = \"ranking\"", "`metrics.family` (line"),
        ("format = \"jsonl\"", "format = \"xml\"", "`source.format` (line"),
        ("truth = \"diagonal\"", "truth = \"anti\"", "`item.truth` (line"),
        ("texts = [\"{caption_0}\", \"{caption_1}\"]", "texts = [\"{caption_0\"]", "`item.texts[0]` (line"),
        ("headline = \"group_score\"", "headline = \"f1\"", "`metrics.headline` (line"),
        ("breakdown = [\"collapsed_tag\",", "breakdown = [\"colapsed_tag\",", "`metrics.breakdown` (line"),
        ("[metrics]", "[metrics]\nties = \"first\"", "`metrics.ties` (line"),
        ("[source]", "[source]\nrows = 3", "unknown field `rows`"),
        ("id = \"my-copy\"", "id = \"winoground\"", "`id` (line"),
        // A submission format by name, one that fits the family's items, not EqBen's own.
        ("id = \"my-copy\"", "id = \"my-copy\"\nsubmission = \"csv\"", "`submission` (line"),
        ("id = \"my-copy\"", "id = \"my-copy\"\nsubmission = \"eqben-npy\"", "`submission` (line"),
        ("id = \"my-copy\"", "id = \"my-copy\"\nsubmission = \"naturalbench-outputs\"", "`submission` (line"),
        // Images are read under `item.image_dir`: it must not lead out of the data directory.
        ("image_dir = \"images\"", "image_dir = \"../elsewhere\"", "`item.image_dir` (line"),
        ("image_dir = \"images\"", "image_dir = \"/etc\"", "`item.image_dir` (line"),
        ("image_dir = \"images\"", "image_dir = \"images/../../x\"", "`item.image_dir` (line"),
        // Several files: `file` or `files`, patterns only in the file name, a tag of their own.
        ("file = \"examples.jsonl\"", "file = \"examples.jsonl\"\nfiles = [\"a.jsonl\"]", "`source.files` (line"),
        ("file = \"examples.jsonl\"", "files = []", "`source.files` (line"),
        ("file = \"examples.jsonl\"", "files = [\"*/examples.jsonl\"]", "`source.files[0]` (line"),
        ("file = \"examples.jsonl\"", "files = [\"../examples.jsonl\"]", "`source.files[0]` (line"),
        ("file = \"examples.jsonl\"", "file = \"examples.jsonl\"\ntag = \"part\"", "`source.tag` (line"),
        ("file = \"examples.jsonl\"", "files = [\"examples.jsonl\"]\ntag = \"collapsed_tag\"", "`source.tag` (line"),
        // A paper's average: over a tag, of the family's metrics, under a new name.
        // Groups all right: over a tag, under a new name.
        ("headline = \"group_score\"", "headline = \"group_score\"\nall_of = { pairs = \"nope\" }", "`metrics.all_of` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\nall_of = { text_score = \"tag\" }", "`metrics.all_of` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[metrics.average]\nname = \"avg\"\ngroups = { a = [\"x\"] }\nover = \"nope\"", "`metrics.average.over` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[metrics.average]\nname = \"avg\"\nover = \"collapsed_tag\"\ngroups = {}", "`metrics.average.groups` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[metrics.average]\nover = \"collapsed_tag\"\ngroups = { a = [\"x\"] }\nname = \"group_score\"", "`metrics.average.name` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[metrics.average]\nname = \"avg\"\nover = \"collapsed_tag\"\ngroups = { a = [\"x\"] }\nmetrics = [\"f1\"]", "`metrics.average.metrics` (line"),
        // Groups may list groups (averages of averages), not in a circle.
        ("headline = \"group_score\"", "headline = \"group_score\"\n[metrics.average]\nname = \"avg\"\nover = \"collapsed_tag\"\ngroups = { a = [\"b\", \"x\"], b = [\"a\"] }", "`metrics.average.groups` (line"),
        ("file = \"examples.jsonl\"", "file = \"examples.jsonl\"\nentries = true", "`source.entries` (line"),
        // `[hub]` (after the last table here): a repo id as the hub writes them, a revision,
        // files inside the repo.
        ("headline = \"group_score\"", "headline = \"group_score\"\n[hub]\nrepo = \"winoground\"", "`hub.repo` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[hub]\nrepo = \"org--x/y\"", "`hub.repo` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[hub]\nrepo = \"org/y\"\nrevision = \"../main\"", "`hub.revision` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[hub]\nrepo = \"org/y\"\nfiles = []", "`hub.files` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[hub]\nrepo = \"org/y\"\nfiles = [\"../x.parquet\"]", "`hub.files` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[hub]\nrepo = \"org/y\"\nfiles = [\"x.parquet\"]\nunpack = true", "`hub.unpack` (line"),
        ("headline = \"group_score\"", "headline = \"group_score\"\n[hub]\nrepo = \"org/y\"\nbranch = \"main\"", "unknown field `branch`"),
    ];
    let unchanged = dir.path().join("same.toml");
    std::fs::write(&unchanged, &good).unwrap();
    let same = find(unchanged.to_str().unwrap()).unwrap();
    assert_eq!(same.id, "winoground-manifest");
    let SuiteKind::Manifest(m) = same.kind else { panic!("a manifest suite") };
    assert!(m.path.is_none(), "recorded as the bundled suite, not a file");
    // A changed copy of a bundled manifest needs its own id; the cases change such a copy.
    let changed = dir.path().join("changed.toml");
    std::fs::write(&changed, good.replace("headline = \"group_score\"", "headline = \"text_score\"")).unwrap();
    let err = find(changed.to_str().unwrap()).err().unwrap().to_string();
    assert!(err.contains("`id` (line 4)") && err.contains("bundled manifest's id"), "{err}");
    let good = good.replace("id = \"winoground-manifest\"", "id = \"my-copy\"");
    let copy = dir.path().join("copy.toml");
    std::fs::write(&copy, &good).unwrap();
    assert!(find(copy.to_str().unwrap()).is_ok(), "the same manifest under its own id is accepted");
    for (i, (from, to, expected)) in cases.iter().enumerate() {
        assert!(good.contains(from), "{from}");
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, good.replacen(from, to, 1)).unwrap();
        let err = find(path.to_str().unwrap()).err().unwrap_or_else(|| panic!("{to} was accepted"));
        assert_eq!(err.kind(), ErrorKind::Manifest, "{err}");
        let message = err.to_string();
        assert!(message.contains(expected) && message.contains(path.to_str().unwrap()), "{message}");
        // The line named is the line of the change.
        let line = good.replacen(from, to, 1).lines().position(|l| l.contains(to.lines().last().unwrap())).unwrap() + 1;
        assert!(message.contains(&format!("line {line}")), "{message} (expected line {line})");
    }
}

/// A record that lacks a field a template names is bad data naming the file, the record and
/// the manifest key; an item id seen twice names both records.
#[test]
fn record_problems_name_the_record_and_the_manifest_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("images")).unwrap();
    let line = |id: u32, caption: &str| {
        format!(
            r#"{{"id": {id}, "caption_0": "{caption}", "caption_1": "b", "image_0": "ex_{id}_img_0", "image_1": "ex_{id}_img_1", "tag": "Noun", "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": "Object"}}"#
        )
    };
    let missing = line(1, "a").replace(r#""caption_1": "b", "#, "");
    std::fs::write(dir.path().join("examples.jsonl"), [line(0, "a"), missing, line(0, "c")].join("\n")).unwrap();
    let (suite, problems) = find("winoground-manifest").unwrap().load_all(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 1);
    let messages: Vec<String> = problems.messages().map(ToString::to_string).collect();
    assert!(
        messages[0].contains("examples.jsonl line 2")
            && messages[0].contains("`item.texts[1]`")
            && messages[0].contains("no field `caption_1`"),
        "{messages:?}"
    );
    assert!(
        messages[1].contains("line 3")
            && messages[1].contains("duplicate item id \"0\"")
            && messages[1].contains("line 1"),
        "{messages:?}"
    );
    assert!(problems.iter().all(|(kind, _)| kind == ErrorKind::Malformed));
}

/// One manifest, every source format: the Winoground hub fixture's records as JSONL, as the
/// hub's parquet (plain and snappy, two row groups, written by `datasets`), as a JSON object
/// keyed by id nested under `records`, and as TSV give the same items.
#[test]
fn every_source_format_gives_the_same_items() {
    let hub = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/winoground-hub");
    let bundled = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/manifests/winoground-manifest.toml"),
    )
    .unwrap();
    let images = "images = [\"{image_0}.png\", \"{image_1}.png\"]";
    assert!(bundled.contains(images));
    let dir = tempfile::tempdir().unwrap();
    let variant = |name: &str, source: &str, item_id: &str, images_line: &str| {
        let text = bundled
            .replace("id = \"winoground-manifest\"", &format!("id = \"{name}\""))
            .replace("file = \"examples.jsonl\"\nformat = \"jsonl\"", source)
            .replace("id = \"{id}\"", item_id)
            .replace(images, images_line);
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        find(path.to_str().unwrap()).unwrap()
    };
    // Relative image paths, ids, texts, truth and tags of each item.
    type Shape = (String, Vec<String>, Vec<String>, benchctl_scoring::Truth, benchctl_scoring::Tags);
    let items = |suite: &Suite| -> Vec<Shape> {
        suite
            .items
            .iter()
            .map(|i| {
                let images = i.images().map(|s| s.path().file_name().unwrap().to_string_lossy().into_owned()).collect();
                (
                    i.id().to_string(),
                    images,
                    i.texts().map(str::to_string).collect::<Vec<_>>(),
                    i.truth().clone(),
                    i.tags().clone(),
                )
            })
            .collect()
    };
    let jsonl = find("winoground-manifest").unwrap().load(&hub.join("jsonl")).unwrap();
    let expected = items(&jsonl);
    assert_eq!(expected.len(), 4);
    assert_eq!(expected, items(&find("winoground").unwrap().load(&hub.join("jsonl")).unwrap()));

    let by_id = "images = [\"ex_{id}_img_0.png\", \"ex_{id}_img_1.png\"]";
    let parquet =
        variant("pq", "file = \"data/test-00000-of-00001.parquet\"\nformat = \"parquet\"", "id = \"{id}\"", by_id);
    for form in ["parquet", "snappy"] {
        assert_eq!(items(&parquet.load(&hub.join(form)).unwrap()), expected, "{form}");
    }

    let records: Vec<serde_json::Value> = std::fs::read_to_string(hub.join("jsonl/examples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let keyed: serde_json::Map<String, serde_json::Value> =
        records.iter().map(|r| (r["id"].to_string(), r.clone())).collect();
    let object_dir = dir.path().join("object");
    std::fs::create_dir_all(&object_dir).unwrap();
    std::fs::write(object_dir.join("all.json"), serde_json::json!({"data": {"examples": keyed}}).to_string()).unwrap();
    let object = variant("obj", "file = \"all.json\"\nformat = \"json\"\nrecords = \"data.examples\"", "", images);
    assert_eq!(items(&object.load(&object_dir).unwrap()), expected, "ids default to the object's keys");

    let columns = [
        "id",
        "caption_0",
        "caption_1",
        "image_0",
        "image_1",
        "tag",
        "secondary_tag",
        "num_main_preds",
        "collapsed_tag",
    ];
    let cell = |v: &serde_json::Value| {
        let text = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
        if text.contains(['"', '\t', '\n']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text
        }
    };
    let mut tsv = columns.join("\t") + "\r\n";
    for r in &records {
        tsv += &(columns.iter().map(|c| cell(&r[*c])).collect::<Vec<_>>().join("\t") + "\r\n");
    }
    let tsv_dir = dir.path().join("tsv");
    std::fs::create_dir_all(&tsv_dir).unwrap();
    std::fs::write(tsv_dir.join("examples.tsv"), format!("\u{feff}{tsv}")).unwrap();
    let tsv_suite = variant("tsv", "file = \"examples.tsv\"\nformat = \"tsv\"", "id = \"{id}\"", images);
    assert_eq!(items(&tsv_suite.load(&tsv_dir).unwrap()), expected, "a BOM and CRLF are accepted");
}

/// Truth read from a field (`text = "{label}"`, `image = "{answer}"`), list fields as
/// candidates, explicit pairs, and the three families, on small layouts whose outcomes are
/// set by the scores: the choice family's labelled candidate must beat the others, the
/// pairwise family's caption its foil, the group family's both directions.
#[test]
fn truth_from_fields_lists_and_every_family() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    // SPEC-like: one image, candidate texts in a list, the label a field.
    write(
        "i2t.json",
        r#"[{"query": "a.png", "keys": ["x", "y", "z"], "label": 2}, {"query": "b.png", "keys": ["u", "v"], "label": "0"}]"#,
    );
    let i2t = write(
        "i2t.toml",
        "id = \"t-i2t\"\ndescription = \"d\"\n[source]\nfile = \"i2t.json\"\nformat = \"json\"\n[item]\nimages = [\"{query}\"]\ntexts_list = \"keys\"\ntruth = { text = \"{label}\" }\n[metrics]\nfamily = \"choice\"\nties = \"first\"\n",
    );
    let suite = find(i2t.to_str().unwrap()).unwrap().load(dir.path()).unwrap();
    assert_eq!((suite.items.item(0).text_count(), suite.items.item(1).text_count()), (3, 2));
    assert!(suite.items.item(0).truth().is_match(0, 2) && suite.items.item(1).truth().is_match(0, 0));
    let mut scores = ScoreTensor::new();
    scores.push(1, 3, &[0.1, 0.2, 0.9]).unwrap(); // the label wins
    scores.push(1, 2, &[0.3, 0.4]).unwrap(); // the label loses
    assert_eq!(suite.evaluate(&scores).unwrap().metric("i2t_accuracy"), Some(50.0));

    // Text-to-image: candidate images in a list, the answer a field.
    write("t2i.jsonl", "{\"text\": \"t\", \"imgs\": [\"a.png\", \"b.png\"], \"answer\": 1}\n");
    let t2i = write(
        "t2i.toml",
        "id = \"t-t2i\"\ndescription = \"d\"\n[source]\nfile = \"t2i.jsonl\"\nformat = \"jsonl\"\n[item]\nimages_list = \"imgs\"\ntexts = [\"{text}\"]\ntruth = { image = \"{answer}\" }\n[metrics]\nfamily = \"choice\"\nheadline = \"t2i_accuracy\"\n",
    );
    let suite = find(t2i.to_str().unwrap()).unwrap().load(dir.path()).unwrap();
    let mut scores = ScoreTensor::new();
    scores.push(2, 1, &[0.2, 0.7]).unwrap();
    assert_eq!(suite.evaluate(&scores).unwrap().metric("t2i_accuracy"), Some(100.0));

    // VALSE-like pairwise: caption and foil, truth as explicit pairs.
    write("pairs.csv", "image,caption,foil\na.png,\"a dog, running\",a cat\nb.png,two,three\n");
    let pairwise = write(
        "pairwise.toml",
        "id = \"t-pairs\"\ndescription = \"d\"\n[source]\nfile = \"pairs.csv\"\nformat = \"csv\"\n[item]\nimages = [\"{image}\"]\ntexts = [\"{caption}\", \"{foil}\"]\ntruth = { pairs = [[0, 0]] }\n[metrics]\nfamily = \"pairwise\"\n",
    );
    let suite = find(pairwise.to_str().unwrap()).unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.item(0).texts().collect::<Vec<_>>(), ["a dog, running", "a cat"]);
    let mut scores = ScoreTensor::new();
    scores.push(1, 2, &[0.8, 0.1]).unwrap();
    scores.push(1, 2, &[0.5, 0.5]).unwrap(); // a tie is a miss
    assert_eq!(suite.evaluate(&scores).unwrap().metric("acc_r"), Some(50.0));

    // A label outside the item is bad data naming the record and the key.
    write("i2t.json", r#"[{"query": "a.png", "keys": ["x"], "label": 3}]"#);
    let (_, problems) = find(i2t.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    let message = problems.message(0);
    assert!(
        message.contains("entry 0") && message.contains("`item.truth`") && message.contains("text 3 of an item with 1"),
        "{message}"
    );
}

/// A manifest of very many tags (200,000 here) is read in time linear in its size, and an
/// error in its last one still names that tag's line: naming lines used to count from the
/// start for every key, quadratic in the manifest's length (30,000 tags took seconds,
/// 1,000,000 never finished).
#[test]
fn a_manifest_of_many_tags_is_read_and_its_lines_named() {
    let good = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/manifests/winoground-manifest.toml"),
    )
    .unwrap()
    .replace("id = \"winoground-manifest\"", "id = \"many-tags\"");
    const TAGS: usize = 200_000;
    let tags: String = (0..TAGS).map(|i| format!("t{i} = \"{{tag}}\"\n")).collect();
    let text = good.replacen("[item.tags]\n", &format!("[item.tags]\n{tags}"), 1);
    assert!(benchctl_suites::manifest::parse(&text, "many", None).is_ok());
    let bad = text.replacen(&format!("t{} = \"{{tag}}\"", TAGS - 1), &format!("t{} = \"{{tag\"", TAGS - 1), 1);
    let line = bad.lines().position(|l| l.starts_with(&format!("t{} =", TAGS - 1))).unwrap() + 1;
    let err = benchctl_suites::manifest::parse(&bad, "many", None).err().unwrap().to_string();
    assert!(err.contains(&format!("`item.tags.t{}` (line {line})", TAGS - 1)), "{err}");
}

/// Each suite is declared once, consistently: ids are unique over built-in suites and bundled
/// manifests, a suite's loader gives it the id it is listed by, and every item suite's
/// headline is a metric its summary reports (the family's declaration decides), bundled
/// manifests included.
#[test]
fn every_suite_headline_is_a_metric_its_summary_reports() {
    let all = benchctl_suites::all();
    let ids: std::collections::HashSet<String> = all.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(ids.len(), all.len(), "duplicate suite ids");
    let empty = tempfile::tempdir().unwrap();
    for info in &all {
        let Some(summary) = info.summary() else { continue };
        let names = summary.reported_names();
        assert!(
            names.contains(&info.headline.to_string()),
            "{}: headline `{}` not in {names:?}",
            info.id,
            info.headline
        );
        let (suite, _) = info.load_all(empty.path()).unwrap();
        assert_eq!(suite.id, info.id, "the loader names its suite as the table does");
        assert_eq!(suite.summary, summary);
    }
    assert!(all.iter().filter(|s| s.summary().is_none()).all(|s| s.id == "rococo"), "only RoCOCO is galleries");
}

/// Annotation files that are symbolic links (a hub cache's snapshot is made of them) are read
/// through a `*` pattern as through their names: a link inside the data directory counts, one
/// leading out of it is refused naming both paths, a loop and a broken link are named.
#[cfg(unix)]
#[test]
fn patterns_follow_links_inside_the_data_directory() {
    use std::os::unix::fs::symlink;
    let data = tempfile::tempdir().unwrap();
    let dir = data.path();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    let record = |i: usize| format!("{{\"image\": \"x{i}.png\", \"pos\": \"a cat {i}\", \"neg\": \"a dog {i}\"}}\n");
    std::fs::write(dir.join("data/a.jsonl"), record(0) + &record(1)).unwrap();
    std::fs::write(dir.join("blobs/b-blob"), record(2) + &record(3)).unwrap();
    symlink(dir.join("blobs/b-blob"), dir.join("data/b.jsonl")).unwrap();
    let manifest = |files: &str| {
        let path = dir.join("m.toml");
        std::fs::write(
            &path,
            format!(
                "id = \"links\"\ndescription = \"x\"\n[source]\nfiles = {files}\nformat = \"jsonl\"\n[item]\nimages = [\"{{image}}\"]\ntexts = [\"{{pos}}\", \"{{neg}}\"]\ntruth = {{ text = 0 }}\n[metrics]\nfamily = \"pairwise\"\n"
            ),
        )
        .unwrap();
        find(path.to_str().unwrap()).unwrap()
    };
    let named = manifest(r#"["data/a.jsonl", "data/b.jsonl"]"#).load(dir).unwrap();
    let pattern = manifest(r#"["data/*.jsonl"]"#).load(dir).unwrap();
    assert_eq!(named.items.len(), 4);
    assert_eq!(pattern.items.len(), 4, "the link is read through the pattern too");
    // Out of the data directory: refused, naming the link and where it leads.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("c.jsonl"), record(4)).unwrap();
    symlink(outside.path().join("c.jsonl"), dir.join("data/c.jsonl")).unwrap();
    let err = manifest(r#"["data/*.jsonl"]"#).load(dir).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PathEscapes, "{err}");
    assert!(
        err.to_string().contains("data/c.jsonl") && err.to_string().contains("outside the data directory"),
        "{err}"
    );
    std::fs::remove_file(dir.join("data/c.jsonl")).unwrap();
    // A loop, and a link that leads nowhere.
    symlink(dir.join("data/d.jsonl"), dir.join("data/e.jsonl")).unwrap();
    symlink(dir.join("data/e.jsonl"), dir.join("data/d.jsonl")).unwrap();
    let err = manifest(r#"["data/*.jsonl"]"#).load(dir).unwrap_err();
    assert!(err.to_string().contains("a loop of symbolic links"), "{err}");
    std::fs::remove_file(dir.join("data/d.jsonl")).unwrap();
    let err = manifest(r#"["data/*.jsonl"]"#).load(dir).unwrap_err();
    assert!(err.to_string().contains("data/e.jsonl") && err.to_string().contains("leads nowhere"), "{err}");
}
