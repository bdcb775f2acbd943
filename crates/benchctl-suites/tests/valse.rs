//! The VALSE loader on the real annotations and on malformed input.

use std::collections::BTreeMap;

use benchctl_suites::{find, valse, ErrorKind, ImageSource};
use benchctl_testkit::shared;

#[test]
fn loads_the_real_pieces_keeping_only_valid_records() {
    let Some(dir) = shared("datasets/valse") else { return };
    let suite = find("valse").unwrap().load(&dir).unwrap();
    assert_eq!(suite.items.len(), 7702);
    assert_eq!(suite.items.len() + suite.excluded, 8782);
    let mut per_piece: BTreeMap<&str, usize> = BTreeMap::new();
    for item in &suite.items {
        *per_piece.entry(item.tags()[0].1[0].as_str()).or_default() += 1;
    }
    let expected = BTreeMap::from([
        ("actant-swap", 949),
        ("action-replacement", 648),
        ("coreference-hard", 104),
        ("coreference-standard", 708),
        ("counting-adversarial", 691),
        ("counting-hard", 868),
        ("counting-small-quant", 900),
        ("existence", 505),
        ("foil-it", 943),
        ("plurals", 851),
        ("relations", 535),
    ]);
    assert_eq!(per_piece, expected);
    // Every item is one image with [caption, foil], the caption matching, and its image
    // expected in the folder its source's archive extracts to: coreference-standard's VisDial
    // records in COCO's train2014/ and val2014/, coreference-hard's in VisualDialog_val2018/.
    let mut folders: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for item in &suite.items {
        assert_eq!((item.image_count(), item.text_count()), (1, 2));
        assert!(item.truth().is_match(0, 0) && !item.truth().is_match(0, 1));
        let image = item.image(0);
        let path = image.path();
        assert!(matches!(item.image(0), ImageSource::File(_)));
        let folder = path.strip_prefix(dir.join("images")).unwrap().parent().unwrap().display().to_string();
        *folders.entry((item.tags()[0].1[0].as_str(), folder)).or_default() += 1;
    }
    let coreference: Vec<_> = folders.iter().filter(|((p, _), _)| p.starts_with("coreference")).collect();
    assert_eq!(
        coreference.iter().map(|((p, f), _)| (*p, f.as_str())).collect::<Vec<_>>(),
        [
            ("coreference-hard", "VisualDialog_val2018"),
            ("coreference-standard", "train2014"),
            ("coreference-standard", "val2014")
        ]
    );
    assert_eq!(folders[&("foil-it", "val2014".to_string())], 943);
    assert_eq!(folders[&("plurals", "val2017".to_string())], 851);
    assert_eq!(suite.annotation_files.len(), 11);
}

fn record(votes: u64, dataset: &str, image: &str) -> serde_json::Value {
    serde_json::json!({"dataset": dataset, "image_file": image, "caption": "two dogs", "foil": "one dog", "mturk": {"caption": votes, "foil": 0, "other": 0}})
}

/// A VALSE directory whose every piece holds `records`.
fn layout(records: serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for piece in valse::PIECES {
        std::fs::write(dir.path().join(format!("{piece}.json")), records.to_string()).unwrap();
    }
    dir
}

#[test]
fn invalid_records_are_excluded_and_sources_map_to_folders() {
    let dir = layout(serde_json::json!({
        "a": record(3, "visual7w", "v7w_1.jpg"),
        "b": record(1, "visual7w", "v7w_2.jpg"),
        "c": record(2, "FOIL dataset", "COCO_val2014_000000000042.jpg"),
    }));
    let suite = find("valse").unwrap().load(dir.path()).unwrap();
    assert_eq!((suite.items.len(), suite.excluded), (22, 11));
    assert_eq!(suite.items.item(0).id(), "existence/a");
    // Missing images are expected where COCO's val2014.zip extracts.
    assert_eq!(
        suite.items.item(1).image(0),
        ImageSource::File(dir.path().join("images/val2014/COCO_val2014_000000000042.jpg"))
    );
}

/// VisDial v1.0 records (coreference pieces) name COCO train2014, COCO val2014 and VisDial
/// val2018 images: each is found in the folder its own archive extracts to, and images in the
/// older single-folder layout (`images/visdial/`) are still found.
#[test]
fn images_are_routed_by_file_prefix_to_the_folders_their_sources_ship() {
    let dir = layout(serde_json::json!({
        "train": record(3, "VisDial_v1.0", "COCO_train2014_000000000001.jpg"),
        "val": record(3, "VisDial_v1.0", "COCO_val2014_000000000002.jpg"),
        "dialog": record(3, "VisDial_v1.0", "VisualDialog_val2018_000000000003.jpg"),
        "legacy": record(3, "VisDial_v1.0", "VisualDialog_val2018_000000000004.jpg"),
        "swig": record(3, "SWiG", "jumping_1.jpg"),
        "coco17": record(3, "coco2017", "000000291619.jpg"),
    }));
    let place = |folder: &str, file: &str| {
        let path = dir.path().join("images").join(folder).join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"jpeg").unwrap();
        path
    };
    let expected = [
        ("train", place("train2014", "COCO_train2014_000000000001.jpg")),
        ("val", place("val2014", "COCO_val2014_000000000002.jpg")),
        ("dialog", place("VisualDialog_val2018", "VisualDialog_val2018_000000000003.jpg")),
        ("legacy", place("visdial", "VisualDialog_val2018_000000000004.jpg")),
        ("swig", place("images_512", "jumping_1.jpg")),
        ("coco17", place("val2017", "000000291619.jpg")),
    ];
    let suite = find("valse").unwrap().load(dir.path()).unwrap();
    for (key, path) in expected {
        let item = suite.items.iter().find(|i| i.id() == format!("existence/{key}")).unwrap();
        assert_eq!(item.image(0), ImageSource::File(path), "{key}");
    }
}

#[test]
fn malformed_records_name_the_file_record_and_key() {
    let dir = layout(
        serde_json::json!({"r1": {"dataset": "visual7w", "image_file": "x.jpg", "caption": "c", "mturk": {"caption": 3}}}),
    );
    let err = find("valse").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    let msg = err.to_string();
    assert!(msg.contains("existence.json record `r1` key `foil`"), "{msg}");

    let dir = layout(serde_json::json!({"r1": record(3, "flickr", "x.jpg")}));
    let err = find("valse").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("unknown image source `flickr`"), "{err}");

    let dir = layout(serde_json::json!({"r1": record(3, "visual7w", "/etc/passwd")}));
    assert_eq!(find("valse").unwrap().load(dir.path()).unwrap_err().kind(), ErrorKind::PathEscapes);
}

#[test]
fn missing_pieces_are_listed() {
    let dir = layout(serde_json::json!({}));
    std::fs::remove_file(dir.path().join("plurals.json")).unwrap();
    std::fs::remove_file(dir.path().join("foil-it.json")).unwrap();
    let err = find("valse").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingData);
    assert!(err.to_string().contains("plurals.json") && err.to_string().contains("1 more problem"), "{err}");
    let (_, problems) = find("valse").unwrap().load_all(dir.path()).unwrap();
    let named: Vec<bool> =
        ["plurals.json", "foil-it.json"].iter().map(|f| problems.messages().any(|p| p.contains(f))).collect();
    assert_eq!(named, [true, true]);
}
