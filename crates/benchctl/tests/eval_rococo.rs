//! `benchctl eval --suite rococo` end to end on a fixture in the official shape.

mod common;

use common::{benchctl, dump_path, eval_tiny, stderr, stdout};

fn eval(data: &std::path::Path, results: &std::path::Path) -> serde_json::Value {
    eval_tiny("rococo", data, results, &["--rococo-lambdas", "900,800", "--rococo-seeds", "0,1", "--batch-size", "16"])
        .1
}

#[test]
fn score_recomputes_the_rococo_report_from_the_dump() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(data.path(), 8);
    let results = tempfile::tempdir().unwrap();
    let (path, run, _) = eval_tiny(
        "rococo",
        data.path(),
        results.path(),
        &["--rococo-methods", "patch,mix", "--rococo-lambdas", "800", "--rococo-seeds", "2,0"],
    );
    let dump = dump_path(&path, &run);
    let out = benchctl(&["score", "--suite", "rococo", "--scores", dump.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let report: serde_json::Value = serde_json::from_str(&text[text.find("\n{").unwrap()..]).unwrap();
    assert_eq!(report, run["report"], "the same metrics, in the same order, from the dump alone");

    // A dump line out of order is named.
    let mut lines: Vec<String> = std::fs::read_to_string(&dump).unwrap().lines().map(String::from).collect();
    lines.swap(0, 1);
    let broken = results.path().join("broken.jsonl");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    let out = benchctl(&["score", "--suite", "rococo", "--scores", broken.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("line 1: query 1 of clean i2t is out of order (expected 0)"), "{}", stderr(&out));

    // A rank no gallery of that size allows is bad data, naming the line.
    let mut lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&dump).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.iter().all(|l| l["rank"].as_u64().unwrap() < l["candidates"].as_u64().unwrap()));
    lines[2]["rank"] = serde_json::json!(1_000_000_000_000u64);
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&broken, text.join("\n")).unwrap();
    let out = benchctl(&["score", "--suite", "rococo", "--scores", broken.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("line 3: rank 1000000000000 is impossible in a gallery of"), "{}", stderr(&out));
}

#[test]
fn rococo_fixture_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(data.path(), 12);
    let results = tempfile::tempdir().unwrap();
    let run = eval(data.path(), results.path());
    let m = &run["report"]["metrics"];
    let get = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("missing {k} in {m}"));
    for prefix in ["clean_i2t", "clean_t2i", "same_concept_i2t", "danger_i2t", "mix90_t2i", "patch80_t2i"] {
        let (r1, r5, r10) = (get(&format!("{prefix}_r1")), get(&format!("{prefix}_r5")), get(&format!("{prefix}_r10")));
        assert!(0.0 <= r1 && r1 <= r5 && r5 <= r10 && r10 <= 100.0, "{prefix}: {r1} {r5} {r10}");
    }
    // Drop rate against the clean gallery's R@1, when that is not zero.
    let clean = get("clean_i2t_r1");
    if clean > 0.0 {
        let expected = 100.0 * (clean - get("rand_voca_i2t_r1")) / clean;
        assert!((get("rand_voca_i2t_drop") - expected).abs() < 1e-9);
    }
    let i2t_mean = ["rand_voca", "same_concept", "diff_concept", "danger"]
        .iter()
        .map(|s| get(&format!("{s}_i2t_r1")))
        .sum::<f64>()
        / 4.0;
    assert!((get("i2t_r1_altered_mean") - i2t_mean).abs() < 1e-9);

    // 12 test images plus 12 altered ones for each of 2 methods × 2 λ × 2 seeds; each
    // distinct caption once (originals are shared by all five galleries).
    let counts = &run["counts"];
    assert_eq!(counts["images_encoded"], 12 + 12 * 8);
    assert_eq!(counts["texts_encoded"], counts["unique_texts"]);
    assert_eq!(counts["unique_texts"], 63 + 4 * 60);

    // The same seeds give the same galleries and so the same metrics.
    let again = eval(data.path(), tempfile::tempdir().unwrap().path());
    assert_eq!(again["report"], run["report"]);
}

