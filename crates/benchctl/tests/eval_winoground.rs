//! `benchctl eval` end to end on Winoground: the real 400 annotations in the official
//! layout with generated images, a fixture model, and the stored run and score dump.

mod common;

use std::collections::HashSet;

use benchctl::results::{read_scores, Run};
use benchctl_scoring::ScoreTensor;
use benchctl_testkit::{read_winoground_tsv, shared, winoground_layout};
use common::{benchctl, dump_path, eval_tiny};

#[test]
fn real_annotations_end_to_end() {
    let Some(tsv) = shared("datasets/winoground/winoground_annotations.tsv") else { return };
    let rows = read_winoground_tsv(&tsv);
    let data = tempfile::tempdir().unwrap();
    winoground_layout(&rows, data.path());
    let results = tempfile::tempdir().unwrap();
    let (run_path, json, out) = eval_tiny("winoground", data.path(), results.path(), &["--batch-size", "64"]);
    let report = &json["report"];
    assert_eq!(report["items"], 400);
    let breakdown = |key: &str, value: &str| report["breakdowns"][key][value]["items"].as_u64().unwrap();
    assert_eq!(breakdown("collapsed_tag", "Object"), 141);
    assert_eq!(breakdown("collapsed_tag", "Relation"), 233);
    assert_eq!(breakdown("collapsed_tag", "Both"), 26);
    assert_eq!(breakdown("num_main_preds", "1"), 292);
    assert_eq!(breakdown("num_main_preds", "2"), 108);
    for key in ["Symbolic", "Pragmatics", "Series", "Morpheme-Level"] {
        assert!(breakdown("secondary_tag", key) > 0, "{key}");
    }

    // Encode once: every unique image and caption exactly once, in batches of 64.
    let captions: HashSet<&str> = rows.iter().flat_map(|r| [r.caption_0.as_str(), r.caption_1.as_str()]).collect();
    let counts = &json["counts"];
    assert_eq!(counts["unique_images"], 800);
    assert_eq!(counts["images_encoded"], 800);
    assert_eq!(counts["image_batches"], 13);
    assert_eq!(counts["unique_texts"].as_u64().unwrap() as usize, captions.len());
    assert_eq!(counts["texts_encoded"], counts["unique_texts"]);

    // The model is recorded, and the table names the model and suite.
    assert_eq!(json["model"]["id"], "clip-tiny-a");
    assert_eq!(json["model"]["dtype"], "f32");
    assert!(json["tool"]["version"].is_string());
    assert!(common::stdout(&out).contains("group_score"));

    // Every metric is recomputed from the score dump alone, exactly.
    let lines = read_scores(&dump_path(&run_path, &json)).unwrap();
    assert_eq!(lines.len(), 400);
    let suite = benchctl_suites::find("winoground").unwrap().load(data.path()).unwrap();
    let mut scores = ScoreTensor::new();
    for ((id, matrix), item) in lines.iter().zip(&suite.items) {
        assert_eq!(id, &item.id());
        scores.push(matrix.len(), matrix[0].len(), &matrix.concat()).unwrap();
    }
    let recomputed = suite.evaluate(&scores).unwrap();
    let stored = Run::from_json(&json).unwrap();
    assert_eq!(recomputed, stored.report);

    // The leaderboard picks the run up.
    let out = benchctl(&["leaderboard", "--results-dir", results.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let md = std::fs::read_to_string(results.path().join("LEADERBOARD.md")).unwrap();
    assert!(md.contains("## winoground") && md.contains("| clip-tiny-a |"), "{md}");
}

#[test]
fn repeated_captions_and_images_are_encoded_once() {
    let data = tempfile::tempdir().unwrap();
    common::copy_tree(&common::demo_suite(), data.path());
    // Make example 1 reuse example 0's images and captions.
    let path = data.path().join("examples.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for key in ["image_0", "image_1", "caption_0", "caption_1"] {
        lines[1][key] = lines[0][key].clone();
    }
    std::fs::write(&path, lines.iter().map(|l| l.to_string() + "\n").collect::<String>()).unwrap();
    let results = tempfile::tempdir().unwrap();
    let (run_path, json, _) = eval_tiny("winoground", data.path(), results.path(), &["--batch-size", "5"]);
    let counts = &json["counts"];
    assert_eq!(counts["unique_images"], 14);
    assert_eq!(counts["images_encoded"], 14);
    assert_eq!(counts["image_batches"], 3);
    assert_eq!(counts["texts_encoded"], 14);
    // The two identical items get identical scores.
    let dump = std::fs::read_to_string(dump_path(&run_path, &json)).unwrap();
    let scores: Vec<serde_json::Value> = dump.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(scores[0]["scores"], scores[1]["scores"]);
}

#[test]
fn batch_size_does_not_change_scores() {
    let mut dumps = Vec::new();
    for batch in ["1", "7", "32"] {
        let results = tempfile::tempdir().unwrap();
        let (path, json, _) = eval_tiny("winoground", &common::demo_suite(), results.path(), &["--batch-size", batch]);
        let lines = read_scores(&dump_path(&path, &json)).unwrap();
        dumps.push(lines);
    }
    for other in &dumps[1..] {
        for ((_, a), (_, b)) in dumps[0].iter().zip(other) {
            for (x, y) in a.concat().iter().zip(b.concat()) {
                assert!((x - y).abs() < 1e-4, "{x} vs {y}");
            }
        }
    }
}

/// The hub's two forms of Winoground (parquet with embedded PNGs, and examples.jsonl +
/// images/), written by the `datasets` library, give the same report; the embedded images
/// share the cache with their files (same bytes, same key).
#[test]
fn parquet_and_jsonl_releases_give_the_same_report() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchctl-suites/tests/fixtures/winoground-hub");
    let results = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let run = |form: &str| {
        let model = common::tiny_model();
        let out = common::benchctl(
            &[
                "eval",
                "--model-path",
                &model,
                "--suite",
                "winoground",
                "--data-dir",
                fixtures.join(form).to_str().unwrap(),
                "--results-dir",
                results.path().to_str().unwrap(),
            ],
            &[("BENCHCTL_CACHE", cache.path().to_str().unwrap())],
        );
        common::stored_run(&out).1
    };
    let (jsonl, parquet) = (run("jsonl"), run("parquet"));
    assert_eq!(jsonl["report"], parquet["report"]);
    assert_eq!(jsonl["report"]["items"], 4);
    assert_eq!(parquet["counts"]["images_encoded"], 0, "every image came from the cache the jsonl run filled");
    assert!(jsonl["report"]["breakdowns"]["tag"].as_object().unwrap().contains_key("Verb-Transitive"));
}

/// A caption longer than the model's 77-token context is cut as the reference pipeline cuts
/// it, and never silently: the run counts it, stores the count and prints it; with
/// `--on-long-caption error` the run is refused, naming the caption.
#[test]
fn long_captions_are_counted_or_refused() {
    let data = tempfile::tempdir().unwrap();
    common::copy_tree(&common::demo_suite(), data.path());
    let examples = data.path().join("examples.jsonl");
    let long: String = (0..90).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let text =
        std::fs::read_to_string(&examples).unwrap().replacen("a blue triangle to the left of a green square", &long, 1);
    std::fs::write(&examples, text).unwrap();
    let results = tempfile::tempdir().unwrap();
    let (_, run, out) = common::eval_tiny("winoground", data.path(), results.path(), &[]);
    assert_eq!(run["counts"]["captions_truncated"], 1);
    assert_eq!(run["counts"]["text_context"], 77);
    assert!(
        common::stdout(&out).contains("long captions: 1 of 16 unique caption(s) exceed the model's 77-token context"),
        "{}",
        common::stdout(&out)
    );

    let model = common::tiny_model();
    let out = common::benchctl(
        &[
            "eval",
            "--model-path",
            &model,
            "--suite",
            "winoground",
            "--data-dir",
            data.path().to_str().unwrap(),
            "--results-dir",
            results.path().to_str().unwrap(),
            "--on-long-caption",
            "error",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("w0 w1 w2")
            && common::stderr(&out).contains("longer than the model's 77-token context"),
        "{}",
        common::stderr(&out)
    );
}

/// A 1 × 1,000,000-pixel PNG (4 KB in the report) used to abort the process allocating 7 GB for its
/// resize; it is now bad data (exit 3) naming the image, before any allocation.
#[test]
fn an_image_of_extreme_aspect_ratio_is_bad_data_not_an_abort() {
    let data = tempfile::tempdir().unwrap();
    common::copy_tree(&common::demo_suite(), data.path());
    let image = data.path().join("images/ex_0_img_0.png");
    image::RgbImage::new(1, 1_000_000).save(&image).unwrap();
    let results = tempfile::tempdir().unwrap();
    let model = common::tiny_model();
    let out = common::benchctl(
        &[
            "eval",
            "--model-path",
            &model,
            "--suite",
            "winoground",
            "--data-dir",
            data.path().to_str().unwrap(),
            "--results-dir",
            results.path().to_str().unwrap(),
            "--no-cache",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(err.contains("ex_0_img_0.png") && err.contains("1×1000000") && err.contains("aspect ratio"), "{err}");
}

/// An image file followed by a gibibyte of zeros (sparse, so the disk holds none of it) is
/// read as Pillow reads it: the image ends where its format says, and it scores as the same
/// image without the tail does, with no more memory than that run (the tail is hashed for
/// the cache key as a stream, never held).
#[cfg(target_os = "linux")]
#[test]
fn an_image_followed_by_a_gibibyte_of_zeros_is_read_in_bounded_memory() {
    let (plain, padded) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    common::copy_tree(&common::demo_suite(), plain.path());
    common::copy_tree(&common::demo_suite(), padded.path());
    let image = padded.path().join("images/ex_0_img_0.png");
    let file = std::fs::OpenOptions::new().write(true).open(&image).unwrap();
    file.set_len(file.metadata().unwrap().len() + (1 << 30)).unwrap();
    let model = common::tiny_model();
    let run = |data: &std::path::Path| {
        let results = common::scratch_dir("gib-tail");
        let cache = common::scratch_dir("gib-tail-cache");
        let args = common::eval_args(&model, "winoground", data.to_str().unwrap(), results.to_str().unwrap(), &[]);
        let (out, rss) = common::benchctl_peak_rss(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
        let (path, json) = common::stored_run(&out);
        (std::fs::read_to_string(common::dump_path(&path, &json)).unwrap(), json, rss)
    };
    let (plain_dump, plain_run, plain_rss) = run(plain.path());
    let (padded_dump, padded_run, padded_rss) = run(padded.path());
    assert_eq!(padded_run["report"], plain_run["report"]);
    assert_eq!(padded_dump, plain_dump, "the item scores are the plain image's");
    assert!(padded_rss < plain_rss + 64.0, "peak RSS {padded_rss:.0} MiB with the tail, {plain_rss:.0} MiB without");
}

/// A suite longer than one scoring window (4,096 items): embeddings are fetched window by
/// window and released after the last item that shows them. Every item's scores match
/// `transformers` (CLIPModel, its PIL image processor and tokenizer on the same fixture
/// checkpoint, `scripts/fixtures/gen_window_reference.py` → `tests/fixtures/window-scores.npy`). Item n
/// shows demo item n mod 5's images, demo item n mod 8's first caption (shared across every
/// window boundary) and a second caption of its own (fetched and released within its window);
/// a row released too early fails the run. A warm re-run that reads every row from the cache,
/// and three shards merged, give the cold run's dump bit for bit, as the docs promise.
#[test]
fn suites_longer_than_a_scoring_window_match_transformers() {
    let demo = common::demo_suite();
    let base: Vec<serde_json::Value> = std::fs::read_to_string(demo.join("examples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let data = common::scratch_dir("window-suite");
    common::copy_tree(&demo.join("images"), &data.join("images"));
    let items = 5_000;
    let mut lines = String::new();
    for n in 0..items {
        let (a, b) = (&base[n % 5], &base[n % 8]);
        let own = format!("{} number {n}", b["caption_1"].as_str().unwrap());
        let item = serde_json::json!({
            "id": n, "image_0": a["image_0"], "image_1": a["image_1"], "caption_0": b["caption_0"], "caption_1": own,
            "tag": "t", "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": "Object",
        });
        lines.push_str(&format!("{item}\n"));
    }
    std::fs::write(data.join("examples.jsonl"), lines).unwrap();
    let reference: Vec<f32> = {
        let path = benchctl_testkit::workspace_root().join("crates/benchctl/tests/fixtures/window-scores.npy");
        let bytes = std::fs::read(path).unwrap();
        let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
        assert_eq!(npy.shape(), [items as u64, 2, 2]);
        npy.into_vec().unwrap()
    };
    let cache = common::scratch_dir("window-cache");
    let env = [("BENCHCTL_CACHE", cache.to_str().unwrap())];
    let run = |extra: &[&str]| {
        let results = common::scratch_dir("window-results");
        let (path, json, _) = common::eval_model(
            std::path::Path::new(&common::tiny_model()),
            "winoground",
            &data,
            &results,
            &[&["--batch-size", "256"], extra].concat(),
            &env,
        );
        (read_scores(&dump_path(&path, &json)).unwrap(), json, path)
    };
    let (cold, cold_run, _) = run(&[]);
    assert_eq!(cold.len(), items);
    assert_eq!(cold_run["counts"]["texts_encoded"], items + 8);
    for (n, (id, scores)) in cold.iter().enumerate() {
        assert_eq!(id, &n.to_string());
        for (cell, (ours, theirs)) in scores.concat().iter().zip(&reference[n * 4..n * 4 + 4]).enumerate() {
            assert!((ours - theirs).abs() < 1e-4, "item {n}, cell {cell}: {ours} vs transformers' {theirs}");
        }
    }

    let (warm, warm_run, _) = run(&[]);
    assert_eq!(warm_run["counts"]["texts_encoded"], 0);
    assert_eq!(warm_run["counts"]["texts_cached"], items + 8);
    assert_eq!(warm, cold);

    let shard_runs: Vec<String> =
        (0..3).map(|i| run(&["--no-cache", "--shard", &format!("{i}/3")]).2.display().to_string()).collect();
    let merged = common::scratch_dir("window-merged");
    let mut args = vec!["merge"];
    args.extend(shard_runs.iter().map(String::as_str));
    args.extend(["--data-dir", data.to_str().unwrap(), "--results-dir", merged.to_str().unwrap()]);
    let out = benchctl(&args, &env);
    let (path, json) = common::stored_run(&out);
    assert_eq!(read_scores(&dump_path(&path, &json)).unwrap(), cold);

    // Every vector that can spill in a file (`BENCHCTL_SPILL_AT=0`, the path a million-item
    // suite takes): the cold run's dump, report and intervals. A spill directory that cannot
    // take a file (here a regular file) is a warning, and the run stays in memory, unchanged.
    let spill_dir = common::scratch_dir("window-spill");
    let not_a_directory = spill_dir.join("a-file");
    std::fs::write(&not_a_directory, b"").unwrap();
    for (dir, warns) in [(&spill_dir, false), (&not_a_directory, true)] {
        let results = common::scratch_dir("window-results");
        let env = [("BENCHCTL_SPILL_AT", "0"), ("BENCHCTL_SPILL_DIR", dir.to_str().unwrap())];
        let (path, json, out) = common::eval_model(
            std::path::Path::new(&common::tiny_model()),
            "winoground",
            &data,
            &results,
            &["--batch-size", "256", "--no-cache"],
            &env,
        );
        assert_eq!(read_scores(&dump_path(&path, &json)).unwrap(), cold, "spilled to {}", dir.display());
        assert_eq!((&json["report"], &json["intervals"]), (&cold_run["report"], &cold_run["intervals"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.contains("failed to spill per-item state"), warns, "{stderr}");
        assert_eq!(std::fs::read_dir(&spill_dir).unwrap().count(), 1, "spill files are unlinked: none is left");
    }
}
