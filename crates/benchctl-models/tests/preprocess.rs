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
/// (`scripts/fixtures/gen_hf_preprocess_fixture.py`): CLIP's floor crop offset (the 224-px photos here
/// have odd margins, where torchvision's rounding differs), a shortest edge larger than the
/// crop, other rescale factors and constants, SigLIP's and BLIP's squares; greyscale, RGBA
/// and palette PNGs converted to RGB first.
#[test]
fn hf_layout_follows_transformers_image_processors() {
    let dir = model_fixture("preprocess-hf");
    let expected = candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let expected: std::collections::HashMap<_, _> =
        expected.into_iter().filter(|(key, _)| !key.starts_with("processor/")).collect();
    assert_eq!(expected.len(), 36);
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
    // An RGB PNG with one transparent colour is RGB to Pillow, and that colour turns white.
    let keyed = benchctl_suites::ImageSource::File(dir.join("rgbt_88x61.png")).load_pil().unwrap();
    assert!(matches!(keyed, benchctl_suites::PilImage::Keyed { key: [40, 200, 90], .. }), "{keyed:?}");
    let (max, _) = diffs(
        &prep.apply(&keyed.to_rgb()),
        &expected["siglip32/rgbt_88x61"].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
    );
    assert!(max > 0.1, "the transparent colour's pixels are white ({max})");
}

