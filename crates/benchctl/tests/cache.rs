//! The embedding cache: a warm re-run encodes nothing and reads no weights; truncated or
//! corrupt entries are recomputed, never trusted.

mod common;

use std::path::{Path, PathBuf};

use common::{benchctl, copy_tree, demo_suite, dump_path, stderr, stored_run, tiny_model};

/// `benchctl eval` of `model` on the demo suite with `cache`: the process output.
fn eval_model(model: &str, cache: &Path, results: &Path, extra: &[&str]) -> std::process::Output {
    let data = demo_suite();
    let mut args = vec![
        "eval",
        "--model-path",
        model,
        "--suite",
        "winoground",
        "--data-dir",
        data.to_str().unwrap(),
        "--results-dir",
        results.to_str().unwrap(),
        "--batch-size",
        "4",
    ];
    args.extend_from_slice(extra);
    benchctl(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())])
}

fn eval(cache: &Path, extra: &[&str]) -> serde_json::Value {
    let results = tempfile::tempdir().unwrap();
    stored_run(&eval_model(&tiny_model(), cache, results.path(), extra)).1
}

/// Bytes of a cache record holding `dim` values: magic, key, dim, values, check.
fn record_len(dim: usize) -> usize {
    4 + 32 + 4 + dim * 4 + 8
}

/// A segment opens with its magic and namespace hash; its first record is the model's score
/// head (3 values), then the 32 embeddings (projection dim 24).
const HEAD_RECORD: usize = 4 + 32 + 4 + 32 + 4 + 3 * 4 + 8;

fn encoded(run: &serde_json::Value) -> (u64, u64, u64, u64) {
    let c = &run["counts"];
    let n = |k: &str| c[k].as_u64().unwrap();
    (n("images_encoded"), n("texts_encoded"), n("images_cached"), n("texts_cached"))
}

