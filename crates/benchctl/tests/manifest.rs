//! A suite from a manifest file runs as the built-in suites do: `eval`, `check`, `score`,
//! the store, `report`, `compare` and the leaderboard; its run names the manifest so later
//! commands read it again. The manifest here is the bundled Winoground one, saved as a user's
//! own file under another id, so its reports must equal the built-in `winoground`'s.

mod common;

use common::{benchctl, demo_suite, stderr, stdout, stored_run};

fn eval(suite: &str, results: &std::path::Path) -> (std::path::PathBuf, serde_json::Value) {
    // The demo model trained on shapes: its reports are not all zeros, so equality means something.
    let model = benchctl_testkit::fixture_model("clip-shapes").display().to_string();
    let data = demo_suite().display().to_string();
    let args = [
        "eval",
        "--model-path",
        &model,
        "--suite",
        suite,
        "--data-dir",
        &data,
        "--results-dir",
        results.to_str().unwrap(),
    ];
    stored_run(&benchctl(&args, &[]))
}

#[test]
fn a_manifest_file_runs_like_a_built_in_suite() {
    let dir = tempfile::tempdir().unwrap();
    let bundled = benchctl_testkit::workspace_root().join("datasets/manifests/winoground-manifest.toml");
    let text = std::fs::read_to_string(bundled).unwrap().replace("id = \"winoground-manifest\"", "id = \"my-suite\"");
    let manifest = dir.path().join("my-suite.toml");
    std::fs::write(&manifest, text).unwrap();
    let results = dir.path().join("results");

    let (_, built_in) = eval("winoground", &results);
    let (run_path, run) = eval(manifest.to_str().unwrap(), &results);
    assert_eq!(run["suite"]["id"], "my-suite");
    assert_eq!(run["suite"]["manifest"], manifest.to_str().unwrap());
    assert_eq!(run["report"], built_in["report"], "the same report as the built-in loader");
    assert_eq!(run["report"]["metrics"]["group_score"], 50.0);
    assert_eq!(run["intervals"], built_in["intervals"]);
    assert_ne!(run["data_fingerprint"], built_in["data_fingerprint"], "the manifest is part of the data");

    // `check` and `score` take the manifest's path too.
    let data = demo_suite().display().to_string();
    let out = benchctl(&["check", "--suite", manifest.to_str().unwrap(), "--data-dir", &data], &[]);
    assert!(stdout(&out).contains("my-suite in") && stdout(&out).contains("8 items, 16 images"), "{}", stdout(&out));
    let dump = common::dump_path(&run_path, &run);
    let args =
        ["score", "--suite", manifest.to_str().unwrap(), "--data-dir", &data, "--scores", dump.to_str().unwrap()];
    let out = benchctl(&args, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = built_in["report"]["metrics"]["group_score"].as_f64().unwrap();
    assert!(stdout(&out).contains(&format!("{printed:.2}")), "{}", stdout(&out));

    // Later commands find the suite from the run, wherever they run.
    let out = benchctl(&["report", run_path.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(run_path.with_extension("report").join("index.html").is_file());
    let out = benchctl(&["leaderboard", "--results-dir", results.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let board = std::fs::read_to_string(results.join("LEADERBOARD.md")).unwrap();
    assert!(board.contains("my-suite (group score)"), "{board}");
}

#[test]
fn a_broken_manifest_is_a_usage_error_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("broken.toml");
    let bundled = benchctl_testkit::workspace_root().join("datasets/manifests/aro-coco-order.toml");
    let text = std::fs::read_to_string(bundled).unwrap().replace("id = \"aro-coco-order\"", "id = \"my-order\"");
    let line = text.lines().position(|l| l == "format = \"json\"").unwrap() + 1;
    std::fs::write(&manifest, text.replace("format = \"json\"", "format = \"yaml\"")).unwrap();
    let out = benchctl(&["check", "--suite", manifest.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("`source.format` (line {line})")), "{}", stderr(&out));
    // A missing key is named by the TOML reader.
    std::fs::write(&manifest, "id = \"x\"\ndescription = \"d\"\n").unwrap();
    let out = benchctl(&["check", "--suite", manifest.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("missing field `source`"), "{}", stderr(&out));
    let out = benchctl(&["check", "--suite", "no-such-suite"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("aro-vg-relation") && stderr(&out).contains("manifest's path"), "{}", stderr(&out));
}

/// `--suite NAME` finds `datasets/manifests/NAME.toml` under the working directory; shards of
/// a manifest suite merge back into the whole run (merge reads the manifest the runs name).
#[test]
fn local_manifests_by_name_and_sharded_runs_merge() {
    let dir = tempfile::tempdir().unwrap();
    let bundled = benchctl_testkit::workspace_root().join("datasets/manifests/winoground-manifest.toml");
    let text =
        std::fs::read_to_string(bundled).unwrap().replace("id = \"winoground-manifest\"", "id = \"local-bench\"");
    std::fs::create_dir_all(dir.path().join("datasets/manifests")).unwrap();
    std::fs::write(dir.path().join("datasets/manifests/local-bench.toml"), text).unwrap();
    let model = benchctl_testkit::fixture_model("clip-shapes").display().to_string();
    let data = demo_suite().display().to_string();
    let run = |extra: &[&str]| {
        let mut args =
            vec!["eval", "--model-path", &model, "--suite", "local-bench", "--data-dir", &data, "--no-cache"];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_benchctl"))
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        stored_run(&out)
    };
    let at = |name: &str| dir.path().join(name).display().to_string();
    let (_, whole) = run(&["--results-dir", &at("whole")]);
    assert_eq!(whole["suite"]["id"], "local-bench");
    let shards: Vec<String> = ["0/2", "1/2"]
        .iter()
        .map(|s| run(&["--results-dir", &at("shards"), "--shard", s]).0.display().to_string())
        .collect();
    let merged = dir.path().join("merged");
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(String::as_str));
    args.extend(["--results-dir", merged.to_str().unwrap()]);
    let (_, merged) = stored_run(&benchctl(&args, &[]));
    assert_eq!(merged["report"], whole["report"]);
    assert_eq!(merged["intervals"], whole["intervals"]);
}
