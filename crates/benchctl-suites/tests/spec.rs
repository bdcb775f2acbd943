//! The SPEC loader on fixtures in the official shape.

use benchctl_suites::{find, spec, ErrorKind};
use benchctl_testkit::spec_layout;

#[test]
fn loads_both_directions_of_every_subset() {
    let dir = tempfile::tempdir().unwrap();
    let (i2t, t2i) = spec_layout(dir.path(), &spec::SUBSETS, 5);
    let suite = find("spec").unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.len(), i2t + t2i);
    assert!(suite.missing_images().is_empty());
    let first = &suite.items.item(0);
    assert_eq!(first.id(), "absolute_size/i2t/0");
    assert_eq!((first.image_count(), first.text_count()), (1, 2));
    assert!(first.truth().is_match(0, 0));
    let t2i_item = suite.items.iter().find(|i| i.id() == "count/t2i/3").unwrap();
    // Subset 5, entry 3: 2 + (5 + 3) % 8 = 2 candidates; label (3 + 1) % 2 = 0.
    assert_eq!((t2i_item.image_count(), t2i_item.text_count()), (2, 1));
    assert!(t2i_item.truth().is_match(0, 0) && !t2i_item.truth().is_match(1, 0));
    let sizes: std::collections::BTreeSet<usize> =
        suite.items.iter().map(|i| i.image_count().max(i.text_count())).collect();
    assert_eq!(sizes.first(), Some(&2));
    assert_eq!(sizes.last(), Some(&9));
}

#[test]
fn bad_labels_and_missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    spec_layout(dir.path(), &spec::SUBSETS, 1);
    let path = dir.path().join("existence/text2image.json");
    std::fs::write(&path, r#"[{"query": "a cat", "keys": ["images/k_0_0.png", "images/k_0_1.png"], "label": 2}]"#)
        .unwrap();
    let err = find("spec").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(err.to_string().contains("existence/text2image.json entry 0: `label` 2"), "{err}");

    std::fs::remove_file(&path).unwrap();
    let err = find("spec").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingData);
    assert!(err.to_string().contains("existence/text2image.json"), "{err}");
}

/// SPEC ships one `data.zip`; unzipped, its subset folders may sit in a single wrapper folder
/// above them (what `zipfile.extractall` of the README's recipe gives).
#[test]
fn the_subsets_may_sit_in_the_folder_data_zip_unpacks_to() {
    let dir = tempfile::tempdir().unwrap();
    let (i2t, t2i) = spec_layout(&dir.path().join("data"), &spec::SUBSETS, 2);
    let suite = find("spec").unwrap().load(dir.path()).unwrap();
    assert_eq!(suite.items.len(), i2t + t2i);
    assert!(suite.missing_images().is_empty());
    assert!(suite.annotation_files[0].starts_with(dir.path().join("data/absolute_size")));

    // Two folders side by side are ambiguous: the first missing subset is named where expected.
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    let err = find("spec").unwrap().load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingData);
    assert!(err.to_string().contains(&dir.path().join("absolute_size").display().to_string()), "{err}");
}
