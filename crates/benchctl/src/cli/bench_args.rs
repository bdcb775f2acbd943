//! `benchctl bench`'s options: what is measured (`--part`) and on what, made into a
//! [`bench::BenchPlan`].

use std::path::PathBuf;

use benchctl::{bench, Result};
use benchctl_models::device::DeviceSpec;
use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchPart {
    Image,
    Text,
    Both,
    /// The whole evaluation path on a Winoground-sized suite of PNG files, a warm-cache
    /// re-run, and the evaluation's peak RSS.
    E2e,
    /// RoCOCO-scale retrieval scoring on random embeddings.
    Retrieval,
    /// One dense layer's product as the image encoder runs it (1,600 × 768 by 3,072 × 768),
    /// in GFLOP/s.
    Dense,
    /// A 1,000,000-item Winoground annotation file (every item naming the same two images):
    /// how fast it loads, how much memory the loaded suite takes, the peak of whole evals of
    /// two slices of it (and so its growth per item), and the peak of `check` on a generated
    /// 250,000-item EqBen list.
    Annotations,
    /// Images inside a parquet file against the same images as files: a 2,000-item suite of
    /// 4,000 PNGs (500 × 375) evaluated both ways with a tiny CLIP (the data path's time), and
    /// a warm re-run of the parquet suite with the images it decodes counted.
    Embedded,
    /// The bootstrap's intervals: coverage of the true accuracy over 1,000 simulated suites of
    /// clustered items (cluster and item bootstrap, the mean design effect), and the time of
    /// one bootstrap of a 1,000,000-item suite by clusters and by items.
    Intervals,
    /// The regression gate: its false-alarm rate over 1,000 simulated pairs of runs with no
    /// true difference and 51 rows (Holm, Benjamini–Hochberg, no correction), and its power at
    /// the detectable difference it reports.
    Gate,
    /// Decoding and preprocessing every PNG and JPEG file under --images (default: a
    /// generated set of photo-like JPEGs and PNGs, 400 to 2,000 pixels a side) to the
    /// --model's input tensor: images per second in total and per core, and the time per
    /// stage (decode, mode conversion, resize, crop/normalise).
    Preprocess,
    /// The fp32 multiply-add peak of this CPU at the current tier (`BENCHCTL_CPU`) on all
    /// threads, in GFLOP/s: what the encoders' rates are a fraction of.
    Peak,
    /// The fused self-attention kernel alone (a developer's build with `--features dev-bench`;
    /// on a GPU, `--device cuda` and `--features cuda,dev-bench`): microseconds per call at
    /// --batch rows (in --dtype on a GPU, f32 on the CPU) for each sequence length and head
    /// width of the towers (50 to 1,024 tokens, heads of 64 to 128), and the rate in TFLOP/s.
    Attention,
    /// VQAScore on the CPU: `benchctl eval` of the tiny Gemma 3 fixture on a generated suite
    /// beside the same forward passes alone (pairs per second, the pipeline's overhead).
    Vqascore,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The zoo id whose architecture is benchmarked (weights are random).
    #[arg(long, default_value = "clip-vit-b32")]
    pub model: String,
    /// A config.json to benchmark instead of the zoo entry's architecture.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = BenchPart::Both)]
    pub part: BenchPart,
    /// Inputs per forward pass.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch: u32,
    /// Timed batches per part (after one warm-up batch).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Tokens per benchmark text, start and end tokens included.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=77))]
    pub text_tokens: u32,
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Worker threads of the CPU kernels [default: all cores].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
    /// `--part preprocess`: the directory of images to decode (searched recursively).
    #[arg(long, value_name = "DIR")]
    pub images: Option<PathBuf>,
    /// `--part preprocess` without --images: write the generated set into DIR (kept, for
    /// scripts/bench/bench_preprocess.py to run on the same files) instead of a temporary one.
    #[arg(long, value_name = "DIR", conflicts_with = "images")]
    pub keep_images: Option<PathBuf>,
    /// Print the results as JSON (for scripts/bench/bench_torch.py).
    #[arg(long)]
    pub json: bool,
}

impl BenchArgs {
    pub fn plan(&self) -> Result<bench::BenchPlan> {
        Ok(bench::BenchPlan {
            model: self.model.clone(),
            config: self.config.clone(),
            part: match self.part {
                BenchPart::Image => bench::Part::Image,
                BenchPart::Text => bench::Part::Text,
                BenchPart::Both => bench::Part::Both,
                BenchPart::E2e => bench::Part::E2e,
                BenchPart::Retrieval => bench::Part::Retrieval,
                BenchPart::Dense => bench::Part::Dense,
                BenchPart::Annotations => bench::Part::Annotations,
                BenchPart::Embedded => bench::Part::Embedded,
                BenchPart::Intervals => bench::Part::Intervals,
                BenchPart::Gate => bench::Part::Gate,
                BenchPart::Preprocess => bench::Part::Preprocess,
                BenchPart::Peak => bench::Part::Peak,
                BenchPart::Attention => bench::Part::Attention,
                BenchPart::Vqascore => bench::Part::Vqa,
            },
            batch: self.batch,
            iters: self.iters,
            text_tokens: self.text_tokens,
            device: DeviceSpec::parse(&self.device)?,
            dtype: benchctl_models::device::parse_dtype(&self.dtype)?,
            threads: self.threads,
            images: self.images.clone(),
            keep_images: self.keep_images.clone(),
        })
    }
}