#[test]
fn a_warm_rococo_rerun_ranks_from_the_cache_without_the_weights() {
    let (data, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    benchctl_testkit::rococo_layout(data.path(), 8);
    let model = common::tiny_model();
    let run = || {
        let results = common::scratch_dir("rococo-results");
        let args = [
            "eval",
            "--model-path",
            model.as_str(),
            "--suite",
            "rococo",
            "--data-dir",
            data.path().to_str().unwrap(),
            "--results-dir",
            results.to_str().unwrap(),
            "--rococo-lambdas",
            "800",
            "--rococo-seeds",
            "1",
        ];
        let (path, json) = common::stored_run(&benchctl(&args, &[("BENCHCTL_CACHE", cache.path().to_str().unwrap())]));
        (std::fs::read_to_string(dump_path(&path, &json)).unwrap(), json)
    };
    let (cold_dump, cold) = run();
    assert!(cold["timings"]["load_model_s"].as_f64().unwrap() > 0.0);
    let (warm_dump, warm) = run();
    assert_eq!(warm["timings"]["load_model_s"].as_f64(), Some(0.0), "every embedding was cached: no weights read");
    assert_eq!((&warm["counts"]["images_encoded"], &warm["counts"]["texts_encoded"]), (&0.into(), &0.into()));
    assert_eq!(warm["report"], cold["report"]);
    assert_eq!(warm_dump, cold_dump, "every query's rank is the cold run's");
}

/// The folders RoCOCO's `mix_images.py` writes (`images/mix_0.9/<file name>`) are read when
/// present and named in the run record; a method/λ without its folder is generated; and
/// `--rococo-altered release` without the folder is bad data naming it.
#[test]
fn release_altered_folders_are_used_and_recorded() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(data.path(), 8);
    let folder = data.path().join("images/mix_0.9");
    std::fs::create_dir_all(&folder).unwrap();
    for i in 0..8u64 {
        // 384² as mix_images.py saves them; each test image's own file name.
        benchctl_testkit::generated_image(1000 + i, 384, 384)
            .save_with_format(folder.join(format!("COCO_val2014_{:012}.jpg", 100 + i)), image::ImageFormat::Jpeg)
            .unwrap();
    }
    let results = tempfile::tempdir().unwrap();
    let args = ["--rococo-methods", "mix,patch", "--rococo-lambdas", "900", "--rococo-seeds", "0,1"];
    let (path, run, out) = eval_tiny("rococo", data.path(), results.path(), &args);
    let record = run["suite"]["altered_images"].as_str().unwrap();
    assert_eq!(record, "release folders mix_0.9 (mix_images.py); generated by benchctl for patch_0.9 (seeds 0, 1)");
    assert!(stdout(&out).contains("altered images: release folders mix_0.9"), "{}", stdout(&out));
    // The release gallery is one draw; the generated one averages two seeds.
    let dump = std::fs::read_to_string(dump_path(&path, &run)).unwrap();
    let galleries: std::collections::BTreeSet<String> = dump
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["gallery"].as_str().unwrap().to_string())
        .collect();
    assert!(
        galleries.contains("mix90_seedrelease")
            && galleries.contains("patch90_seed1")
            && !galleries.contains("mix90_seed0"),
        "{galleries:?}"
    );
    // 8 test images, 8 release images, 8 × 2 generated ones.
    assert_eq!(run["counts"]["images_encoded"], 8 + 8 + 16);

    let model = common::tiny_model();
    let mut cmd = vec![
        "eval",
        "--model-path",
        &model,
        "--suite",
        "rococo",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--results-dir",
        results.path().to_str().unwrap(),
    ];
    cmd.extend(args);
    cmd.extend(["--rococo-altered", "release"]);
    let out = benchctl(&cmd, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("patch_0.9") && stderr(&out).contains("mix_images.py"), "{}", stderr(&out));
}

/// Retrieval's summaries as the official code reports them: the mean of R@1/5/10, MedR
/// (`floor(median(rank)) + 1`, from the dump's ranks) and rsum over both clean directions.
#[test]
fn r_mean_medr_and_rsum_follow_the_official_code() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(data.path(), 10);
    let results = tempfile::tempdir().unwrap();
    let (path, run, _) = eval_tiny(
        "rococo",
        data.path(),
        results.path(),
        &[
            "--rococo-methods",
            "mix",
            "--rococo-lambdas",
            "900",
            "--rococo-seeds",
            "0",
            "--caption-normalisation",
            "blip",
            "--ties",
            "first",
        ],
    );
    assert_eq!(run["suite"]["caption_normalisation"], "blip (pre_caption, 30 words)");
    assert_eq!(run["suite"]["ties"], "first");
    let m = &run["report"]["metrics"];
    let get = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("missing {k} in {m}"));
    for prefix in ["clean_i2t", "clean_t2i", "danger_i2t", "mix90_t2i"] {
        let mean = (get(&format!("{prefix}_r1")) + get(&format!("{prefix}_r5")) + get(&format!("{prefix}_r10"))) / 3.0;
        assert!((get(&format!("{prefix}_r_mean")) - mean).abs() < 1e-9, "{prefix}");
    }
    let rsum: f64 =
        ["clean_i2t", "clean_t2i"].iter().flat_map(|p| ["r1", "r5", "r10"].map(|k| get(&format!("{p}_{k}")))).sum();
    assert!((get("clean_rsum") - rsum).abs() < 1e-9);
    let mut ranks: Vec<f64> = std::fs::read_to_string(dump_path(&path, &run))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["gallery"] == "clean" && v["direction"] == "t2i")
        .map(|v| v["rank"].as_f64().unwrap())
        .collect();
    ranks.sort_by(f64::total_cmp);
    let n = ranks.len();
    let median = if n % 2 == 1 { ranks[n / 2] } else { (ranks[n / 2 - 1] + ranks[n / 2]) / 2.0 };
    assert_eq!(get("clean_t2i_medr"), median.floor() + 1.0);
}

/// A retrieval gallery ranks every query against the whole gallery: `--shard` is refused
/// (exit 2) before any model work, not run whole under a shard's name.
#[test]
fn a_gallery_suite_refuses_shards() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(data.path(), 4);
    let (results, model) = (tempfile::tempdir().unwrap(), common::tiny_model());
    let args = common::eval_args(
        &model,
        "rococo",
        data.path().to_str().unwrap(),
        results.path().to_str().unwrap(),
        &["--shard", "0/2"],
    );
    let out = benchctl(&args, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("use --shard on rococo: a retrieval gallery"), "{}", stderr(&out));
    assert!(!results.path().join("runs").exists(), "nothing stored");
}
