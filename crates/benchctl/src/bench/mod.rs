//! `benchctl bench`: encoder throughput of a model's architecture on random weights, so
//! it runs anywhere without downloading anything.

use std::time::Instant;

use benchctl_models::models::clip::{Clip, ClipConfig};
use benchctl_models::registry::{self, Architecture};
use benchctl_scoring::metrics::stats::SplitMix64;
use candle_core::{DType, Tensor};

use rayon::prelude::*;

use crate::cli::{BenchArgs, BenchPart};

mod preprocess;
use crate::{Error, ErrorKind, Result};

/// Throughput and latency of one part.
#[derive(Debug, Clone, PartialEq)]
pub struct PartResult {
    pub part: &'static str,
    pub batch: usize,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub max_ms: f64,
    /// Further measurements of the part, e.g. `("e2e_over_encoder", 1.07)`.
    pub extra: Vec<(&'static str, f64)>,
}

/// Sets the worker threads of every CPU kernel: rayon's global pool, which candle, gemm and
/// benchctl's kernels all use. It must be built before the first parallel operation; if it
/// already exists, the benchmark says so rather than measuring another thread count.
fn set_threads(threads: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().map_err(|e| {
        Error::new(ErrorKind::Usage, format!("benchmark on {threads} threads: the thread pool already exists ({e})"))
    })
}

/// Runs the benchmark and returns one result per part.
pub fn run(args: &BenchArgs) -> Result<(String, Vec<PartResult>)> {
    if let Some(threads) = args.threads {
        set_threads(threads as usize)?;
    }
    if args.config.is_none() && args.model.starts_with("fiber") && args.part != BenchPart::Preprocess {
        return fiber(args);
    }
    match args.part {
        BenchPart::E2e => return e2e(args),
        BenchPart::Retrieval => return retrieval(args),
        BenchPart::Peak => return peak(args),
        BenchPart::Dense => return dense(args),
        BenchPart::Annotations => return annotations(),
        BenchPart::Preprocess => return preprocess::run(args),
        _ => {}
    }
    let (name, config) = match &args.config {
        Some(path) => (path.display().to_string(), ClipConfig::from_file(path)?),
        None => {
            let entry = registry::find(&args.model)?;
            match entry.architecture {
                Architecture::Clip if entry.id == "clip-vit-b32" => (entry.id.to_string(), ClipConfig::vit_b32()),
                Architecture::Clip | Architecture::OpenClip => {
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!("benchmark `{}`: pass its config.json with --config", entry.id),
                    ))
                }
                Architecture::Siglip | Architecture::Blip | Architecture::Fiber => {
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!("benchmark `{}`: the benchmark covers CLIP-architecture models only", entry.id),
                    ))
                }
            }
        }
    };
    let device = benchctl_models::device::parse_device(&args.device)?;
    let dtype = benchctl_models::device::parse_dtype(&args.dtype)?;
    let model = Clip::random(config.clone(), dtype, &device)?;
    let batch = args.batch as usize;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let mut results = Vec::new();
    if matches!(args.part, BenchPart::Image | BenchPart::Both) {
        let size = config.vision_config.image_size;
        let pixels = Tensor::randn(0f32, 1f32, (batch, 3, size, size), &device)
            .and_then(|t| t.to_dtype(dtype))
            .map_err(compute)?;
        let times = time(args.iters as usize, || {
            let out = model.image_features(&pixels)?;
            out.to_dtype(DType::F32).and_then(|o| o.sum_all()).and_then(|s| s.to_scalar::<f32>()).map_err(compute)?;
            Ok(())
        })?;
        results.push(summarise("image", batch, &times));
    }
    if matches!(args.part, BenchPart::Text | BenchPart::Both) {
        let tokens = args.text_tokens as usize;
        let vocab = config.text_config.vocab_size as u32;
        // Deterministic pseudo-random ids below the end token, which closes each text.
        let ids: Vec<Vec<u32>> = (0..batch)
            .map(|b| {
                let mut row: Vec<u32> =
                    (0..tokens - 1).map(|t| ((b * 7919 + t * 104_729) as u32) % (vocab - 2)).collect();
                row.push(vocab - 1);
                row
            })
            .collect();
        let times = time(args.iters as usize, || {
            let out = model.text_features(&ids)?;
            out.to_dtype(DType::F32).and_then(|o| o.sum_all()).and_then(|s| s.to_scalar::<f32>()).map_err(compute)?;
            Ok(())
        })?;
        results.push(summarise("text", batch, &times));
    }
    Ok((name, results))
}