/// The embedding segments of every model namespace (not the image-key memo).
fn segments(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(cache).unwrap() {
        let dir = dir.unwrap().path();
        if dir.ends_with("file-keys") {
            continue;
        }
        for f in std::fs::read_dir(dir).unwrap() {
            let path = f.unwrap().path();
            if path.extension().is_some_and(|e| e == "bin") {
                out.push(path);
            }
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
    // Cut the last embedding record in half.
    let record = record_len(24);
    assert_eq!(bytes.len(), HEAD_RECORD + 32 * record);
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
    // Flip a bit inside the values of the third embedding record.
    bytes[HEAD_RECORD + 2 * record_len(24) + 60] ^= 0x40;
    std::fs::write(segment, &bytes).unwrap();
    let rerun = eval(cache.path(), &[]);
    let (images, texts, _, _) = encoded(&rerun);
    assert_eq!(images + texts, 1);
    assert_eq!(rerun["report"], cold["report"]);
}

/// An entry whose check is valid but whose size cannot be this model's (as a hand-written or
/// foreign-tool entry could be) is a miss: encoded again, the report unchanged, not a
/// "shape mismatch" failure.
#[test]
fn an_entry_of_the_wrong_size_is_encoded_again() {
    use sha2::Digest;
    let cache = tempfile::tempdir().unwrap();
    let cold = eval(cache.path(), &[]);
    let segment = &segments(cache.path())[0];
    let mut bytes = std::fs::read(segment).unwrap();
    // The segment's namespace (after its magic) and the first embedding's key; a later record
    // for the same key replaces the earlier one when the cache is read.
    let namespace = bytes[4..36].to_vec();
    let key = bytes[HEAD_RECORD + 4..HEAD_RECORD + 36].to_vec();
    let values: Vec<u8> = [0.5f32; 5].iter().flat_map(|v| v.to_le_bytes()).collect();
    let check = sha2::Sha256::new().chain_update(&namespace).chain_update(&key).chain_update(&values).finalize();
    let magic: [u8; 4] = bytes[HEAD_RECORD..HEAD_RECORD + 4].try_into().unwrap();
    bytes.extend_from_slice(&magic);
    bytes.extend_from_slice(&key);
    bytes.extend_from_slice(&5u32.to_le_bytes());
    bytes.extend_from_slice(&values);
    bytes.extend_from_slice(&check[..8]);
    std::fs::write(segment, &bytes).unwrap();
    let results = tempfile::tempdir().unwrap();
    let out = eval_model(&tiny_model(), cache.path(), results.path(), &[]);
    assert!(stderr(&out).contains("had the wrong size; they are encoded again"), "{}", stderr(&out));
    let rerun = stored_run(&out).1;
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

#[test]
fn a_warm_rerun_scores_without_reading_the_weights() {
    let (cache, results, dir) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let model = dir.path().join("clip-tiny-a");
    copy_tree(Path::new(&tiny_model()), &model);
    let model_arg = model.to_str().unwrap();
    let (cold_path, cold) = stored_run(&eval_model(model_arg, cache.path(), results.path(), &[]));
    assert!(cold["timings"]["load_model_s"].as_f64().unwrap() > 0.0);

    // Same size and mtime (so the same cache namespace), but no longer a safetensors file.
    let weights = model.join("model.safetensors");
    let modified = std::fs::metadata(&weights).unwrap().modified().unwrap();
    let len = std::fs::metadata(&weights).unwrap().len() as usize;
    std::fs::write(&weights, vec![0u8; len]).unwrap();
    std::fs::File::options().write(true).open(&weights).unwrap().set_modified(modified).unwrap();

    let (warm_path, warm) = stored_run(&eval_model(model_arg, cache.path(), results.path(), &[]));
    assert_eq!(encoded(&warm), (0, 0, 16, 16));
    assert_eq!(warm["timings"]["load_model_s"].as_f64(), Some(0.0));
    assert_eq!(warm["report"], cold["report"]);
    assert_eq!(warm["model"], cold["model"], "the run names the same model and score head");
    let dump = |path: &Path, run: &serde_json::Value| std::fs::read_to_string(dump_path(path, run)).unwrap();
    assert_eq!(dump(&warm_path, &warm), dump(&cold_path, &cold), "every item score is the cold run's");

    // The weights really are unreadable: a run that needs them says so.
    let out = eval_model(model_arg, cache.path(), results.path(), &["--no-cache"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("model.safetensors"), "{}", stderr(&out));
}

#[test]
fn a_run_missing_one_embedding_loads_the_model_and_encodes_only_that() {
    let cache = tempfile::tempdir().unwrap();
    let cold = eval(cache.path(), &[]);
    let segment = &segments(cache.path())[0];
    let bytes = std::fs::read(segment).unwrap();
    std::fs::write(segment, &bytes[..bytes.len() - record_len(24)]).unwrap();
    let rerun = eval(cache.path(), &[]);
    assert_eq!(encoded(&rerun), (0, 1, 16, 15));
    assert!(rerun["timings"]["load_model_s"].as_f64().unwrap() > 0.0);
    assert_eq!(rerun["report"], cold["report"]);
}

#[test]
fn a_cache_without_the_score_head_loads_the_model() {
    let cache = tempfile::tempdir().unwrap();
    let cold = eval(cache.path(), &[]);
    let segment = &segments(cache.path())[0];
    let bytes = std::fs::read(segment).unwrap();
    // Drop the head record (keeping the segment's own header): every embedding is still
    // there, but scoring needs the scale.
    let header = 4 + 32;
    std::fs::write(segment, [&bytes[..header], &bytes[HEAD_RECORD..]].concat()).unwrap();
    let rerun = eval(cache.path(), &[]);
    assert_eq!(encoded(&rerun), (0, 0, 16, 16));
    assert!(rerun["timings"]["load_model_s"].as_f64().unwrap() > 0.0);
    assert_eq!(rerun["report"], cold["report"]);
}

/// A segment copied into another model's folder is ignored there (it carries the namespace it
/// was written for): that model encodes everything and reports its own scores, not the other
/// model's.
#[test]
fn a_segment_copied_into_another_models_folder_is_not_trusted() {
    let cache = tempfile::tempdir().unwrap();
    let results = tempfile::tempdir().unwrap();
    let b = benchctl_testkit::fixture_model("clip-tiny-b");
    let own_b =
        stored_run(&eval_model(b.to_str().unwrap(), tempfile::tempdir().unwrap().path(), results.path(), &[])).1;
    // Model A fills its folder; a run of model B makes its folder, which is then emptied.
    eval(cache.path(), &[]);
    let a_segment = segments(cache.path())[0].clone();
    let a_folder = a_segment.parent().unwrap().to_path_buf();
    stored_run(&eval_model(b.to_str().unwrap(), cache.path(), results.path(), &[]));
    let b_folder = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| *p != a_folder && !p.ends_with("file-keys"))
        .unwrap();
    for f in std::fs::read_dir(&b_folder).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    std::fs::copy(&a_segment, b_folder.join(a_segment.file_name().unwrap())).unwrap();
    let run = stored_run(&eval_model(b.to_str().unwrap(), cache.path(), results.path(), &[])).1;
    assert_eq!(encoded(&run), (16, 16, 0, 0), "nothing of model A's is served to model B");
    assert_eq!(run["report"], own_b["report"]);
    // The copied segment's records, re-headed with B's namespace, still fail their checks.
    let mut spliced = std::fs::read(&a_segment).unwrap();
    let b_segment = segments(cache.path())
        .into_iter()
        .find(|p| p.starts_with(&b_folder) && *p != b_folder.join(a_segment.file_name().unwrap()))
        .unwrap();
    spliced[4..36].copy_from_slice(&std::fs::read(&b_segment).unwrap()[4..36]);
    for f in std::fs::read_dir(&b_folder).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    std::fs::write(b_folder.join("seg-spliced.bin"), spliced).unwrap();
    let run = stored_run(&eval_model(b.to_str().unwrap(), cache.path(), results.path(), &[])).1;
    assert_eq!(encoded(&run), (16, 16, 0, 0), "records checked against A's namespace fail under B's");
}

/// The namespace carries the code's output version and the crate version: a build whose
/// preprocessing or model code changed outputs starts a fresh cache.
#[test]
fn the_namespace_names_the_code_version() {
    let resolved = benchctl::model::resolve_model(&benchctl::plan::ModelChoice {
        source: benchctl::plan::ModelSource::Path(tiny_model().into()),
        head: None,
        text_prep: None,
        max_patches: None,
        processor_pixels: None,
        answer_rule: Default::default(),
        reply_reading: Default::default(),
        device: benchctl_models::device::DeviceSpec::Cpu,
        dtype: candle_core::DType::F32,
    })
    .unwrap();
    let benchctl::cache::CacheIdentity::Model(identity) = &resolved.cache_identity else { panic!("a local model") };
    assert_eq!(identity.output_version, benchctl_models::OUTPUT_VERSION);
    assert_eq!(identity.benchctl_version, env!("CARGO_PKG_VERSION"));
}

/// Each namespace folder says what it holds: `identity.json`, the identity its name is the
/// hash of, naming the model, its files' digests, dtype, device and head.
#[test]
fn each_cache_folder_describes_its_identity() {
    let cache = tempfile::tempdir().unwrap();
    eval(cache.path(), &[]);
    let folders: Vec<PathBuf> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("file-keys"))
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    let text = std::fs::read_to_string(folders[0].join("identity.json")).unwrap();
    let identity: benchctl::cache::CacheIdentity = serde_json::from_str(&text).unwrap();
    let benchctl::cache::CacheIdentity::Model(model) = &identity else { panic!("{text}") };
    assert_eq!(
        (model.architecture.as_str(), model.head.as_str(), model.dtype.as_str()),
        ("clip", "contrastive", "f32")
    );
    assert!(model.config.is_some() && model.tokenizer.is_some() && model.weights.size.is_some(), "{text}");
    // The folder's name is the hash of that identity's canonical form.
    let expected = benchctl::cache::key(&[identity.canonical().as_bytes()]);
    let name: String = expected[..16].iter().map(|b| format!("{b:02x}")).collect();
    assert!(folders[0].ends_with(&name), "{} is not named {name}", folders[0].display());
}

/// A cache folder written by the previous layout (a positional namespace string, hashed
/// without a typed identity) is never read: its name is not any identity's hash, so even a
/// folder holding every entry a run needs, with wrong values, leaves the run's scores those of
/// an uncached run (docs/architecture.md: old folders are ignored; delete them to reclaim space).
#[test]
fn a_cache_folder_of_the_previous_layout_is_never_served() {
    use benchctl::cache::{key, EmbeddingCache, KeyTag};
    let model = PathBuf::from(tiny_model());
    let cache = tempfile::tempdir().unwrap();
    // The previous namespace, as the previous `model.rs` formatted it for this model.
    let weights = model.join("model.safetensors");
    let meta = std::fs::metadata(&weights).unwrap();
    let digest = |name: &str| {
        std::fs::read(model.join(name))
            .map(|b| key(&[&b])[..8].iter().map(|x| format!("{x:02x}")).collect::<String>())
            .unwrap_or_default()
    };
    let id = model.canonicalize().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    let stamp = format!("{}:{:?}", meta.len(), meta.modified().ok());
    // Output version 4: the last one that layout was written with.
    let old = format!(
        "v{}|{}|{}|{:?}|{:?}|{:?}|{}|{}|{}|{}|{}|{}|{}|{}",
        4,
        env!("CARGO_PKG_VERSION"),
        id,
        None::<String>,
        None::<String>,
        weights.canonicalize().ok(),
        stamp,
        "f32",
        "cpu",
        "clip",
        "contrastive",
        digest("config.json"),
        digest("tokenizer.json"),
        digest("preprocessor_config.json"),
    );
    // Every entry the demo run needs, poisoned, and the score head.
    let data = demo_suite();
    let mut entries: Vec<(benchctl::cache::Key, Vec<f32>)> = Vec::new();
    for image in std::fs::read_dir(data.join("images")).unwrap() {
        let bytes = std::fs::read(image.unwrap().path()).unwrap();
        entries.push((KeyTag::File.key(&[&bytes]), vec![1.0; 24]));
    }
    for line in std::fs::read_to_string(data.join("examples.jsonl")).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for caption in ["caption_0", "caption_1"] {
            entries.push((KeyTag::Text.key(&[v[caption].as_str().unwrap().as_bytes()]), vec![1.0; 24]));
        }
    }
    entries.push((KeyTag::SimilarityHead.key(&[]), vec![100.0, 0.0, 0.0]));
    let records: Vec<(benchctl::cache::Key, &[f32])> = entries.iter().map(|(k, v)| (*k, &v[..])).collect();
    EmbeddingCache::open(cache.path(), &old).unwrap().append(&records).unwrap();
    let run = eval(cache.path(), &[]);
    assert_eq!(encoded(&run), (16, 16, 0, 0), "the old folder serves nothing");
    let uncached = eval(tempfile::tempdir().unwrap().path(), &["--no-cache"]);
    assert_eq!(run["report"], uncached["report"]);
}

/// Image files are hashed once: a warm re-run reads none of them to key them (the memo knows
/// each by path, size and mtime); a file whose mtime changed is read again; a corrupt memo is
/// ignored, never trusted or fatal; `--no-cache` hashes everything.
#[test]
fn image_files_are_hashed_once_and_again_only_when_they_change() {
    let data = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), data.path());
    let cache = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let results = tempfile::tempdir().unwrap();
        let model = tiny_model();
        let mut args = vec![
            "eval",
            "--model-path",
            &model,
            "--suite",
            "winoground",
            "--data-dir",
            data.path().to_str().unwrap(),
            "--results-dir",
            results.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        stored_run(&benchctl(&args, &[("BENCHCTL_CACHE", cache.path().to_str().unwrap())])).1
    };
    let hashed = |run: &serde_json::Value| run["counts"]["images_hashed"].as_u64().unwrap();
    let cold = run(&[]);
    assert_eq!(hashed(&cold), 16);
    let warm = run(&[]);
    assert_eq!(hashed(&warm), 0);
    assert_eq!(warm["image_fingerprint"], cold["image_fingerprint"]);
    // A new mtime (same bytes): that file alone is read again, and its key is unchanged.
    let image = data.path().join("images/ex_3_img_1.png");
    let file = std::fs::File::options().append(true).open(&image).unwrap();
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5)).unwrap();
    let touched = run(&[]);
    assert_eq!(hashed(&touched), 1);
    assert_eq!(touched["image_fingerprint"], cold["image_fingerprint"]);
    // A corrupt memo segment is skipped: everything is hashed again, the run goes on.
    for segment in std::fs::read_dir(cache.path().join("file-keys")).unwrap() {
        let path = segment.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let after_corruption = run(&[]);
    assert!(hashed(&after_corruption) >= 1);
    assert_eq!(after_corruption["report"], cold["report"]);
    assert_eq!(hashed(&run(&["--no-cache"])), 16);
}

