//! RoCOCO: the real annotations, and the altered images' determinism.

use benchctl_suites::rococo::{self, altered};
use benchctl_testkit::{generated_image, shared};

#[test]
fn loads_the_real_test_split_and_caption_sets() {
    let Some(dir) = shared("datasets/rococo") else { return };
    let data = rococo::load(&dir).unwrap();
    assert_eq!(data.images.len(), 5000);
    assert!(data.images[0].ends_with("images/val2014/COCO_val2014_000000391895.jpg"));
    assert_eq!(data.clean.captions.len(), 25_010);
    assert!(data.clean.altered.iter().all(|a| !a));
    assert_eq!(data.caption_sets.len(), 4);
    for set in &data.caption_sets {
        assert_eq!(set.captions.len(), 50_010, "{}", set.name);
        assert_eq!(set.altered.iter().filter(|a| **a).count(), 25_000, "{}", set.name);
        // Every image keeps its originals, and its altered captions point back to it.
        assert_eq!(set.image_of.iter().copied().max(), Some(4999));
    }
    // The first record: five originals, then the altered ones.
    let same = &data.caption_sets[1];
    assert_eq!(same.name, "same_concept");
    assert_eq!(&same.captions[..5], &data.clean.captions[..5]);
    assert!(same.altered[5] && same.image_of[5] == 0);
}

#[test]
fn a_set_that_does_not_repeat_the_test_split_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let ann = dir.path().join("annotations");
    std::fs::create_dir_all(&ann).unwrap();
    let test = serde_json::json!([{"image": "val2014/a.jpg", "caption": ["a dog", "a brown dog"]}]);
    std::fs::write(ann.join("coco_karpathy_test.json"), test.to_string()).unwrap();
    for set in rococo::CAPTION_SETS {
        let record = serde_json::json!([{"image": "val2014/a.jpg", "caption": ["a dog", "a brown dog", "a dig", "a brown dig"]}]);
        std::fs::write(ann.join(format!("{set}.json")), record.to_string()).unwrap();
    }
    let data = rococo::load(dir.path()).unwrap();
    assert_eq!(data.caption_sets[3].altered, [false, false, true, true]);
    std::fs::write(ann.join("danger.json"), r#"[{"image": "val2014/b.jpg", "caption": ["a dog", "a brown dog"]}]"#)
        .unwrap();
    let err = rococo::load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("danger.json record 0: its image and first 2 captions must repeat"), "{err}");
}

#[test]
fn altered_images_are_bit_identical_for_a_seed() {
    let images: Vec<_> = (0..6).map(|i| generated_image(i, 40 + i as u32, 30)).collect();
    for method in [altered::Method::Mix, altered::Method::Patch] {
        for lambda in [900, 800] {
            let a = altered::gallery(6, method, lambda, 1).unwrap();
            let b = altered::gallery(6, method, lambda, 1).unwrap();
            assert_eq!(a, b);
            for spec in &a {
                assert_ne!(spec.base, spec.other, "an image is never mixed with itself");
                let first = altered::render(spec, &images[spec.base], &images[spec.other]);
                let again = altered::render(spec, &images[spec.base], &images[spec.other]);
                assert_eq!(first.as_raw(), again.as_raw());
                assert_eq!(first.dimensions(), images[spec.base].dimensions());
            }
        }
    }
    // Another seed draws other partners.
    let partners = |seed| {
        altered::gallery(100, altered::Method::Mix, 900, seed).unwrap().iter().map(|s| s.other).collect::<Vec<_>>()
    };
    assert_ne!(partners(0), partners(1));
    assert!(altered::gallery(1, altered::Method::Mix, 900, 0).is_err());
}

#[test]
fn mix_and_patch_follow_their_definitions() {
    let white = image::RgbImage::from_pixel(20, 10, image::Rgb([255, 255, 255]));
    let black = image::RgbImage::from_pixel(20, 10, image::Rgb([0, 0, 0]));
    let mix = altered::AlteredImage { base: 0, other: 1, method: altered::Method::Mix, lambda_milli: 800, draw: 7 };
    // 0.8 · 255 = 204.
    assert!(altered::render(&mix, &white, &black).pixels().all(|p| p.0 == [204, 204, 204]));
    let patch = altered::AlteredImage { method: altered::Method::Patch, lambda_milli: 750, ..mix };
    let out = altered::render(&patch, &white, &black);
    // Sides × √0.25 = ½: a 10 × 5 black rectangle, a quarter of the image.
    assert_eq!(out.pixels().filter(|p| p.0 == [0, 0, 0]).count(), 50);
}

/// BLIP's `pre_caption`, as its own code computes it (`scripts/fixtures/gen_pre_caption_fixture.py`
/// runs the function from RoCOCO's copy of BLIP): punctuation, whitespace runs, Unicode
/// lower-casing, truncation to 30 (and 5) words.
#[test]
fn pre_caption_matches_blips_own_function() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blip_pre_caption.json");
    let cases: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(cases.len(), 20);
    for case in cases {
        let (caption, max_words) = (case["caption"].as_str().unwrap(), case["max_words"].as_u64().unwrap() as usize);
        assert_eq!(
            rococo::pre_caption(caption, max_words),
            case["expected"].as_str().unwrap(),
            "{caption:?} ({max_words} words)"
        );
    }
}

/// `mix_images.py` saves under `<data_path>/<method>_<str(lam)>/`.
#[test]
fn release_folders_are_named_as_mix_images_names_them() {
    use benchctl_suites::rococo::altered::Method;
    assert_eq!(rococo::python_float(900), "0.9");
    assert_eq!(rococo::python_float(850), "0.85");
    assert_eq!(rococo::python_float(1000), "1.0");
    assert_eq!(rococo::python_float(5), "0.005");
    assert_eq!(
        rococo::release_folder(std::path::Path::new("images"), Method::Patch, 800),
        std::path::Path::new("images/patch_0.8")
    );
}
