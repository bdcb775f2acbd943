//! Images inside annotation files, as the Hugging Face hub publishes benchmarks: manifests over
//! parquet and Arrow IPC files written by `datasets` and pyarrow
//! (`scripts/fixtures/gen_embedded_fixture.py`), each image decoded as Pillow decodes the same
//! bytes, and every hostile cell an error naming the file, the row and the column.

use std::path::{Path, PathBuf};

use benchctl_suites::{find, ErrorKind, ImageSource, Suite};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embedded").join(name)
}

fn expected() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap()
}

/// A manifest over `file` (`format`) whose `[item]` and `[metrics]` are `rest`, written into
/// `dir` under the file's name.
fn manifest_over(dir: &Path, file: &str, format: &str, rest: &str) -> PathBuf {
    let name = file.replace('.', "-");
    let path = dir.join(format!("{name}.toml"));
    let source = format!("[source]\nfile = \"{file}\"\nformat = \"{format}\"\n");
    std::fs::write(&path, format!("id = \"embedded-{name}\"\ndescription = \"d\"\n{source}{rest}")).unwrap();
    path
}

/// Winoground's shape: the `image_0` and `image_1` columns against `caption_0` and `caption_1`.
const PAIRS: &str = "[item]\nimages = [\"{image_0}\", \"{image_1}\"]\ntexts = [\"{caption_0}\", \"{caption_1}\"]\n\
                     truth = \"diagonal\"\n[metrics]\nfamily = \"group\"\n";

/// [`PAIRS`] with ids and a tag from the rows, over `file`, written into `dir`.
fn pairs_manifest(dir: &Path, file: &str, format: &str) -> PathBuf {
    let rest = PAIRS.replacen("[item]\n", "[item]\nid = \"{id}\"\n", 1).replacen(
        "[metrics]",
        "[item.tags]\ntag = \"{tag}\"\n[metrics]",
        1,
    );
    manifest_over(dir, file, format, &rest)
}

fn load(manifest: &Path, data_dir: &Path) -> (Suite, benchctl_suites::Problems) {
    find(manifest.to_str().unwrap()).unwrap().load_all(data_dir).unwrap()
}

/// `expected.json`'s pixels for one image (what Pillow's `convert("RGB")` gives), against
/// benchctl's decode: the same size, and the same pixels (lossless formats and WebP exactly;
/// JPEG exactly with the `libjpeg-turbo` feature, else within zune-jpeg's 4 levels: the bound
/// of docs/models.md, "Decoding").
fn assert_decodes_as_pillow(source: &ImageSource, name: &str) {
    let expected = expected();
    let want = &expected[name];
    let image = source.load_rgb().unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        [image.width() as u64, image.height() as u64],
        [want["size"][0].as_u64().unwrap(), want["size"][1].as_u64().unwrap()],
        "{name}"
    );
    let pil: Vec<u8> = want["rgb"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
    let worst = image.as_raw().iter().zip(&pil).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
    let exact_jpeg = benchctl_suites::image::JPEG_DECODER == "libjpeg-turbo";
    let allowed = if name == "jpeg" && !exact_jpeg { 4 } else { 0 };
    assert!(worst <= allowed, "{name}: a pixel {worst} levels from Pillow's (allowed {allowed})");
    let ImageSource::Embedded(embedded) = source else { panic!("{name}: not embedded: {source:?}") };
    assert_eq!(
        embedded.bytes().unwrap().len() as u64,
        want["bytes"].as_u64().unwrap(),
        "{name}: the cell's bytes, whole"
    );
}

