//! Encoder throughput on random weights: CLIP's and SigLIP's towers (SigLIP 2's at fixed
//! resolution and NaFlex), and FIBER's unimodal and pair passes.

use benchctl_models::models::clip::{Clip, ClipConfig, ClipText};
use benchctl_models::models::eva::{self, eva02, pe_core, EvaTower, EvaVision, TimmClipFile};
use benchctl_models::models::siglip::{Siglip, SiglipConfig};
use benchctl_models::models::siglip2_naflex::{self, Siglip2Config};
use benchctl_models::registry::{self, BenchTowers};
use candle_core::{DType, Tensor};

use super::e2e::{eval_child, fixture, write_suite};
use super::{io, summarise, time, BenchPlan, Part, PartResult};
use crate::{Error, ErrorKind, Result};

/// open_clip 3.3's `PE-Core-B-16` (`model_configs/PE-Core-B-16.json`) with the hub
/// checkpoint's `preprocess_cfg`.
const PE_CORE_B16: &str = r#"{"model_cfg": {"embed_dim": 1024,
    "vision_cfg": {"image_size": 224, "timm_model_name": "vit_pe_core_base_patch16_224", "timm_pool": "map", "timm_proj": null},
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 1024, "heads": 16, "layers": 24}},
    "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bilinear", "resize_mode": "squash"}}"#;

/// open_clip 3.3's `EVA02-B-16` (`model_configs/EVA02-B-16.json`).
const EVA02_B16: &str = r#"{"model_cfg": {"embed_dim": 512,
    "vision_cfg": {"image_size": 224, "timm_model_name": "eva02_base_patch16_clip_224", "timm_pool": "token", "timm_proj": null},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12}}}"#;

/// open_clip 3.3's `PE-Core-L-14-336` (`model_configs/PE-Core-L-14-336.json`), the B/16's
/// `preprocess_cfg`.
const PE_CORE_L14_336: &str = r#"{"model_cfg": {"embed_dim": 1024,
    "vision_cfg": {"image_size": 336, "timm_model_name": "vit_pe_core_large_patch14_336", "timm_pool": "map", "timm_proj": null},
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 1024, "heads": 16, "layers": 24}},
    "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bilinear", "resize_mode": "squash"}}"#;

/// open_clip 3.3's `EVA02-L-14` (`model_configs/EVA02-L-14.json`).
const EVA02_L14: &str = r#"{"model_cfg": {"embed_dim": 768,
    "vision_cfg": {"image_size": 224, "timm_model_name": "eva02_large_patch14_clip_224", "timm_pool": "token", "timm_proj": null},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 768, "heads": 12, "layers": 12}}}"#;

/// A zoo entry's open_clip config (above) and its tower in the family's table.
fn timm_eva_shape(json: &str, towers: &'static [EvaTower]) -> Result<(TimmClipFile, &'static EvaTower)> {
    let file: TimmClipFile =
        serde_json::from_str(json).map_err(|e| Error::new(ErrorKind::Model, format!("read a benchmark shape: {e}")))?;
    let name = &file.model_cfg.vision_cfg.timm_model_name;
    let tower = towers.iter().find(|t| t.timm_name == name);
    let tower = tower.ok_or_else(|| Error::new(ErrorKind::Model, format!("find the timm tower {name}")))?;
    Ok((file, tower))
}

/// Two towers with random weights, built from a zoo id's shape or a `config.json`.
enum Towers {
    Clip(Box<Clip>),
    Siglip(Box<Siglip>),
    TimmEva(Box<(EvaVision, ClipText)>),
}