/// Opening the cache indexes records and reads values only when asked: a record whose bytes
/// change after the cache was opened (another tool, a disk error) reads back as a miss, and
/// the records around it still read back as stored.
#[test]
fn a_record_changed_after_opening_reads_back_as_a_miss() {
    use benchctl::cache::{key, EmbeddingCache};
    let root = tempfile::tempdir().unwrap();
    let (a, b, c) = (key(&[b"a"]), key(&[b"b"]), key(&[b"c"]));
    let values = [vec![1.0f32, 2.0, 3.0], vec![4.0, 5.0, 6.0], vec![7.0, 8.0, 9.0]];
    EmbeddingCache::open(root.path(), "ns")
        .unwrap()
        .append(&[(a, &values[0][..]), (b, &values[1][..]), (c, &values[2][..])])
        .unwrap();
    let cache = EmbeddingCache::open(root.path(), "ns").unwrap();
    assert_eq!((cache.len(), cache.skipped), (3, 0));
    assert_eq!(cache.get(&b), Some(values[1].clone()));
    // Flip a bit of b's second value, in place: the index still points at it.
    let segment = segments(root.path()).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let b_values = 4 + 32 + record_len(3) + 4 + 32 + 4;
    assert_eq!(&bytes[b_values..b_values + 4], 4.0f32.to_le_bytes());
    bytes[b_values + 5] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    assert_eq!(cache.dim(&b), Some(3));
    assert_eq!(cache.get(&b), None, "a changed record is never trusted");
    assert_eq!(cache.get(&a), Some(values[0].clone()));
    assert_eq!(cache.get(&c), Some(values[2].clone()));
}

