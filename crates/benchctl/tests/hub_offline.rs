//! `benchctl eval --model clip-vit-b32` resolves through a Hugging Face cache laid out in a
//! temp dir with `HF_HUB_OFFLINE=1` (the fixture weights stand in for OpenAI's).

mod common;

use benchctl_models::registry;
use common::{benchctl, demo_suite, stored_run};

#[test]
fn zoo_id_resolves_from_the_cache_offline() {
    let home = tempfile::tempdir().unwrap();
    let entry = registry::find("clip-vit-b32").unwrap();
    let folder = home.path().join("hub").join(format!("models--{}", entry.repo.replace('/', "--")));
    let snapshot = folder.join("snapshots").join(entry.revision);
    common::copy_tree(&benchctl_testkit::fixture_model("clip-tiny-a"), &snapshot);
    benchctl_testkit::write_clip_preprocessor_config(&snapshot, 224);
    let results = tempfile::tempdir().unwrap();
    let out = benchctl(
        &[
            "eval",
            "--model",
            "clip-vit-b32",
            "--suite",
            "winoground",
            "--data-dir",
            demo_suite().to_str().unwrap(),
            "--results-dir",
            results.path().to_str().unwrap(),
        ],
        &[("HF_HOME", home.path().to_str().unwrap()), ("HF_HUB_OFFLINE", "1")],
    );
    let (_, json) = stored_run(&out);
    assert_eq!(json["model"]["id"], "clip-vit-b32");
    assert_eq!(json["model"]["repo"], entry.repo);
    assert_eq!(json["model"]["commit"], entry.revision);
    assert_eq!(json["report"]["items"], 8);
}

/// Offline with an empty cache, the error names the file, the cache, and how to bring the
/// weights to this machine (`hf download` elsewhere and the cache copied, or `--model-path`).
#[test]
fn an_offline_miss_says_how_to_bring_the_weights() {
    let home = tempfile::tempdir().unwrap();
    let entry = registry::find("clip-vit-b32").unwrap();
    let out = benchctl(
        &["eval", "--model", "clip-vit-b32", "--suite", "winoground", "--data-dir", demo_suite().to_str().unwrap()],
        &[("HF_HOME", home.path().to_str().unwrap()), ("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(out.status.code(), Some(4), "{}", common::stderr(&out));
    let message = common::stderr(&out);
    for needle in [
        format!("hf download {} --revision {}", entry.repo, entry.revision),
        home.path().join("hub").display().to_string(),
        "--model-path DIR".to_string(),
        "Offline machines".to_string(),
    ] {
        assert!(message.contains(&needle), "{needle:?} missing from: {message}");
    }
}
