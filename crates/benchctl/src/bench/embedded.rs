//! Images inside a parquet file against the same images as files: a 2,000-item suite of
//! photo-like PNGs (500 × 375, two per item) evaluated both ways with a tiny CLIP, so the time
//! is the data path's (read, decode, preprocess), not the model's; then a warm re-run of the
//! parquet suite, whose decodes are counted.

use std::sync::Arc;

use benchctl_models::models::clip::{Clip, ClipConfig};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

use super::e2e::{eval_child, fixture, write_suite, CLIP_TOKENIZER, TINY_CLIP_CONFIG};
use super::{io, PartResult};
use crate::{Error, ErrorKind, Result};

const ITEMS: usize = 2_000;

/// Rows per row group (and per Arrow record batch), as `datasets` writes image datasets (100).
const ROW_GROUP: usize = 100;

const PARQUET_FILE: &str = "test-00000-of-00001.parquet";
const ARROW_FILE: &str = "data-00000-of-00001.arrow";

pub(super) fn run() -> Result<(String, Vec<PartResult>)> {
    let dir = std::env::temp_dir().join(format!("benchctl-bench-embedded-{}", std::process::id()));
    let result = measure(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        format!("{ITEMS} items, {} PNG images of 500 × 375: files against parquet and Arrow cells", 2 * ITEMS),
        result?,
    ))
}