#[test]
fn images_inside_parquet_and_arrow_decode_as_pillow_decodes_them() {
    let dir = tempfile::tempdir().unwrap();
    let rows = expected()["rows"].clone();
    let mut first: Option<Vec<(String, Vec<String>)>> = None;
    for (file, format) in [("pairs.parquet", "parquet"), ("pairs.arrow", "arrow"), ("pairs-file-format.arrow", "arrow")]
    {
        std::fs::copy(fixture(file), dir.path().join(file)).unwrap();
        let (suite, problems) = load(&pairs_manifest(dir.path(), file, format), dir.path());
        assert!(problems.is_empty(), "{file}: {}", problems.message(0));
        assert_eq!(suite.items.len(), 4, "{file}");
        for (item, names) in suite.items.iter().zip(rows.as_array().unwrap()) {
            for k in 0..2 {
                let source = item.image(k);
                let name = names[k].as_str().unwrap();
                assert_decodes_as_pillow(&source, name);
                // Named by its file, its row and its column.
                let shown = source.display_name();
                assert!(shown.ends_with(&format!("{file}#row {} image_{k}", item.id())), "{shown}");
            }
        }
        // Every format gives the same items: ids, texts, tags.
        let items: Vec<(String, Vec<String>)> = suite
            .items
            .iter()
            .map(|i| (i.id().to_string(), i.texts().map(str::to_string).chain([i.tags()[0].1[0].clone()]).collect()))
            .collect();
        match &first {
            None => first = Some(items),
            Some(first) => assert_eq!(&items, first, "{file} against pairs.parquet"),
        }
    }
}

/// A release that shows one photo in two rows (pairs.parquet: row 0's `image_0` is row 3's
/// `image_1`) clusters those items together, as it would two references to one file.
#[test]
fn one_photo_embedded_in_two_rows_is_one_image_for_the_clusters() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("pairs.parquet"), dir.path().join("pairs.parquet")).unwrap();
    let (suite, _) = load(&pairs_manifest(dir.path(), "pairs.parquet", "parquet"), dir.path());
    let clusters = suite.clusters().expect("items clustered by their images");
    assert_eq!(clusters.count(), 3, "rows 0 and 3 share a photo, rows 1 and 2 show their own");
    assert_eq!(clusters.members(0), &[0, 3]);
}

/// A `Sequence(Image)` column read with `images_list`, and a plain binary column (no struct).
#[test]
fn lists_of_images_and_plain_binary_columns_are_images_too() {
    let dir = tempfile::tempdir().unwrap();
    for file in ["listed.parquet", "binary.parquet"] {
        std::fs::copy(fixture(file), dir.path().join(file)).unwrap();
    }
    let listed = manifest_over(
        dir.path(),
        "listed.parquet",
        "parquet",
        "[item]\nimages_list = \"images\"\ntexts_list = \"captions\"\ntruth = \"diagonal\"\n[metrics]\nfamily = \"group\"\n",
    );
    let (suite, problems) = load(&listed, dir.path());
    assert!(problems.is_empty(), "{}", problems.message(0));
    let item = suite.items.item(0);
    for (k, name) in expected()["listed"].as_array().unwrap().iter().enumerate() {
        assert_decodes_as_pillow(&item.image(k), name.as_str().unwrap());
        assert!(item.image(k).display_name().ends_with(&format!("listed.parquet#row 0 images.{k}")));
    }
    let binary = manifest_over(
        dir.path(),
        "binary.parquet",
        "parquet",
        "[item]\nimages = [\"{image}\"]\ntexts = [\"{caption}\", \"{negative}\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\n",
    );
    let (suite, problems) = load(&binary, dir.path());
    assert!(problems.is_empty(), "{}", problems.message(0));
    for (item, name) in suite.items.iter().zip(expected()["binary"].as_array().unwrap()) {
        assert_decodes_as_pillow(&item.image(0), name.as_str().unwrap());
    }
}

/// A template that is more than one field (`images/{id}.png`) is a path as before, even in a
/// parquet file that holds images; and a record whose image is null says so.
#[test]
fn paths_stay_paths_and_a_missing_image_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("pairs.parquet"), dir.path().join("pairs.parquet")).unwrap();
    let path = manifest_over(
        dir.path(),
        "pairs.parquet",
        "parquet",
        &PAIRS.replace("\"{image_0}\", \"{image_1}\"", "\"images/{id}.png\", \"{image_1.path}\""),
    );
    let (suite, problems) = load(&path, dir.path());
    // `image_1.path` is null in every row (the bytes are there, the path is not).
    assert_eq!(suite.items.len(), 0);
    assert_eq!(problems.len(), 4);
    let message = problems.message(0).to_string();
    assert!(
        message.contains("pairs.parquet row 0")
            && message.contains("item.images[1]")
            && message.contains("image_1.path"),
        "{message}"
    );
}