/// FIBER-base with random weights: the ITC image and text encoders (the unimodal paths) and
/// the ITM pair pass (six fused steps and the head, on cached pre-fusion image tokens), at
/// 384 px (`fiber-base`, the ITM checkpoints) or 576 px (the ITC checkpoints).
fn fiber(args: &BenchArgs) -> Result<(String, Vec<PartResult>)> {
    use benchctl_models::models::fiber::{self, TextBatch};
    let entry = registry::FIBER_CHECKPOINTS.iter().find(|e| e.id == args.model);
    if entry.is_none() && args.model != "fiber-base" {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("benchmark `{}`: FIBER benchmarks are `fiber-base` or a FIBER checkpoint id", args.model),
        ));
    }
    let size = if entry.is_some_and(|e| e.preprocessing.starts_with("576")) { 576 } else { 384 };
    if matches!(args.part, BenchPart::E2e) {
        return fiber_e2e(args, size);
    }
    let device = benchctl_models::device::parse_device(&args.device)?;
    let dtype = benchctl_models::device::parse_dtype(&args.dtype)?;
    let model = fiber::random_base(size, dtype, &device)?;
    let batch = args.batch as usize;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let pixels = Tensor::randn(0f32, 1f32, (batch, 3, size, size), &device).map_err(compute)?;
    let tokens = (args.text_tokens as usize).clamp(3, fiber::FIBER_MAX_TEXT_LEN);
    // `<s>`, pseudo-random ids clear of the special tokens, `</s>`.
    let rows: Vec<Vec<u32>> = (0..batch)
        .map(|b| {
            let mut row = vec![0];
            row.extend((0..tokens - 2).map(|t| 4 + ((b * 7919 + t * 104_729) as u32) % 50_000));
            row.push(2);
            row
        })
        .collect();
    let text = TextBatch::pad(&rows, 1);
    let sync = |t: Tensor| -> Result<()> {
        t.to_dtype(DType::F32).and_then(|o| o.sum_all()).and_then(|s| s.to_scalar::<f32>()).map_err(compute)?;
        Ok(())
    };
    let mut results = Vec::new();
    if matches!(args.part, BenchPart::Image | BenchPart::Both) {
        let times =
            time(args.iters as usize, || sync(model.itc_image_from_backbone(&model.image_backbone(&pixels)?)?.1))?;
        results.push(summarise("image (itc)", batch, &times));
    }
    if matches!(args.part, BenchPart::Text | BenchPart::Both) {
        let times = time(args.iters as usize, || sync(model.itc_text_from_backbone(&model.text_backbone(&text)?)?.1))?;
        results.push(summarise("text (itc)", batch, &times));
    }
    if matches!(args.part, BenchPart::Both) {
        let prefusion = model.image_prefusion(&pixels)?;
        let times = time(args.iters as usize, || sync(model.pair_logits(&prefusion, &text)?))?;
        results.push(summarise("pairs (itm)", batch, &times));
    }
    if results.is_empty() {
        return Err(Error::new(ErrorKind::Usage, "benchmark FIBER: --part image, text or both"));
    }
    Ok((format!("FIBER-base at {size} px"), results))
}

/// The micro FIBER fixture's byte-level BPE (RoBERTa's file format and special ids), built in
/// so the FIBER benchmark needs no files; its ids fit any RoBERTa vocabulary.
const FIBER_VOCAB: &[u8] = include_bytes!("../../../benchctl-models/tests/fixtures/fiber-micro/vocab.json");
const FIBER_MERGES: &[u8] = include_bytes!("../../../benchctl-models/tests/fixtures/fiber-micro/merges.txt");