impl Towers {
    /// The towers of `--model` (`clip-vit-b32`, `siglip-base-patch16-224`,
    /// `siglip2-base-patch16-224`, `siglip2-base-patch16-naflex`, `pe-core-b16-224`,
    /// `pe-core-l14-336`, `eva02-clip-b16`, `eva02-clip-l14` have their shapes here) or of
    /// `--config`.
    fn build(args: &BenchPlan) -> Result<(String, Towers)> {
        let device = args.device.open()?;
        let dtype = args.dtype;
        let clip = |config: ClipConfig| -> Result<Towers> {
            Ok(Towers::Clip(Box::new(Clip::random(config, dtype, &device)?)))
        };
        let siglip = |config: SiglipConfig| -> Result<Towers> {
            Ok(Towers::Siglip(Box::new(Siglip::random(&config, dtype, &device)?)))
        };
        let timm_eva = |(file, tower): (TimmClipFile, &EvaTower)| -> Result<Towers> {
            Ok(Towers::TimmEva(Box::new(eva::random_towers(&file, tower, dtype, &device)?)))
        };
        // Square images of the position grid's size: every patch of the budget a real one.
        let naflex = |config: Siglip2Config| -> Result<Towers> {
            Ok(Towers::Siglip(Box::new(siglip2_naflex::random(&config, dtype, &device)?)))
        };
        if let Some(path) = &args.config {
            let name = path.display().to_string();
            let architecture = registry::detect_architecture(path)?;
            return match architecture.spec().bench_towers {
                BenchTowers::Siglip => Ok((name, siglip(SiglipConfig::from_file(path)?)?)),
                BenchTowers::Clip => Ok((name, clip(ClipConfig::from_file(path)?)?)),
                BenchTowers::Siglip2Naflex => Ok((name, naflex(Siglip2Config::from_file(path)?)?)),
                BenchTowers::TimmEva => {
                    let read = if architecture == eva02::ARCHITECTURE { eva02::read_config } else { pe_core::read_config };
                    Ok((name, timm_eva(read(path)?)?))
                }
                BenchTowers::None => Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "benchmark {name}: a {} model's towers are not benchmarked with --part image|text (CLIP's and SigLIP's are)",
                        architecture.name()
                    ),
                )),
            };
        }
        let entry = registry::find(&args.model)?;
        let towers = match entry.id {
            "clip-vit-b32" => clip(ClipConfig::vit_b32())?,
            "siglip-base-patch16-224" => {
                siglip(SiglipConfig { text_config: Default::default(), vision_config: Default::default() })?
            }
            "siglip2-base-patch16-224" => siglip(SiglipConfig::siglip2_base_patch16_224())?,
            "siglip2-base-patch16-naflex" => naflex(Siglip2Config::base_patch16_naflex())?,
            "pe-core-b16-224" => timm_eva(timm_eva_shape(PE_CORE_B16, pe_core::TOWERS)?)?,
            "eva02-clip-b16" => timm_eva(timm_eva_shape(EVA02_B16, eva02::TOWERS)?)?,
            "pe-core-l14-336" => timm_eva(timm_eva_shape(PE_CORE_L14_336, pe_core::TOWERS)?)?,
            "eva02-clip-l14" => timm_eva(timm_eva_shape(EVA02_L14, eva02::TOWERS)?)?,
            other => {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("benchmark `{other}`: pass its config.json with --config"),
                ))
            }
        };
        Ok((entry.id.to_string(), towers))
    }

    fn image_size(&self) -> usize {
        match self {
            Towers::Clip(m) => m.config().vision_config.image_size,
            Towers::Siglip(m) => m.image_size(),
            Towers::TimmEva(m) => m.0.image_size(),
        }
    }

    fn vocab(&self) -> usize {
        match self {
            Towers::Clip(m) => m.config().text_config.vocab_size,
            Towers::Siglip(m) => m.vocab_size(),
            Towers::TimmEva(m) => m.1.vocab_size(),
        }
    }

    /// SigLIP's texts always have its trained length; CLIP's the length asked for (PE-Core's
    /// at most its context).
    fn text_len(&self, asked: usize) -> usize {
        match self {
            Towers::Clip(_) => asked,
            Towers::Siglip(m) => m.text_len(),
            Towers::TimmEva(m) => asked.min(m.1.max_positions()),
        }
    }

    fn image_features(&self, pixels: &Tensor) -> benchctl_models::Result<Tensor> {
        match self {
            Towers::Clip(m) => m.image_features(pixels),
            Towers::Siglip(m) => m.image_features(pixels),
            Towers::TimmEva(m) => m.0.forward(pixels).map_err(|e| benchctl_models::Error::compute("encode images", e)),
        }
    }

    fn text_features(&self, ids: &[Vec<u32>]) -> benchctl_models::Result<Tensor> {
        match self {
            Towers::Clip(m) => m.text_features(ids),
            Towers::Siglip(m) => m.text_features(ids),
            Towers::TimmEva(m) => m.1.text_features(ids),
        }
    }
}

/// The image and text towers (`Part::Image`, `Part::Text`, `Part::Both`).
pub(super) fn towers(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    let device = args.device.open()?;
    let dtype = args.dtype;
    let memory = DeviceMemory::start(&device);
    let (name, model) = Towers::build(args)?;
    let batch = args.batch as usize;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let mut results = Vec::new();
    if matches!(args.part, Part::Image | Part::Both) {
        let size = model.image_size();
        let pixels = Tensor::randn(0f32, 1f32, (batch, 3, size, size), &device)
            .and_then(|t| t.to_dtype(dtype))
            .map_err(compute)?;
        let times = time(args.iters as usize, || {
            let out = model.image_features(&pixels)?;
            out.to_dtype(DType::F32).and_then(|o| o.sum_all()).and_then(|s| s.to_scalar::<f32>()).map_err(compute)?;
            memory.sample();
            Ok(())
        })?;
        results.push(memory.report(summarise("image", batch, &times)));
    }
    if matches!(args.part, Part::Text | Part::Both) {
        let tokens = model.text_len(args.text_tokens as usize);
        let vocab = model.vocab() as u32;
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
            memory.sample();
            Ok(())
        })?;
        let mut part = summarise("text", batch, &times);
        part.extra.push(("text_tokens", tokens as f64));
        results.push(memory.report(part));
    }
    Ok((name, results))
}

