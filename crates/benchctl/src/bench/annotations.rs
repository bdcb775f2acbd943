//! The memory ceiling of annotations: a million-item suite loaded, whole evals of two slices
//! of it, and `check` of a large EqBen list.

use std::time::Instant;

use benchctl_models::models::clip::{Clip, ClipConfig};
use benchctl_scoring::metrics::stats::SplitMix64;

use super::e2e::{child_peak, eval_child, fixture, CLIP_TOKENIZER, TINY_CLIP_CONFIG};
use super::{io, rss_mib, PartResult};
use crate::{Error, ErrorKind, Result};

/// The memory ceiling of annotations: a Winoground `examples.jsonl` of 1,000,000 items (two
/// 8×8 images shared by all, so only the annotations grow), loaded as `eval` loads it, the
/// resident memory before and after, per item; whole `eval`s (a tiny random CLIP, 512-wide
/// embeddings, in child processes) of its first [`EVAL_ITEMS`] items, each one's peak RSS and
/// how it grows per item, with the default memory budget and with none (`BENCHCTL_SPILL_AT=0`,
/// every vector spilled: how a suite past the budget grows, which should be not at all); and
/// `check` of a generated EqBen full list of [`EQBEN_ITEMS`] items (its million-entry JSON
/// document), its peak RSS.
pub(super) fn run() -> Result<(String, Vec<PartResult>)> {
    let items = 1_000_000;
    let dir = std::env::temp_dir().join(format!("benchctl-bench-annotations-{}", std::process::id()));
    let result = (|| -> Result<Vec<PartResult>> {
        let eval_dirs = write_annotations(&dir, items)?;
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
        std::fs::write(model_dir.join("tokenizer.json"), fixture(CLIP_TOKENIZER)?)
            .map_err(io("write tokenizer.json"))?;
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
                let (_, wall, peak) =
                    eval_child("winoground", &model_dir, eval_dir, &results, &dir.join("cache"), &options, &env)?;
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

/// Writes the benchmark's suite under `dir` (`items` items naming two 8×8 images) and, for
/// each of [`EVAL_ITEMS`], a suite of its first items; returns those (size, directory).
fn write_annotations(dir: &std::path::Path, items: usize) -> Result<Vec<(usize, std::path::PathBuf)>> {
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
    Ok(eval_files.into_iter().map(|(n, _, dir)| (n, dir)).collect())
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