/// A full-size FIBER-base with random weights, written as a model directory, evaluated with
/// its ITM head on a generated 24-item suite in a child process: every pair through the fused
/// backbones end to end, the shapes checked by the run completing, memory by its peak RSS.
fn fiber_e2e(args: &BenchArgs, size: usize) -> Result<(String, Vec<PartResult>)> {
    let items = 24;
    let dir = std::env::temp_dir().join(format!("benchctl-bench-fiber-{}", std::process::id()));
    let (model_dir, suite_dir) = (dir.join("model"), dir.join("suite"));
    let result = (|| -> Result<Vec<PartResult>> {
        std::fs::create_dir_all(&model_dir).map_err(io("create the model directory"))?;
        let config = format!(r#"{{"model_type": "fiber", "image_size": {size}}}"#);
        std::fs::write(model_dir.join("config.json"), config).map_err(io("write config.json"))?;
        std::fs::write(model_dir.join("vocab.json"), FIBER_VOCAB).map_err(io("write vocab.json"))?;
        std::fs::write(model_dir.join("merges.txt"), FIBER_MERGES).map_err(io("write merges.txt"))?;
        benchctl_models::models::fiber::save_random_base(size, &model_dir.join("model.safetensors"))?;
        write_suite(&suite_dir, items)?;
        let (results, cache) = (dir.join("results"), dir.join("cache"));
        let batch = args.batch.to_string();
        let (run, wall, rss) = eval_child(&model_dir, &suite_dir, &results, &cache, &["--batch-size", &batch], &[])?;
        let t = |k: &str| run["timings"][k].as_f64().unwrap_or(f64::NAN);
        let pairs = run["counts"]["pairs_scored"].as_f64().unwrap_or(f64::NAN);
        let seconds = t("total_s") - t("load_model_s");
        Ok(vec![PartResult {
            part: "e2e (itm)",
            batch: args.batch as usize,
            per_second: pairs / seconds,
            p50_ms: f64::NAN,
            p90_ms: f64::NAN,
            max_ms: f64::NAN,
            extra: vec![
                ("pairs_scored", pairs),
                ("images_encoded", run["counts"]["images_encoded"].as_f64().unwrap_or(f64::NAN)),
                ("eval_s", seconds),
                ("load_model_s", t("load_model_s")),
                ("wall_s", wall),
                ("eval_peak_rss_mib", rss),
            ],
        }])
    })();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((format!("FIBER-base at {size} px, {items} items, ITM pairs per second"), result?))
}

/// One warm-up call, then `iters` timed calls; seconds each.
fn time(iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    f()?;
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect()
}

fn summarise(part: &'static str, batch: usize, times: &[f64]) -> PartResult {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize] * 1e3;
    let total: f64 = times.iter().sum();
    PartResult {
        part,
        batch,
        per_second: (batch * times.len()) as f64 / total,
        p50_ms: pct(0.5),
        p90_ms: pct(0.9),
        max_ms: pct(1.0),
        extra: Vec::new(),
    }
}

/// The resident set now, in MiB (`VmRSS`).
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

/// The memory ceiling of annotations: a Winoground `examples.jsonl` of 1,000,000 items (two
/// 8×8 images shared by all, so only the annotations grow), loaded as `eval` loads it, the
/// resident memory before and after, per item; whole `eval`s (a tiny random CLIP, 512-wide
/// embeddings, in child processes) of its first [`EVAL_ITEMS`] items, each one's peak RSS and
/// how it grows per item, with the default memory budget and with none (`BENCHCTL_SPILL_AT=0`,
/// every vector spilled: how a suite past the budget grows, which should be not at all); and
/// `check` of a generated EqBen full list of [`EQBEN_ITEMS`] items (its million-entry JSON
/// document), its peak RSS.
fn annotations() -> Result<(String, Vec<PartResult>)> {
    let items = 1_000_000;
    let dir = std::env::temp_dir().join(format!("benchctl-bench-annotations-{}", std::process::id()));
    let result = (|| -> Result<Vec<PartResult>> {
        std::fs::create_dir_all(dir.join("images")).map_err(io("create the suite"))?;
        for name in ["a", "b"] {
            image::RgbImage::from_pixel(8, 8, image::Rgb([9, 99, 199]))
                .save(dir.join("images").join(format!("{name}.png")))
                .map_err(|e| Error::new(ErrorKind::Compute, format!("benchmark: write an image: {e}")))?;
        }
        // The first EVAL_ITEMS[k] items also make suites of their own, for the whole evals.
        let create = |path: std::path::PathBuf| {
            std::fs::File::create(path).map(std::io::BufWriter::new).map_err(io("write examples.jsonl"))
        };
        let mut eval_files = Vec::new();
        for &n in &EVAL_ITEMS {
            let eval_dir = dir.join(format!("eval-{n}"));
            std::fs::create_dir_all(eval_dir.join("images")).map_err(io("create an eval suite"))?;
            for name in ["a", "b"] {
                let image = format!("{name}.png");
                std::fs::copy(dir.join("images").join(&image), eval_dir.join("images").join(&image))
                    .map_err(io("copy an image"))?;
            }
            eval_files.push((n, create(eval_dir.join("examples.jsonl"))?, eval_dir));
        }
        let mut file = create(dir.join("examples.jsonl"))?;
        for i in 0..items {
            use std::io::Write;
            let line = format!(
                r#"{{"id": {i}, "image_0": "a", "image_1": "b", "caption_0": "a small dog to the left of a red car number {i}", "caption_1": "a red car to the left of a small dog number {i}", "tag": "Relation-Spatial", "secondary_tag": "Symbolic", "num_main_preds": 1, "collapsed_tag": "Relation"}}"#
            );
            writeln!(file, "{line}").map_err(io("write examples.jsonl"))?;
            for (n, eval_file, _) in eval_files.iter_mut() {
                if i < *n {
                    writeln!(eval_file, "{line}").map_err(io("write examples.jsonl"))?;
                }
            }
        }
        drop(file);
        let eval_dirs: Vec<(usize, std::path::PathBuf)> = eval_files.into_iter().map(|(n, _, dir)| (n, dir)).collect();
        let bytes = std::fs::metadata(dir.join("examples.jsonl")).map(|m| m.len() as f64).unwrap_or(f64::NAN);
        let before = rss_mib().unwrap_or(f64::NAN);
        let started = Instant::now();
        let suite = benchctl_suites::find("winoground")?.load(&dir)?;
        let seconds = started.elapsed().as_secs_f64();
        let after = rss_mib().unwrap_or(f64::NAN);
        if suite.items.len() != items {
            return Err(Error::new(
                ErrorKind::Compute,
                format!("benchmark: loaded {} items of {items}", suite.items.len()),
            ));
        }
        drop(suite);
        let model_dir = dir.join("model");
        std::fs::create_dir_all(&model_dir).map_err(io("create the model directory"))?;
        std::fs::write(model_dir.join("config.json"), TINY_CLIP_CONFIG).map_err(io("write config.json"))?;
        std::fs::write(model_dir.join("tokenizer.json"), CLIP_TOKENIZER).map_err(io("write tokenizer.json"))?;
        let config = ClipConfig::from_file(&model_dir.join("config.json"))?;
        Clip::save_random(&config, &model_dir.join("model.safetensors"))?;
        let options = ["--no-cache", "--batch-size", "256"];
        // Each size twice: with the default memory budget (both fit it), and with none
        // (`BENCHCTL_SPILL_AT=0`: every vector spilled, as a suite past the budget runs).
        let mut evals = Vec::new();
        for budget in [None, Some(std::ffi::OsStr::new("0"))] {
            for (n, eval_dir) in &eval_dirs {
                let results = dir.join(format!("results-{n}-{}", budget.is_some()));
                let env: Vec<(&str, &std::ffi::OsStr)> = budget.map(|b| ("BENCHCTL_SPILL_AT", b)).into_iter().collect();
                let (_, wall, peak) = eval_child(&model_dir, eval_dir, &results, &dir.join("cache"), &options, &env)?;
                evals.push((*n as f64, wall, peak));
            }
        }
        let [(small, _, small_peak), (large, large_wall, large_peak)] = [evals[0], evals[1]];
        let [(_, _, small_spilled), (_, large_spilled_wall, large_spilled)] = [evals[2], evals[3]];
        let eqben_dir = dir.join("eqben");
        write_eqben_list(&eqben_dir, EQBEN_ITEMS)?;
        let check: Vec<std::ffi::OsString> =
            vec!["check".into(), "--suite".into(), "eqben".into(), "--data-dir".into(), eqben_dir.into()];
        let (_, eqben_check_s, eqben_check_peak) = child_peak(&check, &[], &dir.join("check"))?;
        Ok(vec![PartResult {
            part: "annotations",
            batch: items,
            per_second: items as f64 / seconds,
            p50_ms: seconds * 1e3,
            p90_ms: f64::NAN,
            max_ms: f64::NAN,
            extra: vec![
                ("file_mib", bytes / (1 << 20) as f64),
                ("load_s", seconds),
                ("suite_mib", after - before),
                ("bytes_per_item", (after - before) * (1 << 20) as f64 / items as f64),
                ("eval_items", large),
                ("eval_wall_s", large_wall),
                ("eval_peak_rss_mib", large_peak),
                ("eval_items_small", small),
                ("eval_peak_rss_mib_small", small_peak),
                ("eval_bytes_per_item", (large_peak - small_peak) * (1 << 20) as f64 / (large - small)),
                ("eval_spilled_wall_s", large_spilled_wall),
                ("eval_spilled_peak_rss_mib", large_spilled),
                ("eval_spilled_peak_rss_mib_small", small_spilled),
                ("eval_spilled_bytes_per_item", (large_spilled - small_spilled) * (1 << 20) as f64 / (large - small)),
                ("eqben_check_items", EQBEN_ITEMS as f64),
                ("eqben_check_s", eqben_check_s),
                ("eqben_check_peak_rss_mib", eqben_check_peak),
            ],
        }])
    })();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        format!(
            "winoground examples.jsonl, 1,000,000 items (evals: the first {} and {}); eqben check, {EQBEN_ITEMS} items",
            EVAL_ITEMS[0], EVAL_ITEMS[1]
        ),
        result?,
    ))
}

