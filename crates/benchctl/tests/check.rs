//! `benchctl check` reports every problem of a suite's data at once.

mod common;

use benchctl_suites::spec;
use common::{benchctl, copy_tree, demo_suite, stderr, stdout};

#[test]
fn every_problem_is_listed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), dir.path());
    let jsonl = dir.path().join("examples.jsonl");
    let mut text = std::fs::read_to_string(&jsonl).unwrap();
    text.push_str("{\"id\": 8, \"caption_0\": \"x\"}\n");
    std::fs::write(&jsonl, text).unwrap();
    std::fs::remove_file(dir.path().join("images/ex_2_img_0.png")).unwrap();
    std::fs::write(dir.path().join("images/ex_6_img_1.png"), b"\x89PNG broken").unwrap();

    let out = benchctl(&["check", "--suite", "winoground", "--data-dir", dir.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(report.contains("8 items, 16 images, 4 problem(s)"), "{report}");
    for needle in ["examples.jsonl line 9", "ex_2_img_0.png", "ex_6_img_1.png", "the official release has 400 items"] {
        assert!(report.contains(needle), "expected {needle:?} in {report}");
    }
    assert!(stderr(&out).contains("4 problem(s), listed above"));
}

#[test]
fn clean_data_passes() {
    let dir = tempfile::tempdir().unwrap();
    benchctl_testkit::spec_layout(dir.path(), &spec::SUBSETS, 2);
    let out = benchctl(&["check", "--suite", "spec", "--data-dir", dir.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("24 items") && stdout(&out).contains("0 problem(s)"), "{}", stdout(&out));
}

#[test]
fn a_retrieval_suite_is_checked_too() {
    let dir = tempfile::tempdir().unwrap();
    benchctl_testkit::rococo_layout(dir.path(), 6);
    std::fs::remove_file(dir.path().join("images/val2014/COCO_val2014_000000000102.jpg")).unwrap();
    let out = benchctl(&["check", "--suite", "rococo", "--data-dir", dir.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3));
    let report = stdout(&out);
    assert!(report.contains("6 items, 6 images, 2 problem(s)"), "{report}");
    assert!(
        report.contains("COCO_val2014_000000000102.jpg") && report.contains("official release has 5000"),
        "{report}"
    );
}

/// `check` decodes every image as `eval` does, so the hostile images `eval` refuses are
/// listed, not passed: a truncated PNG, a 1 × 1,000,000 PNG (3.9 KB, whose resize would
/// have needed 7 GB) and a 1 × 10,000 one.
#[test]
fn images_eval_refuses_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), dir.path());
    let truncated = dir.path().join("images/ex_1_img_0.png");
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    image::GrayImage::new(1, 1_000_000).save(dir.path().join("images/ex_3_img_1.png")).unwrap();
    // The second input: 1 × 10,000 (resized to 224 × 2,240,000 it peaked at 1.6 GB).
    image::GrayImage::new(1, 10_000).save(dir.path().join("images/ex_5_img_0.png")).unwrap();
    let out = benchctl(&["check", "--suite", "winoground", "--data-dir", dir.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(report.contains("4 problem(s)"), "{report}"); // and the 8-item demo is not the full release
    for image in ["ex_1_img_0.png", "ex_3_img_1.png", "ex_5_img_0.png"] {
        assert!(report.contains(image), "{image}: {report}");
    }
}
