//! `benchctl check` reports every problem of a suite's data at once.

mod common;

use benchctl_suites::spec;
use common::{benchctl, copy_tree, demo_suite, stderr, stdout, tiny_model};

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

/// `benchctl suites` says, suite by suite, what this machine has: nothing (with how to get
/// it), annotations without some images (how many, one named), or everything.
#[test]
fn suites_say_what_data_is_here_and_what_is_missing() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), &root.path().join("winoground"));
    let sugarcrepe =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchctl-suites/tests/fixtures/manifests/sugarcrepe");
    copy_tree(&sugarcrepe, &root.path().join("sugarcrepe"));
    let removed = root.path().join("sugarcrepe/val2017/000000390007.jpg");
    std::fs::remove_file(&removed).unwrap();
    std::fs::create_dir(root.path().join("spec")).unwrap();

    let out = benchctl(&["suites", "--data-root", root.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listing = stdout(&out);
    let data_of = |id: &str| suite_rows(&listing).remove(id).unwrap_or_else(|| panic!("no {id} in {listing}")).1;
    let winoground = data_of("winoground");
    assert!(
        winoground.starts_with("data: ready: 8 items (the official release has 400), all 16 images"),
        "{winoground}"
    );
    // The images the seven files name, each once.
    let mut named = std::collections::BTreeSet::new();
    for file in std::fs::read_dir(&sugarcrepe).unwrap().flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && name != "scores.json" && name != "official.json" {
            let records: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(file.path()).unwrap()).unwrap();
            named.extend(records.as_object().unwrap().values().map(|r| r["filename"].as_str().unwrap().to_string()));
        }
    }
    let sugarcrepe = data_of("sugarcrepe");
    let expected = format!(
        "data: annotations only: 31 items (the official release has 7511), 1 of {} images missing",
        named.len()
    );
    assert!(sugarcrepe.starts_with(&expected), "{sugarcrepe}");
    assert!(sugarcrepe.contains("000000390007.jpg") && sugarcrepe.contains("RAIVNLab/sugar-crepe"), "{sugarcrepe}");
    let spec = data_of("spec");
    assert!(spec.starts_with("data: no readable annotations in") && spec.contains("wjpoom/SPEC"), "{spec}");
    let eqben = data_of("eqben");
    assert!(eqben.starts_with("data: not here") && eqben.contains("Wangt-CN/EqBen"), "{eqben}");
    // Each suite's official submission file, after its data.
    for format in ["eqben-npy", "naturalbench-outputs", "vismin-csv"] {
        assert!(listing.contains(&format!("submission: {format} (written beside each run")), "{format}: {listing}");
    }
}

