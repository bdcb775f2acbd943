//! The whole evaluation path on a Winoground-sized suite, in child processes whose peak RSS
//! is read.

use std::time::Instant;

use benchctl_models::models::clip::{Clip, ClipConfig};
use benchctl_scoring::metrics::stats::SplitMix64;
use candle_core::{DType, Tensor};
use rayon::prelude::*;

use super::{io, BenchPlan, PartResult};
use crate::{Error, ErrorKind, Result};
/// A tiny CLIP (2 layers of width 32 and 48, projection 24), for evaluations whose cost is the
/// suite's, not the model's.
/// Tiny towers, but embeddings as wide as ViT-B/32's (512): the eval's memory per item is
/// what a real model's would be, beyond its weights.
pub(super) const TINY_CLIP_CONFIG: &str = r#"{"model_type": "clip", "projection_dim": 512,
 "text_config": {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2},
 "vision_config": {"hidden_size": 48, "intermediate_size": 96, "num_attention_heads": 3, "num_hidden_layers": 2, "patch_size": 32, "image_size": 224}}"#;

/// The tokenizer the end-to-end benchmark's random model uses: the CLIP vocabulary of the
/// parity fixtures (OpenAI's BPE), read from the checkout the benchmark was built in.
pub(super) const CLIP_TOKENIZER: &str = "benchctl-models/tests/fixtures/tokenizer/tokenizer.json";

/// A file of the checkout's test fixtures (`crates/<path>`): the developer benchmarks build
/// their random models from them rather than carry them in every binary.
pub(super) fn fixture(path: &str) -> Result<Vec<u8>> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read(&file).map_err(|e| {
        Error::caused_by(
            ErrorKind::Usage,
            format!("benchmark: read {} ({e}): this benchmark runs from a benchctl checkout", file.display()),
            e,
        )
    })
}

/// A Winoground-layout suite of `items` items under `dir`: 2 PNG photos-like images
/// (smooth noise, 500×375 like COCO) and 2 captions each.
pub(super) fn write_suite(dir: &std::path::Path, items: usize) -> Result<()> {
    write_suite_sized(dir, items, (500, 375))
}

/// [`write_suite`] with images of `(width, height)`.
pub(super) fn write_suite_sized(dir: &std::path::Path, items: usize, (width, height): (u32, u32)) -> Result<()> {
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
            let image = image::RgbImage::from_fn(width, height, |x, y| {
                let (cx, cy) = ((x * 15 / width) as usize, (y * 11 / height) as usize);
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

/// `benchctl eval` of `suite` (an id or a manifest's path) as a child process: (its run JSON,
/// wall seconds, its peak RSS in MiB).
pub(super) fn eval_child(
    suite_id: &str,
    model: &std::path::Path,
    suite: &std::path::Path,
    results: &std::path::Path,
    cache: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<(serde_json::Value, f64, f64)> {
    let mut args: Vec<std::ffi::OsString> = ["eval", "--suite", suite_id, "--model-path"].map(Into::into).to_vec();
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
pub(super) fn child_peak(
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
/// inputs, in process, after one warm-up batch of each), a cold `benchctl eval` (decode →
/// preprocess → encode → score, a child process, whose peak RSS and encoding stages are
/// recorded) and a warm-cache re-run.
pub(super) fn run(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    let items = 400;
    let dir = std::env::temp_dir().join(format!("benchctl-bench-{}", std::process::id()));
    let (model_dir, suite_dir) = (dir.join("model"), dir.join("suite"));
    std::fs::create_dir_all(&model_dir).map_err(io("create the model directory"))?;
    let config = ClipConfig::vit_b32();
    std::fs::write(model_dir.join("config.json"), r#"{"model_type": "clip", "text_config": {}, "vision_config": {}}"#)
        .map_err(io("write config.json"))?;
    std::fs::write(model_dir.join("tokenizer.json"), fixture(CLIP_TOKENIZER)?).map_err(io("write tokenizer.json"))?;
    Clip::save_random(&config, &model_dir.join("model.safetensors"))?;
    write_suite(&suite_dir, items)?;
    let batch = args.batch.to_string();
    let device = args.device.open()?;
    let dtype = args.dtype;
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
        let encode_all = |images: &[Vec<f32>], texts: &[&str]| -> Result<()> {
            for chunk in images.chunks(b) {
                // As `eval` does: host pixels copied to the device, the embeddings read back.
                let pixels = Tensor::from_vec(chunk.concat(), (chunk.len(), 3, prep.size, prep.size), &device)
                    .and_then(|p| p.to_dtype(dtype))
                    .map_err(compute)?;
                encoder
                    .encode_images(&pixels)?
                    .to_dtype(DType::F32)
                    .and_then(|e| e.to_vec2::<f32>())
                    .map_err(compute)?;
            }
            for chunk in texts.chunks(b) {
                encoder.encode_texts(chunk)?.to_dtype(DType::F32).and_then(|e| e.to_vec2::<f32>()).map_err(compute)?;
            }
            Ok(())
        };
        // One batch of each first: the encoder's steady rate, without the device's one-time
        // start (a GPU's kernel loading and library handles), which the cold `eval` below pays.
        encode_all(&images[..b.min(images.len())], &texts[..b.min(texts.len())])?;
        let started = Instant::now();
        encode_all(&images, &texts)?;
        let encoder_s = started.elapsed().as_secs_f64();
        drop(encoder);

        let (cold_cache, results) = (dir.join("cache"), dir.join("results"));
        let (device_name, dtype_name) = (args.device.to_string(), benchctl_models::device::dtype_name(dtype));
        let options = ["--batch-size", &batch, "--device", &device_name, "--dtype", dtype_name];
        let (cold, cold_wall, rss) =
            eval_child("winoground", &model_dir, &suite_dir, &results, &cold_cache, &options, &[])?;
        let (warm, warm_wall, _) =
            eval_child("winoground", &model_dir, &suite_dir, &results, &cold_cache, &options, &[])?;
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
                // The cold run's own encoding stages (decode and preprocess ahead of them
                // included, device start included), and the rest: suite, cache, scores, store.
                ("eval_encode_s", t(&cold, "encode_images_s") + t(&cold, "encode_texts_s")),
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