/// Items of the annotations benchmark's whole evals (a tiny model: the memory is the suite's);
/// two sizes, so that the peak's growth per item shows apart from the process's baseline.
const EVAL_ITEMS: [usize; 2] = [50_000, 200_000];

/// Items of the annotations benchmark's EqBen list (the full release has 251,048).
const EQBEN_ITEMS: usize = 250_000;

/// A shuffled EqBen full list of `items` 2×2 items (four entries each, `private_info` in the
/// entries, the seven splits in the release's proportions), no images.
fn write_eqben_list(dir: &std::path::Path, items: usize) -> Result<()> {
    use std::io::Write;
    let path = dir.join(benchctl_suites::eqben::ANNOTATION_FILE);
    std::fs::create_dir_all(path.parent().unwrap_or(dir)).map_err(io("create the eqben list's folder"))?;
    let mut entries: Vec<(String, String, &str, String, usize)> = Vec::with_capacity(items * 4);
    let total: usize = benchctl_suites::eqben::SPLITS.iter().map(|(_, n)| n).sum();
    for (split, official) in benchctl_suites::eqben::SPLITS {
        for sample in 0..(items * official).div_ceil(total) {
            for c in 0..2 {
                for i in 0..2 {
                    let image = format!("{split}/video_{sample:06}/frame_{i}.png");
                    let caption = format!("a person slices the vegetable number {sample} {}", ["before", "after"][c]);
                    entries.push((image, caption, split, format!("c{c}i{i}"), sample));
                }
            }
        }
    }
    // A fixed shuffle, as the release's list is shuffled.
    SplitMix64::new(0x9E37_79B9_7F4A_7C15).shuffle(&mut entries);
    let mut file = std::fs::File::create(&path).map(std::io::BufWriter::new).map_err(io("write the eqben list"))?;
    let write = |file: &mut std::io::BufWriter<std::fs::File>| -> std::io::Result<()> {
        file.write_all(b"[")?;
        for (j, (image, caption, split, name, sample)) in entries.iter().enumerate() {
            let entry = serde_json::json!({"image": image, "caption": caption,
                "private_info": {"dataset": split, "name": name, "sample_cnt": sample}});
            write!(file, "{}{entry}", if j == 0 { "" } else { ", " })?;
        }
        file.write_all(b"]")?;
        file.flush()
    };
    write(&mut file).map_err(io("write the eqben list"))
}

