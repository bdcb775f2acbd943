//! Preprocessing parity with OpenAI CLIP's torchvision/PIL pipeline.

use benchctl_models::preprocess::Preprocessor;
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
    let expected = candle_core::safetensors::load(model_fixture("preprocess/expected.safetensors"), &Device::Cpu).unwrap();
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
    let expected = candle_core::safetensors::load(model_fixture("preprocess/square_resize.safetensors"), &Device::Cpu).unwrap();
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