/// Hostile cells: bytes that are not an image and a PNG bomb (a header of 30,000 × 30,000
/// pixels) load as items and are refused when decoded, naming file, row and column; the good
/// rows decode. A struct of the wrong shape, an Image struct whose `bytes` is text and an
/// Arrow file whose schema is garbage are errors naming the file (and row and column).
#[test]
fn hostile_cells_are_refused_naming_file_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    for file in ["hostile-cells.parquet", "hostile-shape.parquet", "hostile-bytes-text.parquet", "hostile-schema.arrow"]
    {
        std::fs::copy(fixture(file), dir.path().join(file)).unwrap();
    }
    let manifest = |file: &str, format: &str| manifest_over(dir.path(), file, format, PAIRS);
    let (suite, problems) = load(&manifest("hostile-cells.parquet", "parquet"), dir.path());
    assert!(problems.is_empty(), "{}", problems.message(0));
    assert_eq!(suite.items.len(), 4, "every row is an item; its image is checked when decoded");
    for (row, good) in [(0, true), (1, false), (2, false), (3, true)] {
        let result = suite.items.item(row).image(0).load_rgb();
        assert_eq!(result.is_ok(), good, "row {row}");
        if let Err(e) = result {
            let message = e.to_string();
            assert_eq!(e.kind(), ErrorKind::CorruptImage);
            assert!(message.contains(&format!("hostile-cells.parquet#row {row} image_0")), "{message}");
            if row == 2 {
                assert!(message.contains("30000×30000"), "the bomb is refused by its header: {message}");
            }
        }
    }
    let (suite, problems) = load(&manifest("hostile-shape.parquet", "parquet"), dir.path());
    assert_eq!(suite.items.len(), 0);
    let message = problems.message(0).to_string();
    assert!(
        message.contains("hostile-shape.parquet row 0")
            && message.contains("item.images[0]")
            && message.contains("`image_0` is a struct of `data`, `width`, not an image"),
        "{message}"
    );
    let (_, problems) = load(&manifest("hostile-bytes-text.parquet", "parquet"), dir.path());
    let message = problems.message(0).to_string();
    assert!(message.contains("row 0") && message.contains("`image_0.bytes` is text, not image bytes"), "{message}");
    let (suite, problems) = load(&manifest("hostile-schema.arrow", "arrow"), dir.path());
    assert_eq!(suite.items.len(), 0);
    let message = problems.message(0).to_string();
    assert_eq!(problems.kind(0), ErrorKind::Malformed);
    assert!(message.contains("hostile-schema.arrow") && message.contains("not an Arrow IPC file"), "{message}");
}

/// Only a binary cell of a parquet or Arrow file is image bytes: text made to look like the
/// token that stands for one in a record is a path.
#[test]
fn text_shaped_like_a_token_is_not_image_bytes() {
    // A JSON file cannot name image bytes, whatever its text: its image fields are paths.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.json"),
        "[{\"image\": \"\\u0000bytes 0000000000000000 #0 (5 bytes)\", \"t\": \"x\"}]",
    )
    .unwrap();
    let path = manifest_over(
        dir.path(),
        "a.json",
        "json",
        "[item]\nimages = [\"{image}\"]\ntexts = [\"{t}\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\n",
    );
    let (suite, _) = load(&path, dir.path());
    assert!(suite.items.iter().all(|i| !matches!(i.image(0), ImageSource::Embedded(_))));
}