/// Every bundled manifest is listed by `benchctl suites` with what is missing and how its
/// release is obtained (the manifest's `how_to_get`, from each benchmark's README).
#[test]
fn suites_list_every_bundled_manifest_with_how_to_get_it() {
    let root = tempfile::tempdir().unwrap();
    let out = benchctl(&["suites", "--data-root", root.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listing = stdout(&out);
    let rows = suite_rows(&listing);
    for info in benchctl_suites::manifest::bundled_suites() {
        let (_, data) = rows.get(&*info.id).unwrap_or_else(|| panic!("{} is not listed: {listing}", info.id));
        assert!(data.starts_with("data: not here"), "{}: {data}", info.id);
        assert!(!info.how_to_get.is_empty() && data.contains(&*info.how_to_get), "{}: {data}", info.id);
    }
}

/// SugarCrepe laid out as its own README suggests (the seven JSON files here, COCO's val2017
/// elsewhere): `check` and `eval` name the missing image folder once, with how many images
/// it was to hold, instead of a line per image.
#[test]
fn a_missing_image_folder_is_one_line() {
    let data = tempfile::tempdir().unwrap();
    let sugarcrepe =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchctl-suites/tests/fixtures/manifests/sugarcrepe");
    copy_tree(&sugarcrepe, data.path());
    std::fs::remove_dir_all(data.path().join("val2017")).unwrap();
    let out = benchctl(&["check", "--suite", "sugarcrepe", "--data-dir", data.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stdout(&out) + &stderr(&out);
    let folder = data.path().join("val2017");
    let line = format!("find the image folder {}: it does not exist", folder.display());
    assert_eq!(text.matches(&line).count(), 1, "{text}");
    assert!(!text.contains("read image"), "no per-image line: {text}");
    let eval = benchctl(
        &["eval", "--model-path", &tiny_model(), "--suite", "sugarcrepe", "--data-dir", data.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(eval.status.code(), Some(3));
    assert!(stderr(&eval).contains(&line), "{}", stderr(&eval));
}

/// A reader that went away is not an error and never a panic: `check` of data with problems,
/// its stdout and stderr closed before it writes (`2>&1 | head -1`), exits with the documented
/// data code, not 101.
#[test]
fn closed_output_streams_never_panic() {
    use std::process::{Command, Stdio};
    let data = tempfile::tempdir().unwrap();
    let sugarcrepe =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchctl-suites/tests/fixtures/manifests/sugarcrepe");
    copy_tree(&sugarcrepe, data.path());
    std::fs::remove_dir_all(data.path().join("val2017")).unwrap();
    for args in [
        vec!["check", "--suite", "sugarcrepe", "--data-dir", data.path().to_str().unwrap()],
        vec![
            "eval",
            "--suite",
            "sugarcrepe",
            "--model-path",
            "/nonexistent/model",
            "--data-dir",
            data.path().to_str().unwrap(),
        ],
        vec!["suites"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_benchctl"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Both readers gone before anything is written.
        drop(child.stdout.take());
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_ne!(status.code(), Some(101), "{args:?} panicked");
        assert!(matches!(status.code(), Some(0..=9)), "{args:?}: {status:?}");
    }
}

/// `benchctl suites`' table (rows on one line each, as without a terminal): each suite's id with
/// its description and its `data: …` line.
fn suite_rows(listing: &str) -> std::collections::HashMap<String, (String, String)> {
    let mut rows = std::collections::HashMap::new();
    let mut current: Option<(String, String)> = None;
    for line in listing.lines().filter(|l| l.starts_with('│')) {
        let mut cells = line.trim_matches('│').split('┆').map(str::trim);
        let (id, text) = (cells.next().unwrap_or_default(), cells.next().unwrap_or_default());
        if !id.is_empty() && id != "suite" {
            current = Some((id.to_string(), text.to_string()));
        } else if let (Some((id, description)), true) = (current.take(), text.starts_with("data:")) {
            rows.insert(id, (description, text.to_string()));
        }
    }
    rows
}

/// Each bundled hub release in its full size (every row of the release, its layout and
/// features, written by `datasets`; one 1-pixel image: `scripts/fixtures/gen_full_layout_fixtures.py`)
/// gives exactly the release's official item count: `check` passes it without a problem.
#[test]
fn full_hub_releases_give_their_official_item_counts() {
    let root = benchctl_testkit::workspace_root().join("crates/benchctl/tests/fixtures/full-releases");
    for (suite, items) in [("bivlc", 2933), ("colorswap", 1000), ("naturalbench", 1900), ("vismin", 2084)] {
        let expected = benchctl_suites::find(suite).unwrap().expected_items;
        assert_eq!(expected, Some(items), "{suite}'s manifest");
        let data = root.join(suite);
        let out = benchctl(&["check", "--suite", suite, "--data-dir", data.to_str().unwrap()], &[]);
        let report = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{suite}: {report}{}", stderr(&out));
        assert!(report.contains(&format!("{items} items, {} images, 0 problem(s)", 2 * items)), "{suite}: {report}");
    }
}

/// ImageCoDe's validation split at its full size in its official layout (1,039 image sets of 10
/// frames, 2,302 descriptions: 430 of static sets and 1,872 of video sets, as its
/// `valid_data.json` counts them), made here with one small JPEG linked as every frame: `check`
/// gives the official item count without a problem.
#[test]
fn imagecode_at_full_size_gives_its_official_item_count() {
    let dir = tempfile::tempdir().unwrap();
    let frame = benchctl_testkit::workspace_root()
        .join("crates/benchctl-suites/tests/fixtures/imagecode/image-sets/YouCook-video0037-shot3_0/img4.jpg");
    // Static: 143 sets of 3 descriptions and 1 of 1 (430); video: 82 sets of 3 and 813 of 2
    // (1,872); 1,039 sets in all.
    let mut sets: Vec<(String, usize)> = Vec::new();
    sets.extend((0..143).map(|i| (format!("open-images-{i}_aaaa"), 3)));
    sets.push(("open-images-999_bbbb".into(), 1));
    sets.extend((0..82).map(|i| (format!("MSR-VTT-videoTestVideo_video{i}-shot1_0"), 3)));
    sets.extend((0..813).map(|i| (format!("YouCook-video{i:04}-shot1_0"), 2)));
    let mut descriptions = serde_json::Map::new();
    for (name, count) in &sets {
        let folder = dir.path().join("image-sets").join(name);
        std::fs::create_dir_all(&folder).unwrap();
        for j in 0..10 {
            let target = folder.join(format!("img{j}.jpg"));
            std::fs::hard_link(&frame, &target).or_else(|_| std::fs::copy(&frame, &target).map(|_| ())).unwrap();
        }
        let entries: serde_json::Map<String, serde_json::Value> =
            (0..*count).map(|t| (t.to_string(), format!("description {t} of {name}").into())).collect();
        descriptions.insert(name.clone(), entries.into());
    }
    std::fs::write(dir.path().join("valid_data.json"), serde_json::Value::Object(descriptions).to_string()).unwrap();
    let out = benchctl(&["check", "--suite", "imagecode", "--data-dir", dir.path().to_str().unwrap()], &[]);
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{report}{}", stderr(&out));
    assert!(report.contains("2302 items, 10390 images, 0 problem(s)"), "{report}");
}
