//! `bench --part preprocess`: every image file under a directory decoded and preprocessed to
//! a model's input tensor, as `eval` does it, on the chosen threads: images per second in
//! total and per core, and where the time goes (decode, mode conversion, resize,
//! crop/normalise). `scripts/bench/bench_preprocess.py` runs Pillow and the model's reference
//! processor on the same files beside it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use benchctl_models::preprocess::Preprocessor;
use benchctl_suites::{ImageSource, PilImage};
use rayon::prelude::*;

use super::BenchPlan;
use super::PartResult;
use crate::{Error, ErrorKind, Result};

/// Seconds one image spent in each stage.
#[derive(Debug, Clone, Copy, Default)]
struct Stages {
    decode: f64,
    convert: f64,
    resize: f64,
    normalise: f64,
}

impl Stages {
    fn total(&self) -> f64 {
        self.decode + self.convert + self.resize + self.normalise
    }

    fn add(self, other: Stages) -> Stages {
        Stages {
            decode: self.decode + other.decode,
            convert: self.convert + other.convert,
            resize: self.resize + other.resize,
            normalise: self.normalise + other.normalise,
        }
    }
}

/// The sizes of the generated set: photos from 400 to 2,000 pixels a side, landscape and
/// portrait, each saved as a JPEG (quality 90) and every third one also as a PNG.
const GENERATED: [(u32, u32); 12] = [
    (640, 480),
    (2000, 1500),
    (1024, 768),
    (480, 640),
    (1600, 1200),
    (1200, 1600),
    (800, 533),
    (1920, 1080),
    (500, 750),
    (1280, 960),
    (400, 400),
    (1500, 1000),
];

pub(super) fn run(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    let prep = benchctl_models::registry::default_preprocessor(&args.model)?;
    let generated = std::env::temp_dir().join(format!("benchctl-bench-preprocess-{}", std::process::id()));
    let dir: PathBuf = match (&args.images, &args.keep_images) {
        (Some(dir), _) => dir.clone(),
        (None, Some(dir)) => {
            generate(dir)?;
            dir.clone()
        }
        (None, None) => {
            generate(&generated)?;
            generated.clone()
        }
    };
    let measured = measure(args, &prep, &dir);
    if args.images.is_none() && args.keep_images.is_none() {
        let _ = std::fs::remove_dir_all(&generated);
    }
    measured
}

fn measure(args: &BenchPlan, prep: &Preprocessor, dir: &Path) -> Result<(String, Vec<PartResult>)> {
    let files = image_files(dir)?;
    if files.is_empty() {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("benchmark preprocessing: no PNG or JPEG files under {}", dir.display()),
        ));
    }
    // One pass to warm the page cache and the allocator, then the timed passes, each one
    // parallel run over every file `iters` times (so no thread idles at a pass's end). With
    // several threads, the same run on one thread alternates with it, five rounds each, for
    // the scaling: a shared machine's speed drifts between commands, less between rounds.
    files.par_iter().map(|f| one(prep, f)).collect::<Result<Vec<_>>>()?;
    let timed: Vec<&PathBuf> = (0..args.iters).flat_map(|_| &files).collect();
    let run = || -> Result<(f64, Vec<Stages>)> {
        let start = Instant::now();
        let stages = timed.par_iter().map(|f| one(prep, f)).collect::<Result<Vec<_>>>()?;
        Ok((start.elapsed().as_secs_f64(), stages))
    };
    let threads = rayon::current_num_threads();
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .map_err(|e| Error::new(ErrorKind::Compute, format!("start a one-thread pool: {e}")))?;
    let rounds = if threads > 1 { 5 } else { 1 };
    let (mut wall, mut wall_single, mut stages) = (0.0, 0.0, Vec::new());
    for _ in 0..rounds {
        let (seconds, round) = run()?;
        wall += seconds;
        stages.extend(round);
        if threads > 1 {
            wall_single += single.install(run)?.0;
        }
    }
    let mut per_image: Vec<f64> = stages.iter().map(Stages::total).collect();
    let images = stages.len();
    let sum = stages.into_iter().fold(Stages::default(), Stages::add);
    per_image.sort_by(f64::total_cmp);
    let pct = |p: f64| per_image[((per_image.len() - 1) as f64 * p).round() as usize] * 1e3;
    let ms = |s: f64| s / images as f64 * 1e3;
    let result = PartResult {
        part: "preprocess",
        // Latencies are per image.
        batch: 1,
        per_second: images as f64 / wall,
        p50_ms: pct(0.5),
        p90_ms: pct(0.9),
        max_ms: pct(1.0),
        extra: vec![
            ("threads", threads as f64),
            ("per_core_per_second", images as f64 / wall / threads as f64),
            // This rate over one thread's, measured in alternating rounds.
            ("scaling_from_1_thread", if threads > 1 { wall_single / wall } else { 1.0 }),
            // CPU time per image in each stage, summed over the threads.
            ("decode_ms", ms(sum.decode)),
            ("convert_ms", ms(sum.convert)),
            ("resize_ms", ms(sum.resize)),
            ("normalise_ms", ms(sum.normalise)),
        ],
    };
    Ok((
        format!("{} preprocessing ({}), {} files under {}", args.model, prep.describe(), files.len(), dir.display()),
        vec![result],
    ))
}

