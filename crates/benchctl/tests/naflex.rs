//! A model whose images keep their own sizes (SigLIP 2 NaFlex, the tiny fixture) through
//! `eval`: a batch of images of several sizes is encoded size by size and its embeddings put
//! back in order, so every image scores as it does encoded alone (`--batch-size 1`).

mod common;

use common::{demo_suite, dump_path, eval_model, scratch_dir};

/// The demo suite with its images resized to six different sizes (two to four of each).
fn demo_of_mixed_sizes() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::copy_tree(&demo_suite(), dir.path());
    let sizes = [(96, 64), (40, 90), (130, 31), (64, 64), (17, 11), (200, 120)];
    let mut images: Vec<_> =
        std::fs::read_dir(dir.path().join("images")).unwrap().flatten().map(|e| e.path()).collect();
    images.sort();
    for (i, path) in images.iter().enumerate() {
        let (w, h) = sizes[(i * 5) % sizes.len()];
        let resized = image::open(path).unwrap().resize_exact(w, h, image::imageops::FilterType::Triangle);
        resized.save(path).unwrap();
    }
    dir
}

fn scores(path: &std::path::Path, run: &serde_json::Value) -> Vec<f64> {
    std::fs::read_to_string(dump_path(path, run))
        .unwrap()
        .lines()
        .flat_map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let cells: Vec<f64> =
                row["scores"].as_array().unwrap().iter().flat_map(benchctl_testkit::json_numbers).collect();
            cells
        })
        .collect()
}

#[test]
fn images_of_several_sizes_in_one_batch_score_as_each_alone() {
    let model = benchctl_testkit::fixture_model("siglip2-naflex-tiny");
    let data = demo_of_mixed_sizes();
    let results = scratch_dir("naflex");
    let (alone_path, alone, _) = eval_model(&model, "winoground", data.path(), &results, &["--batch-size", "1"], &[]);
    let (mixed_path, mixed, _) = eval_model(&model, "winoground", data.path(), &results, &["--batch-size", "16"], &[]);
    // The run names the architecture its config was detected as.
    assert_eq!(alone["model"]["architecture"], "siglip2-naflex", "{}", alone["model"]);
    let (alone, mixed) = (scores(&alone_path, &alone), scores(&mixed_path, &mixed));
    assert_eq!(alone.len(), 8 * 4);
    let d = alone.iter().zip(&mixed).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(d <= 1e-5, "a batch of mixed sizes moves scores by {d}");
    // The sizes matter (the same images at one size score otherwise), so the comparison above
    // would see rows put back in the wrong order.
    let demo = scratch_dir("naflex-demo");
    let (demo_path, demo_run, _) = eval_model(&model, "winoground", &demo_suite(), &demo, &[], &[]);
    let one_size = scores(&demo_path, &demo_run);
    let moved = one_size.iter().zip(&mixed).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(moved > 1e-3, "resizing the images moved no score ({moved})");
}

/// `--max-patches` sets the budget of a NaFlex model's images: recorded in the run and its
/// label, a cache namespace of its own (the images are encoded again, not served from the
/// default budget's embeddings), other scores, never the default budget's baseline; refused for a model of fixed-size images, naming the flag.
#[test]
fn a_run_patch_budget_is_recorded_and_cached_apart() {
    let model = benchctl_testkit::fixture_model("siglip2-naflex-tiny");
    let data = demo_of_mixed_sizes();
    let (results, cache) = (scratch_dir("naflex-budget"), scratch_dir("naflex-budget-cache"));
    let env = [("BENCHCTL_CACHE", cache.to_str().unwrap())];
    let (default_path, default_run, _) = eval_model(&model, "winoground", data.path(), &results, &[], &env);
    let (small_path, small_run, _) =
        eval_model(&model, "winoground", data.path(), &results, &["--max-patches", "6"], &env);
    assert_eq!(small_run["model"]["max_patches"], 6, "{}", small_run["model"]);
    assert!(default_run["model"].get("max_patches").is_none(), "{}", default_run["model"]);
    assert_eq!(small_run["counts"]["images_encoded"], default_run["counts"]["images_encoded"]);
    let moved = scores(&default_path, &default_run)
        .iter()
        .zip(&scores(&small_path, &small_run))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(moved > 1e-3, "a budget of 6 patches moved no score ({moved})");
    // Tables name the budget, and the regression gate keeps the two runs apart.
    let run = |json: &serde_json::Value| benchctl::results::Run::from_json(json).unwrap();
    let (small, default) = (run(&small_run), run(&default_run));
    assert_eq!(
        (small.label(), default.label()),
        ("siglip2-naflex-tiny (6 patches)".into(), "siglip2-naflex-tiny".into())
    );
    assert_ne!(small.identity(), default.identity());

    let clip = benchctl_testkit::fixture_model("clip-tiny-a");
    let args = common::eval_args(
        clip.to_str().unwrap(),
        "winoground",
        data.path().to_str().unwrap(),
        results.to_str().unwrap(),
        &["--max-patches", "6"],
    );
    let out = common::benchctl(&args, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--max-patches 6"), "{stderr}");
}
