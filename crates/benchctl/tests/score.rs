//! `benchctl score` reproduces, from a score file, exactly the metrics `benchctl eval`
//! computed, for every item suite and every supported score layout.

mod common;

use std::path::{Path, PathBuf};

use benchctl_suites::{eqben, spec, valse};
use common::{benchctl, demo_suite, stderr, stdout};

/// Evaluates the fixture model; returns the stored run's JSON and its score dump's path.
fn eval(suite: &str, data: &Path, results: &Path, extra: &[&str]) -> (serde_json::Value, PathBuf) {
    let (path, json, _) = common::eval_tiny(suite, data, results, extra);
    let dump = common::dump_path(&path, &json);
    (json, dump)
}

/// The report `benchctl score` prints (its JSON follows the table).
fn score(suite: &str, data: &Path, scores: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args =
        vec!["score", "--suite", suite, "--data-dir", data.to_str().unwrap(), "--scores", scores.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = benchctl(&args, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    serde_json::from_str(&text[text.find("\n{").expect("a JSON report")..]).unwrap()
}

/// A small VALSE layout of our own records (two per piece, one invalid).
fn valse_layout(dir: &Path) {
    for (p, piece) in valse::PIECES.iter().enumerate() {
        let mut records = serde_json::Map::new();
        for r in 0..3u64 {
            let image = format!("img_{p}_{r}.jpg");
            let path = dir.join("images/visual7w").join(&image);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            benchctl_testkit::generated_image(p as u64 * 10 + r, 30, 20)
                .save_with_format(&path, image::ImageFormat::Jpeg)
                .unwrap();
            records.insert(
                format!("{piece}_{r}"),
                serde_json::json!({"dataset": "visual7w", "image_file": image, "caption": format!("there are {r} dogs"),
                                   "foil": format!("there are {} dogs", r + 1), "mturk": {"caption": 1 + r, "foil": 0, "other": 0}}),
            );
        }
        std::fs::write(dir.join(format!("{piece}.json")), serde_json::Value::Object(records).to_string()).unwrap();
    }
}

#[test]
fn own_dumps_reproduce_every_suite() {
    let results = tempfile::tempdir().unwrap();
    let spec_dir = tempfile::tempdir().unwrap();
    benchctl_testkit::spec_layout(spec_dir.path(), &spec::SUBSETS, 2);
    let eqben_dir = tempfile::tempdir().unwrap();
    let splits: Vec<(&str, usize)> = eqben::SPLITS.iter().map(|(s, _)| (*s, 2)).collect();
    benchctl_testkit::eqben_release(eqben_dir.path(), &splits, true, false);
    let valse_dir = tempfile::tempdir().unwrap();
    valse_layout(valse_dir.path());
    let suites: [(&str, &Path); 4] = [
        ("winoground", &demo_suite()),
        ("spec", spec_dir.path()),
        ("eqben", eqben_dir.path()),
        ("valse", valse_dir.path()),
    ];
    for (suite, data) in suites {
        let (run, dump) = eval(suite, data, results.path(), &[]);
        assert_eq!(score(suite, data, &dump, &[]), run["report"], "{suite}");
    }
}

#[test]
fn winoground_published_jsonl_reproduces_eval() {
    let results = tempfile::tempdir().unwrap();
    let (run, dump) = eval("winoground", &demo_suite(), results.path(), &[]);
    // Rewrite the dump as Winoground's published layout: one line per (caption, image).
    let mut jsonl = String::new();
    for line in std::fs::read_to_string(&dump).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for image in 0..2 {
            for caption in 0..2 {
                let label = format!("{}_c{caption}_i{image}", v["id"].as_str().unwrap());
                jsonl.push_str(&serde_json::json!({"label": label, "score": v["scores"][image][caption]}).to_string());
                jsonl.push('\n');
            }
        }
    }
    let file = results.path().join("published.jsonl");
    std::fs::write(&file, &jsonl).unwrap();
    assert_eq!(score("winoground", &demo_suite(), &file, &[]), run["report"]);
    // As a Windows editor saves it (a byte order mark, `\r\n` line ends): the same report.
    let windows = results.path().join("published-windows.jsonl");
    std::fs::write(&windows, format!("\u{feff}{}", jsonl.replace('\n', "\r\n"))).unwrap();
    assert_eq!(score("winoground", &demo_suite(), &windows, &[]), run["report"]);

    // A missing pair, an unknown label and a non-number are errors naming the entry.
    let refused = |scores: &Path| {
        let (data, scores) = (demo_suite(), scores.to_str().unwrap().to_string());
        let out = benchctl(
            &["score", "--suite", "winoground", "--data-dir", data.to_str().unwrap(), "--scores", &scores],
            &[],
        );
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        stderr(&out)
    };
    let broken = |bytes: &[u8]| {
        std::fs::write(&file, bytes).unwrap();
        refused(&file)
    };
    let dropped: String = jsonl.lines().skip(1).map(|l| format!("{l}\n")).collect();
    assert!(broken(dropped.as_bytes()).contains("1 item(s) lack scores, e.g. 0"));
    assert!(broken(jsonl.replacen("\"0_c0_i0\"", "\"99_c0_i0\"", 1).as_bytes()).contains("no item `99`"));
    let dashed = jsonl.replacen("\"label\":\"0_c0_i0\"", "\"label\":\"0-c0-i0\"", 1);
    assert!(broken(dashed.as_bytes()).contains("is not of the form"));
    let nan = jsonl.lines().next().unwrap().replace("\"score\":", "\"score\":\"NaN\",\"x\":");
    assert!(broken(format!("{nan}\n{dropped}").as_bytes()).contains("line 1: `score` is not a number"));
    // A byte that is not UTF-8 (0xff, here in the second line's label) is named with its offset
    // in the file, as annotation files' are; a score file that is a directory is refused too.
    let second = jsonl.find('\n').unwrap() + 1 + "{\"label\":\"".len();
    let mut bytes = jsonl.clone().into_bytes();
    bytes[second] = 0xff;
    let message = broken(&bytes);
    assert!(message.contains(&format!("not UTF-8 text (invalid byte at offset {second})")), "{message}");
    assert!(refused(results.path()).contains("directory"));
}

#[test]
fn eqben_prediction_vector_reproduces_eval() {
    let data = tempfile::tempdir().unwrap();
    let splits: Vec<(&str, usize)> = eqben::SPLITS.iter().map(|(s, _)| (*s, 2)).collect();
    benchctl_testkit::eqben_release(data.path(), &splits, false, true);
    let results = tempfile::tempdir().unwrap();
    let (run_path, run, _) = common::eval_tiny("eqben", data.path(), results.path(), &[]);
    let npy = common::prediction_path(&run_path);
    assert_eq!(score("eqben", data.path(), &npy, &[]), run["report"]);

    // A vector of the wrong length, shape or dtype, or with a non-finite score, is bad data.
    let values: Vec<f32> = npyz::NpyFile::new(&std::fs::read(&npy).unwrap()[..]).unwrap().into_vec().unwrap();
    let broken = |name: &str, write: &dyn Fn(&Path)| {
        let file = results.path().join(name);
        write(&file);
        let out = benchctl(
            &[
                "score",
                "--suite",
                "eqben",
                "--data-dir",
                data.path().to_str().unwrap(),
                "--scores",
                file.to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        stderr(&out)
    };
    let short = broken("short.npy", &|f| npyz::to_file_1d(f, values[1..].iter().copied()).unwrap());
    assert!(short.contains(&format!("{} scores for the {} entries", values.len() - 1, values.len())), "{short}");
    let ints = broken("ints.npy", &|f| npyz::to_file_1d(f, values.iter().map(|v| *v as i32)).unwrap());
    assert!(ints.contains("expected float32 (<f4) or float64 (<f8) scores, got dtype <i4"), "{ints}");
    let mut with_nan = values.clone();
    with_nan[3] = f32::NAN;
    let nan = broken("nan.npy", &|f| npyz::to_file_1d(f, with_nan.iter().copied()).unwrap());
    assert!(nan.contains("score 3 is NaN"), "{nan}");
    let matrix = broken("matrix.npy", &|f| {
        use npyz::WriterBuilder;
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[2, values.len() as u64 / 2])
            .writer(std::fs::File::create(f).unwrap())
            .begin_nd()
            .unwrap();
        w.extend(values.iter().copied()).unwrap();
        w.finish().unwrap();
    });
    assert!(matrix.contains("expected a vector of shape"), "{matrix}");
}

#[test]
fn external_match_probabilities_get_valses_threshold_metrics() {
    let data = tempfile::tempdir().unwrap();
    valse_layout(data.path());
    let suite = benchctl_suites::find("valse").unwrap().load(data.path()).unwrap();
    // Captions at 0.8; foils at 0.3, except in the first piece, where they are at 0.6.
    let dump: String = suite
        .items
        .iter()
        .map(|item| {
            let foil = if item.id().starts_with(valse::PIECES[0]) { 0.6 } else { 0.3 };
            serde_json::json!({"id": item.id(), "scores": [[0.8, foil]]}).to_string() + "\n"
        })
        .collect();
    let file = data.path().join("itm.jsonl");
    std::fs::write(&file, dump).unwrap();
    let report = score("valse", data.path(), &file, &["--score-kind", "probability"]);
    let m = &report["metrics"];
    assert_eq!(m["acc_r"], 100.0);
    assert_eq!(m["p_c"], 100.0);
    let p_f = 100.0 * (suite.items.len() - 2) as f64 / suite.items.len() as f64;
    assert!((m["p_f"].as_f64().unwrap() - p_f).abs() < 1e-9, "{m}");
    assert!((m["min_macro"].as_f64().unwrap() - 100.0 * 10.0 / 11.0).abs() < 1e-9, "{m}");

    let out_of_range: String = suite
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::json!({"id": item.id(), "scores": [[if i == 3 { 1.5 } else { 0.8 }, 0.2]]}).to_string() + "\n"
        })
        .collect();
    std::fs::write(&file, out_of_range).unwrap();
    let out = benchctl(
        &[
            "score",
            "--suite",
            "valse",
            "--data-dir",
            data.path().to_str().unwrap(),
            "--scores",
            file.to_str().unwrap(),
            "--score-kind",
            "probability",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("item `{}`", suite.items.item(3).id())) && err.contains("not a probability"),
        "{err}"
    );
}

