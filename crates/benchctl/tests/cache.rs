//! The embedding cache: a warm re-run encodes nothing; truncated or corrupt entries are
//! recomputed, never trusted.

mod common;

use std::path::{Path, PathBuf};

use common::{benchctl, demo_suite, stored_run, tiny_model};

fn eval(cache: &Path, extra: &[&str]) -> serde_json::Value {
    let results = tempfile::tempdir().unwrap();
    let (model, data) = (tiny_model(), demo_suite());
    let mut args = vec![
        "eval", "--model-path", model.as_str(), "--suite", "winoground",
        "--data-dir", data.to_str().unwrap(), "--results-dir", results.path().to_str().unwrap(), "--batch-size", "4",
    ];
    args.extend_from_slice(extra);
    stored_run(&benchctl(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())])).1
}

fn encoded(run: &serde_json::Value) -> (u64, u64, u64, u64) {
    let c = &run["counts"];
    let n = |k: &str| c[k].as_u64().unwrap();
    (n("images_encoded"), n("texts_encoded"), n("images_cached"), n("texts_cached"))
}

fn segments(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(cache).unwrap() {
        for f in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    out
}

#[test]
fn a_warm_rerun_does_no_forward_pass() {
    let cache = tempfile::tempdir().unwrap();
    let cold = eval(cache.path(), &[]);
    assert_eq!(encoded(&cold), (16, 16, 0, 0));
    let warm = eval(cache.path(), &[]);
    assert_eq!(encoded(&warm), (0, 0, 16, 16));
    assert_eq!(warm["counts"]["image_batches"], 0);
    assert_eq!(warm["report"], cold["report"]);
}

#[test]
fn a_truncated_cache_file_is_recomputed() {
    let cache = tempfile::tempdir().unwrap();
    let cold = eval(cache.path(), &[]);
    let segment = &segments(cache.path())[0];
    let bytes = std::fs::read(segment).unwrap();
    // One record holds 4 + 32 + 4 + 24 × 4 + 8 bytes (projection dim 24): cut the last in half.
    let record = 4 + 32 + 4 + 24 * 4 + 8;
    assert_eq!(bytes.len(), 32 * record);
    std::fs::write(segment, &bytes[..bytes.len() - record / 2]).unwrap();
    let rerun = eval(cache.path(), &[]);
    let (images, texts, _, _) = encoded(&rerun);
    assert_eq!(images + texts, 1, "only the cut record is encoded again");
    assert_eq!(rerun["report"], cold["report"]);
    assert_eq!(encoded(&eval(cache.path(), &[])), (0, 0, 16, 16));
}

#[test]
fn a_corrupt_entry_is_detected_and_recomputed() {
    let cache = tempfile::tempdir().unwrap();
    let cold = eval(cache.path(), &[]);
    let segment = &segments(cache.path())[0];
    let mut bytes = std::fs::read(segment).unwrap();
    // Flip a bit inside the values of the third record.
    let record = 4 + 32 + 4 + 24 * 4 + 8;
    bytes[2 * record + 60] ^= 0x40;
    std::fs::write(segment, &bytes).unwrap();
    let rerun = eval(cache.path(), &[]);
    let (images, texts, _, _) = encoded(&rerun);
    assert_eq!(images + texts, 1);
    assert_eq!(rerun["report"], cold["report"]);
}

#[test]
fn no_cache_encodes_everything_and_stores_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let run = eval(cache.path(), &["--no-cache"]);
    assert_eq!(encoded(&run), (16, 16, 0, 0));
    assert!(std::fs::read_dir(cache.path()).unwrap().next().is_none());
}
