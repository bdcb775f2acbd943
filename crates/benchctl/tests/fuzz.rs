//! Mutation tests of every parser benchctl runs on files it is handed: valid inputs with
//! bytes flipped, inserted, deleted, duplicated and cut, a few thousand per parser, each of
//! which must give a result or an error of the parser's documented kind, never a panic.
//! Deterministic (seeded); `BENCHCTL_FUZZ_CASES=N` runs more (`just fuzz`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use benchctl_scoring::metrics::stats::SplitMix64;

/// Cases per parser: enough for CI, more on request.
fn cases() -> usize {
    std::env::var("BENCHCTL_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

/// One random mutation of `valid`: a bit flip, a byte set to an edge value, an insertion,
/// a deletion, a duplicated span or a cut.
fn mutate(valid: &[u8], rng: &mut SplitMix64) -> Vec<u8> {
    let mut out = valid.to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = if out.is_empty() { 0 } else { rng.below(out.len()) };
        match rng.below(6) {
            0 if !out.is_empty() => out[at] ^= 1 << rng.below(8),
            1 if !out.is_empty() => out[at] = [0, 0xFF, b'"', b'{', b'9', b'\n', b'-'][rng.below(7)],
            2 => out.insert(at, rng.below(256) as u8),
            3 if !out.is_empty() => {
                out.remove(at);
            }
            4 if !out.is_empty() => {
                let end = (at + 1 + rng.below(64)).min(out.len());
                let span = out[at..end].to_vec();
                out.splice(at..at, span);
            }
            _ => out.truncate(at),
        }
    }
    out
}

/// A manifest case: `bytes` written as a new manifest file in `dir` (manifests are parsed
/// once per path and process, so each case gets its own), found and loaded on `data`; a
/// load problem of a kind `data_kind` does not accept is the case's error.
fn manifest_case(
    dir: &Path,
    bytes: &[u8],
    data: &Path,
    data_kind: impl Fn(&benchctl_suites::Error) -> bool,
) -> Result<(), benchctl_suites::Error> {
    static CASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let info = write_then(dir, &format!("m{n}.toml"), bytes, |p| benchctl_suites::find(p.to_str().unwrap()))?;
    let (_, problems) = info.load_all(data)?;
    let unexpected =
        problems.iter().map(|(kind, message)| benchctl_suites::Error::new(kind, message)).find(|e| !data_kind(e));
    unexpected.map_or(Ok(()), Err)
}

/// Runs `parse` on `cases()` mutations of `valid`; every outcome must be `Ok` or pass `ok_err`.
fn fuzz<E: std::fmt::Display>(
    name: &str,
    valid: &[u8],
    seed: u64,
    parse: impl Fn(&[u8]) -> Result<(), E>,
    ok_err: impl Fn(&E) -> bool,
) {
    let mut rng = SplitMix64::new(seed);
    assert!(parse(valid).is_ok(), "{name}: the valid input must parse");
    let (mut errors, mut oks) = (0, 0);
    for case in 0..cases() {
        let input = mutate(valid, &mut rng);
        match catch_unwind(AssertUnwindSafe(|| parse(&input))) {
            Ok(Ok(())) => oks += 1,
            Ok(Err(e)) => {
                assert!(ok_err(&e), "{name} case {case}: an error of the wrong kind: {e}");
                errors += 1;
            }
            Err(_) => panic!("{name} case {case}: the parser panicked on {:?}", String::from_utf8_lossy(&input)),
        }
    }
    assert!(errors > 0, "{name}: no mutation was refused ({oks} accepted): the mutations do not reach the parser");
}

#[test]
fn winoground_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let demo = benchctl_testkit::workspace_root().join("datasets/demo/winoground");
    let valid = std::fs::read(demo.join("examples.jsonl")).unwrap();
    let info = benchctl_suites::find("winoground").unwrap();
    std::os::unix::fs::symlink(demo.join("images"), dir.path().join("images")).unwrap();
    use benchctl_suites::ErrorKind as K;
    fuzz(
        "examples.jsonl",
        &valid,
        1,
        |bytes| {
            std::fs::write(dir.path().join("examples.jsonl"), bytes).unwrap();
            info.load(dir.path()).map(|_| ())
        },
        |e| matches!(e.kind(), K::Malformed | K::MissingImage | K::PathEscapes | K::MissingData),
    );
}

