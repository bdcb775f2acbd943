//! A suite whose images are inside its annotation file (the demo suite as the hub would publish
//! it: `demo.parquet`, written by `datasets` from the demo's PNG files,
//! `scripts/fixtures/gen_embedded_fixture.py`) evaluates as the same suite with its images as
//! files: the same report, the same embedding cache (keyed by the images' bytes, so a run
//! after the files' run decodes nothing), thumbnails in the report, and `check` naming a bad
//! cell by file, row and column.

mod common;

use common::{benchctl, demo_suite, stderr, stdout, stored_run};

/// The demo suite as a manifest over `demo.parquet`, and its data directory.
fn parquet_suite(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let fixture =
        benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/embedded/demo.parquet");
    std::fs::copy(fixture, data.join("demo.parquet")).unwrap();
    let manifest = dir.join("demo-parquet.toml");
    std::fs::write(
        &manifest,
        "id = \"demo-parquet\"\ndescription = \"the demo suite with its images inside a parquet file\"\n\
         [source]\nfile = \"demo.parquet\"\nformat = \"parquet\"\n\
         [item]\nid = \"{id}\"\nimages = [\"{image_0}\", \"{image_1}\"]\ntexts = [\"{caption_0}\", \"{caption_1}\"]\n\
         truth = \"diagonal\"\n[item.tags]\ntag = { value = \"{tag}\", split = \",\" }\n\
         secondary_tag = { value = \"{secondary_tag}\", split = \",\" }\ncollapsed_tag = \"{collapsed_tag}\"\n\
         num_main_preds = \"{num_main_preds}\"\n[metrics]\nfamily = \"group\"\n",
    )
    .unwrap();
    (manifest, data)
}

fn eval(suite: &str, data: &std::path::Path, results: &std::path::Path, cache: &std::path::Path) -> serde_json::Value {
    let model = benchctl_testkit::fixture_model("clip-shapes").display().to_string();
    let (data, results) = (data.to_str().unwrap(), results.to_str().unwrap());
    let args = common::eval_args(&model, suite, data, results, &[]);
    stored_run(&benchctl(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())])).1
}

#[test]
fn images_inside_parquet_evaluate_as_the_same_images_as_files() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, data) = parquet_suite(dir.path());
    let (results, cache) = (dir.path().join("results"), dir.path().join("cache"));

    let embedded = eval(manifest.to_str().unwrap(), &data, &results, &cache);
    assert_eq!(embedded["counts"]["unique_images"], 16);
    assert_eq!(embedded["counts"]["images_encoded"], 16);
    assert_eq!(embedded["counts"]["images_decoded"], 16, "each image decoded once, from the file's bytes");
    assert_eq!(embedded["counts"]["images_hashed"], 16, "each cell hashed once to key it");
    // Nothing was written next to the annotations: the images stay inside the file.
    let written: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(written, ["demo.parquet"]);

    // The same images as files: the same scores, and every image already in the cache.
    let files = eval("winoground", &demo_suite(), &results, &cache);
    assert_eq!(files["report"]["metrics"], embedded["report"]["metrics"], "the same metrics as the files give");
    assert_eq!(files["counts"]["images_cached"], 16, "keyed by content: the files' bytes are the cells'");
    assert_eq!(files["counts"]["images_decoded"], 0);

    // A warm re-run of the parquet suite decodes no image.
    let warm = eval(manifest.to_str().unwrap(), &data, &results, &cache);
    assert_eq!(warm["counts"]["images_cached"], 16);
    assert_eq!(warm["counts"]["images_decoded"], 0, "a warm re-run decodes nothing");
    assert_eq!(warm["counts"]["images_hashed"], 0, "nor hashes a cell: the memo knows the file");
    assert_eq!(warm["report"], embedded["report"]);

    // The report's thumbnails are made from the cells' bytes.
    let run = std::fs::read_dir(results.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "json") && std::fs::read_to_string(p).unwrap().contains("demo-parquet")
        })
        .unwrap();
    let out = benchctl(&["report", run.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let thumbs = run.with_extension("report").join("thumbs");
    assert_eq!(std::fs::read_dir(&thumbs).unwrap().count(), 16, "one thumbnail per image");
    let chunk = std::fs::read_to_string(run.with_extension("report").join("data/chunk-0000.js")).unwrap();
    assert!(chunk.contains("demo.parquet#row 3 image_1"), "the page names the image by file, row and column");
}

#[test]
fn check_names_a_cell_that_is_not_an_image_by_file_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let fixture = benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/embedded");
    std::fs::copy(fixture.join("hostile-cells.parquet"), data.join("cells.parquet")).unwrap();
    let manifest = dir.path().join("cells.toml");
    std::fs::write(
        &manifest,
        "id = \"cells\"\ndescription = \"d\"\n[source]\nfile = \"cells.parquet\"\nformat = \"parquet\"\n\
         [item]\nimages = [\"{image_0}\", \"{image_1}\"]\ntexts = [\"{caption_0}\", \"{caption_1}\"]\n\
         truth = \"diagonal\"\n[metrics]\nfamily = \"group\"\n",
    )
    .unwrap();
    let out = benchctl(&["check", "--suite", manifest.to_str().unwrap(), "--data-dir", data.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("4 items"), "{text}");
    assert!(text.contains("cells.parquet#row 1 image_0"), "the cell that is not an image: {text}");
    assert!(text.contains("cells.parquet#row 2 image_0") && text.contains("30000×30000"), "the PNG bomb: {text}");
    assert!(!text.contains("row 0 image_0") && !text.contains("row 3 image_0"), "good rows pass: {text}");
}

/// The bundled BiVLC manifest end to end on its fixture (the hub layout, images inside): a
/// stored run with the bidirectional metrics per type, and `check` comparing the 30 fixture
/// rows with the release's 2,933.
#[test]
fn bivlc_runs_from_its_hub_layout() {
    let dir = tempfile::tempdir().unwrap();
    let data = benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/bivlc");
    let (results, cache) = (dir.path().join("results"), dir.path().join("cache"));
    let run = eval("bivlc", &data, &results, &cache);
    assert_eq!(run["suite"]["id"], "bivlc");
    assert_eq!(run["counts"]["unique_images"], 60);
    let metrics = run["report"]["metrics"].as_object().unwrap();
    for name in ["i2t", "t2i", "group_score", "ipos_2t", "ineg_2t", "tpos_2i", "tneg_2i"] {
        let value = metrics[name].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&value), "{name} = {value}");
    }
    let group = metrics["group_score"].as_f64().unwrap();
    assert!(group <= metrics["i2t"].as_f64().unwrap() && group <= metrics["t2i"].as_f64().unwrap());
    let out = benchctl(&["check", "--suite", "bivlc", "--data-dir", data.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("the official release has 2933 items, these annotations give 30"), "{text}");
}

