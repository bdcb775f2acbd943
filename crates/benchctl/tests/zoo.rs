//! Every architecture in the runner. Fusion models (BLIP ITM): every (image, text) pair of
//! an item scored by a joint forward pass and cached per pair; `--score` picks the head;
//! retrieval suites shortlist with the contrastive head and re-rank the top k. SigLIP and
//! OpenCLIP directories run as dual encoders; `benchctl models` lists what each offers.

mod common;

use std::path::Path;

use benchctl_models::models::blip::BlipItm;
use benchctl_models::{hub, FusionEncoder};
use common::{benchctl, demo_suite, dump_path, stderr, stored_run};

fn blip() -> String {
    benchctl_testkit::fixture_model("blip-tiny").display().to_string()
}

fn eval(suite: &str, data: &Path, cache: &Path, extra: &[&str]) -> (std::path::PathBuf, serde_json::Value) {
    let results = common::scratch_dir("zoo-results");
    let cache = [("BENCHCTL_CACHE", cache.to_str().unwrap())];
    let (path, json, _) = common::eval_model(Path::new(&blip()), suite, data, &results, extra, &cache);
    (path, json)
}

#[test]
fn itm_scores_every_pair_as_the_model_does_and_a_warm_rerun_scores_none() {
    let cache = tempfile::tempdir().unwrap();
    // A batch of 3 splits items' pairs across batches.
    let (path, run) = eval("winoground", &demo_suite(), cache.path(), &["--score", "itm", "--batch-size", "3"]);
    assert_eq!(run["model"]["score"], "itm");
    let c = &run["counts"];
    assert_eq!((c["pairs_scored"].as_u64(), c["pairs_cached"].as_u64()), (Some(32), Some(0)));
    assert_eq!(c["images_encoded"], 16, "each image is encoded once for all its pairs");

    // The stored scores are the model's match logit of each pair, computed directly.
    let model =
        BlipItm::load(&hub::from_dir(Path::new(&blip())).unwrap(), candle_core::DType::F32, &candle_core::Device::Cpu)
            .unwrap();
    let suite = benchctl_suites::find("winoground").unwrap().load(&demo_suite()).unwrap();
    let dump = std::fs::read_to_string(dump_path(&path, &run)).unwrap();
    for (item, line) in suite.items.iter().zip(dump.lines()).take(3) {
        let stored: serde_json::Value = serde_json::from_str(line).unwrap();
        for (i, image) in item.images().enumerate() {
            let pixels = model.preprocessor().apply(&image.load_rgb().unwrap());
            let size = model.preprocessor().size;
            let pixels = candle_core::Tensor::from_vec(pixels, (1, 3, size, size), &candle_core::Device::Cpu).unwrap();
            let states = model.encode_images(&pixels).unwrap();
            for (j, text) in item.texts().enumerate() {
                let direct = model.score_pairs(&states, &[text]).unwrap().to_vec1::<f32>().unwrap()[0];
                let ours = stored["scores"][i][j].as_f64().unwrap() as f32;
                assert!((direct - ours).abs() < 1e-5, "item {} pair ({i}, {j}): {ours} vs {direct}", item.id());
            }
        }
    }

    let (_, warm) = eval("winoground", &demo_suite(), cache.path(), &["--score", "itm", "--batch-size", "3"]);
    let c = &warm["counts"];
    assert_eq!((c["pairs_scored"].as_u64(), c["pairs_cached"].as_u64()), (Some(0), Some(32)));
    assert_eq!(c["images_encoded"], 0);
    assert_eq!(warm["report"], run["report"]);
    assert!(run["timings"]["load_model_s"].as_f64().unwrap() > 0.0);
    assert_eq!(warm["timings"]["load_model_s"].as_f64(), Some(0.0), "every pair score was cached: no weights read");
}

