//! Preprocessing parity with OpenAI CLIP's torchvision/PIL pipeline.

use benchctl_models::preprocess::{Preprocessor, HALF, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD};
use benchctl_testkit::{model_fixture, shared};
use candle_core::Device;

fn diffs(ours: &[f32], expected: &[f32]) -> (f32, f32) {
    assert_eq!(ours.len(), expected.len());
    let max = ours.iter().zip(expected).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    let mean = ours.iter().zip(expected).map(|(a, b)| (a - b).abs()).sum::<f32>() / ours.len() as f32;
    (max, mean)
}

#[test]
fn generated_pngs_match_torchvision_exactly() {
    // Awkward sizes: downscales both ways, an odd crop offset, an upscale, a no-op resize.
    let expected =
        candle_core::safetensors::load(model_fixture("preprocess/expected.safetensors"), &Device::Cpu).unwrap();
    assert_eq!(expected.len(), 5);
    let prep = Preprocessor::openai_clip(224);
    for (name, tensor) in &expected {
        let img = image::open(model_fixture(&format!("preprocess/{name}.png"))).unwrap().to_rgb8();
        let ours = prep.apply(&img);
        let (max, _) = diffs(&ours, &tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        // Identical 8-bit pixels; only float rounding of the normalisation may differ.
        assert!(max < 1e-5, "{name}: max abs diff {max}");
    }
}

#[test]
fn square_stretch_matches_siglip_and_blip_image_processors() {
    // transformers' PIL processors: both sides resized (bicubic), no crop, then normalised.
    use benchctl_models::preprocess::{HALF, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD};
    let expected =
        candle_core::safetensors::load(model_fixture("preprocess/square_resize.safetensors"), &Device::Cpu).unwrap();
    assert_eq!(expected.len(), 6);
    for (key, tensor) in &expected {
        let (family, name) = key.split_once('/').unwrap();
        let prep = match family {
            "siglip" => Preprocessor::stretch(224, HALF, HALF),
            "blip" => Preprocessor::stretch(224, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
            other => panic!("unexpected fixture family {other}"),
        };
        let img = image::open(model_fixture(&format!("preprocess/{name}.png"))).unwrap().to_rgb8();
        let (max, _) = diffs(&prep.apply(&img), &tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert!(max < 1e-5, "{key}: max abs diff {max}");
    }
}

#[test]
fn the_reference_photo_matches_openai_preprocessing() {
    let Some(dir) = shared("reference/clip-preprocess") else { return };
    let bytes = std::fs::read(dir.join("expected_preprocessed_image.npy")).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.shape(), &[1, 3, 224, 224]);
    let expected: Vec<f32> = npy.into_vec().unwrap();
    let img = image::open(dir.join("franz-kafka.jpg")).unwrap().to_rgb8();
    let ours = Preprocessor::openai_clip(224).apply(&img);
    let (max, mean) = diffs(&ours, &expected);
    eprintln!("franz-kafka.jpg: max abs diff {max}, mean abs diff {mean}");
    assert!(max <= 0.02, "max abs diff {max}");
    assert!(mean <= 0.002, "mean abs diff {mean}");
}

/// Checkpoints in Hugging Face layout are preprocessed as `transformers`' PIL image
/// processors do it under their `preprocessor_config.json`
/// (`scripts/gen_hf_preprocess_fixture.py`): CLIP's floor crop offset (the 224-px photos here
/// have odd margins, where torchvision's rounding differs), a shortest edge larger than the
/// crop, other rescale factors and constants, SigLIP's and BLIP's squares; greyscale, RGBA
/// and palette PNGs converted to RGB first.
#[test]
fn hf_layout_follows_transformers_image_processors() {
    let dir = model_fixture("preprocess-hf");
    let expected = candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    assert_eq!(expected.len(), 33);
    let defaults = |config: &str| match config {
        c if c.starts_with("clip") => Preprocessor::hf_clip(224),
        c if c.starts_with("siglip") => Preprocessor::stretch(224, HALF, HALF),
        _ => Preprocessor::stretch(384, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
    };
    let mut worst = 0f32;
    for (key, tensor) in &expected {
        let (config, name) = key.split_once('/').unwrap();
        let prep = Preprocessor::from_hf_config(&dir.join(format!("{config}.json")), &defaults(config)).unwrap();
        // transformers' convert_to_rgb composites alpha onto white before resizing.
        let img = benchctl_suites::ImageSource::File(dir.join(format!("{name}.png"))).load_pil().unwrap();
        let (max, _) = diffs(&pil_preprocess(&prep, &img), &tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert!(max <= 1e-6, "{key}: max abs diff {max}");
        worst = worst.max(max);
    }
    eprintln!("largest difference to transformers over {} tensors: {worst:e}", expected.len());
    // torchvision's rounding of the crop offset differs where the margin halves to an odd
    // number and a half: 320×227 resizes to 315×224, margin 91, offset 45 (floor) vs 46.
    let img = image::open(dir.join("rgb_320x227.png")).unwrap().to_rgb8();
    let reference = expected["clip224/rgb_320x227"].flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let (max, _) = diffs(&Preprocessor::openai_clip(224).apply(&img), &reference);
    assert!(max > 1e-3, "an odd margin must tell the two crop rules apart ({max})");
    // Dropping the alpha instead of compositing it is visibly wrong on the RGBA image.
    let rgba = image::open(dir.join("rgba_71x130.png")).unwrap().to_rgb8();
    let prep = Preprocessor::from_hf_config(&dir.join("siglip32.json"), &defaults("siglip32")).unwrap();
    let (max, _) =
        diffs(&prep.apply(&rgba), &expected["siglip32/rgba_71x130"].flatten_all().unwrap().to_vec1::<f32>().unwrap());
    assert!(max > 0.1, "alpha compositing matters ({max})");
}

/// OpenAI / OpenCLIP checkpoints are preprocessed as open_clip's eval transform does it on a
/// PIL image as opened (`scripts/gen_openclip_preprocess_fixture.py`): resize and crop in the
/// image's own mode, then `convert("RGB")`. RGBA and LA are resized premultiplied by alpha,
/// palette (with and without transparency) and 1-bit images nearest-neighbour, 16-bit
/// greyscale in 16 bits and then clipped; odd and even crop margins, upscales.
#[test]
fn openai_and_openclip_follow_open_clips_transform_on_every_pil_mode() {
    let dir = model_fixture("preprocess-openclip");
    let expected = candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    assert_eq!(expected.len(), 14);
    let mut modes = std::collections::HashSet::new();
    for (key, tensor) in &expected {
        let (size, name) = key.split_once('/').unwrap();
        let prep = Preprocessor::openai_clip(size.parse().unwrap());
        let img = benchctl_suites::ImageSource::File(dir.join(format!("{name}.png"))).load_pil().unwrap();
        modes.insert(std::mem::discriminant(&img));
        let reference = tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (max, _) = diffs(&pil_preprocess(&prep, &img), &reference);
        assert!(max <= 1e-6, "{key}: max abs diff {max}");
        // Converting to RGB before resizing (the old order) is measurably wrong on each of
        // the modes that PIL resizes its own way (when there is a resize).
        let size: u32 = size.parse().unwrap();
        if !matches!(img, benchctl_suites::PilImage::Rgb(_)) && img.dimensions() != (size, size) {
            let (before, _) = diffs(&prep.apply(&img.to_rgb()), &reference);
            assert!(before > 1e-3, "{key}: converting first should differ ({before})");
        }
    }
    assert_eq!(modes.len(), 4, "RGB, RGBA, palette and 16-bit images are all covered");
}

/// An image through `prep` by the mode PIL holds it in, as the runner dispatches it.
fn pil_preprocess(prep: &Preprocessor, image: &benchctl_suites::PilImage) -> Vec<f32> {
    use benchctl_suites::PilImage;
    let mut out = vec![0.0; prep.len()];
    match image {
        PilImage::Rgb(rgb) => prep.apply_into(rgb, &mut out),
        PilImage::Rgba(rgba) => prep.apply_rgba(rgba, false, &mut out),
        PilImage::Palette(rgba) => prep.apply_rgba(rgba, true, &mut out),
        PilImage::Gray16(grey) => prep.apply_gray16(grey, &mut out),
    }
    out
}

#[test]
fn unsupported_processor_settings_are_refused_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let refuse = |json: &str, key: &str| {
        let path = dir.path().join("preprocessor_config.json");
        std::fs::write(&path, json).unwrap();
        let err = Preprocessor::from_hf_config(&path, &Preprocessor::hf_clip(224)).unwrap_err();
        assert!(err.to_string().contains(&format!("key `{key}`")), "{err}");
    };
    refuse(r#"{"resample": 2}"#, "resample");
    refuse(r#"{"do_resize": false}"#, "do_resize");
    refuse(r#"{"image_std": [0.5, 0, 0.5]}"#, "image_std");
    refuse(r#"{"size": {"height": 224, "width": 200}}"#, "size");
    refuse(r#"{"rescale_factor": "x"}"#, "rescale_factor");
}