/// A tiny CLIP (2 layers of width 32 and 48, projection 24), for evaluations whose cost is the
/// suite's, not the model's.
/// Tiny towers, but embeddings as wide as ViT-B/32's (512): the eval's memory per item is
/// what a real model's would be, beyond its weights.
const TINY_CLIP_CONFIG: &str = r#"{"model_type": "clip", "projection_dim": 512,
 "text_config": {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2},
 "vision_config": {"hidden_size": 48, "intermediate_size": 96, "num_attention_heads": 3, "num_hidden_layers": 2, "patch_size": 32, "image_size": 224}}"#;

/// The tokenizer the end-to-end benchmark's random model uses: the CLIP vocabulary of the
/// parity fixtures (OpenAI's BPE), built into the binary so the benchmark needs no files.
const CLIP_TOKENIZER: &[u8] = include_bytes!("../../../benchctl-models/tests/fixtures/tokenizer/tokenizer.json");

fn io(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::new(ErrorKind::Compute, format!("benchmark: {what}: {e}"))
}

/// A Winoground-layout suite of `items` items under `dir`: 2 PNG photos-like images
/// (smooth noise, 500×375 like COCO) and 2 captions each.
fn write_suite(dir: &std::path::Path, items: usize) -> Result<()> {
    std::fs::create_dir_all(dir.join("images")).map_err(io("create the suite"))?;
    let words = [
        "red", "blue", "dog", "cat", "left", "right", "of", "a", "the", "on", "under", "tall", "small", "tree", "car",
        "house",
    ];
    let mut lines = String::new();
    let pixels: Vec<Result<()>> = (0..items * 2)
        .into_par_iter()
        .map(|n| {
            let mut rng = SplitMix64::new(n as u64);
            let mut next = move || rng.next_u64();
            let coarse: Vec<u8> = (0..16 * 12 * 3).map(|_| next() as u8).collect();
            let image = image::RgbImage::from_fn(500, 375, |x, y| {
                let (cx, cy) = ((x * 15 / 500) as usize, (y * 11 / 375) as usize);
                let base = (cy * 16 + cx) * 3;
                let noise = (next() % 24) as u8;
                image::Rgb([
                    coarse[base].wrapping_add(noise),
                    coarse[base + 1].wrapping_add(noise),
                    coarse[base + 2].wrapping_add(noise),
                ])
            });
            image
                .save(dir.join("images").join(format!("img_{n}.png")))
                .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("benchmark: write an image: {e}"), e))
        })
        .collect();
    pixels.into_iter().collect::<Result<Vec<()>>>()?;
    for i in 0..items {
        let caption =
            |k: usize| (0..8).map(|w| words[(i * 7 + k * 3 + w * 5) % words.len()]).collect::<Vec<_>>().join(" ");
        lines.push_str(
            &serde_json::json!({
                "id": i, "image_0": format!("img_{}", 2 * i), "image_1": format!("img_{}", 2 * i + 1),
                "caption_0": caption(0), "caption_1": caption(1), "tag": "Object", "secondary_tag": "",
                "num_main_preds": 1, "collapsed_tag": "Object"
            })
            .to_string(),
        );
        lines.push('\n');
    }
    std::fs::write(dir.join("examples.jsonl"), lines).map_err(io("write examples.jsonl"))
}

/// `benchctl eval` as a child process: (its run JSON, wall seconds, its peak RSS in MiB).
fn eval_child(
    model: &std::path::Path,
    suite: &std::path::Path,
    results: &std::path::Path,
    cache: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<(serde_json::Value, f64, f64)> {
    let mut args: Vec<std::ffi::OsString> = ["eval", "--suite", "winoground", "--model-path"].map(Into::into).to_vec();
    args.push(model.into());
    args.extend(["--data-dir".into(), suite.into(), "--results-dir".into(), results.into()]);
    args.extend(extra.iter().map(Into::into));
    let mut env = env.to_vec();
    env.push(("BENCHCTL_CACHE", cache.as_os_str()));
    let (stdout, wall, peak) = child_peak(&args, &env, results)?;
    let path = stdout
        .lines()
        .find_map(|l| l.strip_prefix("stored "))
        .ok_or_else(|| Error::new(ErrorKind::Compute, "benchmark: benchctl eval stored no run"))?;
    let json = serde_json::from_str(&std::fs::read_to_string(path.trim()).map_err(io("read the run"))?)
        .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("benchmark: parse the run: {e}"), e))?;
    Ok((json, wall, peak))
}