fn measure(dir: &std::path::Path) -> Result<Vec<PartResult>> {
    let model_dir = dir.join("model");
    let [files_dir, parquet_dir, arrow_dir] = ["files", "parquet", "arrow"].map(|d| dir.join(d));
    std::fs::create_dir_all(&model_dir).map_err(io("create the model directory"))?;
    std::fs::write(model_dir.join("config.json"), TINY_CLIP_CONFIG).map_err(io("write config.json"))?;
    std::fs::write(model_dir.join("tokenizer.json"), fixture(CLIP_TOKENIZER)?).map_err(io("write tokenizer.json"))?;
    Clip::save_random(&ClipConfig::from_file(&model_dir.join("config.json"))?, &model_dir.join("model.safetensors"))?;
    write_suite(&files_dir, ITEMS)?;
    for cells in [&parquet_dir, &arrow_dir] {
        std::fs::create_dir_all(cells).map_err(io("create a suite of cells"))?;
    }
    let (parquet_file, arrow_file) = (parquet_dir.join(PARQUET_FILE), arrow_dir.join(ARROW_FILE));
    write_parquet(&files_dir, &parquet_file)?;
    write_arrow(&files_dir, &arrow_file)?;
    let manifest = |name: &str, source: &str, format: &str, images: &str| -> Result<String> {
        let path = dir.join(format!("{name}.toml"));
        let text = format!(
            "id = \"{name}\"\ndescription = \"bench\"\n[source]\nfile = \"{source}\"\nformat = \"{format}\"\n\
             [item]\nid = \"{{id}}\"\nimages = {images}\ntexts = [\"{{caption_0}}\", \"{{caption_1}}\"]\n\
             truth = \"diagonal\"\n[item.tags]\ntag = \"{{tag}}\"\n[metrics]\nfamily = \"group\"\n"
        );
        std::fs::write(&path, text).map_err(io("write a manifest"))?;
        Ok(path.display().to_string())
    };
    let cells = r#"["{image_0}", "{image_1}"]"#;
    let suites = [
        (
            manifest("as-files", "examples.jsonl", "jsonl", r#"["images/{image_0}.png", "images/{image_1}.png"]"#)?,
            &files_dir,
        ),
        (manifest("as-cells", PARQUET_FILE, "parquet", cells)?, &parquet_dir),
        (manifest("as-arrow", ARROW_FILE, "arrow", cells)?, &arrow_dir),
    ];
    // Loading alone, in this process.
    let load = |suite: &str, data: &std::path::Path| -> Result<f64> {
        let started = std::time::Instant::now();
        let loaded = benchctl_suites::find(suite)?.load(data)?;
        let seconds = started.elapsed().as_secs_f64();
        if loaded.items.len() != ITEMS {
            return Err(Error::new(
                ErrorKind::Compute,
                format!("benchmark: {suite} loaded {} items", loaded.items.len()),
            ));
        }
        Ok(seconds)
    };
    let loads = suites.iter().map(|(suite, data)| load(suite, data)).collect::<Result<Vec<f64>>>()?;
    let timed = |run: &serde_json::Value| {
        let t = |k: &str| run["timings"][k].as_f64().unwrap_or(f64::NAN);
        t("total_s") - t("load_model_s")
    };
    // Alternated, twice each, the faster of each kept: the machine's drift falls on all.
    let (mut seconds, mut rss) = ([f64::INFINITY; 3], [0f64; 3]);
    for round in 0..2 {
        for (i, (suite, data)) in suites.iter().enumerate() {
            let results = dir.join(format!("results-{round}"));
            let (run, _, peak) =
                eval_child(suite, &model_dir, data, &results, &dir.join("unused-cache"), &["--no-cache"], &[])?;
            seconds[i] = seconds[i].min(timed(&run));
            rss[i] = rss[i].max(peak);
        }
    }
    // The parquet suite cold into a cache, then warm: the warm run decodes nothing.
    let (as_cells, cache, results) = (&suites[1].0, dir.join("cache"), dir.join("results-cache"));
    let (cold, _, _) = eval_child(as_cells, &model_dir, &parquet_dir, &results, &cache, &[], &[])?;
    let (warm, _, _) = eval_child(as_cells, &model_dir, &parquet_dir, &results, &cache, &[], &[])?;
    let count = |run: &serde_json::Value, k: &str| run["counts"][k].as_f64().unwrap_or(f64::NAN);
    if cold["report"] != warm["report"] {
        return Err(Error::new(ErrorKind::Compute, "benchmark: the warm re-run's report differs from the cold run's"));
    }
    Ok(vec![PartResult {
        part: "embedded",
        batch: ITEMS,
        per_second: (2 * ITEMS) as f64 / seconds[1],
        p50_ms: f64::NAN,
        p90_ms: f64::NAN,
        max_ms: f64::NAN,
        extra: vec![
            ("files_s", seconds[0]),
            ("parquet_s", seconds[1]),
            ("arrow_s", seconds[2]),
            ("parquet_over_files", seconds[1] / seconds[0]),
            ("arrow_over_files", seconds[2] / seconds[0]),
            ("load_files_s", loads[0]),
            ("load_parquet_s", loads[1]),
            ("load_arrow_s", loads[2]),
            ("files_peak_rss_mib", rss[0]),
            ("parquet_peak_rss_mib", rss[1]),
            ("arrow_peak_rss_mib", rss[2]),
            ("parquet_mib", file_mib(&parquet_file)),
            ("arrow_mib", file_mib(&arrow_file)),
            ("cold_decodes", count(&cold, "images_decoded")),
            ("warm_decodes", count(&warm, "images_decoded")),
            ("warm_cached", count(&warm, "images_cached")),
            ("warm_s", timed(&warm)),
        ],
    }])
}

fn file_mib(path: &std::path::Path) -> f64 {
    std::fs::metadata(path).map(|m| m.len() as f64 / (1 << 20) as f64).unwrap_or(f64::NAN)
}

/// The suite of `files_dir` (`examples.jsonl` and `images/`) as the hub publishes such a
/// benchmark: one parquet file, snappy, whose image columns are the `datasets` Image struct
/// (`bytes` set, `path` null) holding the PNG files' bytes.
fn write_parquet(files_dir: &std::path::Path, out: &std::path::Path) -> Result<()> {
    let failed = |e: parquet::errors::ParquetError| {
        Error::caused_by(ErrorKind::Compute, format!("benchmark: write {}: {e}", out.display()), e)
    };
    let text = std::fs::read_to_string(files_dir.join("examples.jsonl")).map_err(io("read examples.jsonl"))?;
    let rows: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let schema = parquet::schema::parser::parse_message_type(
        "message schema {
            REQUIRED INT64 id;
            OPTIONAL GROUP image_0 { OPTIONAL BYTE_ARRAY bytes; OPTIONAL BYTE_ARRAY path (UTF8); }
            OPTIONAL GROUP image_1 { OPTIONAL BYTE_ARRAY bytes; OPTIONAL BYTE_ARRAY path (UTF8); }
            REQUIRED BYTE_ARRAY caption_0 (UTF8);
            REQUIRED BYTE_ARRAY caption_1 (UTF8);
            REQUIRED BYTE_ARRAY tag (UTF8);
        }",
    )
    .map_err(failed)?;
    let properties = WriterProperties::builder().set_compression(parquet::basic::Compression::SNAPPY).build();
    let file = std::fs::File::create(out).map_err(io("create the parquet file"))?;
    let mut writer = SerializedFileWriter::new(file, Arc::new(schema), Arc::new(properties)).map_err(failed)?;
    for group in rows.chunks(ROW_GROUP) {
        let text_of = |key: &str| -> Vec<ByteArray> {
            group.iter().map(|r| ByteArray::from(r[key].as_str().unwrap_or_default().as_bytes().to_vec())).collect()
        };
        let image_of = |k: usize| -> Result<Vec<ByteArray>> {
            group
                .iter()
                .map(|r| {
                    let name = r[format!("image_{k}")].as_str().unwrap_or_default();
                    let bytes = std::fs::read(files_dir.join("images").join(format!("{name}.png")))
                        .map_err(io("read an image"))?;
                    Ok(ByteArray::from(bytes))
                })
                .collect()
        };
        let ids: Vec<i64> = group.iter().map(|r| r["id"].as_i64().unwrap_or_default()).collect();
        // Columns in schema order: id, image_0.bytes, image_0.path, image_1.bytes, image_1.path,
        // caption_0, caption_1, tag. A present `bytes` is at definition level 2, a null `path`
        // at level 1 (its struct present).
        let (present, null_path) = (vec![2i16; group.len()], vec![1i16; group.len()]);
        let mut row_group = writer.next_row_group().map_err(failed)?;
        let mut column = 0;
        while let Some(mut writer) = row_group.next_column().map_err(failed)? {
            match column {
                0 => writer.typed::<Int64Type>().write_batch(&ids, None, None).map(drop),
                1 | 3 => {
                    writer.typed::<ByteArrayType>().write_batch(&image_of(column / 2)?, Some(&present), None).map(drop)
                }
                2 | 4 => writer.typed::<ByteArrayType>().write_batch(&[], Some(&null_path), None).map(drop),
                5 => writer.typed::<ByteArrayType>().write_batch(&text_of("caption_0"), None, None).map(drop),
                6 => writer.typed::<ByteArrayType>().write_batch(&text_of("caption_1"), None, None).map(drop),
                _ => writer.typed::<ByteArrayType>().write_batch(&text_of("tag"), None, None).map(drop),
            }
            .map_err(failed)?;
            writer.close().map_err(failed)?;
            column += 1;
        }
        row_group.close().map_err(failed)?;
    }
    writer.close().map_err(failed)?;
    // On disk before anything is timed: 1.7 GB of dirty pages being written back would slow
    // the reads measured next.
    std::fs::File::open(out).and_then(|f| f.sync_all()).map_err(io("sync the parquet file"))
}