/// A CLIP processor saved by transformers 5 holds its image settings only in
/// `processor_config.json` (section `image_processor`): read from there, every image of the
/// fixture preprocesses as `AutoProcessor` loaded from that save does.
#[test]
fn a_processor_config_saved_by_transformers_5_is_read() {
    let dir = model_fixture("preprocess-hf");
    let expected = candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let prep =
        Preprocessor::from_hf_config(&dir.join("processor-config/processor_config.json"), &Preprocessor::hf_clip(224))
            .unwrap();
    assert_eq!((prep.size, prep.mean), (37, [0.3, 0.5, 0.7]));
    let mut seen = 0;
    for (key, tensor) in expected.iter().filter(|(key, _)| key.starts_with("processor/")) {
        let name = key.trim_start_matches("processor/");
        let img = benchctl_suites::ImageSource::File(dir.join(format!("{name}.png"))).load_pil().unwrap();
        let (max, _) = diffs(&pil_preprocess(&prep, &img), &tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert!(max <= 1e-6, "{key}: max abs diff {max}");
        seen += 1;
    }
    assert_eq!(seen, 11, "every fixture image");
}

/// OpenAI / OpenCLIP checkpoints are preprocessed as open_clip's eval transform does it on a
/// PIL image as opened (`scripts/fixtures/gen_openclip_preprocess_fixture.py`): resize and crop in the
/// image's own mode, then `convert("RGB")`. RGBA and LA are resized premultiplied by alpha,
/// palette (with and without transparency) and 1-bit images nearest-neighbour, 16-bit
/// greyscale in 16 bits and then clipped, a transparent colour of RGB and grey ignored; odd
/// and even crop margins, upscales.
#[test]
fn openai_and_openclip_follow_open_clips_transform_on_every_pil_mode() {
    let dir = model_fixture("preprocess-openclip");
    let expected = candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    assert_eq!(expected.len(), 32);
    let mut modes = std::collections::HashSet::new();
    for (key, tensor) in expected.iter().filter(|(key, _)| !key.starts_with("squash/")) {
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
        let converted_alike =
            matches!(img, benchctl_suites::PilImage::Rgb(_) | benchctl_suites::PilImage::Keyed { .. });
        if !converted_alike && img.dimensions() != (size, size) {
            let (before, _) = diffs(&prep.apply(&img.to_rgb()), &reference);
            assert!(before > 1e-3, "{key}: converting first should differ ({before})");
        }
    }
    assert_eq!(modes.len(), 5, "RGB, RGB with a transparent colour, RGBA, palette and 16-bit images are all covered");
}

/// `preprocess_cfg.resize_mode = "squash"` (Apple's DFN-5B checkpoints) as open_clip's eval
/// transform does it (both sides resized, no crop), on the same images of every PIL mode as
/// above (`scripts/fixtures/gen_openclip_preprocess_fixture.py`), through the preprocessor the
/// OpenCLIP loader builds from that setting.
#[test]
fn openclip_squash_follows_open_clips_transform_on_every_pil_mode() {
    let dir = model_fixture("preprocess-openclip");
    let expected = candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let squash =
        benchctl_models::models::clip_openai::OpenClipPreprocess { resize_mode: "squash".into(), ..Default::default() };
    let mut seen = 0;
    for (key, tensor) in expected.iter().filter_map(|(key, t)| Some((key.strip_prefix("squash/")?, t))) {
        let (size, name) = key.split_once('/').unwrap();
        let prep = squash.preprocessor(size.parse().unwrap());
        let img = benchctl_suites::ImageSource::File(dir.join(format!("{name}.png"))).load_pil().unwrap();
        let reference = tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (max, _) = diffs(&pil_preprocess(&prep, &img), &reference);
        assert!(max <= 1e-6, "squash/{key}: max abs diff {max}");
        seen += 1;
    }
    assert_eq!(seen, 16, "every image squashed");
}

/// An image through `prep` by the mode PIL holds it in, as the runner dispatches it.
fn pil_preprocess(prep: &Preprocessor, image: &benchctl_suites::PilImage) -> Vec<f32> {
    let mut out = vec![0.0; prep.len()];
    prep.apply_pil(image, &mut out);
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
    refuse(r#"{"resample": 1}"#, "resample");
    refuse(r#"{"resample": "bilinear"}"#, "resample");
    refuse(r#"{"do_resize": false}"#, "do_resize");
    refuse(r#"{"image_std": [0.5, 0, 0.5]}"#, "image_std");
    refuse(r#"{"size": {"height": 224, "width": 200}}"#, "size");
    refuse(r#"{"rescale_factor": "x"}"#, "rescale_factor");
}

/// The JPEG fixture's manifest (scripts/fixtures/gen_jpeg_fixture.py): each file's mode and size as
/// `Image.open` gives them, and which file's Pillow decode it shares.
fn jpeg_fixture() -> Vec<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(model_fixture("preprocess-jpeg/manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(manifest["pillow"], "13.0.0", "the bound below was measured against this Pillow");
    manifest["files"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The most any channel of a pixel benchctl decodes from a JPEG may differ from Pillow's
/// (libjpeg-turbo's) decode, and the most the mean absolute difference may be, in 8-bit
/// levels (docs/models.md, "Decoding"): none with libjpeg-turbo itself (the `libjpeg-turbo`
/// feature), a few levels with zune-jpeg.
const EXACT: bool = matches!(benchctl_suites::image::JPEG_DECODER.as_bytes(), b"libjpeg-turbo");
const JPEG_MAX_LEVELS: u8 = if EXACT { 0 } else { 4 };
const JPEG_MEAN_LEVELS: f64 = if EXACT { 0.0 } else { 0.25 };

/// Max and mean absolute difference of two RGB8 buffers, and the share of values that differ.
fn level_diffs(ours: &[u8], pillow: &[u8]) -> (u8, f64, f64) {
    assert_eq!(ours.len(), pillow.len());
    let diff = |(a, b): (&u8, &u8)| a.abs_diff(*b);
    let max = ours.iter().zip(pillow).map(diff).max().unwrap_or(0);
    let sum: u64 = ours.iter().zip(pillow).map(|p| u64::from(diff(p))).sum();
    let differing = ours.iter().zip(pillow).filter(|(a, b)| a != b).count();
    (max, sum as f64 / ours.len() as f64, differing as f64 / ours.len() as f64)
}

/// benchctl decodes every layout of the fixture (baseline 4:2:0, 4:2:2 and 4:4:4,
/// progressive, restart markers, greyscale, Adobe CMYK, an EXIF-rotated file) to the size and
/// mode `Image.open` gives, within the stated bound of Pillow's pixels; and the CLIP crop made
/// from its decode is within the same bound of `CLIPImageProcessorPil`'s crop of Pillow's.
#[test]
// With libjpeg-turbo the bound is 0 levels: `max <= 0` is the exactness asked there.
#[allow(clippy::absurd_extreme_comparisons)]
fn jpegs_decode_within_the_stated_bound_of_pillow() {
    let prep = Preprocessor::hf_clip(224);
    for (name, entry) in jpeg_fixture() {
        let decoded_as = entry.get("decode_as").and_then(|v| v.as_str()).unwrap_or(&name).to_string();
        let pillow = image::open(model_fixture(&format!("preprocess-jpeg/{decoded_as}.pillow.png"))).unwrap().to_rgb8();
        let image = benchctl_suites::ImageSource::File(model_fixture(&format!("preprocess-jpeg/{name}.jpg")))
            .load_pil()
            .unwrap();
        let mode = entry["mode"].as_str().unwrap();
        match (&image, mode) {
            (benchctl_suites::PilImage::Rgb(_), "RGB" | "L") | (benchctl_suites::PilImage::Cmyk(_), "CMYK") => {}
            (other, mode) => panic!("{name}: Pillow opens it as {mode}, benchctl as {other:?}"),
        }
        let size = (entry["size"][0].as_u64().unwrap() as u32, entry["size"][1].as_u64().unwrap() as u32);
        assert_eq!(image.dimensions(), size, "{name}: Image.open's size");
        let ours = image.to_rgb();
        let (max, mean, share) = level_diffs(ours.as_raw(), pillow.as_raw());
        eprintln!("{name}: decode max {max} mean {mean:.3} differing {:.1}%", share * 100.0);
        assert!(max <= JPEG_MAX_LEVELS && mean <= JPEG_MEAN_LEVELS, "{name}: decode max {max}, mean {mean:.3}");

        let clip = image::open(model_fixture(&format!("preprocess-jpeg/{decoded_as}.clip224.png"))).unwrap().to_rgb8();
        // From Pillow's own decode the resize is transformers' to the bit, on every tier ...
        let (w, h) = (pillow.width() as usize, pillow.height() as usize);
        for tier in benchctl_cpu::Tier::available() {
            let ours = prep.resize_rgb_on(tier, pillow.as_raw(), w, h);
            assert!(ours == clip.as_raw()[..], "{name}: resize of Pillow's decode on {tier:?}");
        }
        // ... and from benchctl's decode within the decode's bound.
        let (max, mean, _) = level_diffs(&prep.resize_rgb(ours.as_raw(), w, h), clip.as_raw());
        eprintln!("{name}: crop max {max} mean {mean:.3}");
        assert!(max <= JPEG_MAX_LEVELS && mean <= JPEG_MEAN_LEVELS, "{name}: crop max {max}, mean {mean:.3}");
    }
}

/// The EXIF orientation is left as `Image.open` leaves it (the official evaluation scripts
/// open images with `Image.open(...).convert("RGB")`), not applied as
/// `transformers.image_utils.load_image` applies it.
#[test]
fn exif_orientation_is_left_as_image_open_leaves_it() {
    let files = jpeg_fixture();
    let (_, entry) = files.iter().find(|(name, _)| name == "exif-rotated").unwrap();
    let image =
        benchctl_suites::ImageSource::File(model_fixture("preprocess-jpeg/exif-rotated.jpg")).load_pil().unwrap();
    let (w, h) = image.dimensions();
    assert_eq!([u64::from(w), u64::from(h)], [entry["size"][0].as_u64().unwrap(), entry["size"][1].as_u64().unwrap()]);
    assert_eq!(
        [u64::from(h), u64::from(w)],
        [entry["load_image_size"][0].as_u64().unwrap(), entry["load_image_size"][1].as_u64().unwrap()],
        "load_image rotates the file a quarter turn"
    );
}

/// Qwen-VL images resized again by the image processor at its own pixel bounds after
/// `qwen_vl_utils` (`--min-pixels`, `--max-pixels`: NaturalBench's Qwen2.5-VL example), against
/// transformers' Pillow processor run so (`scripts/fixtures/gen_processor_pixels_fixture.py`):
/// the same sizes and the same 8-bit pixels, bit for bit after normalising, on every PIL mode
/// (a transparent colour made white between the two resizes), enlarged and shrunk; Qwen2.5-VL's
/// (patches of 14) and Qwen3-VL's (patches of 16, its mean and std).
#[test]
fn qwen_images_resized_again_at_the_processors_bounds_match_its_pillow_backend() {
    use benchctl_models::preprocess::{PixelBounds, Resize};
    use benchctl_models::vqascore::local::LocalVqa;
    let fixture = model_fixture("processor-pixels");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap()).unwrap();
    let files = |name: &str| benchctl_models::hub::from_dir(&model_fixture(name)).unwrap();
    let (f32, cpu) = (candle_core::DType::F32, Device::Cpu);
    let bounds = PixelBounds { min: 12_544, max: 15_680 };
    let qwen25 = benchctl_models::models::qwen25vl::load(&files("qwen25vl-tiny"), f32, &cpu).unwrap();
    let qwen25 = benchctl_models::FusionEncoder::preprocessor(&qwen25.with_processor_pixels(Some(bounds))).clone();
    let Resize::Native { processor, .. } = qwen25.resize else { panic!("a native resize: {:?}", qwen25.resize) };
    assert_eq!(processor, Some(bounds), "the model's preprocessing resizes again");
    let qwen3 = benchctl_models::models::qwen3vl::Qwen3VlVqa::load(&files("qwen3vl-tiny"), f32, &cpu).unwrap();
    let qwen3 = benchctl_models::FusionEncoder::preprocessor(&qwen3).clone();
    let cases = expected["cases"].as_array().unwrap();
    let mut resized_again = 0;
    for case in cases {
        let [min, max] = [0, 1].map(|i| case["bounds"][i].as_u64().unwrap() as usize);
        let mut prep = match case["family"].as_str().unwrap() {
            "qwen2.5-vl" => qwen25.clone(),
            _ => qwen3.clone(),
        };
        if let Resize::Native { processor, .. } = &mut prep.resize {
            *processor = Some(PixelBounds { min, max });
        }
        let path = benchctl_testkit::workspace_root().join(case["image"].as_str().unwrap());
        let image = benchctl_suites::ImageSource::File(path.clone()).load_pil().unwrap();
        let (w, h) = image.dimensions();
        let size = prep.output_size(w as usize, h as usize);
        let want = [0, 1].map(|i| case["resized"][i].as_u64().unwrap() as usize);
        assert_eq!([size.0, size.1], want, "{}", path.display());
        resized_again += usize::from(case["first"] != case["resized"]);
        let mut ours = vec![0.0; prep.len_for(w as usize, h as usize)];
        prep.apply_pil(&image, &mut ours);
        let pixels = image::open(fixture.join(case["expected"].as_str().unwrap())).unwrap().to_rgb8();
        let mut theirs = vec![0.0; ours.len()];
        prep.normalise_into(pixels.as_raw(), &mut theirs);
        let differing = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        assert_eq!(differing, 0, "{} at {min}–{max} pixels: {differing} values differ", path.display());
    }
    let qwen3_cases = cases.iter().filter(|c| c["family"] == "qwen3-vl").count();
    assert!(cases.len() >= 30 && qwen3_cases >= 10, "{} cases, {qwen3_cases} of Qwen3-VL", cases.len());
    assert!(resized_again + 2 >= cases.len(), "{resized_again} of {} resized again", cases.len());
}
