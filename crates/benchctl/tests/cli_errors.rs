//! Bad input gets a clear error and a distinct non-zero exit code, never a panic.

mod common;

use common::{benchctl, copy_tree, demo_suite, stderr, tiny_model};

fn eval(data_dir: &str, model_dir: &str) -> std::process::Output {
    let results = tempfile::tempdir().unwrap();
    benchctl(
        &[
            "eval",
            "--model-path",
            model_dir,
            "--suite",
            "winoground",
            "--data-dir",
            data_dir,
            "--results-dir",
            results.path().to_str().unwrap(),
        ],
        &[],
    )
}

fn assert_fails(out: &std::process::Output, code: i32, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    // Notes (a checkpoint's defaults) may come first; the error is the first other line.
    let first = err.lines().find(|l| !l.starts_with("note: ")).unwrap_or_default();
    assert!(first.starts_with("error: failed to "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "expected {needle:?} in {err}");
    }
}

fn broken_demo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), dir.path());
    dir
}

#[test]
fn missing_data_dir() {
    let out = eval("/nonexistent/winoground", &tiny_model());
    assert_fails(&out, 3, &["/nonexistent/winoground", "facebook/winoground"]);
}

#[test]
fn missing_image_is_named() {
    let dir = broken_demo();
    std::fs::remove_file(dir.path().join("images/ex_3_img_1.png")).unwrap();
    let out = eval(dir.path().to_str().unwrap(), &tiny_model());
    assert_fails(&out, 3, &["ex_3_img_1.png"]);
}

#[test]
fn corrupt_image_is_named() {
    let dir = broken_demo();
    let path = dir.path().join("images/ex_5_img_0.png");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let out = eval(dir.path().to_str().unwrap(), &tiny_model());
    assert_fails(&out, 3, &["decode image", "ex_5_img_0.png"]);
}

#[test]
fn malformed_jsonl_names_file_and_line() {
    let dir = broken_demo();
    let path = dir.path().join("examples.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"id\": 99, oops}\n");
    std::fs::write(&path, text).unwrap();
    let out = eval(dir.path().to_str().unwrap(), &tiny_model());
    assert_fails(&out, 3, &["examples.jsonl line 9"]);
}

#[test]
fn model_dir_missing_a_file() {
    let model = tempfile::tempdir().unwrap();
    std::fs::copy(benchctl_testkit::fixture_model("clip-tiny-a").join("config.json"), model.path().join("config.json"))
        .unwrap();
    let out = eval(demo_suite().to_str().unwrap(), model.path().to_str().unwrap());
    assert_fails(&out, 4, &["missing model.safetensors, tokenizer.json"]);
}

#[test]
fn weights_disagreeing_with_config() {
    let model = tempfile::tempdir().unwrap();
    copy_tree(&benchctl_testkit::fixture_model("clip-tiny-a"), model.path());
    // clip-tiny-b's weights under clip-tiny-a's config.
    std::fs::copy(
        benchctl_testkit::fixture_model("clip-tiny-b").join("model.safetensors"),
        model.path().join("model.safetensors"),
    )
    .unwrap();
    let out = eval(demo_suite().to_str().unwrap(), model.path().to_str().unwrap());
    assert_fails(&out, 4, &["does not have the shape", "model.safetensors"]);
}

#[test]
fn unknown_model_and_suite_list_the_known_ones() {
    let out = benchctl(
        &["eval", "--model", "clip-vit-b99", "--suite", "winoground", "--data-dir", demo_suite().to_str().unwrap()],
        &[],
    );
    assert_fails(&out, 2, &["clip-vit-b99", "known models are clip-vit-b32"]);
    let out = benchctl(&["eval", "--model-path", &tiny_model(), "--suite", "winogrande"], &[]);
    assert_fails(&out, 2, &["winogrande", "known suites are eqben, eqben-subset, rococo, spec, valse, winoground"]);
}

#[test]
fn unavailable_device_is_a_usage_error() {
    let out = benchctl(
        &[
            "eval",
            "--model-path",
            &tiny_model(),
            "--suite",
            "winoground",
            "--data-dir",
            demo_suite().to_str().unwrap(),
            "--dtype",
            "f64",
        ],
        &[],
    );
    assert_fails(&out, 2, &["dtype `f64`"]);
}

