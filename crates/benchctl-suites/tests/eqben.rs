//! The EqBen loader on small copies of the real releases: the full release's flat, shuffled
//! list (`eqben_ann/ann_json_finegrained_random.json`, with `private_info` in the entries or
//! rebuilt from `private_info.json` + `private_random_idx.json` as the official
//! `evaluate_eqben_locally.py` does), the light `.jpg` release, and the 10 % subset
//! (`eqben_subset/eqben_subset_10percent_final.json` + `image_subset/`).

use std::path::Path;

use benchctl_suites::{eqben, find, ErrorKind, ImageSource, Suite};
use benchctl_testkit::{eqben_release, eqben_subset_release, generated_image, EqbenEntry};

const SMALL: [(&str, usize); 7] = [
    ("eqbenag", 3),
    ("eqbenyoucook2", 2),
    ("eqbengebc", 2),
    ("eqbenkubric_loc", 2),
    ("eqbenkubric_attr", 2),
    ("eqbenkubric_cnt", 2),
    ("eqbensd", 3),
];

fn load(dir: &Path) -> Suite {
    find("eqben").unwrap().load(dir).unwrap()
}

/// Every flat entry points at the pair it describes: its image and caption, in the item its
/// `(dataset, sample_cnt)` names, at the slots its `name` gives.
fn assert_order_matches(suite: &Suite, entries: &[EqbenEntry]) {
    let order = suite.pair_order.as_ref().expect("the full release has a submission order");
    assert!(order.complete());
    assert_eq!(order.slots.len(), entries.len());
    for (slot, entry) in order.slots.iter().zip(entries) {
        let item = &suite.items.item(slot.item as usize);
        assert_eq!(item.id(), format!("{}/{}", entry.split, entry.sample_cnt));
        assert!(item.image(slot.image as usize).path().to_string_lossy().ends_with(&entry.image), "{entry:?}");
        assert_eq!(item.text(slot.text as usize), entry.caption);
        assert_eq!(entry.name, format!("c{}i{}", slot.text, slot.image));
    }
}

#[test]
fn the_full_release_is_read_as_downloaded() {
    let dir = tempfile::tempdir().unwrap();
    let entries = eqben_release(dir.path(), &SMALL, true, false);
    let suite = load(dir.path());
    assert_eq!(suite.items.len(), 16);
    assert!(suite.missing_images().is_empty(), "images found under the archive's folder: {:?}", suite.missing_images());
    // Items in the official split order, then by sample.
    let ids: Vec<&str> = suite.items.iter().map(|i| i.id()).collect();
    assert_eq!(&ids[..4], ["eqbenag/0", "eqbenag/1", "eqbenag/2", "eqbenyoucook2/3"]);
    assert_eq!(
        suite.items.item(0).texts().collect::<Vec<_>>(),
        ["the eqbenag thing 0 before", "the eqbenag thing 0 after"]
    );
    for item in &suite.items {
        assert!(item.truth().is_match(0, 0) && item.truth().is_match(1, 1) && !item.truth().is_match(0, 1));
    }
    assert_order_matches(&suite, &entries);
    // YouCook2 frames are BGR .npy arrays, decoded to the original RGB.
    let yc = suite.items.iter().find(|i| i.id() == "eqbenyoucook2/3").unwrap();
    assert!(matches!(yc.image(0), ImageSource::NpyBgr(_)));
    assert_eq!(yc.image(0).load_rgb().unwrap(), generated_image(1000, 30, 20));
    // A partial release loads, and says how it falls short of SUBSET_LENGTH_INFO.
    assert_eq!(suite.incomplete.len(), 7);
    assert!(suite.incomplete.contains(&"eqbenag has 3 of its 195872 items".to_string()), "{:?}", suite.incomplete);
}

#[test]
fn private_info_files_rebuild_the_same_items_as_the_scorer_does() {
    let (with, without) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let entries = eqben_release(with.path(), &SMALL, true, false);
    assert_eq!(eqben_release(without.path(), &SMALL, false, false), entries);
    let (a, b) = (load(with.path()), load(without.path()));
    assert_eq!(
        a.items.iter().map(|i| (i.id(), i.texts().collect::<Vec<_>>())).collect::<Vec<_>>(),
        b.items.iter().map(|i| (i.id(), i.texts().collect::<Vec<_>>())).collect::<Vec<_>>()
    );
    assert_eq!(a.pair_order.as_ref().unwrap().slots, b.pair_order.as_ref().unwrap().slots);
    assert_order_matches(&b, &entries);
    assert_eq!(b.annotation_files.len(), 3, "the two private files count as annotations: {:?}", b.annotation_files);
}