/// One file decoded and preprocessed, each stage timed. An RGB image's resize and crop are
/// timed apart; other modes go through [`Preprocessor::apply_pil`] whole (their mode
/// conversion counted as conversion).
fn one(prep: &Preprocessor, file: &Path) -> Result<Stages> {
    let mut stages = Stages::default();
    let start = Instant::now();
    let image = ImageSource::File(file.to_path_buf()).load_pil().map_err(Error::from)?;
    stages.decode = start.elapsed().as_secs_f64();
    let (w, h) = image.dimensions();
    prep.check_input(w as usize, h as usize)
        .map_err(|e| Error::caused_by(ErrorKind::Data, format!("preprocess image {}: {e}", file.display()), e))?;
    let mut out = vec![0f32; prep.len()];
    let start = Instant::now();
    match &image {
        PilImage::Rgb(rgb) => {
            let kept = prep.resize_rgb(rgb.as_raw(), w as usize, h as usize);
            let resized = Instant::now();
            stages.resize = (resized - start).as_secs_f64();
            prep.normalise_into(&kept, &mut out);
            stages.normalise = resized.elapsed().as_secs_f64();
        }
        other => {
            prep.apply_pil(other, &mut out);
            stages.convert = start.elapsed().as_secs_f64();
        }
    }
    std::hint::black_box(&out);
    Ok(stages)
}

/// Every `.png`, `.jpg` and `.jpeg` file under `dir`, sorted.
fn image_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| Error::new(ErrorKind::Data, format!("list {}: {e}", dir.display())))?;
        for entry in entries {
            let path = entry.map_err(|e| Error::new(ErrorKind::Data, format!("list {}: {e}", dir.display())))?.path();
            let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
            if path.is_dir() {
                pending.push(path);
            } else if matches!(ext.as_deref(), Some("png" | "jpg" | "jpeg")) {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Writes the generated set into `dir` (made if missing): photo-like images (smooth shading,
/// textured regions, hard edges, sensor noise), so the encoders see what a camera gives them.
fn generate(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::new(ErrorKind::Results, format!("make {}: {e}", dir.display())))?;
    GENERATED.par_iter().enumerate().try_for_each(|(i, &(w, h))| {
        let image = photo_like(w, h, i as u64);
        let save = |name: String, format: image::ImageFormat| {
            let path = dir.join(name);
            let file = std::fs::File::create(&path)
                .map_err(|e| Error::new(ErrorKind::Results, format!("write {}: {e}", path.display())))?;
            let mut out = std::io::BufWriter::new(file);
            let written = match format {
                image::ImageFormat::Jpeg => {
                    image.write_with_encoder(image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90))
                }
                _ => image.write_to(&mut out, format),
            };
            written.map_err(|e| Error::new(ErrorKind::Results, format!("write {}: {e}", path.display())))
        };
        save(format!("photo-{i:02}-{w}x{h}.jpg"), image::ImageFormat::Jpeg)?;
        if i % 3 == 0 {
            save(format!("photo-{i:02}-{w}x{h}.png"), image::ImageFormat::Png)?;
        }
        Ok(())
    })
}

/// A deterministic photo-like RGB image.
fn photo_like(w: u32, h: u32, seed: u64) -> image::RgbImage {
    let mut rng = benchctl_scoring::metrics::stats::SplitMix64::new(seed);
    // A few soft blobs of colour over a sky-to-ground gradient, striped texture in some,
    // and per-pixel noise.
    let blobs: Vec<[f64; 7]> = (0..6)
        .map(|_| {
            let mut v = [0.0; 7];
            v.iter_mut().for_each(|x| *x = unit(&mut rng));
            v
        })
        .collect();
    let mut noise = benchctl_scoring::metrics::stats::SplitMix64::new(seed ^ 0x5eed);
    image::RgbImage::from_fn(w, h, |x, y| {
        let (u, v) = (f64::from(x) / f64::from(w), f64::from(y) / f64::from(h));
        let mut rgb = [90.0 + 120.0 * (1.0 - v), 120.0 + 80.0 * (1.0 - v), 200.0 - 120.0 * v];
        for b in &blobs {
            let d = ((u - b[0]).powi(2) + (v - b[1]).powi(2)).sqrt() / (0.08 + 0.25 * b[2]);
            if d < 1.0 {
                let stripes = if b[6] > 0.5 { 0.5 + 0.5 * (f64::from(x + y) * (0.05 + 0.3 * b[6])).sin() } else { 1.0 };
                let weight = (1.0 - d * d) * stripes;
                for (c, target) in rgb.iter_mut().zip([b[3], b[4], b[5]]) {
                    *c = *c * (1.0 - weight) + 255.0 * target * weight;
                }
            }
        }
        let n = (unit(&mut noise) - 0.5) * 12.0;
        image::Rgb(rgb.map(|c| (c + n).clamp(0.0, 255.0) as u8))
    })
}

/// A uniform number in [0, 1).
fn unit(rng: &mut benchctl_scoring::metrics::stats::SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}