#[test]
fn zoo_model_offline_without_cache() {
    let home = tempfile::tempdir().unwrap();
    let out = benchctl(
        &["eval", "--model", "clip-vit-b32", "--suite", "winoground", "--data-dir", demo_suite().to_str().unwrap()],
        &[("HF_HOME", home.path().to_str().unwrap()), ("HF_HUB_OFFLINE", "1")],
    );
    assert_fails(&out, 4, &["openai/clip-vit-base-patch32", "HF_HUB_OFFLINE"]);
}

#[test]
fn unwritable_results_keep_the_printed_metrics() {
    let blocker = tempfile::NamedTempFile::new().unwrap();
    // A file where the results directory should be: nothing can be created under it.
    let out = benchctl(
        &[
            "eval",
            "--model-path",
            &tiny_model(),
            "--suite",
            "winoground",
            "--data-dir",
            demo_suite().to_str().unwrap(),
            "--results-dir",
            blocker.path().join("sub").to_str().unwrap(),
        ],
        &[],
    );
    assert_fails(&out, 5, &["create results directory"]);
    assert!(common::stdout(&out).contains("group_score"), "the metrics were printed before the failure");
}

/// A file passed as `--model-path` says so; a cache location that cannot be used warns and
/// the run goes on without it (the cache is an accelerator, never a point of failure).
#[test]
fn a_model_file_and_an_unusable_cache_are_handled() {
    let model = std::path::Path::new(&tiny_model()).join("config.json");
    let out = benchctl(
        &[
            "eval",
            "--model-path",
            model.to_str().unwrap(),
            "--suite",
            "winoground",
            "--data-dir",
            demo_suite().to_str().unwrap(),
        ],
        &[],
    );
    assert_fails(&out, 4, &["it is a file; --model-path takes the directory holding config.json"]);

    let blocker = tempfile::NamedTempFile::new().unwrap();
    let results = tempfile::tempdir().unwrap();
    let out = benchctl(
        &[
            "eval",
            "--model-path",
            &tiny_model(),
            "--suite",
            "winoground",
            "--data-dir",
            demo_suite().to_str().unwrap(),
            "--results-dir",
            results.path().to_str().unwrap(),
        ],
        &[("BENCHCTL_CACHE", blocker.path().to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: failed to create cache directory"), "{}", stderr(&out));
}

/// Bad data is exit 3, not a computation failure: a VALSE copy whose every record is invalid,
/// and a RoCOCO dump missing a gallery the report needs.
#[test]
fn data_without_items_and_incomplete_dumps_are_bad_data() {
    let data = tempfile::tempdir().unwrap();
    let record = serde_json::json!({"r1": {"dataset": "visual7w", "image_file": "v7w_1.jpg", "caption": "c", "foil": "f", "mturk": {"caption": 1}}});
    for piece in benchctl_suites::valse::PIECES {
        std::fs::write(data.path().join(format!("{piece}.json")), record.to_string()).unwrap();
    }
    let out = benchctl(
        &["eval", "--model-path", &tiny_model(), "--suite", "valse", "--data-dir", data.path().to_str().unwrap()],
        &[],
    );
    assert_fails(&out, 3, &["it has no items to score (11 record(s) excluded by the suite's validity rule)"]);

    let dump = data.path().join("rococo.scores.jsonl");
    std::fs::write(&dump, r#"{"gallery": "clean", "direction": "i2t", "query": 0, "rank": 0, "top1_altered": false}"#)
        .unwrap();
    let out = benchctl(&["score", "--suite", "rococo", "--scores", dump.to_str().unwrap()], &[]);
    assert_fails(&out, 3, &["the clean t2i gallery was not scored"]);
}

/// `BENCHCTL_SPILL_AT` must be a byte count; anything else is refused before any work.
#[test]
fn a_spill_threshold_that_is_not_a_size_is_a_usage_error() {
    for bad in ["lots", "-1", "1.5e6"] {
        let out = benchctl(&["suites"], &[("BENCHCTL_SPILL_AT", bad)]);
        assert_fails(&out, 2, &["failed to read BENCHCTL_SPILL_AT", bad]);
    }
    let out = benchctl(&["suites"], &[("BENCHCTL_SPILL_AT", "0")]);
    assert!(out.status.success(), "{}", stderr(&out));
}
