//! Hostile inputs the loaders and decoders meet (issue 13's list): each is refused with a
//! clear error, never a panic, an abort or an unbounded allocation.

use benchctl_suites::image::{decode_npy_bgr, decode_rgb};
use benchctl_suites::{find, valse, ErrorKind};

/// CRC-32 (IEEE) of PNG chunk bytes.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A valid 1×1 PNG whose header is rewritten to claim `w × h` pixels (its data stays 1×1).
fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::new(1, 1).write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).unwrap();
    // Signature (8), IHDR length (4), "IHDR" (4), width, height ... CRC after 13 data bytes.
    bytes[16..20].copy_from_slice(&w.to_be_bytes());
    bytes[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&bytes[12..29]);
    bytes[29..33].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn an_image_over_the_pixel_limit_is_refused_from_its_header() {
    // 22,000² pixels (484 M): refused before a pixel is decoded, as Pillow refuses it.
    let err = decode_rgb(&png_claiming(22_000, 22_000)).unwrap_err().to_string();
    assert!(err.contains("22000×22000") && err.contains("178956970"), "{err}");
    // Under the limit the header is believed and the truncated data is an error, not grey.
    assert!(decode_rgb(&png_claiming(64, 64)).is_err());
}

#[test]
fn a_degenerate_npy_frame_is_an_error_not_a_panic() {
    let write = |shape: &[u64], data: &[u8]| {
        use npyz::WriterBuilder;
        let mut out = Vec::new();
        let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(&mut out).begin_nd().unwrap();
        w.extend(data.iter().copied()).unwrap();
        w.finish().unwrap();
        out
    };
    let err = decode_npy_bgr(&write(&[0, 32, 3], &[])).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let err = decode_npy_bgr(&write(&[2, 2], &[1, 2, 3, 4])).unwrap_err();
    assert!(err.to_string().contains("expected shape (H, W, 3)"), "{err}");
    let floats = {
        use npyz::WriterBuilder;
        let mut out = Vec::new();
        let mut w = npyz::WriteOptions::new().default_dtype().shape(&[1, 1, 3]).writer(&mut out).begin_nd().unwrap();
        w.extend([0.5f32, 0.5, 0.5]).unwrap();
        w.finish().unwrap();
        out
    };
    assert!(decode_npy_bgr(&floats).unwrap_err().to_string().contains("expected uint8"));
    assert!(decode_npy_bgr(&write(&[1, 2, 3], &[1, 2, 3, 4, 5, 6])).is_ok());
}

#[test]
fn a_byte_order_mark_and_float_vote_counts_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let record = serde_json::json!({"r1": {"dataset": "visual7w", "image_file": "v7w_1.jpg", "caption": "two dogs", "foil": "one dog",
                                           "mturk": {"caption": 3.0, "foil": 0, "other": 0}}});
    for piece in valse::PIECES {
        std::fs::write(dir.path().join(format!("{piece}.json")), format!("\u{feff}{record}")).unwrap();
    }
    let suite = find("valse").unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 11);

    let bad = serde_json::json!({"r1": {"dataset": "visual7w", "image_file": "v7w_1.jpg", "caption": "c", "foil": "f", "mturk": {"caption": 2.5}}});
    std::fs::write(dir.path().join("existence.json"), bad.to_string()).unwrap();
    let err = find("valse").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains("expected a count of votes (0 to 3), got 2.5"), "{err}");

    // Winoground's jsonl with a BOM on its first line.
    let wino = tempfile::tempdir().unwrap();
    let line = r#"{"id": 0, "image_0": "ex_0_img_0", "image_1": "ex_0_img_1", "caption_0": "a", "caption_1": "b", "tag": "t", "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": "Object"}"#;
    std::fs::write(wino.path().join("examples.jsonl"), format!("\u{feff}{line}\r\n")).unwrap();
    let suite = find("winoground").unwrap().load(wino.path()).unwrap();
    assert_eq!(suite.items.item(0).id(), "0");
}