/// A release's cells are not held: each is read from its file (parquet, Arrow IPC in either
/// format) when asked for, so a file changed after the suite was read is refused for them
/// (its cells may be elsewhere now), naming the file and the cell.
#[test]
fn cells_are_read_when_asked_and_not_from_a_changed_file() {
    let dir = tempfile::tempdir().unwrap();
    let embedded = |suite: &Suite, row: usize| match suite.items.item(row).image(0) {
        ImageSource::Embedded(e) => *e,
        other => panic!("not embedded: {other:?}"),
    };
    let mut first = None;
    for (file, format) in [("pairs.parquet", "parquet"), ("pairs.arrow", "arrow"), ("pairs-file-format.arrow", "arrow")]
    {
        std::fs::copy(fixture(file), dir.path().join(file)).unwrap();
        let (suite, problems) = load(&pairs_manifest(dir.path(), file, format), dir.path());
        assert!(problems.is_empty(), "{file}: {}", problems.message(0));
        assert!(embedded(&suite, 0).cell.is_read_when_asked(), "{file}");
        let bytes = embedded(&suite, 0).bytes().unwrap();
        assert_eq!(&bytes, first.get_or_insert_with(|| bytes.clone()), "{file}: the same cell's bytes");

        // Rewritten since: one more byte at its end.
        let mut bytes = std::fs::read(dir.path().join(file)).unwrap();
        bytes.push(0);
        std::fs::write(dir.path().join(file), bytes).unwrap();
        let error = suite.items.item(1).image(0).load_rgb().unwrap_err();
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::CorruptImage);
        assert!(
            message.contains(&format!("{file}#row 1 image_0")) && message.contains("changed since the suite was read"),
            "{message}"
        );
    }
}

/// An Arrow stream of 30 record batches (more than are kept read) whose `images` column is a
/// list of `datasets` Image structs, two per row: every cell, read in an order that jumps
/// between batches on every core, is its own row's and element's bytes. Uncompressed, each cell
/// is read as its own bytes at their place in the file; with LZ4-compressed bodies, from its
/// record batch decoded again.
#[test]
fn cells_of_many_arrow_batches_read_in_any_order_are_their_own() {
    use arrow_array::{Array, ArrayRef, BinaryArray, ListArray, RecordBatch, StringArray, StructArray};
    use arrow_schema::{DataType, Field, Fields, Schema};
    use rayon::prelude::*;
    use std::sync::Arc;
    let element = |row: usize, k: usize| format!("row {row} element {k} ").repeat(1 + (row + k) % 5).into_bytes();
    let image =
        Fields::from(vec![Field::new("bytes", DataType::Binary, true), Field::new("path", DataType::Utf8, true)]);
    let item = Arc::new(Field::new("item", DataType::Struct(image.clone()), true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("images", DataType::List(item.clone()), true),
        Field::new("caption", DataType::Utf8, false),
    ]));
    for compression in [None, Some(arrow_ipc::CompressionType::LZ4_FRAME)] {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("many.arrow")).unwrap();
        let options = arrow_ipc::writer::IpcWriteOptions::default().try_with_compression(compression).unwrap();
        let mut writer = arrow_ipc::writer::StreamWriter::try_new_with_options(file, &schema, options).unwrap();
        for batch in 0..30 {
            let rows: Vec<usize> = (batch * 2..batch * 2 + 2).collect();
            let bytes: Vec<Vec<u8>> = rows.iter().flat_map(|&r| [element(r, 0), element(r, 1)]).collect();
            let bytes = BinaryArray::from_iter_values(bytes.iter());
            let paths = StringArray::from(vec![None::<&str>; bytes.len()]);
            let structs = StructArray::new(image.clone(), vec![Arc::new(bytes) as ArrayRef, Arc::new(paths)], None);
            let offsets = arrow_buffer::OffsetBuffer::from_lengths([2, 2]);
            let lists = ListArray::new(item.clone(), offsets, Arc::new(structs), None);
            let ids = StringArray::from_iter_values(rows.iter().map(|r| r.to_string()));
            let captions = StringArray::from_iter_values(rows.iter().map(|r| format!("caption {r}")));
            let columns: Vec<ArrayRef> = vec![Arc::new(ids), Arc::new(lists), Arc::new(captions)];
            assert_eq!(columns[1].len(), 2);
            writer.write(&RecordBatch::try_new(schema.clone(), columns).unwrap()).unwrap();
        }
        writer.finish().unwrap();
        let manifest = manifest_over(
            dir.path(),
            "many.arrow",
            "arrow",
            "[item]\nid = \"{id}\"\nimages_list = \"images\"\ntexts = [\"{caption}\"]\ntruth = { text = 0 }\n\
         [metrics]\nfamily = \"choice\"\n",
        );
        let (suite, problems) = load(&manifest, dir.path());
        assert!(problems.is_empty(), "{}", problems.message(0));
        assert_eq!(suite.items.len(), 60);
        let cells: Vec<(usize, usize)> = (0..60).flat_map(|i| [(i, 0), (i, 1)]).collect();
        let jumping: Vec<(usize, usize)> =
            (0..cells.len()).map(|i| if i % 2 == 0 { cells[i / 2] } else { cells[cells.len() - 1 - i / 2] }).collect();
        jumping.par_iter().for_each(|&(i, k)| {
            let item = suite.items.item(i);
            let row: usize = item.id().parse().unwrap();
            let ImageSource::Embedded(e) = item.image(k) else { panic!("row {row}: not embedded") };
            assert!(e.cell.is_read_when_asked());
            let kind = if compression.is_none() { "RangeCell" } else { "FileCell" };
            assert!(format!("{:?}", e.cell).starts_with(kind), "{compression:?}: {:?}", e.cell);
            assert_eq!(&e.bytes().unwrap()[..], &element(row, k)[..], "row {row} element {k}");
        });
    }
}

