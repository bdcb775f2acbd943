//! The Winoground loader on the real annotations and on malformed input.

use std::collections::BTreeMap;

use benchctl_suites::{find, ErrorKind, ImageSource};
use benchctl_testkit::{read_winoground_tsv, shared, winoground_layout, WinogroundRow};

fn count(suite: &benchctl_suites::Suite, key: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for item in &suite.items {
        for (k, values) in item.tags().iter() {
            if k == key {
                for v in values {
                    *counts.entry(v.clone()).or_default() += 1;
                }
            }
        }
    }
    counts
}

#[test]
fn loads_all_400_real_examples_with_their_tags() {
    let Some(tsv) = shared("datasets/winoground/winoground_annotations.tsv") else { return };
    let rows = read_winoground_tsv(&tsv);
    let dir = tempfile::tempdir().unwrap();
    winoground_layout(&rows, dir.path());
    let suite = find("winoground").unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 400);
    assert!(suite.missing_images().is_empty());
    let collapsed = count(&suite, "collapsed_tag");
    assert_eq!(collapsed, BTreeMap::from([("Both".into(), 26), ("Object".into(), 141), ("Relation".into(), 233)]));
    let preds = count(&suite, "num_main_preds");
    assert_eq!(preds, BTreeMap::from([("1".into(), 292), ("2".into(), 108)]));
    // "Symbolic, Pragmatics" counts once for each tag.
    let secondary = count(&suite, "secondary_tag");
    assert_eq!(secondary["Symbolic"], 28 + 3 + 5 + 5);
    assert_eq!(secondary["Series"], 23 + 1 + 2 + 5);
    // The fine `tag` is comma-separated in 66 examples ("Negation, Scope"): split likewise.
    assert_eq!(suite.items.iter().filter(|i| i.tags().iter().any(|(k, v)| k == "tag" && v.len() > 1)).count(), 66);
    let tags = count(&suite, "tag");
    assert_eq!((tags.len(), tags["Scope"], tags["Noun Phrase"]), (39, 41, 34));
    assert!(tags.keys().all(|t| !t.contains(',')));
    // Item 219 keeps its quotes, and its images resolve to images/ex_219_img_k.png.
    let item = suite.items.iter().find(|i| i.id() == "219").unwrap();
    assert_eq!(item.text(0), r#"It starts with "A" and ends with "Z""#);
    assert_eq!(item.image(1), ImageSource::File(dir.path().join("images/ex_219_img_1.png")));
    assert!(item.truth().is_match(0, 0) && item.truth().is_match(1, 1) && !item.truth().is_match(0, 1));
}

#[test]
fn rgba_and_greyscale_images_become_rgb() {
    let row = WinogroundRow {
        id: "7".into(),
        caption_0: "a".into(),
        caption_1: "b".into(),
        tag: "t".into(),
        secondary_tag: String::new(),
        num_main_preds: "1".into(),
        collapsed_tag: "Object".into(),
    };
    let dir = tempfile::tempdir().unwrap();
    // id 7 is written as RGBA (image 0) and greyscale (image 1).
    winoground_layout(&[row], dir.path());
    let suite = find("winoground").unwrap().load(dir.path()).unwrap();
    let rgba = image::open(suite.items.item(0).image(0).path()).unwrap();
    assert_eq!(rgba.color(), image::ColorType::Rgba8);
    let rgb = suite.items.item(0).image(0).load_rgb().unwrap();
    let expected = benchctl_testkit::generated_image(14, 40, 30);
    assert_eq!(rgb, expected, "alpha is dropped, colours kept");
    let grey = suite.items.item(0).image(1).load_rgb().unwrap();
    assert!(grey.pixels().all(|p| p[0] == p[1] && p[1] == p[2]), "grey is replicated to three channels");
}

fn write(dir: &std::path::Path, jsonl: &str) {
    std::fs::create_dir_all(dir.join("images")).unwrap();
    std::fs::write(dir.join("examples.jsonl"), jsonl).unwrap();
}

const GOOD: &str = r#"{"id": 0, "caption_0": "a", "caption_1": "b", "image_0": "ex_0_img_0", "image_1": "ex_0_img_1", "tag": "Noun", "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": "Object"}"#;

#[test]
fn malformed_jsonl_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &format!("{GOOD}\n{{\"id\": 1, \"caption_0\": \n"));
    let err = find("winoground").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains("examples.jsonl line 2"), "{err}");
}

#[test]
fn a_missing_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &GOOD.replace(r#""caption_1": "b", "#, ""));
    let err = find("winoground").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("line 1") && err.to_string().contains("caption_1"), "{err}");
}

#[test]
fn duplicate_ids_and_empty_files_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &format!("{GOOD}\n{GOOD}\n"));
    let err = find("winoground").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("line 2: duplicate id 0"), "{err}");
    write(dir.path(), "\n");
    let err = find("winoground").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("no examples"), "{err}");
}