#[test]
fn the_light_release_is_read_without_editing_annotations() {
    let dir = tempfile::tempdir().unwrap();
    eqben_release(dir.path(), &SMALL, true, true);
    let suite = load(dir.path());
    assert!(suite.missing_images().is_empty());
    let sd = suite.items.iter().find(|i| i.id().starts_with("eqbensd/")).unwrap();
    assert_eq!(sd.image(0).path().extension().unwrap(), "jpg");
    sd.image(0).load_rgb().unwrap();
    let yc = suite.items.iter().find(|i| i.id().starts_with("eqbenyoucook2/")).unwrap();
    assert_eq!(yc.image(0).path().extension().unwrap(), "npy", "frames stay .npy");
}

#[test]
fn the_subset_reads_its_split_from_the_image_path() {
    let dir = tempfile::tempdir().unwrap();
    let splits = eqben_subset_release(dir.path(), &["eqbenag", "eqbenkubric_cnt", "eqbensd"], 7);
    let suite = find("eqben-subset").unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.len(), 7);
    assert!(suite.missing_images().is_empty());
    assert!(suite.items.item(0).image(0).path().starts_with(dir.path().join("image_subset")));
    for (item, split) in suite.items.iter().zip(&splits) {
        assert_eq!(*item.tags(), vec![("split".to_string(), vec![split.clone()])].into());
    }
    assert_eq!(suite.items.item(3).texts().collect::<Vec<_>>(), ["subset 3 before", "subset 3 after"]);
    assert!(suite.pair_order.is_none() && suite.incomplete.is_empty());
}

#[test]
fn a_missing_release_names_the_expected_files() {
    let dir = tempfile::tempdir().unwrap();
    let err = find("eqben").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingData);
    let expected = dir.path().join("eqben_ann/ann_json_finegrained_random.json");
    assert!(err.to_string().contains(&expected.display().to_string()), "{err}");
    let err = find("eqben-subset").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("eqben_subset/eqben_subset_10percent_final.json"), "{err}");

    // Entries without private_info and without the scorer's files to rebuild it.
    std::fs::create_dir_all(dir.path().join("eqben_ann")).unwrap();
    std::fs::write(expected, r#"[{"image": "eqbensd/a.png", "caption": "x"}]"#).unwrap();
    let err = find("eqben").unwrap().load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("private_info.json and private_random_idx.json"), "{err}");
}

fn write_list(dir: &Path, list: serde_json::Value) {
    std::fs::create_dir_all(dir.join("eqben_ann")).unwrap();
    std::fs::write(dir.join(eqben::ANNOTATION_FILE), list.to_string()).unwrap();
}

fn entry(image: &str, caption: &str, name: &str, cnt: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"image": image, "caption": caption, "private_info": {"dataset": "eqbensd", "name": name, "sample_cnt": cnt}})
}

#[test]
fn broken_items_are_named_with_their_entries() {
    let dir = tempfile::tempdir().unwrap();
    // Item eqbensd/0 lacks c1i1; item eqbensd/1 gives image 0 two different files; a bad name.
    write_list(
        dir.path(),
        serde_json::json!([
            entry("eqbensd/a.png", "a", "c0i0", 0.into()),
            entry("eqbensd/b.png", "a", "c0i1", 0.into()),
            entry("eqbensd/a.png", "b", "c1i0", 0.into()),
            entry("eqbensd/c.png", "c", "c0i0", 1.into()),
            entry("eqbensd/x.png", "d", "c1i0", 1.into()),
            entry("eqbensd/c.png", "c", "c2i0", 2.into()),
        ]),
    );
    let (_, problems) = find("eqben").unwrap().load_all(dir.path()).unwrap();
    let text: Vec<String> = problems.messages().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|p| p.contains("entry 4: item eqbensd/1: entry 3 gives image \"eqbensd/c.png\"")),
        "{text:?}"
    );
    assert!(text.iter().any(|p| p.contains("entry 5: `private_info.name` is `c2i0`")), "{text:?}");
    assert!(text.iter().any(|p| p.contains("item eqbensd/0 lacks the entries c1i1")), "{text:?}");
    assert!(problems.iter().all(|(kind, _)| kind == ErrorKind::Malformed));
}

#[test]
fn sample_counts_written_as_floats_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["c0i0", "c0i1", "c1i0", "c1i1"];
    let list: Vec<serde_json::Value> =
        names.iter().map(|n| entry(&format!("eqbensd/{}.png", &n[2..]), &n[..2], n, serde_json::json!(5.0))).collect();
    write_list(dir.path(), serde_json::Value::from(list));
    let (suite, problems) = find("eqben").unwrap().load_all(dir.path()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(suite.items.item(0).id(), "eqbensd/5");
    assert_eq!(suite.items.item(0).texts().collect::<Vec<_>>(), ["c0", "c1"]);
}