/// The rows of a parquet file of many row groups, as `parquet_cells_file` writes them: a plain
/// binary column `image` (null in row 22, so that row group's statistics count a null and its
/// column is read with the records) and a `datasets` Image struct `pic`.
const GROUPS: usize = 40;
const ROWS_PER_GROUP: usize = 3;

fn image_bytes(row: usize) -> Vec<u8> {
    format!("image of row {row} ").repeat(1 + row % 7).into_bytes()
}

fn pic_bytes(row: usize) -> Vec<u8> {
    format!("pic {row}").into_bytes()
}

fn parquet_cells_file(path: &Path) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    let schema = parquet::schema::parser::parse_message_type(
        "message schema {
            REQUIRED INT64 id;
            OPTIONAL BYTE_ARRAY image;
            OPTIONAL GROUP pic { OPTIONAL BYTE_ARRAY bytes; OPTIONAL BYTE_ARRAY path (UTF8); }
            REQUIRED BYTE_ARRAY caption (UTF8);
        }",
    )
    .unwrap();
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::file::writer::SerializedFileWriter::new(file, schema.into(), properties.into()).unwrap();
    for group in 0..GROUPS {
        let rows: Vec<usize> = (group * ROWS_PER_GROUP..(group + 1) * ROWS_PER_GROUP).collect();
        let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        let images: Vec<ByteArray> = rows.iter().filter(|&&r| r != 22).map(|&r| image_bytes(r).into()).collect();
        let image_levels: Vec<i16> = rows.iter().map(|&r| i16::from(r != 22)).collect();
        let pics: Vec<ByteArray> = rows.iter().map(|&r| pic_bytes(r).into()).collect();
        let captions: Vec<ByteArray> =
            rows.iter().map(|&r| format!("caption {r}").as_bytes().to_vec().into()).collect();
        let mut row_group = writer.next_row_group().unwrap();
        let mut column = 0;
        while let Some(mut writer) = row_group.next_column().unwrap() {
            match column {
                0 => writer.typed::<Int64Type>().write_batch(&ids, None, None),
                1 => writer.typed::<ByteArrayType>().write_batch(&images, Some(&image_levels), None),
                2 => writer.typed::<ByteArrayType>().write_batch(&pics, Some(&vec![2; rows.len()]), None),
                3 => writer.typed::<ByteArrayType>().write_batch(&[], Some(&vec![1; rows.len()]), None),
                _ => writer.typed::<ByteArrayType>().write_batch(&captions, None, None),
            }
            .unwrap();
            writer.close().unwrap();
            column += 1;
        }
        row_group.close().unwrap();
    }
    writer.close().unwrap();
}