/// benchctl with `args` (and `env` set) as a child process, its output kept in `out_dir`: (its
/// stdout, wall seconds, its peak RSS in MiB); its failure is an error with its stderr.
fn child_peak(
    args: &[std::ffi::OsString],
    env: &[(&str, &std::ffi::OsStr)],
    out_dir: &std::path::Path,
) -> Result<(String, f64, f64)> {
    let exe = std::env::current_exe().map_err(io("find benchctl"))?;
    // Output goes to files: nothing to drain while the child runs and is polled.
    let (out_path, err_path) = (out_dir.join("child.stdout"), out_dir.join("child.stderr"));
    std::fs::create_dir_all(out_dir).map_err(io("create the child's output directory"))?;
    let started = Instant::now();
    let mut child = std::process::Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&out_path).map_err(io("create the child's stdout"))?)
        .stderr(std::fs::File::create(&err_path).map_err(io("create the child's stderr"))?)
        .spawn()
        .map_err(io("run benchctl"))?;
    // The child's own high-water mark (VmHWM of its address space), polled until it exits.
    // getrusage's maxrss would also count the benchmark's pages the child shares between
    // fork and exec.
    let mut peak_kib = 0u64;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(io("wait for benchctl"))? {
            break status;
        }
        peak_kib = peak_kib.max(vm_hwm_kib(child.id()).unwrap_or(0));
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let wall = started.elapsed().as_secs_f64();
    let read = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default();
    // `check` exits 3 when it finds problems (here: images the benchmark does not write).
    let check_found_problems = args.first().is_some_and(|a| a == "check") && status.code() == Some(3);
    if !(status.success() || check_found_problems) {
        return Err(Error::new(ErrorKind::Compute, format!("benchmark: benchctl failed: {}", read(&err_path))));
    }
    let peak_mib = if peak_kib > 0 { peak_kib as f64 / 1024.0 } else { f64::NAN };
    Ok((read(&out_path), wall, peak_mib))
}