/// EqBen's full list, read as a stream (UTF-8 checked as it passes, entries grouped as they
/// arrive).
#[test]
fn eqben_full_list() {
    let dir = tempfile::tempdir().unwrap();
    benchctl_testkit::eqben_release(dir.path(), &[("eqbensd", 3), ("eqbengebc", 2)], true, false);
    let list = dir.path().join(benchctl_suites::eqben::ANNOTATION_FILE);
    let valid = std::fs::read(&list).unwrap();
    let info = benchctl_suites::find("eqben").unwrap();
    use benchctl_suites::ErrorKind as K;
    fuzz(
        "ann_json_finegrained_random.json",
        &valid,
        9,
        |bytes| {
            std::fs::write(&list, bytes).unwrap();
            info.load(dir.path()).map(|_| ())
        },
        |e| matches!(e.kind(), K::Malformed | K::PathEscapes | K::MissingData),
    );
}

#[test]
fn images() {
    let demo = benchctl_testkit::workspace_root().join("datasets/demo/winoground/images");
    let png = std::fs::read(demo.join("ex_0_img_0.png")).unwrap();
    let img = image::load_from_memory(&png).unwrap();
    let mut jpeg = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut jpeg), image::ImageFormat::Jpeg).unwrap();
    for (name, valid, seed) in [("png", &png, 2), ("jpeg", &jpeg, 3)] {
        fuzz(name, valid, seed, |b| benchctl_suites::image::decode_rgb(b).map(|_| ()), |_| true);
    }
}

#[test]
fn npy_frames() {
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let header = "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 5, 3), }";
    let padded = format!("{header:<118}\n");
    npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    npy.extend_from_slice(padded.as_bytes());
    npy.extend((0..90u8).collect::<Vec<_>>());
    fuzz("frame .npy", &npy, 4, |b| benchctl_suites::image::decode_npy_bgr(b).map(|_| ()), |_| true);
}

fn write_then<T>(dir: &Path, name: &str, bytes: &[u8], read: impl Fn(&Path) -> T) -> T {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    read(&path)
}

#[test]
fn run_files_and_score_dumps() {
    let dir = tempfile::tempdir().unwrap();
    let baselines = benchctl_testkit::workspace_root().join("results/baselines");
    let mut files: Vec<_> = std::fs::read_dir(&baselines).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let run = files.iter().find(|p| p.to_string_lossy().ends_with("_winoground.json")).unwrap();
    let dump = files.iter().find(|p| p.to_string_lossy().ends_with(".scores.jsonl")).unwrap();
    let results = |e: &benchctl::Error| e.kind() == benchctl::ErrorKind::BadResults;
    fuzz(
        "run file",
        &std::fs::read(run).unwrap(),
        5,
        |b| write_then(dir.path(), "run.json", b, |p| benchctl::results::read_run_file(p).map(|_| ())),
        results,
    );
    fuzz(
        "score dump",
        &std::fs::read(dump).unwrap(),
        6,
        |b| write_then(dir.path(), "run.scores.jsonl", b, |p| benchctl::results::read_scores(p).map(|_| ())),
        results,
    );
}

#[test]
fn model_configs() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = benchctl_testkit::fixture_model("clip-tiny-a");
    let config = std::fs::read(fixture.join("config.json")).unwrap();
    fuzz(
        "config.json",
        &config,
        7,
        |b| write_then(dir.path(), "config.json", b, benchctl_models::models::clip::ClipConfig::from_file).map(|_| ()),
        |e| e.kind() == benchctl_models::ErrorKind::BadConfig,
    );
    let hf =
        benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/preprocess-hf/clip224.json");
    let defaults = benchctl_models::preprocess::Preprocessor::hf_clip(224);
    fuzz(
        "preprocessor_config.json",
        &std::fs::read(hf).unwrap(),
        8,
        |b| {
            write_then(dir.path(), "preprocessor_config.json", b, |p| {
                benchctl_models::preprocess::Preprocessor::from_hf_config(p, &defaults)
            })
            .map(|_| ())
        },
        |e| e.kind() == benchctl_models::ErrorKind::BadConfig,
    );
}