/// Texts (generated replies) are stored beside values: read back whole, of any length
/// (empty, not a multiple of four bytes, multi-byte characters), after the cache is opened
/// again; a text record whose bytes change reads back as a miss, never a changed text, and the
/// records after it still read.
#[test]
fn texts_are_stored_whole_and_a_changed_one_is_a_miss() {
    use benchctl::cache::{key, EmbeddingCache};
    let root = tempfile::tempdir().unwrap();
    let texts = ["", "B", "Yes.", "Ja, die Tasse ist blau — 是的 🙂\nzweite Zeile"];
    let keys: Vec<_> = (0..texts.len()).map(|i| key(&[&[i as u8]])).collect();
    let batch: Vec<_> = keys.iter().copied().zip(texts).collect();
    EmbeddingCache::open(root.path(), "ns").unwrap().append_texts(&batch).unwrap();
    let values = [0.5f32, -1.0];
    EmbeddingCache::open(root.path(), "ns").unwrap().append(&[(key(&[b"v"]), &values[..])]).unwrap();
    let cache = EmbeddingCache::open(root.path(), "ns").unwrap();
    assert_eq!((cache.len(), cache.skipped), (5, 0));
    for (k, text) in keys.iter().zip(texts) {
        assert_eq!(cache.get_text(k).as_deref(), Some(text));
    }
    assert_eq!(cache.get(&key(&[b"v"])), Some(values.to_vec()), "values beside texts");
    // The third text's length field, then its bytes.
    let segment = segments(root.path()).into_iter().find(|s| std::fs::read(s).unwrap().len() > 100).unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let third = 4 + 32 + (4 + 32 + 4 + 4 + 8) + (4 + 32 + 4 + 8 + 8) + 4 + 32 + 4;
    assert_eq!(&bytes[third..third + 8], b"\x04\0\0\0Yes.");
    bytes[third] = 200;
    std::fs::write(&segment, &bytes).unwrap();
    assert_eq!(cache.get_text(&keys[2]), None, "a changed record is never trusted");
    let reopened = EmbeddingCache::open(root.path(), "ns").unwrap();
    assert_eq!(reopened.get_text(&keys[2]), None);
    assert_eq!(reopened.get_text(&keys[3]).as_deref(), Some(texts[3]), "the records after it still read");
    // A text too long for a record (past 2^20 values) is not cached, and spoils nothing after it.
    let long = "y".repeat(4 << 20);
    let (long_key, after) = (key(&[b"long"]), key(&[b"after"]));
    EmbeddingCache::open(root.path(), "ns")
        .unwrap()
        .append_texts(&[(long_key, long.as_str()), (after, "kept")])
        .unwrap();
    let reopened = EmbeddingCache::open(root.path(), "ns").unwrap();
    assert_eq!((reopened.get_text(&long_key), reopened.get_text(&after).as_deref()), (None, Some("kept")));
    assert_eq!(reopened.skipped, 1, "only the record changed above");
}