/// A process's peak resident set (`VmHWM` in `/proc/PID/status`), in KiB.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The whole evaluation path on a Winoground-sized suite from PNG files (800 images, 800
/// captions, scoring), with full-size random weights: the pure encoder time (preprocessed
/// inputs, in process), a cold `benchctl eval` (decode → preprocess → encode → score, a child
/// process, whose peak RSS is recorded) and a warm-cache re-run.
fn e2e(args: &BenchArgs) -> Result<(String, Vec<PartResult>)> {
    let items = 400;
    let dir = std::env::temp_dir().join(format!("benchctl-bench-{}", std::process::id()));
    let (model_dir, suite_dir) = (dir.join("model"), dir.join("suite"));
    std::fs::create_dir_all(&model_dir).map_err(io("create the model directory"))?;
    let config = ClipConfig::vit_b32();
    std::fs::write(model_dir.join("config.json"), r#"{"model_type": "clip", "text_config": {}, "vision_config": {}}"#)
        .map_err(io("write config.json"))?;
    std::fs::write(model_dir.join("tokenizer.json"), CLIP_TOKENIZER).map_err(io("write tokenizer.json"))?;
    Clip::save_random(&config, &model_dir.join("model.safetensors"))?;
    write_suite(&suite_dir, items)?;
    let batch = args.batch.to_string();
    let device = benchctl_models::device::parse_device(&args.device)?;
    let dtype = benchctl_models::device::parse_dtype(&args.dtype)?;
    let result = (|| -> Result<Vec<PartResult>> {
        // Encoder only: the same model and inputs, already decoded and preprocessed.
        let suite = benchctl_suites::find("winoground")?.load(&suite_dir)?;
        let files = benchctl_models::hub::from_dir(&model_dir)?;
        let encoder = benchctl_models::models::clip::ClipEncoder::load(&files, dtype, &device)?;
        use benchctl_models::DualEncoder;
        let prep = encoder.preprocessor().clone();
        let images: Vec<Vec<f32>> = suite
            .items
            .iter()
            .flat_map(|i| i.images())
            .map(|s| s.load_pil().map(|img| crate::encode::preprocess(&prep, &img)))
            .collect::<std::result::Result<_, _>>()?;
        let texts: Vec<&str> = suite.items.iter().flat_map(|i| i.texts()).collect();
        let b = args.batch as usize;
        let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
        let started = Instant::now();
        for chunk in images.chunks(b) {
            // As `eval` does: host pixels copied to the device, the embeddings read back.
            let pixels = Tensor::from_vec(chunk.concat(), (chunk.len(), 3, prep.size, prep.size), &device)
                .and_then(|p| p.to_dtype(dtype))
                .map_err(compute)?;
            encoder.encode_images(&pixels)?.to_dtype(DType::F32).and_then(|e| e.to_vec2::<f32>()).map_err(compute)?;
        }
        for chunk in texts.chunks(b) {
            encoder.encode_texts(chunk)?.to_dtype(DType::F32).and_then(|e| e.to_vec2::<f32>()).map_err(compute)?;
        }
        let encoder_s = started.elapsed().as_secs_f64();
        drop(encoder);

        let (cold_cache, results) = (dir.join("cache"), dir.join("results"));
        let options = ["--batch-size", &batch, "--device", &args.device, "--dtype", &args.dtype];
        let (cold, cold_wall, rss) = eval_child(&model_dir, &suite_dir, &results, &cold_cache, &options, &[])?;
        let (warm, warm_wall, _) = eval_child(&model_dir, &suite_dir, &results, &cold_cache, &options, &[])?;
        let t = |run: &serde_json::Value, k: &str| run["timings"][k].as_f64().unwrap_or(f64::NAN);
        // The evaluation proper: everything after the model is loaded.
        let cold_s = t(&cold, "total_s") - t(&cold, "load_model_s");
        let warm_s = t(&warm, "total_s") - t(&warm, "load_model_s");
        let n = (2 * items) as f64;
        Ok(vec![PartResult {
            part: "e2e",
            batch: b,
            per_second: n / cold_s,
            p50_ms: f64::NAN,
            p90_ms: f64::NAN,
            max_ms: f64::NAN,
            extra: vec![
                ("encoder_only_s", encoder_s),
                ("e2e_s", cold_s),
                ("e2e_over_encoder", cold_s / encoder_s),
                ("warm_rerun_s", warm_s),
                ("cold_over_warm", cold_s / warm_s),
                ("cold_over_warm_wall", cold_wall / warm_wall),
                ("eval_peak_rss_mib", rss),
            ],
        }])
    })();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(("clip-vit-b32, 800 PNG images + 800 captions".to_string(), result?))
}

/// RoCOCO-scale retrieval scoring on random unit embeddings (dimension 512): 5,000 images
/// against 50,010 captions (image-to-text) and 25,010 captions against 10,000 images
/// (text-to-image), each query reduced to its rank, as `eval --suite rococo` does.
fn retrieval(args: &BenchArgs) -> Result<(String, Vec<PartResult>)> {
    let _ = args;
    let dev = candle_core::Device::Cpu;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let unit = |n: usize| -> Result<Tensor> {
        let x = Tensor::randn(0f32, 1.0, (n, 512), &dev).map_err(compute)?;
        benchctl_models::models::transformer::l2_normalise(&x).map_err(compute)
    };
    let (images, captions) = (unit(5_000)?, unit(50_010)?);
    let (queries, gallery) = (unit(25_010)?, unit(10_000)?);
    let i2t_altered: Vec<bool> = (0..50_010).map(|c| c % 2 == 1).collect();
    let t2i_altered: Vec<bool> = (0..10_000).map(|c| c >= 5_000).collect();
    let mut times = Vec::new();
    for _ in 0..args.iters {
        let started = Instant::now();
        let i2t = crate::evaluate::galleries::rank_gallery(
            &images,
            &captions,
            &|q| (0..5).map(|k| (q * 10 + k) % 50_010).collect(),
            &i2t_altered,
            benchctl_scoring::metrics::Ties::Strict,
        )?;
        let t2i = crate::evaluate::galleries::rank_gallery(
            &queries,
            &gallery,
            &|q| vec![q % 5_000],
            &t2i_altered,
            benchctl_scoring::metrics::Ties::Strict,
        )?;
        times.push(started.elapsed().as_secs_f64());
        if i2t.len() != 5_000 || t2i.len() != 25_010 {
            return Err(Error::new(ErrorKind::Compute, "benchmark: a query lost its outcome"));
        }
    }
    let mut r = summarise("retrieval", 5_000 + 25_010, &times);
    r.extra = vec![("seconds_per_pass", times.iter().sum::<f64>() / times.len() as f64)];
    Ok(("RoCOCO-scale scoring (5,000 × 50,010 and 25,010 × 10,000)".to_string(), vec![r]))
}

/// One dense layer of ViT-B/32's MLP on a batch of 32 images: `(1600, 768) · (3072, 768)ᵀ + b`,
/// `per_second` in GFLOP/s: as the encoders run it (weights packed once, when the model
/// loads: `transformer::Dense`), and through `kernels::dense_2d`, which packs them on every call.
fn dense(args: &BenchArgs) -> Result<(String, Vec<PartResult>)> {
    let (m, k, n) = (1600, 768, 3072);
    let dev = candle_core::Device::Cpu;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let x = Tensor::randn(0f32, 1.0, (m, k), &dev).map_err(compute)?;
    let w = Tensor::randn(0f32, 1.0, (n, k), &dev).map_err(compute)?;
    let b = Tensor::randn(0f32, 1.0, n, &dev).map_err(compute)?;
    let layer = benchctl_models::models::transformer::Dense::from_weights(w.clone(), Some(b.clone()))?;
    let time = |name: &'static str, product: &dyn Fn() -> candle_core::Result<Tensor>| -> Result<PartResult> {
        product().map_err(compute)?;
        let mut times = Vec::new();
        for _ in 0..args.iters.max(1) {
            let started = Instant::now();
            std::hint::black_box(product().map_err(compute)?);
            times.push(started.elapsed().as_secs_f64());
        }
        let best = times.iter().copied().fold(f64::INFINITY, f64::min);
        let gflops = 2.0 * (m * k * n) as f64 / best / 1e9;
        let mut r = summarise(name, 1, &times);
        r.per_second = gflops;
        r.extra = vec![("gflops", gflops)];
        Ok(r)
    };
    let rows = vec![
        time("dense", &|| layer.forward(&x))?,
        time("dense-packed-per-call", &|| benchctl_models::kernels::dense_2d(&x, &w, Some(&b)))?,
    ];
    Ok((format!("dense layer ({m}, {k}) · ({n}, {k})ᵀ + b, {} tier", benchctl_cpu::Tier::current().isa()), rows))
}

