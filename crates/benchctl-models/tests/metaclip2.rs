//! MetaCLIP 2 against its references on `metaclip2-tiny` (XLM-V's kind of vocabulary) and
//! `metaclip2-mt5-tiny` (mT5's: no start token, `</s>` 1) from
//! `scripts/fixtures/gen_metaclip2_fixture.py`: the authors' captions as facebookresearch/MetaCLIP's
//! `get_tokenizer` prepares them (the tokenizer as written, no cleaning) and their pooling
//! (`WorldWideCLIP`: where `text == 2`; `mT5CLIP`: at `(text > 1).sum(-1)`), `transformers`'
//! tokenizer and `MetaClip2Model`'s features and logits, within 1e-4 in f32, and
//! `CLIPImageProcessorPil`'s pixels.

use benchctl_models::hub;
use benchctl_models::models::metaclip2;
use benchctl_models::registry::{self, TextPrep};
use benchctl_models::DualEncoder;
use benchctl_testkit::{
    fixture_expected, fixture_model, half_precision_bound, json_id_rows, max_abs_diff, test_device, workspace_root,
};
use candle_core::{DType, Tensor};

const TOLERANCE: f64 = 1e-4;

const FIXTURES: [&str; 2] = ["metaclip2-tiny", "metaclip2-mt5-tiny"];

#[test]
fn captions_tokenise_and_score_as_the_authors_and_transformers_do() {
    for name in FIXTURES {
        let e = fixture_expected(name);
        let files = hub::from_dir(&fixture_model(name)).unwrap();
        assert_eq!(registry::architecture_of(&files).unwrap().name(), "metaclip2");
        let texts: Vec<&str> = e["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        let context = e["context"].as_u64().unwrap() as usize;
        let [pad, eos] = ["pad", "eos"].map(|k| e["special_ids"][k].as_u64().unwrap() as u32);
        let model = metaclip2::load(&files, DType::F32, &test_device()).unwrap();
        let ours: Vec<Vec<u32>> = texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
        // The authors pad to the context; the ids up to </s> are the text's, and transformers'.
        let authors = json_id_rows(&e["authors"]["input_ids"]);
        assert_eq!(ours, json_id_rows(&e["transformers"]["input_ids"]), "{name}: transformers' ids");
        for ((text, ours), theirs) in texts.iter().zip(&ours).zip(&authors) {
            assert_eq!(ours[..], theirs[..ours.len()], "{name}: the authors' ids of {text:?}");
            assert!(theirs[ours.len()..].iter().all(|&id| id == pad), "{name}: only padding after {text:?}");
        }
        assert_eq!(ours.last().unwrap().len(), context, "{name}: the long caption fills the context");
        assert_eq!(*ours.last().unwrap().last().unwrap(), eos, "{name}: and keeps </s>");
        assert_eq!(ours[0][0] == 0, e["special_ids"]["bos"] == 0, "{name}: a start token only where there is one");

        let image = image::open(workspace_root().join(e["image"].as_str().unwrap())).unwrap().to_rgb8();
        let p = model.preprocessor();
        let pixels = Tensor::from_vec(p.apply(&image), (1, 3, p.size, p.size), &test_device()).unwrap();
        assert!(max_abs_diff(&pixels, &e["pixel_values"]) <= 1e-6);
        let d = max_abs_diff(&model.model().image_features(&pixels).unwrap(), &e["image_embeds"]);
        assert!(d <= TOLERANCE, "{name}: image features differ by {d}");
        let d = max_abs_diff(&model.model().text_features(&ours).unwrap(), &e["authors"]["text_embeds"]);
        assert!(d <= TOLERANCE, "{name}: text features differ from the authors' pooling by {d}");
        let images = model.encode_images(&pixels).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let scores = model.scores(&images, &encoded).unwrap();
        for reference in ["authors", "transformers"] {
            let d = max_abs_diff(&scores, &e[reference]["logits_per_image"]);
            assert!(d <= TOLERANCE, "{name}: logits differ from {reference}' by {d}");
        }
    }
}

/// open_clip's port of the worldwide configs cleans captions (ftfy, HTML references) before the
/// tokenizer; the authors' code does not, and neither does benchctl.
#[test]
fn open_clips_cleaning_is_not_the_authors() {
    let e = fixture_expected("metaclip2-tiny");
    let files = hub::from_dir(&fixture_model("metaclip2-tiny")).unwrap();
    let model = metaclip2::load(&files, DType::F32, &test_device()).unwrap();
    let texts: Vec<&str> = e["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let open_clip = json_id_rows(&e["open_clip"]["input_ids"]);
    let differ: Vec<&str> = texts
        .iter()
        .zip(&open_clip)
        .filter(|(text, theirs)| {
            let ours = model.tokenizer().encode(text).unwrap();
            ours[..] != theirs[..ours.len()]
        })
        .map(|(text, _)| *text)
        .collect();
    assert_eq!(differ, ["fish &amp; chips &lt;3", "mojibake: cafÃ© and naÃ¯ve"]);
    let err = registry::architecture("metaclip2").unwrap().choose_text_prep(Some(TextPrep::Transformers)).unwrap_err();
    assert!(err.to_string().contains("one way"), "{err}");
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
    let err = metaclip2::load(&files, DType::F32, &test_device()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("eos_token_id 5") && message.contains("tokenizer.json"), "{message}");
}

/// bf16 and f16 beside `MetaClip2Model`'s f32 logits (the authors' captions): printed, and held to twice
/// transformers' own drift on the same inputs.
#[test]
fn half_precision_drift_is_reported_and_bounded() {
    for name in FIXTURES {
        let e = fixture_expected(name);
        let files = hub::from_dir(&fixture_model(name)).unwrap();
        let texts: Vec<&str> = e["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        let image = image::open(workspace_root().join(e["image"].as_str().unwrap())).unwrap().to_rgb8();
        for dtype in [DType::BF16, DType::F16] {
            let (bound, theirs) = half_precision_bound(&e, "transformers_half_precision_drift", dtype);
            let model = metaclip2::load(&files, dtype, &test_device()).unwrap();
            let p = model.preprocessor();
            let pixels = Tensor::from_vec(p.apply(&image), (1, 3, p.size, p.size), &test_device()).unwrap();
            let images = model.encode_images(&pixels.to_dtype(dtype).unwrap()).unwrap().unsqueeze(0).unwrap();
            let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
            let d = max_abs_diff(&model.scores(&images, &encoded).unwrap(), &e["authors"]["logits_per_image"]);
            eprintln!("{name} {dtype:?}: max abs logit drift {d} (transformers' own {theirs})");
            assert!(d < bound, "{name} {dtype:?} drifts by {d}");
        }
    }
}