/// Embedding cache segments: whatever a mutation does, every entry read back is the value
/// that was stored under its key (a record is trusted only with its checksum), never another.
#[test]
fn cache_segments() {
    let root = tempfile::tempdir().unwrap();
    let namespace = "fuzz-namespace";
    let stored: Vec<(benchctl::cache::Key, Vec<f32>)> = (0..6u8)
        .map(|i| (benchctl::cache::key(&[&[i]]), (0..(3 + i as usize)).map(|v| v as f32 * 0.5 - i as f32).collect()))
        .collect();
    {
        let mut cache = benchctl::cache::EmbeddingCache::open(root.path(), namespace).unwrap();
        let entries: Vec<(benchctl::cache::Key, &[f32])> = stored.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        cache.append(&entries[..3]).unwrap();
        cache.append(&entries[3..]).unwrap();
    }
    let segment = walk(root.path()).into_iter().find(|p| p.is_file()).expect("a segment file");
    let valid = std::fs::read(&segment).unwrap();
    let mut rng = SplitMix64::new(11);
    let (mut lost, mut kept) = (0, 0);
    for case in 0..cases() {
        std::fs::write(&segment, mutate(&valid, &mut rng)).unwrap();
        let cache = catch_unwind(|| benchctl::cache::EmbeddingCache::open(root.path(), namespace))
            .unwrap_or_else(|_| panic!("case {case}: opening the cache panicked"))
            .unwrap();
        for (key, values) in &stored {
            match cache.get(key) {
                Some(read) => {
                    assert_eq!(read, values[..], "case {case}: a wrong value was trusted");
                    kept += 1;
                }
                None => lost += 1,
            }
        }
    }
    assert!(lost > 0 && kept > 0, "the mutations must both spare and damage records ({kept} kept, {lost} lost)");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A RoBERTa tokenizer's `vocab.json` and `merges.txt` (FIBER's layout): a tokenizer error,
/// or a tokenizer that still encodes, never a panic.
#[test]
fn roberta_tokenizer_files() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = benchctl_testkit::model_fixture("fiber-micro");
    let vocab = std::fs::read(fixture.join("vocab.json")).unwrap();
    let merges = std::fs::read(fixture.join("merges.txt")).unwrap();
    let load = |vocab: &[u8], merges: &[u8]| {
        std::fs::write(dir.path().join("vocab.json"), vocab).unwrap();
        std::fs::write(dir.path().join("merges.txt"), merges).unwrap();
        benchctl_models::tokenizer::RobertaTokenizer::from_file(&dir.path().join("vocab.json"), 50)
            .and_then(|t| t.encode("a red square to the left of a green triangle").map(|_| ()))
    };
    let tokenizer = |e: &benchctl_models::Error| e.kind() == benchctl_models::ErrorKind::Tokenizer;
    fuzz("vocab.json", &vocab, 12, |b| load(b, &merges), tokenizer);
    fuzz("merges.txt", &merges, 13, |b| load(&vocab, b), tokenizer);
}

/// Safetensors headers (the JSON after the length): a weights error naming the file, never
/// a panic and never a model built from misread tensors (the FIBER micro checkpoint).
#[test]
fn safetensors_headers() {
    use benchctl_models::models::fiber::{Fiber, FiberConfig};
    let dir = tempfile::tempdir().unwrap();
    let fixture = benchctl_testkit::model_fixture("fiber-micro");
    let config = FiberConfig::from_file_or_default(&fixture.join("config.json")).unwrap();
    let file = std::fs::read(fixture.join("model.safetensors")).unwrap();
    let header_end = 8 + u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let (header, data) = file.split_at(header_end);
    let path = dir.path().join("model.safetensors");
    let load = |header: &[u8]| {
        // The length prefix follows the mutated JSON, so the mutations reach the parser.
        let json = &header[8.min(header.len())..];
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json);
        bytes.extend_from_slice(data);
        std::fs::write(&path, bytes).unwrap();
        Fiber::load(&config, &path, candle_core::DType::F32, &candle_core::Device::Cpu).map(|_| ())
    };
    fuzz("safetensors header", header, 14, load, |e| {
        e.kind() == benchctl_models::ErrorKind::BadWeights && e.to_string().contains("model.safetensors")
    });
}