#[test]
fn a_piece_without_valid_records_is_left_out_of_the_averages() {
    let data = tempfile::tempdir().unwrap();
    valse_layout(data.path());
    // Every record of the first piece fails validation.
    let path = data.path().join(format!("{}.json", valse::PIECES[0]));
    let mut records: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for record in records.values_mut() {
        record["mturk"]["caption"] = 1.into();
    }
    std::fs::write(&path, serde_json::Value::Object(records).to_string()).unwrap();
    let results = tempfile::tempdir().unwrap();
    let (run, _) = eval("valse", data.path(), results.path(), &[]);
    let pieces = run["report"]["breakdowns"]["piece"].as_object().unwrap();
    assert_eq!(pieces.len(), 10);
    assert!(!pieces.contains_key(valse::PIECES[0]));
    let mean = pieces.values().map(|g| g["acc_r"].as_f64().unwrap()).sum::<f64>() / 10.0;
    assert!((run["report"]["metrics"]["acc_r_macro"].as_f64().unwrap() - mean).abs() < 1e-9);
}

/// `--ties first` reproduces SPEC's official `argmax`: a label tied for the top with a later
/// candidate is a hit, with an earlier one a miss; strict counts both as misses. The rule is
/// reported in the printed run.
#[test]
fn spec_ties_first_reproduces_the_official_argmax() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::spec_layout(data.path(), &spec::SUBSETS, 3);
    let results = tempfile::tempdir().unwrap();
    let (_, dump) = eval("spec", data.path(), results.path(), &[]);
    // Every candidate of every item at the same score: argmax is candidate 0.
    let mut tied = String::new();
    let mut label_first = [0usize; 2];
    let mut counts = [0usize; 2];
    let suite = benchctl_suites::find("spec").unwrap().load(data.path()).unwrap();
    for (line, item) in std::fs::read_to_string(&dump).unwrap().lines().zip(&suite.items) {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (k, l) = (item.image_count(), item.text_count());
        v["scores"] = serde_json::json!(vec![vec![0.25; l]; k]);
        tied.push_str(&format!("{v}\n"));
        let direction = usize::from(k > 1);
        counts[direction] += 1;
        label_first[direction] += usize::from(item.truth().is_match(0, 0));
    }
    let file = results.path().join("tied.jsonl");
    std::fs::write(&file, tied).unwrap();
    let strict = score("spec", data.path(), &file, &[]);
    assert_eq!(strict["metrics"]["i2t_accuracy"], 0.0);
    let first = score("spec", data.path(), &file, &["--ties", "first"]);
    let pct = |d: usize| 100.0 * label_first[d] as f64 / counts[d] as f64;
    assert!((first["metrics"]["i2t_accuracy"].as_f64().unwrap() - pct(0)).abs() < 1e-9);
    assert!((first["metrics"]["t2i_accuracy"].as_f64().unwrap() - pct(1)).abs() < 1e-9);
    assert!(pct(0) > 0.0 && pct(0) < 100.0, "the fixture has labels first and not first");

    let (_, run, out) = common::eval_tiny("spec", data.path(), results.path(), &["--ties", "first"]);
    assert_eq!(run["suite"]["ties"], "first");
    assert!(stdout(&out).contains("ties: first (the first of tied candidates wins"), "{}", stdout(&out));
}

