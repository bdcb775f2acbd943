//! VQAScore's pipeline on the CPU: what `benchctl eval` adds to a generative model's own
//! forward passes (decoding, tokenising, the pair table, the cache, the record), measured on
//! the tiny Gemma 3 of the test fixtures over a generated Winoground-layout suite whose
//! images are at the model's input size.

use std::time::Instant;

use benchctl_models::models::gemma3::Gemma3Vqa;
use benchctl_models::vqascore::local::LocalVqa;
use benchctl_models::FusionEncoder;
use candle_core::Tensor;

use super::e2e::{eval_child, write_suite_sized};
use super::{io, BenchPlan, PartResult};
use crate::{Error, ErrorKind, Result};

/// The fixture model, read from the checkout the benchmark was built in.
const MODEL: &str = "benchctl-models/tests/fixtures/gemma3-tiny";

pub(super) fn run(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    let items = 200;
    let model_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(MODEL);
    if !model_dir.join("model.safetensors").is_file() {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("benchmark: {} is missing: this benchmark runs from a benchctl checkout", model_dir.display()),
        ));
    }
    let dir = std::env::temp_dir().join(format!("benchctl-bench-vqa-{}", std::process::id()));
    let suite_dir = dir.join("suite");
    let device = args.device.open()?;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let result = (|| -> Result<Vec<PartResult>> {
        let model = Gemma3Vqa::load(&benchctl_models::hub::from_dir(&model_dir)?, args.dtype, &device)?;
        let size = model.preprocessor().size as u32;
        write_suite_sized(&suite_dir, items, (size, size))?;
        // The model alone: the same images already decoded and preprocessed, each image's
        // prompt state once, each of its two captions over it, as `eval` batches them.
        let suite = benchctl_suites::find("winoground")?.load(&suite_dir)?;
        let prep = model.preprocessor().clone();
        let mut jobs = Vec::new();
        for item in suite.items.iter() {
            for k in 0..item.image_count() {
                let pixels = crate::encode::preprocess(&prep, &item.image(k).load_pil()?);
                jobs.push((pixels, item.texts().collect::<Vec<_>>()));
            }
        }
        let b = args.batch as usize;
        let started = Instant::now();
        for chunk in jobs.chunks(b) {
            let flat: Vec<f32> = chunk.iter().flat_map(|(p, _)| p.iter().copied()).collect();
            let pixels = Tensor::from_vec(flat, (chunk.len(), 3, prep.size, prep.size), &device).map_err(compute)?;
            let states = model.encode_images(&pixels)?;
            let rows: Vec<u32> =
                chunk.iter().enumerate().flat_map(|(i, (_, t))| std::iter::repeat_n(i as u32, t.len())).collect();
            let texts: Vec<&str> = chunk.iter().flat_map(|(_, t)| t.iter().copied()).collect();
            for (rows, texts) in rows.chunks(b).zip(texts.chunks(b)) {
                let index = Tensor::new(rows, &device).map_err(compute)?;
                let pair_states = states.index_select(&index, 0).map_err(compute)?;
                model.score_pairs(&pair_states, texts)?.to_vec1::<f32>().map_err(compute)?;
            }
        }
        let model_s = started.elapsed().as_secs_f64();
        drop(model);
        let (cache, results) = (dir.join("cache"), dir.join("results"));
        let batch = args.batch.to_string();
        let options = ["--batch-size", &batch, "--dtype", benchctl_models::device::dtype_name(args.dtype)];
        let (run, _, rss) = eval_child("winoground", &model_dir, &suite_dir, &results, &cache, &options, &[])?;
        let t = |k: &str| run["timings"][k].as_f64().unwrap_or(f64::NAN);
        let eval_s = t("total_s") - t("load_model_s");
        let pairs = run["counts"]["pairs_scored"].as_f64().unwrap_or(f64::NAN);
        Ok(vec![PartResult {
            part: "vqascore",
            batch: b,
            per_second: pairs / eval_s,
            p50_ms: f64::NAN,
            p90_ms: f64::NAN,
            max_ms: f64::NAN,
            extra: vec![
                ("model_only_s", model_s),
                ("eval_s", eval_s),
                ("pipeline_overhead", eval_s / model_s - 1.0),
                ("eval_peak_rss_mib", rss),
            ],
        }])
    })();
    let _ = std::fs::remove_dir_all(&dir).map_err(io("remove the benchmark's files"));
    Ok((format!("gemma3-tiny (fixture), {items} items, {} pairs", 4 * items), result?))
}
