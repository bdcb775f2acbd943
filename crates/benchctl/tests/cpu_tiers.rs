//! `BENCHCTL_CPU` forces an instruction-set tier for the whole process: every tier this CPU
//! runs gives the generic tier's outcomes (gallery ranks bit for bit from the same
//! embeddings, encoder scores within 1e-6 relative), and a tier it cannot run is refused up front.

mod common;

use benchctl_cpu::{Isa, Tier};
use common::{benchctl, dump_path, stderr, stored_run, tiny_model};

#[test]
fn an_unknown_or_unsupported_tier_is_a_usage_error() {
    let out = benchctl(&["suites"], &[("BENCHCTL_CPU", "sse9")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error: failed to choose the CPU tier: BENCHCTL_CPU=sse9 is not a tier"),
        "{}",
        stderr(&out)
    );
    for isa in Isa::ALL.into_iter().filter(|isa| !isa.is_supported()) {
        let out = benchctl(&["suites"], &[("BENCHCTL_CPU", isa.name())]);
        assert_eq!(out.status.code(), Some(2), "{isa}: {}", stderr(&out));
        assert!(stderr(&out).contains("cannot run"), "{}", stderr(&out));
    }
    let out = benchctl(&["suites"], &[("BENCHCTL_CPU", "generic")]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// One eval per tier; returns each tier's run JSON and score dump.
fn per_tier(args: &[&str], cache: Option<&std::path::Path>) -> Vec<(Isa, serde_json::Value, String)> {
    Tier::available()
        .into_iter()
        .map(|tier| {
            let results = tempfile::tempdir().unwrap();
            let mut all: Vec<&str> = args.to_vec();
            all.extend(["--results-dir", results.path().to_str().unwrap()]);
            let mut env = vec![("BENCHCTL_CPU", tier.isa().name())];
            if let Some(cache) = cache {
                env.push(("BENCHCTL_CACHE", cache.to_str().unwrap()));
            }
            let (path, run) = stored_run(&benchctl(&all, &env));
            let dump = std::fs::read_to_string(dump_path(&path, &run)).unwrap();
            (tier.isa(), run, dump)
        })
        .collect()
}

#[test]
fn every_tier_ranks_a_rococo_gallery_exactly_as_the_generic_one() {
    let (data, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    benchctl_testkit::rococo_layout(data.path(), 24);
    let model = tiny_model();
    let args = [
        "eval",
        "--model-path",
        &model,
        "--suite",
        "rococo",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--rococo-lambdas",
        "800",
        "--rococo-seeds",
        "1",
    ];
    // The generic tier runs first and fills the cache; the others rank those same embeddings.
    let runs = per_tier(&args, Some(cache.path()));
    let (_, reference, reference_dump) = &runs[0];
    for (isa, run, dump) in &runs[1..] {
        assert_eq!(run["counts"]["images_encoded"], 0, "{isa}: the cached embeddings are ranked");
        assert_eq!(run["report"], reference["report"], "{isa}: the same metrics");
        assert_eq!(dump, reference_dump, "{isa}: every query's rank and top-1, bit for bit");
    }
}

#[test]
fn every_tier_scores_winoground_within_1e_6_relative_of_the_generic_one() {
    let (model, data) = (tiny_model(), common::demo_suite());
    let args =
        ["eval", "--model-path", &model, "--suite", "winoground", "--data-dir", data.to_str().unwrap(), "--no-cache"];
    let runs = per_tier(&args, None);
    let scores = |dump: &str| -> Vec<f64> {
        dump.lines()
            .flat_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["scores"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|row| row.as_array().unwrap().iter().map(|s| s.as_f64().unwrap()).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let reference = scores(&runs[0].2);
    assert!(!reference.is_empty());
    for (isa, _, dump) in &runs[1..] {
        let ours = scores(dump);
        assert_eq!(ours.len(), reference.len());
        // Scores are logits (scale × cosine, ≈ 5 here): within 1e-6 relative, a few ulp.
        let worst = ours.iter().zip(&reference).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0f64, f64::max);
        assert!(worst <= 1e-6, "{isa}: scores differ by {worst} (relative)");
    }
}
