//! The EqBen loader on fixtures in all five official annotation shapes.

use benchctl_suites::{eqben, find, ErrorKind, ImageSource};
use benchctl_testkit::{eqben_layout, generated_image};

fn splits() -> Vec<&'static str> {
    eqben::SPLITS.iter().map(|(s, _, _)| *s).collect()
}

#[test]
fn loads_every_split_shape() {
    let dir = tempfile::tempdir().unwrap();
    eqben_layout(dir.path(), &splits(), 6, false);
    let suite = find("eqben").unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 42);
    assert!(suite.missing_images().is_empty());
    // AG: nested video → subject → entries, in file order; the first caption of each list.
    let ag: Vec<_> = suite.items.iter().filter(|i| i.id.starts_with("eqbenag/")).collect();
    assert_eq!(ag.len(), 6);
    assert_eq!(ag[0].texts, ["the eqbenag thing 0 before", "the eqbenag thing 0 after"]);
    assert_eq!(ag[5].texts[0], "the eqbenag thing 5 before");
    // YouCook2 frames are BGR .npy arrays, decoded to the original RGB.
    let yc = suite.items.iter().find(|i| i.id == "eqbenyoucook2/1").unwrap();
    assert!(matches!(yc.images[0], ImageSource::NpyBgr(_)));
    let s = eqben::SPLITS.iter().position(|(s, _, _)| *s == "eqbenyoucook2").unwrap();
    assert_eq!(yc.images[0].load_rgb().unwrap(), generated_image((s * 1000 + 2) as u64, 30, 20));
    for item in &suite.items {
        assert!(item.truth.is_match(0, 0) && item.truth.is_match(1, 1) && !item.truth.is_match(0, 1));
    }
}

#[test]
fn the_light_release_is_read_without_editing_annotations() {
    let dir = tempfile::tempdir().unwrap();
    eqben_layout(dir.path(), &splits(), 4, true);
    let suite = find("eqben").unwrap().load(dir.path()).unwrap();
    assert!(suite.missing_images().is_empty());
    let sd = suite.items.iter().find(|i| i.id == "eqbensd/0").unwrap();
    assert!(sd.images[0].path().extension().unwrap() == "jpg");
    sd.images[0].load_rgb().unwrap();
    let kubric = suite.items.iter().find(|i| i.id == "eqbenkubric_loc/0").unwrap();
    assert!(kubric.images[0].path().extension().unwrap() == "png", "other splits keep their .png");
}

#[test]
fn wrong_shapes_and_bad_frames_are_named() {
    let dir = tempfile::tempdir().unwrap();
    eqben_layout(dir.path(), &splits(), 2, false);
    // A Kubric file in AG's nested shape.
    std::fs::write(dir.path().join("annotations/eqbenkubric_cnt.json"), r#"{"v": {"s": []}}"#).unwrap();
    let err = find("eqben").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains("eqbenkubric_cnt.json at `/`: expected a list of entries"), "{err}");

    std::fs::write(dir.path().join("annotations/eqbenkubric_cnt.json"), r#"[{"image0": "a.png", "image1": "b.png", "caption0": "x"}]"#).unwrap();
    let err = find("eqben").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("eqbenkubric_cnt.json at [0]: missing key `caption1`"), "{err}");

    // Every problem at once: the malformed entry and the missing split.
    std::fs::remove_file(dir.path().join("annotations/eqbensd.json")).unwrap();
    let err = find("eqben").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("and 1 more problem(s)"), "{err}");
    let (suite, problems) = find("eqben").unwrap().load_all(dir.path()).unwrap();
    assert_eq!(problems.len(), 2);
    assert!(problems[1].to_string().contains("annotations/eqbensd.json"), "{}", problems[1]);
    assert_eq!(suite.items.len(), 10, "the readable splits are still loaded");

    let frame = dir.path().join("bad.npy");
    std::fs::write(&frame, b"\x93NUMPY garbage").unwrap();
    let err = ImageSource::from_path(frame).load_rgb().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CorruptImage);
}

#[test]
fn the_public_subset_is_one_shuffled_list() {
    let dir = tempfile::tempdir().unwrap();
    // Two splits' fixtures, their entries pooled into one list as the subset ships them.
    eqben_layout(dir.path(), &["eqbenkubric_loc", "eqbensd"], 3, false);
    let mut entries = Vec::new();
    for split in ["eqbensd", "eqbenkubric_loc"] {
        let text = std::fs::read_to_string(dir.path().join(format!("annotations/{split}.json"))).unwrap();
        entries.extend(serde_json::from_str::<Vec<serde_json::Value>>(&text).unwrap());
    }
    std::fs::write(dir.path().join(eqben::SUBSET_FILE), serde_json::Value::from(entries).to_string()).unwrap();
    let suite = find("eqben-subset").unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 6);
    assert!(suite.missing_images().is_empty());
    assert_eq!(suite.items[0].texts[0], "the eqbensd thing 0 before");
    assert!(suite.summary.breakdown_keys.is_empty());
}