#[test]
fn image_paths_cannot_escape_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &GOOD.replace("ex_0_img_1", "../../etc/passwd"));
    let err = find("winoground").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PathEscapes);
    assert!(err.to_string().contains("../../etc/passwd"), "{err}");
}

#[test]
fn missing_data_and_unknown_suites_explain_themselves() {
    let err = find("winoground").unwrap().load(std::path::Path::new("/nonexistent/wino")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingData);
    assert!(err.to_string().contains("/nonexistent/wino") && err.to_string().contains("facebook/winoground"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let err = find("winoground").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("examples.jsonl"), "{err}");
    let err = find("winogrand").err().unwrap();
    assert_eq!(err.kind(), ErrorKind::UnknownSuite);
    assert!(err.to_string().contains("known suites are eqben, eqben-subset, rococo, spec, valse, winoground"), "{err}");
}

#[test]
fn missing_and_corrupt_images_are_named() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &format!("{GOOD}\n"));
    std::fs::write(dir.path().join("images/ex_0_img_0.png"), b"not a png at all").unwrap();
    let suite = find("winoground").unwrap().load(dir.path()).unwrap();
    let missing = suite.missing_images();
    assert_eq!(missing, [dir.path().join("images/ex_0_img_1.png").as_path()]);
    let err = suite.items.item(0).image(0).load_rgb().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CorruptImage);
    assert!(err.to_string().contains("ex_0_img_0.png"), "{err}");
    let err = suite.items.item(0).image(1).load_rgb().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingImage);
}

fn hub_fixture(form: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/winoground-hub").join(form)
}

/// The two hub forms written by the `datasets` library (`scripts/fixtures/gen_winoground_parquet.py`):
/// the main branch's `data/test-*.parquet` with the PNGs embedded (as `datasets` writes it, and
/// snappy-compressed in two row groups), and the earlier `examples.jsonl` + `images/`. All
/// three give the same items, tags and pixels.
#[test]
fn parquet_and_jsonl_releases_give_the_same_items() {
    let load = |form: &str| find("winoground").unwrap().load(&hub_fixture(form)).unwrap();
    let (jsonl, parquet, snappy) = (load("jsonl"), load("parquet"), load("snappy"));
    assert_eq!(jsonl.items.len(), 4);
    assert_eq!(parquet.annotation_files, [hub_fixture("parquet").join("data/test-00000-of-00001.parquet")]);
    for other in [&parquet, &snappy] {
        assert!(other.missing_images().is_empty());
        for (a, b) in jsonl.items.iter().zip(&other.items) {
            assert_eq!(
                (&a.id(), &a.texts().collect::<Vec<_>>(), &a.tags()),
                (&b.id(), &b.texts().collect::<Vec<_>>(), &b.tags())
            );
            assert!(matches!(&b.image(0), ImageSource::Embedded(e) if e.name == format!("ex_{}_img_0", b.id())));
            for (x, y) in a.images().zip(b.images()) {
                assert_eq!(x.load_rgb().unwrap(), y.load_rgb().unwrap(), "item {}", a.id());
            }
        }
    }
    assert_eq!(
        jsonl.items.item(1).tags()[3],
        ("tag".to_string(), vec!["Noun".to_string(), "Verb-Transitive".to_string()])
    );
    assert_eq!(jsonl.items.item(1).tags()[1], ("num_main_preds".to_string(), vec!["1".to_string()]));
}

/// The parquet release's images stay in the file: loading reads no image, each is read when
/// asked for (the same pixels as the jsonl form's files, in `parquet_and_jsonl_releases_give_the_same_items`),
/// and a file changed since the suite was read is refused for them, naming the file and the image.
#[test]
fn parquet_images_are_read_from_the_file_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let file = dir.path().join("data/test-00000-of-00001.parquet");
    std::fs::copy(hub_fixture("snappy").join("data/test-00000-of-00001.parquet"), &file).unwrap();
    let suite = find("winoground").unwrap().load(dir.path()).unwrap();
    for item in suite.items.iter() {
        for image in item.images() {
            let ImageSource::Embedded(embedded) = image else { panic!("item {}: not embedded", item.id()) };
            assert!(embedded.cell.is_read_when_asked(), "item {}", item.id());
        }
    }
    assert!(suite.items.item(0).image(1).load_rgb().is_ok());

    let mut bytes = std::fs::read(&file).unwrap();
    bytes.push(0);
    std::fs::write(&file, bytes).unwrap();
    let error = suite.items.item(2).image(1).load_rgb().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::CorruptImage);
    let message = error.to_string();
    assert!(message.contains(&format!("{}#ex_2_img_1", file.display())), "{message}");
    assert!(message.contains("changed since the suite was read"), "{message}");
}

#[test]
fn a_broken_parquet_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let file = dir.path().join("data/test-00000-of-00001.parquet");
    let bytes = std::fs::read(hub_fixture("snappy").join("data/test-00000-of-00001.parquet")).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let err = find("winoground").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains(&file.display().to_string()), "{err}");
}