#[test]
fn unreadable_annotations_are_named_precisely() {
    // Non-UTF-8 bytes: the byte offset of the first bad one.
    let dir = tempfile::tempdir().unwrap();
    for piece in valse::PIECES {
        std::fs::write(dir.path().join(format!("{piece}.json")), b"{}").unwrap();
    }
    std::fs::write(dir.path().join("plurals.json"), b"{\"a\": \"caf\xe9\"}").unwrap();
    let err = find("valse").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains("plurals.json: not UTF-8 text (invalid byte at offset 10)"), "{err}");

    // A duplicate record key: both positions, rather than one record silently dropped.
    let record =
        r#"{"dataset": "visual7w", "image_file": "v7w_1.jpg", "caption": "c", "foil": "f", "mturk": {"caption": 3}}"#;
    std::fs::write(dir.path().join("plurals.json"), format!(r#"{{"k1": {record}, "k2": {record}, "k1": {record}}}"#))
        .unwrap();
    let err = find("valse").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("record key `k1` appears twice (records 1 and 3)"), "{err}");

    // A directory where examples.jsonl belongs is malformed data, not the gated-dataset hint.
    let wino = tempfile::tempdir().unwrap();
    std::fs::create_dir(wino.path().join("examples.jsonl")).unwrap();
    let err = find("winoground").unwrap().load(wino.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(
        err.to_string().contains("it is a directory, not a file") && !err.to_string().contains("HF_TOKEN"),
        "{err}"
    );
}

/// A PNG followed by junk decodes as Pillow decodes it (the image ends where its format says),
/// read as a stream, so the junk is never loaded.
#[test]
fn trailing_bytes_after_an_image_are_not_read_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img.png");
    image::RgbImage::from_pixel(5, 4, image::Rgb([10, 20, 30])).save(&path).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, &vec![0u8; 8 << 20]).unwrap();
    let img = benchctl_suites::ImageSource::File(path).load_rgb().unwrap();
    assert_eq!((img.width(), img.height(), img.get_pixel(2, 2).0), (5, 4, [10, 20, 30]));
}

/// A truncated JPEG or PNG is refused, as Pillow refuses it ("image file is truncated"),
/// never decoded with grey fill; the same bytes complete decode. (A PNG that loses only
/// its closing IEND chunk still has all its pixels, and Pillow reads it too.)
#[test]
fn truncated_images_are_refused() {
    let mut rgb = image::RgbImage::new(80, 64);
    for (x, y, p) in rgb.enumerate_pixels_mut() {
        *p = image::Rgb([(x * 3) as u8, (y * 4) as u8, ((x * y) % 251) as u8]);
    }
    for format in [image::ImageFormat::Jpeg, image::ImageFormat::Png] {
        let mut bytes = Vec::new();
        rgb.write_to(&mut std::io::Cursor::new(&mut bytes), format).unwrap();
        assert!(decode_rgb(&bytes).is_ok(), "{format:?} whole");
        let cuts = match format {
            image::ImageFormat::Jpeg => [bytes.len() / 2, bytes.len() - 2],
            _ => [bytes.len() / 2, bytes.len() * 3 / 4],
        };
        for cut in cuts {
            let err =
                decode_rgb(&bytes[..cut]).expect_err(&format!("{format:?} cut to {cut} of {} bytes", bytes.len()));
            assert!(err.to_string().contains("truncated"), "{format:?}: {err}");
        }
    }
}