/// A cache written by many runs has many segments (one per process): opening it and reading
/// every entry keeps only a handful of them open, not one descriptor per segment (a cache of
/// thousands of runs would exhaust the process's limit, 1,024 by default).
#[cfg(target_os = "linux")]
#[test]
fn many_segments_are_read_without_holding_a_descriptor_each() {
    use benchctl::cache::{key, EmbeddingCache};
    let root = tempfile::tempdir().unwrap();
    // Descriptors of this cache's segments only: other tests of this process, and spilled
    // vectors (`BENCHCTL_SPILL_AT`), hold descriptors of their own.
    let open_descriptors = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.starts_with(root.path()))
            .count()
    };
    let segments = 200u32;
    for i in 0..segments {
        let values = [i as f32, 1.0, 2.0];
        EmbeddingCache::open(root.path(), "ns").unwrap().append(&[(key(&[&i.to_le_bytes()]), &values[..])]).unwrap();
    }
    assert_eq!(
        std::fs::read_dir(root.path().read_dir().unwrap().next().unwrap().unwrap().path()).unwrap().count(),
        segments as usize
    );
    let before = open_descriptors();
    let cache = EmbeddingCache::open(root.path(), "ns").unwrap();
    for i in (0..segments).rev() {
        assert_eq!(cache.get(&key(&[&i.to_le_bytes()])), Some(vec![i as f32, 1.0, 2.0]), "entry {i}");
    }
    let held = open_descriptors() - before;
    assert!(held <= 8, "{held} descriptors held for {segments} segments");
}

/// A cache location that cannot be used (a path under a regular file) warns once per
/// process, as docs/inputs.md says (the embeddings and the file-key memo share the warning),
/// and the run is stored.
#[test]
fn an_unusable_cache_location_warns_once() {
    let results = tempfile::tempdir().unwrap();
    let out = eval_model(&tiny_model(), Path::new("/dev/null/cache"), results.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let warnings: Vec<String> = stderr(&out).lines().filter(|l| l.starts_with("warning:")).map(String::from).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("/dev/null/cache") && warnings[0].contains("without the embedding cache"),
        "{warnings:?}"
    );
    stored_run(&out);
}