/// Cells read when asked for, from 40 row groups (more than are kept read), in an order that
/// jumps between them, on every core: each is its own row's bytes. A null cell is an error
/// naming its row and column; the other rows are items.
#[test]
fn cells_read_in_any_order_from_many_row_groups_are_their_own_rows_bytes() {
    use rayon::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    parquet_cells_file(&dir.path().join("many.parquet"));
    let manifest = manifest_over(
        dir.path(),
        "many.parquet",
        "parquet",
        "[item]\nid = \"{id}\"\nimages = [\"{image}\", \"{pic}\"]\ntexts = [\"{caption}\"]\ntruth = { text = 0 }\n\
         [metrics]\nfamily = \"choice\"\n",
    );
    let (suite, problems) = load(&manifest, dir.path());
    assert_eq!(problems.len(), 1);
    let message = problems.message(0).to_string();
    assert!(message.contains("many.parquet row 22") && message.contains("`image` is null"), "{message}");
    assert_eq!(suite.items.len(), GROUPS * ROWS_PER_GROUP - 1);
    let mut cells: Vec<(usize, usize)> = (0..suite.items.len()).flat_map(|i| [(i, 0), (i, 1)]).collect();
    // Odd positions from the end, even ones from the start: every read moves to another group.
    cells = (0..cells.len()).map(|i| if i % 2 == 0 { cells[i / 2] } else { cells[cells.len() - 1 - i / 2] }).collect();
    cells.par_iter().for_each(|&(i, k)| {
        let item = suite.items.item(i);
        let row: usize = item.id().parse().unwrap();
        let ImageSource::Embedded(e) = item.image(k) else { panic!("row {row}: not embedded") };
        assert!(e.cell.is_read_when_asked());
        let want = if k == 0 { image_bytes(row) } else { pic_bytes(row) };
        assert_eq!(&e.bytes().unwrap()[..], &want[..], "row {row} image {k}");
    });
}

/// Clusters given the embedded images' content keys (as a run holds them) are the clusters
/// that reading the cells gives, and need no cell: they come out the same once the file has
/// changed, when no cell can be read.
#[test]
fn clusters_by_given_content_keys_read_no_cell() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("pairs.parquet"), dir.path().join("pairs.parquet")).unwrap();
    let (suite, _) = load(&pairs_manifest(dir.path(), "pairs.parquet", "parquet"), dir.path());
    let read = suite.clusters().expect("rows 0 and 3 share a photo");
    let mut keys = std::collections::HashMap::new();
    for item in suite.items.iter() {
        for source in item.images() {
            let ImageSource::Embedded(e) = source else { panic!("not embedded") };
            let bytes = e.bytes().unwrap();
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
            key[8..].copy_from_slice(&bytes[bytes.len() - 24..]);
            keys.insert((e.file.clone(), e.name.clone()), key);
        }
    }
    std::fs::write(dir.path().join("pairs.parquet"), b"no longer the release").unwrap();
    let known = suite.clusters_knowing(&|e| keys.get(&(e.file.clone(), e.name.clone())).copied()).expect("clusters");
    assert_eq!((known.count(), known.members(0)), (read.count(), read.members(0)));
    assert!(suite.clusters().is_none(), "reading the cells now fails: every image its own");
}

/// An Arrow stream cut short, or whose first message claims more bytes than the file holds,
/// is refused naming the file and where its message starts, before anything is allocated
/// for the claim.
#[test]
fn arrow_messages_past_the_files_end_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let whole = std::fs::read(fixture("pairs.arrow")).unwrap();
    let cut = &whole[..whole.len() * 2 / 3];
    let mut claims = whole.clone();
    // The first message's metadata length, after the continuation marker: 2 GB.
    claims[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
    for (name, bytes) in [("cut.arrow", cut), ("claims.arrow", &claims[..])] {
        std::fs::write(dir.path().join(name), bytes).unwrap();
        let (suite, problems) = load(&pairs_manifest(dir.path(), name, "arrow"), dir.path());
        assert_eq!(suite.items.len(), 0, "{name}");
        let message = problems.message(0).to_string();
        assert_eq!(problems.kind(0), ErrorKind::Malformed, "{name}");
        assert!(message.contains(name) && message.contains("past the file's end"), "{name}: {message}");
    }
}