/// The GPU memory a benchmark takes: device-wide use sampled after each timed batch, less the
/// use before the model was built (the device's context); reported per part as `gpu_peak_mib`
/// (the part's peak; nothing on a CPU).
struct DeviceMemory<'a> {
    device: &'a candle_core::Device,
    before: Option<u64>,
    peak: std::cell::Cell<u64>,
}

impl<'a> DeviceMemory<'a> {
    fn start(device: &'a candle_core::Device) -> Self {
        let before = benchctl_models::device::memory_in_use(device);
        Self { device, before, peak: std::cell::Cell::new(0) }
    }

    fn sample(&self) {
        if let Some(now) = benchctl_models::device::memory_in_use(self.device) {
            self.peak.set(self.peak.get().max(now));
        }
    }

    /// `part` with the peak since the last report, which starts the next part's.
    fn report(&self, mut part: PartResult) -> PartResult {
        if let Some(before) = self.before {
            part.extra.push(("gpu_peak_mib", self.peak.take().saturating_sub(before) as f64 / 1_048_576.0));
        }
        part
    }
}

/// FIBER-base with random weights: the ITC image and text encoders (the unimodal paths) and
/// the ITM pair pass (six fused steps and the head, on cached pre-fusion image tokens), at
/// 384 px (`fiber-base`, the ITM checkpoints) or 576 px (the ITC checkpoints).
pub(super) fn fiber(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    use benchctl_models::models::fiber::{self, TextBatch};
    let entry = registry::FIBER_CHECKPOINTS.iter().find(|e| e.id == args.model);
    if entry.is_none() && args.model != "fiber-base" {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("benchmark `{}`: FIBER benchmarks are `fiber-base` or a FIBER checkpoint id", args.model),
        ));
    }
    let size = if entry.is_some_and(|e| e.preprocessing.starts_with("576")) { 576 } else { 384 };
    if matches!(args.part, Part::E2e) {
        return fiber_e2e(args, size);
    }
    let device = args.device.open()?;
    let dtype = args.dtype;
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
    if matches!(args.part, Part::Image | Part::Both) {
        let times =
            time(args.iters as usize, || sync(model.itc_image_from_backbone(&model.image_backbone(&pixels)?)?.1))?;
        results.push(summarise("image (itc)", batch, &times));
    }
    if matches!(args.part, Part::Text | Part::Both) {
        let times = time(args.iters as usize, || sync(model.itc_text_from_backbone(&model.text_backbone(&text)?)?.1))?;
        results.push(summarise("text (itc)", batch, &times));
    }
    if matches!(args.part, Part::Both) {
        let prefusion = model.image_prefusion(&pixels)?;
        let times = time(args.iters as usize, || sync(model.pair_logits(&prefusion, &text)?))?;
        results.push(summarise("pairs (itm)", batch, &times));
    }
    if results.is_empty() {
        return Err(Error::new(ErrorKind::Usage, "benchmark FIBER: --part image, text or both"));
    }
    Ok((format!("FIBER-base at {size} px"), results))
}

/// The micro FIBER fixture's byte-level BPE (RoBERTa's file format and special ids), read
/// from the checkout; its ids fit any RoBERTa vocabulary.
const FIBER_VOCAB: &str = "benchctl-models/tests/fixtures/fiber-micro/vocab.json";
const FIBER_MERGES: &str = "benchctl-models/tests/fixtures/fiber-micro/merges.txt";

/// A full-size FIBER-base with random weights, written as a model directory, evaluated with
/// its ITM head on a generated 24-item suite in a child process: every pair through the fused
/// backbones end to end, the shapes checked by the run completing, memory by its peak RSS.
fn fiber_e2e(args: &BenchPlan, size: usize) -> Result<(String, Vec<PartResult>)> {
    let items = 24;
    let dir = std::env::temp_dir().join(format!("benchctl-bench-fiber-{}", std::process::id()));
    let (model_dir, suite_dir) = (dir.join("model"), dir.join("suite"));
    let result = (|| -> Result<Vec<PartResult>> {
        std::fs::create_dir_all(&model_dir).map_err(io("create the model directory"))?;
        let config = format!(r#"{{"model_type": "fiber", "image_size": {size}}}"#);
        std::fs::write(model_dir.join("config.json"), config).map_err(io("write config.json"))?;
        std::fs::write(model_dir.join("vocab.json"), fixture(FIBER_VOCAB)?).map_err(io("write vocab.json"))?;
        std::fs::write(model_dir.join("merges.txt"), fixture(FIBER_MERGES)?).map_err(io("write merges.txt"))?;
        benchctl_models::models::fiber::save_random_base(size, &model_dir.join("model.safetensors"))?;
        write_suite(&suite_dir, items)?;
        let (results, cache) = (dir.join("results"), dir.join("cache"));
        let batch = args.batch.to_string();
        let (run, wall, rss) =
            eval_child("winoground", &model_dir, &suite_dir, &results, &cache, &["--batch-size", &batch], &[])?;
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