/// A fusion model's shards, merged, give the unsharded run's dump bit for bit, and so does a
/// run resumed from a cache that holds only some pairs: every run scores the same pair batches
/// (a batch of 3 splits items' pairs across batches, so the boundaries fall inside batches).
#[test]
fn itm_shards_and_a_resumed_run_give_the_cold_runs_bits() {
    let itm = ["--score", "itm", "--batch-size", "3"];
    let (cold_path, cold) = eval("winoground", &demo_suite(), tempfile::tempdir().unwrap().path(), &itm);
    let cold_dump = std::fs::read(dump_path(&cold_path, &cold)).unwrap();
    let first_half = tempfile::tempdir().unwrap();
    for n in [2usize, 3] {
        let mut shard_files = Vec::new();
        let mut asked = 0;
        for i in 0..n {
            // Shard 0 of 2 fills the cache the resumed run starts from.
            let cache =
                if (i, n) == (0, 2) { first_half.path().to_path_buf() } else { common::scratch_dir("itm-shard") };
            let (path, run) =
                eval("winoground", &demo_suite(), &cache, &[&itm[..], &["--shard", &format!("{i}/{n}")]].concat());
            asked += run["counts"]["pairs_scored"].as_u64().unwrap();
            shard_files.push(path.display().to_string());
        }
        assert!(asked >= 32, "{n} shards score every pair at least once ({asked})");
        let merged = common::scratch_dir("itm-merged");
        let mut args = vec!["merge"];
        args.extend(shard_files.iter().map(String::as_str));
        args.extend(["--results-dir", merged.to_str().unwrap()]);
        let (path, json) = stored_run(&benchctl(&args, &[]));
        assert_eq!(json["report"], cold["report"], "{n} shards");
        assert_eq!(std::fs::read(dump_path(&path, &json)).unwrap(), cold_dump, "{n} shards' dump, bit for bit");
    }
    let (resumed_path, resumed) = eval("winoground", &demo_suite(), first_half.path(), &itm);
    let c = &resumed["counts"];
    assert!(c["pairs_cached"].as_u64().unwrap() >= 16, "the first half's pairs were served: {c}");
    assert_eq!(std::fs::read(dump_path(&resumed_path, &resumed)).unwrap(), cold_dump, "the resumed run's dump");
}

#[test]
fn itc_is_a_dual_encoder_of_cosines_and_the_default_head_is_itm() {
    let cache = tempfile::tempdir().unwrap();
    let (path, run) = eval("winoground", &demo_suite(), cache.path(), &["--score", "itc"]);
    assert_eq!(run["model"]["score"], "itc");
    assert_eq!((run["counts"]["images_encoded"].as_u64(), run["counts"]["pairs_scored"].as_u64()), (Some(16), Some(0)));
    let dump = std::fs::read_to_string(dump_path(&path, &run)).unwrap();
    for line in dump.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for s in v["scores"].as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap()) {
            assert!(s.as_f64().unwrap().abs() <= 1.0 + 1e-6, "a cosine: {s}");
        }
    }
    let (_, default) = eval("winoground", &demo_suite(), tempfile::tempdir().unwrap().path(), &[]);
    assert_eq!(default["model"]["score"], "itm");
}

