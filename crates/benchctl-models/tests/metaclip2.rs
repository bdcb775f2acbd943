//! MetaCLIP 2 against its references on `metaclip2-tiny` (`scripts/fixtures/gen_metaclip2_fixture.py`):
//! the authors' captions as open_clip's `HFTokenizer` prepares them for the worldwide configs,
//! `transformers`' as its tokenizer does, `MetaClip2Model`'s features and logits for both
//! within 1e-4 in f32 (pooled at the first `</s>`, not at the largest id), and
//! `CLIPImageProcessorPil`'s pixels.

use benchctl_models::hub;
use benchctl_models::models::metaclip2;
use benchctl_models::registry::{self, TextPrep};
use benchctl_models::DualEncoder;
use benchctl_testkit::{fixture_expected, fixture_model, json_id_rows, json_numbers, test_device, workspace_root};
use candle_core::{DType, Tensor};

const TOLERANCE: f64 = 1e-4;

fn max_diff(ours: &Tensor, theirs: &serde_json::Value) -> f64 {
    let ours = ours.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let theirs = json_numbers(theirs);
    assert_eq!(ours.len(), theirs.len());
    ours.iter().zip(&theirs).map(|(&a, &b)| (f64::from(a) - b).abs()).fold(0.0, f64::max)
}

#[test]
fn both_preparations_tokenise_and_score_as_their_references() {
    let e = fixture_expected("metaclip2-tiny");
    let files = hub::from_dir(&fixture_model("metaclip2-tiny")).unwrap();
    assert_eq!(registry::architecture_of(&files).unwrap().name(), "metaclip2");
    let texts: Vec<&str> = e["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let context = e["context"].as_u64().unwrap() as usize;
    let mut encoded = Vec::new();
    for prep in TextPrep::ALL {
        let model = metaclip2::load(&files, prep, DType::F32, &test_device()).unwrap();
        let reference = &e[prep.name()];
        let ours: Vec<Vec<u32>> = texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
        let theirs = json_id_rows(&reference["input_ids"]);
        for ((text, ours), theirs) in texts.iter().zip(&ours).zip(&theirs) {
            // open_clip pads with <pad> (1) to the context; the ids up to </s> are the text's.
            assert_eq!(ours[..], theirs[..ours.len()], "{prep:?}: ids of {text:?}");
            assert!(theirs[ours.len()..].iter().all(|&id| id == 1), "{prep:?}: only padding after {text:?}");
        }
        assert_eq!(ours.last().unwrap().len(), context, "the long caption fills the context");
        assert_eq!(*ours.last().unwrap().last().unwrap(), 2, "and keeps </s>");

        let image = image::open(workspace_root().join(e["image"].as_str().unwrap())).unwrap().to_rgb8();
        let p = model.preprocessor();
        let pixels = Tensor::from_vec(p.apply(&image), (1, 3, p.size, p.size), &test_device()).unwrap();
        assert!(max_diff(&pixels, &e["pixel_values"]) <= 1e-6);
        let d = max_diff(&model.model().image_features(&pixels).unwrap(), &e["image_embeds"]);
        assert!(d <= TOLERANCE, "image features differ by {d}");
        let d = max_diff(&model.model().text_features(&ours).unwrap(), &reference["text_embeds"]);
        assert!(d <= TOLERANCE, "{prep:?}: text features differ by {d}");
        let images = model.encode_images(&pixels).unwrap().unsqueeze(0).unwrap();
        let texts = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let d = max_diff(&model.scores(&images, &texts).unwrap(), &reference["logits_per_image"]);
        assert!(d <= TOLERANCE, "{prep:?}: logits differ by {d}");
        encoded.push(ours);
    }
    // ftfy and the HTML unescaping are what set the authors' captions apart here.
    let differ: Vec<&str> =
        texts.iter().zip(encoded[0].iter().zip(&encoded[1])).filter(|(_, (a, b))| a != b).map(|(t, _)| *t).collect();
    assert_eq!(differ, ["fish &amp; chips &lt;3", "mojibake: cafÃ© and naÃ¯ve"]);
}

/// A config whose `eos_token_id` is not the tokenizer's `</s>` would pool at the wrong place:
/// refused naming both files.
#[test]
fn an_end_token_the_tokenizer_does_not_have_is_refused() {
    let source = fixture_model("metaclip2-tiny");
    let dir = tempfile::tempdir().unwrap();
    for name in ["model.safetensors", "tokenizer.json", "preprocessor_config.json"] {
        std::fs::copy(source.join(name), dir.path().join(name)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap()).unwrap();
    config["text_config"]["eos_token_id"] = 5.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let err = metaclip2::load(&files, TextPrep::Authors, DType::F32, &test_device()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("eos_token_id 5") && message.contains("tokenizer.json"), "{message}");
}

/// bf16 and f16 beside `MetaClip2Model`'s f32 logits (the authors' captions): bounded, and printed.
#[test]
fn half_precision_drift_is_reported_and_bounded() {
    let e = fixture_expected("metaclip2-tiny");
    let files = hub::from_dir(&fixture_model("metaclip2-tiny")).unwrap();
    let texts: Vec<&str> = e["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let image = image::open(workspace_root().join(e["image"].as_str().unwrap())).unwrap().to_rgb8();
    for (dtype, bound) in [(DType::BF16, 0.25), (DType::F16, 0.05)] {
        let model = metaclip2::load(&files, TextPrep::Authors, dtype, &test_device()).unwrap();
        let p = model.preprocessor();
        let pixels = Tensor::from_vec(p.apply(&image), (1, 3, p.size, p.size), &test_device()).unwrap();
        let images = model.encode_images(&pixels.to_dtype(dtype).unwrap()).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let d = max_diff(&model.scores(&images, &encoded).unwrap(), &e["authors"]["logits_per_image"]);
        eprintln!("metaclip2-tiny {dtype:?}: max abs logit drift {d}");
        assert!(d < bound, "{dtype:?} drifts by {d}");
    }
}