/// Suite manifests, and a CSV read through one (MMVP-VLM's `Questions.csv`): a mutated
/// manifest is refused as a manifest error or accepted, and an accepted one loads the demo
/// Winoground data with problems of the data kinds only.
#[test]
fn suite_manifests_and_csv_annotations() {
    use benchctl_suites::ErrorKind as K;
    let dir = tempfile::tempdir().unwrap();
    let root = benchctl_testkit::workspace_root();
    // Under its own id: a changed copy of a bundled manifest is refused by its id first.
    let valid = std::fs::read_to_string(root.join("datasets/manifests/winoground-manifest.toml"))
        .unwrap()
        .replace("id = \"winoground-manifest\"", "id = \"fuzzed\"")
        .into_bytes();
    let demo = root.join("datasets/demo/winoground");
    fuzz(
        "manifest",
        &valid,
        17,
        // A data problem of an accepted manifest is fine; any other kind fails the check below.
        |bytes| {
            manifest_case(dir.path(), bytes, &demo, |e| {
                matches!(e.kind(), K::Malformed | K::MissingData | K::PathEscapes)
            })
        },
        |e: &benchctl_suites::Error| matches!(e.kind(), K::Manifest),
    );
    let mmvp = root.join("crates/benchctl-suites/tests/fixtures/manifests/mmvp-vlm");
    let valid = std::fs::read(mmvp.join("Questions.csv")).unwrap();
    let info = benchctl_suites::find("mmvp-vlm").unwrap();
    let data = dir.path().join("mmvp");
    std::fs::create_dir_all(&data).unwrap();
    fuzz(
        "Questions.csv",
        &valid,
        18,
        |bytes| {
            std::fs::write(data.join("Questions.csv"), bytes).unwrap();
            let (_, problems) = info.load_all(&data).unwrap();
            problems.into_first().map_or(Ok(()), Err)
        },
        |e: &benchctl_suites::Error| matches!(e.kind(), K::Malformed),
    );
}

/// Winoground's hub release as parquet (uncompressed and snappy pages, the PNGs embedded), as
/// the parquet record reader takes it: a mutated file loads or is refused as malformed data,
/// never a panic and never without end. The cases that found the reader's failures: a byte
/// deleted inside a `BYTE_ARRAY` page (the row iterator returned the same error forever), a
/// column chunk at a negative offset in the footer, and pages whose decoders assert (panics
/// the reader's guard turns into errors).
#[test]
fn parquet_records() {
    use benchctl_suites::ErrorKind as K;
    let hub = benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/winoground-hub");
    let info = benchctl_suites::find("winoground").unwrap();
    for (form, seed) in [("parquet", 19), ("snappy", 20)] {
        let valid = std::fs::read(hub.join(form).join("data/test-00000-of-00001.parquet")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data/test-00000-of-00001.parquet");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        fuzz(
            &format!("{form} test-00000-of-00001.parquet"),
            &valid,
            seed,
            |bytes| {
                std::fs::write(&file, bytes).unwrap();
                info.load(dir.path()).map(|_| ())
            },
            |e| matches!(e.kind(), K::Malformed | K::MissingData | K::CorruptImage | K::MissingImage),
        );
    }
}

/// A manifest's templates alone mutated (the rest of the manifest kept): each is parsed, and
/// rendered on the demo's records, or refused as a manifest error naming its key.
#[test]
fn manifest_templates() {
    use benchctl_suites::ErrorKind as K;
    let dir = tempfile::tempdir().unwrap();
    let root = benchctl_testkit::workspace_root();
    let manifest = std::fs::read_to_string(root.join("datasets/manifests/winoground-manifest.toml"))
        .unwrap()
        .replace("id = \"winoground-manifest\"", "id = \"templates\"");
    let template = "{caption_0} ({tag}, {{literal}}) {secondary_tag}";
    let (before, after) = manifest.split_once("{caption_0}").unwrap();
    let demo = root.join("datasets/demo/winoground");
    fuzz(
        "manifest template",
        template.as_bytes(),
        21,
        |bytes| {
            // Quotes and backslashes end or escape the TOML string: keep the template inside it.
            let text = String::from_utf8_lossy(bytes).replace(['"', '\\', '\n', '\r'], "");
            manifest_case(dir.path(), format!("{before}{text}{after}").as_bytes(), &demo, |_| false)
        },
        // A template TOML or the template parser refuses is a manifest error; one that
        // parses but cannot be rendered on a record names the template's key.
        |e: &benchctl_suites::Error| match e.kind() {
            K::Manifest => true,
            K::Malformed => e.to_string().contains("`item.texts[0]`"),
            _ => false,
        },
    );
}