/// `benchctl score` keeps the file's f64 scores through the metrics and its dump: a margin of
/// 1e-9 at 0.25 is a hit, not an f32 tie; scores beyond f32's range stay finite.
#[test]
fn external_scores_keep_their_precision() {
    let results = tempfile::tempdir().unwrap();
    let (_, dump) = eval("winoground", &demo_suite(), results.path(), &[]);
    let lines: Vec<String> = std::fs::read_to_string(&dump)
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            // Item 0 by 1e-9 at 0.25, item 1 at ±1e300, the others clearly wrong.
            let scores = match i {
                0 => serde_json::json!([[0.25 + 1e-9, 0.25], [0.25, 0.25 + 1e-9]]),
                1 => serde_json::json!([[1e300, -1e300], [-1e300, 1e300]]),
                _ => serde_json::json!([[0.0, 1.0], [1.0, 0.0]]),
            };
            serde_json::json!({"id": v["id"], "scores": scores}).to_string()
        })
        .collect();
    let file = results.path().join("precise.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let report = score("winoground", &demo_suite(), &file, &[]);
    assert_eq!(report["metrics"]["group_score"], 25.0, "2 of 8 items right: {report}");
}

/// A dump's generated replies (`replies`, K×L like its scores) are kept with an external
/// model's stored run, line for line; a line whose replies are not one per cell is refused
/// naming its line (exit 3), and nothing is stored.
#[test]
fn a_dumps_replies_are_kept_and_a_misshapen_one_is_named() {
    let results = tempfile::tempdir().unwrap();
    let (_, dump) = eval("winoground", &demo_suite(), results.path(), &[]);
    let with_replies = |bad_line: Option<usize>| -> String {
        let text = std::fs::read_to_string(&dump).unwrap();
        let lines = text.lines().enumerate().map(|(i, l)| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["replies"] = match Some(i) == bad_line {
                true => serde_json::json!([["only one row", null]]),
                false => serde_json::json!([[format!("item {i}: yes"), null], ["no \"quoted\" 🙂", "yes"]]),
            };
            v.to_string()
        });
        lines.collect::<Vec<_>>().join("\n")
    };
    let file = results.path().join("replies.jsonl");
    std::fs::write(&file, with_replies(None)).unwrap();
    let stored = tempfile::tempdir().unwrap();
    let out = common::score_external(&demo_suite(), &file, "replier", stored.path(), &[]);
    let (run_path, run) = common::stored_run(&out);
    let kept: Vec<serde_json::Value> = std::fs::read_to_string(common::dump_path(&run_path, &run))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["replies"].clone())
        .collect();
    let given: Vec<serde_json::Value> = with_replies(None)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["replies"].clone())
        .collect();
    assert_eq!((kept.len(), kept), (8, given));
    std::fs::write(&file, with_replies(Some(2))).unwrap();
    let refused = tempfile::tempdir().unwrap();
    let out = common::score_external(&demo_suite(), &file, "replier", refused.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("line 3") && said.contains("`replies` has 1 row(s)"), "{said}");
    assert!(
        !refused.path().join("runs").exists() || std::fs::read_dir(refused.path().join("runs")).unwrap().count() == 0
    );
}