#[test]
fn a_head_the_model_lacks_is_refused() {
    let model = common::tiny_model();
    let out = benchctl(
        &[
            "eval",
            "--model-path",
            &model,
            "--suite",
            "winoground",
            "--data-dir",
            demo_suite().to_str().unwrap(),
            "--score",
            "itm",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("use --score itm: a clip model offers contrastive"), "{}", stderr(&out));
}

#[test]
fn rococo_reranks_the_contrastive_shortlist_with_the_fusion_head() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(data.path(), 6);
    let gallery = ["--rococo-methods", "mix", "--rococo-lambdas", "900", "--rococo-seeds", "0"];
    let run = |extra: &[&str]| {
        let cache = tempfile::tempdir().unwrap();
        let args: Vec<&str> = gallery.iter().chain(extra).copied().collect();
        eval("rococo", data.path(), cache.path(), &args).1["report"]["metrics"].clone()
    };
    // Everything outside the shortlist ranks below it: with a shortlist of one, a caption
    // query either hits at rank 0 or misses beyond rank 10 (galleries of 30+ captions).
    let k1 = run(&["--score", "itm", "--rerank-k", "1"]);
    for gallery in ["clean", "rand_voca", "danger"] {
        let r = |k: &str| k1[format!("{gallery}_i2t_{k}")].as_f64().unwrap();
        assert_eq!((r("r1"), r("r5")), (r("r10"), r("r10")), "{gallery}");
    }
    let k5 = run(&["--score", "itm", "--rerank-k", "5"]);
    assert_ne!(k5, k1, "a longer shortlist re-ranks more candidates");
    // A shortlist as large as every gallery ranks by the fusion score alone, so it does not
    // depend on k beyond that.
    let all = run(&["--score", "itm", "--rerank-k", "100000"]);
    let also_all = run(&["--score", "itm", "--rerank-k", "5000"]);
    assert_eq!(all, also_all);
}

#[test]
fn siglip_and_openclip_directories_run_end_to_end() {
    for (name, head) in [("siglip-tiny", "sigmoid"), ("openclip-tiny", "contrastive")] {
        let model = benchctl_testkit::fixture_model(name).display().to_string();
        let results = tempfile::tempdir().unwrap();
        let out = benchctl(
            &[
                "eval",
                "--model-path",
                &model,
                "--suite",
                "winoground",
                "--data-dir",
                demo_suite().to_str().unwrap(),
                "--results-dir",
                results.path().to_str().unwrap(),
            ],
            &[],
        );
        let (path, run) = stored_run(&out);
        assert_eq!(run["model"]["score"], head, "{name}");
        let dump = std::fs::read_to_string(dump_path(&path, &run)).unwrap();
        let scores: Vec<f64> = dump
            .lines()
            .flat_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["scores"].as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().clone()).collect::<Vec<_>>()
            })
            .map(|s| s.as_f64().unwrap())
            .collect();
        assert_eq!(scores.len(), 32);
        if head == "sigmoid" {
            // Stored as the logits of the match probabilities, so saturation never ties them.
            assert_eq!(run["model"]["score_kind"], "logit", "{name}");
            assert!(scores.iter().any(|&s| !(0.0..=1.0).contains(&s)), "{name}: logits, not probabilities");
        }
    }
}

#[test]
fn the_model_listing_names_heads_activation_and_preprocessing() {
    let out = benchctl(&["models"], &[]);
    assert!(out.status.success());
    let text = common::stdout(&out);
    for entry in benchctl_models::registry::MODELS {
        let line = text
            .lines()
            .find(|l| l.contains(&format!(" {} ", entry.id)))
            .unwrap_or_else(|| panic!("{} missing", entry.id));
        assert!(line.contains(entry.activation), "{line}");
        assert!(line.contains(&entry.revision_label()), "{line}");
    }
    let blip = text.lines().find(|l| l.contains(" blip-itm-base-coco ")).unwrap();
    assert!(blip.contains("itm, itc") && blip.contains("384 px, stretched square"), "{blip}");
    // The generative families that generate replies here say so (CLIP-FlanT5 too).
    let qwen = text.lines().find(|l| l.contains(" qwen2.5-vl-3b ")).unwrap();
    assert!(qwen.contains("vqascore (or generated replies)"), "{qwen}");
    // So do the options that size images another way.
    assert!(qwen.contains("--min-pixels, --max-pixels"), "{qwen}");
    let naflex = text.lines().find(|l| l.contains(" siglip2-base-patch16-naflex ")).unwrap();
    assert!(naflex.contains("--max-patches") && !naflex.contains("--min-pixels"), "{naflex}");
    let flant5 = text.lines().find(|l| l.contains(" clip-flant5-xl ")).unwrap();
    assert!(flant5.contains("vqascore (or generated replies)"), "{flant5}");
    let blip_generates = text.lines().find(|l| l.contains(" blip-itm-base-coco ")).unwrap();
    assert!(!blip_generates.contains("generated replies"), "{blip_generates}");
    let siglip = text.lines().find(|l| l.contains(" siglip-base-patch16-224 ")).unwrap();
    assert!(siglip.contains("sigmoid") && siglip.contains("padded to 64"), "{siglip}");
    let siglip2 = text.lines().find(|l| l.contains(" siglip2-base-patch16-224 ")).unwrap();
    assert!(
        siglip2.contains("@main (the commit of the first download, kept)") && siglip2.contains("canonicalised"),
        "{siglip2}"
    );
}