/// A line longer than the line readers take (here a Winoground `examples.jsonl` whose second
/// line runs past 64 MiB without an end) is refused, naming the file and the line, after
/// reading at most that many bytes of it; the manifest reader refuses a file over its limit.
#[test]
fn an_endless_line_and_an_oversized_manifest_are_refused() {
    use std::io::Write;
    let wino = tempfile::tempdir().unwrap();
    let path = wino.path().join("examples.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    let demo = benchctl_testkit::workspace_root().join("datasets/demo/winoground/examples.jsonl");
    let first = std::fs::read_to_string(demo).unwrap().lines().next().unwrap().to_string();
    file.write_all(format!("{first}\n").as_bytes()).unwrap();
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..=benchctl_suites::paths::MAX_LINE_BYTES >> 20 {
        file.write_all(&spaces).unwrap();
    }
    drop(file);
    let err = find("winoground").unwrap().load(wino.path()).unwrap_err().to_string();
    assert!(err.contains(&format!("{} line 2", path.display())) && err.contains("longer than"), "{err}");

    let manifest = wino.path().join("big.toml");
    let mut text = String::from("id = \"big\"\n");
    while text.len() as u64 <= benchctl_suites::manifest::MAX_MANIFEST_BYTES {
        text.push_str(&"# a comment line of a manifest far larger than any dataset's description\n".repeat(1000));
    }
    std::fs::write(&manifest, text).unwrap();
    let err = find(manifest.to_str().unwrap()).err().unwrap().to_string();
    assert!(err.contains("big.toml") && err.contains("more than"), "{err}");
}

/// A CSV source whose header has more columns than a manifest's records may have (every
/// record is a map of every column) is refused naming the file, before any row is made.
#[test]
fn a_csv_of_too_many_columns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let columns = benchctl_suites::manifest::MAX_COLUMNS + 1;
    let header: Vec<String> = (0..columns).map(|i| format!("c{i}")).collect();
    let row = vec!["x"; columns];
    std::fs::write(dir.path().join("a.csv"), format!("{}\n{}\n", header.join(","), row.join(","))).unwrap();
    let good =
        std::fs::read_to_string(benchctl_testkit::workspace_root().join("datasets/manifests/winoground-manifest.toml"))
            .unwrap()
            .replace("id = \"winoground-manifest\"", "id = \"wide-csv\"")
            .replace("file = \"examples.jsonl\"", "file = \"a.csv\"")
            .replace("format = \"jsonl\"", "format = \"csv\"");
    let manifest = dir.path().join("wide.toml");
    std::fs::write(&manifest, good).unwrap();
    let err = find(manifest.to_str().unwrap()).unwrap().load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("a.csv") && err.contains(&format!("{columns} columns")), "{err}");
}

/// A parquet dictionary bomb (`scripts/fixtures/gen_parquet_bomb.py`, pyarrow: a 10 kB file whose million
/// rows all point at one 100,000-byte caption, 100 GB decoded) is refused once its rows have
/// decoded to the budget (256 MiB and 64 times the file), naming the file and the row, in
/// about 2,700 rows rather than a million.
#[test]
fn a_parquet_dictionary_bomb_is_refused_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet-bomb/bomb.parquet");
    let bomb = dir.path().join("bomb.parquet");
    std::fs::copy(&fixture, &bomb).unwrap();
    let manifest = dir.path().join("bomb.toml");
    std::fs::write(
        &manifest,
        "id = \"bomb\"\ndescription = \"d\"\n[source]\nfile = \"bomb.parquet\"\nformat = \"parquet\"\n[item]\nimages = [\"{image}\"]\ntexts = [\"{caption}\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = find(manifest.to_str().unwrap()).unwrap().load(dir.path()).unwrap_err();
    let text = err.to_string();
    let budget = benchctl_suites::paths::parquet_row_budget(std::fs::metadata(&bomb).unwrap().len());
    assert!(text.contains("bomb.parquet") && text.contains(&format!("more than {budget} bytes")), "{text}");
    // Refused at the row where the budget ran out: a 100,000-byte caption and a few bytes more each.
    let row: u64 = text.split("by row ").nth(1).and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
    assert!(row < budget / 100_000 + 1 && row + 1 >= budget / 100_100, "row {row}, budget {budget}");
    assert_eq!(err.kind(), ErrorKind::Malformed);
    eprintln!("refused in {:?}", started.elapsed());
}