/// A model scored elsewhere joins the store: `score --model-name` stores a run marked external
/// (provenance, item scores, intervals), the leaderboard lists it as such, and `compare`
/// pairs it head to head with a model benchctl ran on the same items.
#[test]
fn an_external_model_is_stored_ranked_and_compared() {
    let results = tempfile::tempdir().unwrap();
    let results_dir = results.path().to_str().unwrap();
    let (zoo_run, zoo_dump) = eval("winoground", &demo_suite(), results.path(), &[]);
    // The external model: perfect on every item but one, in Winoground's published layout.
    let mut jsonl = String::new();
    let items: Vec<serde_json::Value> =
        std::fs::read_to_string(&zoo_dump).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for (n, item) in items.iter().enumerate() {
        for image in 0..2 {
            for caption in 0..2 {
                let matched = (image == caption) != (n == 0);
                let label = format!("{}_c{caption}_i{image}", item["id"].as_str().unwrap());
                let score = if matched { 0.75 } else { 0.25 };
                jsonl.push_str(&format!("{{\"label\": \"{label}\", \"score\": {score}}}\n"));
            }
        }
    }
    let scores = results.path().join("my-vlm.jsonl");
    std::fs::write(&scores, &jsonl).unwrap();
    let data = demo_suite();
    let described =
        ["--model-description", "a Python VLM | run elsewhere", "--model-url", "https://example.org/my-vlm"];
    let call = |name: &str| common::score_external(&data, &scores, name, results.path(), &described);
    let out = call("my-vlm");
    let (run_path, run) = common::stored_run(&out);
    let external = &run["model"]["external"];
    assert_eq!(run["model"]["id"], "my-vlm");
    assert_eq!(external["url"], "https://example.org/my-vlm");
    assert_eq!(external["scores_format"], "winoground-jsonl");
    let sha = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(jsonl.as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    assert_eq!(external["scores_sha256"], sha.as_str());
    // The same report `score` prints without storing, with intervals, and its item scores.
    assert_eq!(run["report"], score("winoground", &data, &scores, &[]));
    let n = items.len() as f64;
    let group = run["report"]["metrics"]["group_score"].as_f64().unwrap();
    assert!((group - 100.0 * (n - 1.0) / n).abs() < 1e-9, "group score {group}");
    // Winoground's definitions (its paper and official notebook): the first item (matches
    // scored 0.25, mismatches 0.75) fails its text and image comparisons, every other passes.
    for metric in ["text_score", "image_score"] {
        let value = run["report"]["metrics"][metric].as_f64().unwrap();
        assert!((value - 100.0 * (n - 1.0) / n).abs() < 1e-9, "{metric} {value}");
    }
    assert!(run["intervals"]["group_score"].as_array().is_some_and(|i| i.len() == 2));
    assert_eq!(run["data_fingerprint"], zoo_run["data_fingerprint"]);
    let dump = std::fs::read_to_string(common::dump_path(&run_path, &run)).unwrap();
    assert_eq!(dump.lines().count(), items.len());

    // The leaderboard ranks it beside the model benchctl ran, marked external.
    let out = benchctl(&["leaderboard", "--results-dir", results_dir], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let board = std::fs::read_to_string(results.path().join("LEADERBOARD.md")).unwrap();
    assert!(board.contains("| my-vlm (external) |"), "{board}");
    assert!(board.contains("[external](https://example.org/my-vlm)"), "{board}");
    assert!(board.contains("## External models") && board.contains("a Python VLM \\| run elsewhere"), "{board}");
    assert!(board.contains(&sha[..16]), "{board}");

    // Head to head against the zoo run: paired statistics on the same items.
    let zoo_path = results.path().join("runs").join(
        std::fs::read_dir(results.path().join("runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|f| f.ends_with(".json") && !f.contains("my-vlm"))
            .unwrap(),
    );
    let summary = results.path().join("summary.md");
    let out = benchctl(
        &[
            "compare",
            "--baseline",
            zoo_path.to_str().unwrap(),
            run_path.to_str().unwrap(),
            "--summary",
            summary.to_str().unwrap(),
        ],
        &[],
    );
    let table = stdout(&out);
    let zoo_group = zoo_run["report"]["metrics"]["group_score"].as_f64().unwrap();
    let row = table.lines().find(|l| l.contains("group_score")).expect("a group_score row");
    assert!(row.contains("my-vlm (external) vs"), "{table}");
    assert!(row.contains('[') && row.contains(']'), "a paired interval: {table}");
    // Item scores of two models are on different scales: no largest item-score change.
    let cells: Vec<&str> = row.trim().trim_matches('│').split('┆').map(str::trim).collect();
    assert_eq!(cells.get(9), Some(&"–"), "{table}");
    assert_eq!(out.status.code(), if group < zoo_group { Some(6) } else { Some(0) }, "{table}\n{}", stderr(&out));

    // A zoo id is refused as a name (a usage error), before anything is read or stored.
    let out = call("clip-vit-b32");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("zoo model's id"), "{}", stderr(&out));
    let stored = std::fs::read_dir(results.path().join("runs")).unwrap().count();
    let out = call(" spaced");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(results.path().join("runs")).unwrap().count(), stored);
}

/// Items that share an image are resampled together: a manifest of 240 one-image items, four
/// per image, each image's items all right or all wrong (as a model that misreads an image
/// misreads every question on it). The run records a cluster bootstrap over 60 clusters, each
/// metric's design effect about 4, and an interval about twice as wide as `--bootstrap items`
/// gives; with a tag named by `metrics.cluster_by`, that tag's values cluster instead.
#[test]
fn items_sharing_an_image_are_resampled_together() {
    let data = tempfile::tempdir().unwrap();
    let (images, per_image) = (60, 4);
    let (mut records, mut dump) = (String::new(), String::new());
    for i in 0..images * per_image {
        let image = i / per_image;
        records += &format!("{{\"id\": \"q{i}\", \"image\": \"img{image}.png\", \"scene\": \"s{}\"}}\n", image / 2);
        let right = (image * 7) % 3 != 0;
        let row = if right { "[0.9, 0.1]" } else { "[0.1, 0.9]" };
        dump += &format!("{{\"id\": \"q{i}\", \"scores\": [{row}]}}\n");
    }
    std::fs::write(data.path().join("records.jsonl"), records).unwrap();
    let manifest = |cluster_by: &str| {
        format!(
            "id = \"shared\"\ndescription = \"x\"\n[source]\nfile = \"records.jsonl\"\nformat = \"jsonl\"\n[item]\nid = \"{{id}}\"\nimages = [\"{{image}}\"]\ntexts = [\"a\", \"b\"]\ntruth = {{ text = 0 }}\n[item.tags]\nscene = \"{{scene}}\"\n[metrics]\nfamily = \"choice\"\n{cluster_by}"
        )
    };
    let scores = data.path().join("dump.jsonl");
    std::fs::write(&scores, dump).unwrap();
    let run = |manifest_text: String, extra: &[&str]| {
        let path = data.path().join("m.toml");
        std::fs::write(&path, manifest_text).unwrap();
        let results = tempfile::tempdir().unwrap();
        let (data_dir, results_dir) = (data.path().to_str().unwrap(), results.path().to_str().unwrap());
        let mut args = vec!["score", "--suite", path.to_str().unwrap(), "--data-dir", data_dir];
        args.extend(["--scores", scores.to_str().unwrap(), "--model-name", "x", "--results-dir", results_dir]);
        args.extend_from_slice(extra);
        common::stored_run(&benchctl(&args, &[])).1
    };
    let width = |run: &serde_json::Value| {
        let i = &run["intervals"]["i2t_accuracy"];
        i[1].as_f64().unwrap() - i[0].as_f64().unwrap()
    };
    let clustered = run(manifest(""), &[]);
    let bootstrap = &clustered["bootstrap"];
    assert_eq!((bootstrap["unit"].as_str(), bootstrap["rule"].as_str()), (Some("clusters"), Some("shared images")));
    assert_eq!(bootstrap["clusters"], 60);
    let effect = bootstrap["design_effects"]["i2t_accuracy"].as_f64().unwrap();
    assert!((3.8..4.2).contains(&effect), "design effect {effect}");
    let items = run(manifest(""), &["--bootstrap", "items"]);
    assert_eq!(items["bootstrap"]["unit"], "items");
    assert!(items["bootstrap"].get("design_effects").is_none());
    let ratio = width(&clustered) / width(&items);
    assert!((1.6..2.5).contains(&ratio), "clustered {} vs items {}", width(&clustered), width(&items));
    // Two images per scene: `cluster_by = "scene"` makes 30 clusters.
    let scenes = run(manifest("cluster_by = \"scene\"\n"), &[]);
    assert_eq!(
        (scenes["bootstrap"]["rule"].as_str(), scenes["bootstrap"]["clusters"].as_u64()),
        (Some("tag scene"), Some(30))
    );
}