/// FIBER as released: a Lightning `.ckpt` passed as `--model-path FILE`, its `config.json`
/// and RoBERTa tokenizer beside it (the micro fixture of `scripts/fixtures/gen_fiber_ckpt_fixture.py`).
fn fiber_ckpt() -> std::path::PathBuf {
    benchctl_testkit::model_fixture("fiber-micro/fiber_micro.ckpt")
}

#[test]
fn fiber_checkpoints_run_both_heads_end_to_end() {
    use benchctl_models::models::fiber::FiberItm;
    let results = common::scratch_dir("zoo-fiber");
    let cache = tempfile::tempdir().unwrap();
    let env = [("BENCHCTL_CACHE", cache.path().to_str().unwrap())];
    let (path, run, _) =
        common::eval_model(&fiber_ckpt(), "winoground", &demo_suite(), &results, &["--batch-size", "3"], &env);
    assert_eq!(run["model"]["score"], "itm", "ITM is FIBER's default head");
    assert_eq!(run["model"]["score_kind"], "logit");
    assert!(run["model"]["path"].as_str().unwrap().ends_with("fiber_micro.ckpt"));
    let c = &run["counts"];
    assert_eq!((c["pairs_scored"].as_u64(), c["images_encoded"].as_u64()), (Some(32), Some(16)));

    // Each stored score is the model's own match logit `l1 − l0` of that pair.
    let files = hub::from_path(&fiber_ckpt()).unwrap();
    let model = FiberItm::load(&files, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let suite = benchctl_suites::find("winoground").unwrap().load(&demo_suite()).unwrap();
    let dump = std::fs::read_to_string(dump_path(&path, &run)).unwrap();
    let item = suite.items.item(0);
    let stored: serde_json::Value = serde_json::from_str(dump.lines().next().unwrap()).unwrap();
    let size = model.preprocessor().size;
    assert_eq!(size, 64, "the micro checkpoint's input size, read from its window tables");
    for (i, image) in item.images().enumerate() {
        let pixels = model.preprocessor().apply(&image.load_rgb().unwrap());
        let pixels = candle_core::Tensor::from_vec(pixels, (1, 3, size, size), &candle_core::Device::Cpu).unwrap();
        let states = model.encode_images(&pixels).unwrap();
        for (j, text) in item.texts().enumerate() {
            let direct = model.score_pairs(&states, &[text]).unwrap().to_vec1::<f32>().unwrap()[0];
            let ours = stored["scores"][i][j].as_f64().unwrap() as f32;
            assert!((direct - ours).abs() < 1e-5, "pair ({i}, {j}): {ours} vs {direct}");
        }
    }

    let (itc_path, itc, _) =
        common::eval_model(&fiber_ckpt(), "winoground", &demo_suite(), &results, &["--score", "itc"], &env);
    assert_eq!(itc["model"]["score"], "itc");
    assert_eq!((itc["counts"]["images_encoded"].as_u64(), itc["counts"]["pairs_scored"].as_u64()), (Some(16), Some(0)));
    let itc_dump = std::fs::read_to_string(dump_path(&itc_path, &itc)).unwrap();
    let first: serde_json::Value = serde_json::from_str(itc_dump.lines().next().unwrap()).unwrap();
    for s in first["scores"].as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap()) {
        assert!(s.as_f64().unwrap().abs() <= 1.0 + 1e-6, "ITC scores are cosines: {s}");
    }
    assert_ne!(first["scores"], stored["scores"], "two heads, two sets of scores");
}