/// A parquet footer claiming 10¹² rows over a row group of 37 (`scripts/fixtures/gen_parquet_bomb.py`
/// rewrites pyarrow's footer): the rows that exist are read, and the count the footer claims
/// allocates nothing.
#[test]
fn a_parquet_footer_claiming_a_trillion_rows_reads_the_rows_there_are() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet-bomb/claims-rows.parquet");
    std::fs::copy(&fixture, dir.path().join("claims.parquet")).unwrap();
    let manifest = dir.path().join("claims.toml");
    std::fs::write(
        &manifest,
        "id = \"claims\"\ndescription = \"d\"\n[source]\nfile = \"claims.parquet\"\nformat = \"parquet\"\n[item]\nimages = [\"{image}\"]\ntexts = [\"{caption}\", \"x\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\n",
    )
    .unwrap();
    let (suite, problems) = find(manifest.to_str().unwrap()).unwrap().load_all(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 37);
    assert!(problems.is_empty(), "{:?}", problems.messages().collect::<Vec<_>>());
    assert_eq!(suite.items.item(36).text(0), "caption 36");
}

/// `source.group` of 0 is refused naming the key; of 10¹² it makes no item and says why,
/// without allocating for the groups it names.
#[test]
fn manifest_groups_of_zero_or_a_trillion_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.jsonl"),
        "{\"img\": \"x.png\", \"t\": \"one\"}\n{\"img\": \"x.png\", \"t\": \"two\"}\n",
    )
    .unwrap();
    let manifest = |name: &str, group: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "id = \"{name}\"\ndescription = \"d\"\n[source]\nfile = \"a.jsonl\"\nformat = \"jsonl\"\ngroup = {group}\n[item]\nimages = [\"{{0.img}}\"]\ntexts = [\"{{0.t}}\", \"{{1.t}}\"]\ntruth = {{ text = 0 }}\n[metrics]\nfamily = \"choice\"\n"
            ),
        )
        .unwrap();
        path
    };
    let err = find(manifest("zero", "0").to_str().unwrap()).err().unwrap().to_string();
    assert!(err.contains("source.group") && err.contains("must be at least 1"), "{err}");
    let trillion = find(manifest("trillion", "1000000000000").to_str().unwrap()).unwrap();
    let err = trillion.load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("2 record(s) do not make whole groups of 1000000000000"), "{err}");
    let pairs = find(manifest("pairs", "2").to_str().unwrap()).unwrap().load(dir.path()).unwrap();
    assert_eq!(pairs.items.len(), 1);
}

/// Parquet files as pyarrow writes them with every codec (`scripts/fixtures/gen_parquet_codecs.py`)
/// read to the same records; an LZO file is refused naming the file, column and codec.
#[test]
fn every_parquet_codec_is_read_and_lzo_is_named() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet-codecs");
    let manifest = |file: &str| {
        format!(
            r#"id = "codec-{}"
description = "parquet codecs"
[source]
file = "{file}"
format = "parquet"
[item]
images = ["{{image_0}}", "{{image_1}}"]
texts = ["{{caption_0}}", "{{caption_1}}"]
truth = "diagonal"
[metrics]
family = "group"
"#,
            file.trim_end_matches(".parquet")
        )
    };
    let texts_of = |suite: &benchctl_suites::Suite| -> Vec<Vec<String>> {
        suite.items.iter().map(|item| item.texts().map(str::to_string).collect()).collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut reference = None;
    for codec in ["none", "snappy", "gzip", "zstd", "brotli", "lz4"] {
        let path = dir.path().join(format!("{codec}.toml"));
        std::fs::write(&path, manifest(&format!("{codec}.parquet"))).unwrap();
        let suite = find(path.to_str().unwrap()).unwrap().load(&fixtures).unwrap_or_else(|e| panic!("{codec}: {e}"));
        let texts = texts_of(&suite);
        assert_eq!(texts.len(), 3, "{codec}");
        assert_eq!(texts[2], ["ﬁne print", "print fine"], "{codec}");
        match &reference {
            None => reference = Some(texts),
            Some(reference) => assert_eq!(&texts, reference, "{codec}"),
        }
    }
    let path = dir.path().join("lzo.toml");
    std::fs::write(&path, manifest("lzo.parquet")).unwrap();
    let err = find(path.to_str().unwrap()).unwrap().load(&fixtures).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    let message = err.to_string();
    assert!(message.contains("lzo.parquet") && message.contains("column `id`") && message.contains("LZO"), "{message}");
}