/// The data fingerprint of a suite whose images are inside its parquet file does not read the
/// file again (it is mostly those images, which the image fingerprint covers): it changes with
/// what the records give the items (a caption, a tag), not with the file's bytes of equal
/// length.
#[test]
fn the_data_fingerprint_follows_the_records_not_the_image_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, data) = parquet_suite(dir.path());
    let suite = benchctl_suites::find(manifest.to_str().unwrap()).unwrap().load(&data).unwrap();
    let fingerprint = |suite: &benchctl_suites::Suite| benchctl::results::fingerprint(suite).unwrap();
    let original = fingerprint(&suite);
    assert_eq!(fingerprint(&suite), original, "deterministic");
    let rebuilt = |change: &dyn Fn(usize, &mut benchctl_suites::Item)| {
        let mut changed = suite.clone();
        changed.items = benchctl_suites::Items::new();
        for (i, item) in suite.items.iter().enumerate() {
            let mut item = item.to_item();
            change(i, &mut item);
            changed.items.push(item);
        }
        fingerprint(&changed)
    };
    assert_eq!(rebuilt(&|_, _| {}), original, "the same items, the same fingerprint");
    assert_ne!(
        rebuilt(&|i, item| if i == 3 {
            item.texts[1].push('!')
        }),
        original,
        "a caption"
    );
    let retag = |i: usize, item: &mut benchctl_suites::Item| {
        if i == 5 {
            item.tags = vec![("tag".to_string(), vec!["Other".to_string()])].into();
        }
    };
    assert_ne!(rebuilt(&retag), original, "a tag");
    // The file's bytes are not read again: overwritten with as many zeros, the same fingerprint.
    let file = data.join("demo.parquet");
    let len = std::fs::metadata(&file).unwrap().len() as usize;
    std::fs::write(&file, vec![0u8; len]).unwrap();
    assert_eq!(fingerprint(&suite), original);
}

/// A release that embeds one photo in two rows (`pairs.parquet`: row 0's `image_0` is row 3's
/// `image_1`) is resampled by clusters of its shared images: the run clusters by the content
/// keys it made (its cells are not read again for it), into the clusters that reading the
/// cells gives.
#[test]
fn shared_embedded_photos_cluster_the_bootstrap_by_the_runs_keys() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let fixture = benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/embedded");
    std::fs::copy(fixture.join("pairs.parquet"), data.join("pairs.parquet")).unwrap();
    let manifest = dir.path().join("pairs.toml");
    std::fs::write(
        &manifest,
        "id = \"pairs\"\ndescription = \"d\"\n[source]\nfile = \"pairs.parquet\"\nformat = \"parquet\"\n\
         [item]\nid = \"{id}\"\nimages = [\"{image_0}\", \"{image_1}\"]\ntexts = [\"{caption_0}\", \"{caption_1}\"]\n\
         truth = \"diagonal\"\n[metrics]\nfamily = \"group\"\n",
    )
    .unwrap();
    let read = benchctl_suites::find(manifest.to_str().unwrap()).unwrap().load(&data).unwrap().clusters();
    let read = read.expect("the cells read give clusters");
    let run = eval(manifest.to_str().unwrap(), &data, &dir.path().join("results"), &dir.path().join("cache"));
    assert_eq!(run["counts"]["unique_images"], 8, "eight cells");
    assert_eq!(run["counts"]["images_hashed"], 8, "each cell hashed once, to key it");
    let bootstrap = &run["bootstrap"];
    assert_eq!((bootstrap["unit"].as_str(), bootstrap["rule"].as_str()), (Some("clusters"), Some("shared images")));
    assert_eq!(bootstrap["clusters"], read.count());
    assert_eq!(bootstrap["clusters"], 3);
}