#[test]
fn fiber_reranks_rococo_shortlists_and_is_listed_with_its_downloads() {
    let data = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(data.path(), 6);
    let results = common::scratch_dir("zoo-fiber-rococo");
    let gallery = ["--rococo-methods", "mix", "--rococo-lambdas", "900", "--rococo-seeds", "0"];
    let run = |extra: &[&str]| {
        let cache = tempfile::tempdir().unwrap();
        let env = [("BENCHCTL_CACHE", cache.path().to_str().unwrap())];
        let args: Vec<&str> = gallery.iter().chain(extra).copied().collect();
        common::eval_model(&fiber_ckpt(), "rococo", data.path(), &results, &args, &env).1["report"]["metrics"].clone()
    };
    let k1 = run(&["--score", "itm", "--rerank-k", "1"]);
    for gallery in ["clean", "rand_voca", "danger"] {
        let r = |k: &str| k1[format!("{gallery}_i2t_{k}")].as_f64().unwrap();
        assert_eq!((r("r1"), r("r5")), (r("r10"), r("r10")), "{gallery}: a shortlist of one");
    }
    assert_ne!(run(&["--score", "itm", "--rerank-k", "5"]), k1);

    let out = benchctl(&["models"], &[]);
    let text = common::stdout(&out);
    for entry in benchctl_models::registry::FIBER_CHECKPOINTS {
        let line =
            text.lines().find(|l| l.contains(&format!(" {} ", entry.id))).unwrap_or_else(|| panic!("{}", entry.id));
        assert!(line.contains("download https://datarelease.blob.core.windows.net/fiber/"), "{line}");
    }
    let demo = demo_suite();
    let args = ["eval", "--model", "fiber-coco-itm", "--suite", "winoground", "--data-dir", demo.to_str().unwrap()];
    let out = benchctl(&args, &[]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("fiber_coco_irtr_itm.ckpt and pass --model-path"), "{}", stderr(&out));
}

#[test]
fn convert_writes_a_checkpoints_tensors_as_safetensors_once() {
    let out_dir = tempfile::tempdir().unwrap();
    let output = out_dir.path().join("model.safetensors");
    let ckpt = fiber_ckpt();
    let args = ["convert", ckpt.to_str().unwrap(), output.to_str().unwrap()];
    let out = benchctl(&args, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(common::stdout(&out).contains("709 tensors (7 training buffers left out"), "{}", common::stdout(&out));
    // The same tensors, names and dtypes (integer buffers included) as torch's own safetensors twin.
    let dev = candle_core::Device::Cpu;
    let ours = candle_core::safetensors::load(&output, &dev).unwrap();
    let twin =
        candle_core::safetensors::load(benchctl_testkit::model_fixture("fiber-micro/model.safetensors"), &dev).unwrap();
    assert_eq!(ours.len(), twin.len());
    for (name, tensor) in &twin {
        let converted = &ours[name];
        assert_eq!((converted.dtype(), converted.dims()), (tensor.dtype(), tensor.dims()), "{name}");
        let bytes = |t: &candle_core::Tensor| {
            t.flatten_all().unwrap().to_dtype(candle_core::DType::F64).unwrap().to_vec1::<f64>().unwrap()
        };
        assert_eq!(bytes(converted), bytes(tensor), "{name}");
    }
    let again = benchctl(&args, &[]);
    assert_ne!(again.status.code(), Some(0));
    assert!(stderr(&again).contains("it exists"), "{}", stderr(&again));
}