/// The suite of `files_dir` as `datasets`' `save_to_disk` writes it: an Arrow IPC stream of
/// record batches of [`ROW_GROUP`] rows, the same columns as [`write_parquet`]'s.
fn write_arrow(files_dir: &std::path::Path, out: &std::path::Path) -> Result<()> {
    use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, StructArray};
    use arrow_schema::{DataType, Field, Fields, Schema};
    let failed = |e: arrow_schema::ArrowError| {
        Error::caused_by(ErrorKind::Compute, format!("benchmark: write {}: {e}", out.display()), e)
    };
    let text = std::fs::read_to_string(files_dir.join("examples.jsonl")).map_err(io("read examples.jsonl"))?;
    let rows: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let image =
        Fields::from(vec![Field::new("bytes", DataType::Binary, true), Field::new("path", DataType::Utf8, true)]);
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    fields.extend((0..2).map(|k| Field::new(format!("image_{k}"), DataType::Struct(image.clone()), true)));
    fields.extend(["caption_0", "caption_1", "tag"].map(|name| Field::new(name, DataType::Utf8, false)));
    let schema = std::sync::Arc::new(Schema::new(fields));
    let file = std::fs::File::create(out).map_err(io("create the Arrow file"))?;
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(file, &schema).map_err(failed)?;
    for group in rows.chunks(ROW_GROUP) {
        let text_of = |key: &str| -> ArrayRef {
            std::sync::Arc::new(StringArray::from_iter_values(
                group.iter().map(|r| r[key].as_str().unwrap_or_default()),
            ))
        };
        let image_of = |k: usize| -> Result<ArrayRef> {
            let bytes = group
                .iter()
                .map(|r| {
                    let name = r[format!("image_{k}")].as_str().unwrap_or_default();
                    std::fs::read(files_dir.join("images").join(format!("{name}.png"))).map_err(io("read an image"))
                })
                .collect::<Result<Vec<Vec<u8>>>>()?;
            let columns: Vec<ArrayRef> = vec![
                std::sync::Arc::new(BinaryArray::from_iter_values(bytes.iter())),
                std::sync::Arc::new(StringArray::from(vec![None::<&str>; group.len()])),
            ];
            Ok(std::sync::Arc::new(StructArray::new(image.clone(), columns, None)))
        };
        let ids: ArrayRef = std::sync::Arc::new(Int64Array::from_iter_values(
            group.iter().map(|r| r["id"].as_i64().unwrap_or_default()),
        ));
        let columns = vec![ids, image_of(0)?, image_of(1)?, text_of("caption_0"), text_of("caption_1"), text_of("tag")];
        writer.write(&RecordBatch::try_new(schema.clone(), columns).map_err(failed)?).map_err(failed)?;
    }
    writer.finish().map_err(failed)?;
    std::fs::File::open(out).and_then(|f| f.sync_all()).map_err(io("sync the Arrow file"))
}