/// The fp32 multiply-add rate of the current tier: independent chains of FMAs (AVX-512: 16
/// registers of 16 lanes; AVX2: 12 of 8; generic: 64 lanes as the compiler vectorises them,
/// fused only where the target has FMA) on every thread, `per_second` in GFLOP/s (2 per FMA).
fn peak(args: &BenchArgs) -> Result<(String, Vec<PartResult>)> {
    const ITERATIONS: usize = 20_000_000;
    let tier = benchctl_cpu::Tier::current();
    let threads = rayon::current_num_threads();
    let mut times = Vec::new();
    let mut flops_per_iteration = 0;
    for _ in 0..args.iters.max(1) {
        let started = Instant::now();
        let results: Vec<(f32, usize)> = (0..threads).into_par_iter().map(|_| fma_chains(tier, ITERATIONS)).collect();
        times.push(started.elapsed().as_secs_f64());
        flops_per_iteration = results.iter().map(|r| r.1).sum();
        std::hint::black_box(results);
    }
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let gflops = (ITERATIONS * flops_per_iteration) as f64 / best / 1e9;
    let mut r = summarise("peak", 1, &times);
    r.per_second = gflops;
    r.extra = vec![("gflops", gflops)];
    Ok((format!("fp32 multiply-add peak, {} tier, {threads} threads", tier.isa()), vec![r]))
}

/// `iterations` rounds of independent multiply-add chains; returns a value that depends on
/// all of them (so nothing is optimised away) and the FLOPs per round.
fn fma_chains(tier: benchctl_cpu::Tier, iterations: usize) -> (f32, usize) {
    match tier.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier exists only where the CPU has its features.
        benchctl_cpu::Isa::Avx512 => unsafe { fma_chains_avx512(iterations) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        benchctl_cpu::Isa::Avx2 => unsafe { fma_chains_avx2(iterations) },
        _ => {
            let mut acc = [1f32; 64];
            let (m, a) = (std::hint::black_box(0.999_999f32), std::hint::black_box(1e-7f32));
            for _ in 0..iterations {
                for x in acc.iter_mut() {
                    *x = benchctl_cpu::madd::<{ benchctl_cpu::GENERIC_FUSED }>(*x, m, a);
                }
            }
            (acc.iter().sum(), 64 * 2)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_chains_avx512(iterations: usize) -> (f32, usize) {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(1.0); 16];
    let (m, a) = (_mm512_set1_ps(std::hint::black_box(0.999_999)), _mm512_set1_ps(std::hint::black_box(1e-7)));
    for _ in 0..iterations {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, m, a);
        }
    }
    let sum = acc.iter().fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, *x));
    (_mm512_reduce_add_ps(sum), 16 * 16 * 2)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains_avx2(iterations: usize) -> (f32, usize) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(1.0); 12];
    let (m, a) = (_mm256_set1_ps(std::hint::black_box(0.999_999)), _mm256_set1_ps(std::hint::black_box(1e-7)));
    for _ in 0..iterations {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, m, a);
        }
    }
    let sum = acc.iter().fold(_mm256_setzero_ps(), |s, x| _mm256_add_ps(s, *x));
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
    (lanes.iter().sum(), 12 * 8 * 2)
}

/// Peak resident set size of this process in MiB (Linux), if known.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The results as JSON: the setting and, per part, its throughput, latencies and extras.
pub fn to_json(name: &str, args: &BenchArgs, parts: &[PartResult]) -> serde_json::Value {
    let finite = |v: f64| {
        if v.is_finite() {
            serde_json::json!(v)
        } else {
            serde_json::Value::Null
        }
    };
    serde_json::json!({
        "model": name,
        "batch": args.batch,
        "threads": rayon::current_num_threads(),
        "cpu_tier": benchctl_cpu::Tier::current().isa().name(),
        "gemm_isa": benchctl_models::kernels::gemm_isa().name(),
        "dtype": args.dtype,
        "peak_rss_mib": peak_rss_mib(),
        "parts": parts.iter().map(|p| {
            let mut part = serde_json::json!({
                "part": p.part, "batch": p.batch, "per_second": finite(p.per_second),
                "p50_ms": finite(p.p50_ms), "p90_ms": finite(p.p90_ms), "max_ms": finite(p.max_ms),
            });
            for (k, v) in &p.extra {
                part[*k] = finite(*v);
            }
            part
        }).collect::<Vec<_>>(),
    })
}