#[test]
fn a_private_index_that_is_no_permutation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    eqben_release(dir.path(), &[("eqbensd", 1)], false, false);
    std::fs::write(dir.path().join("eqben_ann/private_random_idx.json"), "[0, 1, 1, 3]").unwrap();
    let err = find("eqben").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains("position 2 (1) makes it no permutation"), "{err}");
}

/// The full list is read as a stream: a BOM is accepted; a byte that is not UTF-8 is named
/// with its offset, also when the character it breaks straddles the reader's 64 KiB buffers;
/// a parse error or mixed `private_info` anywhere leaves no items (and no problems of the
/// entries before it), as a whole-file parse did.
#[test]
fn the_streamed_list_is_refused_whole_and_named_like_a_parsed_one() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["c0i0", "c0i1", "c1i0", "c1i1"];
    let four = |caption: &str| -> Vec<serde_json::Value> {
        names
            .iter()
            .map(|n| entry(&format!("eqbensd/{}.png", &n[2..]), &format!("{caption} {}", &n[..2]), n, 0.into()))
            .collect()
    };
    let path = dir.path().join(eqben::ANNOTATION_FILE);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let load = || find("eqben").unwrap().load_all(dir.path()).unwrap();

    // A BOM, and a caption whose 'é' (two bytes) starts at the last byte of the first 64 KiB.
    let text = serde_json::Value::from(four("x")).to_string();
    let opening = text.find("x c0").unwrap();
    let pad = (1 << 16) - 1 - opening - "\u{feff}".len();
    let caption = format!("{}é", "p".repeat(pad));
    let list = serde_json::Value::from(four(&caption)).to_string();
    assert_eq!(format!("\u{feff}{list}").as_bytes()[(1 << 16) - 1], 0xc3, "the test places the split character");
    std::fs::write(&path, format!("\u{feff}{list}")).unwrap();
    let (suite, problems) = load();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(suite.items.item(0).text(0), format!("{caption} c0"));

    // The same byte, broken: the offset counts the BOM, as a whole-file check does.
    let mut bytes = format!("\u{feff}{list}").into_bytes();
    bytes[(1 << 16) - 1] = 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let (suite, problems) = load();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems.message(0).contains(&format!("not UTF-8 text (invalid byte at offset {})", (1 << 16) - 1)),
        "{}",
        problems.message(0)
    );
    assert!(suite.items.is_empty());
    // A character cut short by the end of the file.
    let mut bytes = list.clone().into_bytes();
    bytes.truncate(bytes.len() - 1);
    bytes.push(0xc3);
    std::fs::write(&path, &bytes).unwrap();
    let (_, problems) = load();
    assert!(
        problems.message(0).contains(&format!("invalid byte at offset {}", bytes.len() - 1)),
        "{}",
        problems.message(0)
    );

    // A bad entry before a parse error: only the parse error, with its line and column.
    let mut list = four("y");
    list[1]["private_info"]["name"] = "c2i2".into();
    let text = serde_json::Value::from(list).to_string();
    std::fs::write(&path, format!("{}, oops]", text.trim_end_matches(']'))).unwrap();
    let (suite, problems) = load();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems.message(0).contains("line 1 column"), "{}", problems.message(0));
    assert_eq!(problems.kind(0), ErrorKind::Malformed);
    assert!(suite.items.is_empty());

    // `private_info` on some entries only, either way round.
    for (without, expected) in
        [(2, "entry 0 has `private_info` but entry 2 has none"), (0, "entry 1 has `private_info` but entry 0 has none")]
    {
        let mut list = four("z");
        list[without].as_object_mut().unwrap().remove("private_info");
        if without == 0 {
            for name in [eqben::PRIVATE_INFO_FILE, eqben::PRIVATE_INDEX_FILE] {
                std::fs::write(dir.path().join("eqben_ann").join(name), "[]").unwrap();
            }
        }
        write_list(dir.path(), serde_json::Value::from(list));
        let (suite, problems) = load();
        let text: Vec<String> = problems.messages().map(ToString::to_string).collect();
        assert!(text.len() == 1 && text[0].contains(expected), "{text:?}");
        assert!(suite.items.is_empty());
    }
}

/// The scorer's two files must hold one info per entry of the list; which sizes differ is
/// named once the list's length is known.
#[test]
fn scorer_files_of_another_length_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    eqben_release(dir.path(), &[("eqbensd", 2)], false, false);
    let path = dir.path().join(eqben::ANNOTATION_FILE);
    let list: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::write(&path, serde_json::Value::from(list[..7].to_vec()).to_string()).unwrap();
    let err = find("eqben").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains("7 entries, but") && err.to_string().contains("has 8"), "{err}");
}
