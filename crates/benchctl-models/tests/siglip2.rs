//! SigLIP 2 (fixed resolution) against its two references on `siglip2-tiny`
//! (`scripts/fixtures/gen_siglip2_fixture.py`): the authors' captions as open_clip's
//! `HFTokenizer(clean="canonicalize")` prepares them, `transformers`' as its processor does
//! (`padding="max_length", max_length=64, truncation=True`; its attention mask applied, as
//! `model(**inputs)` applies it), `SiglipModel`'s embeddings and
//! logits for both, within 1e-4 in f32, and the PIL image processor's pixels.

use benchctl_models::hub;
use benchctl_models::models::siglip::{SiglipEncoder, SiglipText};
use benchctl_models::registry::{self, TextPrep};
use benchctl_models::tokenizer::Siglip2Tokenizer;
use benchctl_models::DualEncoder;
use benchctl_testkit::{
    fixture_expected, fixture_model, half_precision_bound, json_id_rows as id_rows, json_strings, max_abs_diff,
    test_device,
};
use candle_core::{DType, Tensor};

const TOLERANCE: f64 = 1e-4;

fn expected() -> serde_json::Value {
    fixture_expected("siglip2-tiny")
}

fn tokenizer(prep: TextPrep) -> Siglip2Tokenizer {
    let dir = fixture_model("siglip2-tiny");
    let settings = dir.join("tokenizer_config.json");
    Siglip2Tokenizer::from_file(&dir.join("tokenizer.json"), Some(&settings), 64, prep).unwrap()
}

#[test]
fn authors_captions_are_open_clips_canonical_form_and_ids() {
    let e = expected();
    let texts = json_strings(&e["texts"]);
    let tok = tokenizer(TextPrep::Authors);
    for (text, canonical) in texts.iter().zip(json_strings(&e["canonical"])) {
        assert_eq!(tok.canonical(text), canonical, "canonical form of {text:?}");
    }
    for (text, ids) in texts.iter().zip(id_rows(&e["authors"]["input_ids"])) {
        assert_eq!(tok.encode(text).unwrap(), ids, "authors' ids of {text:?}");
    }
    // The long caption loses pieces and keeps <eos> last, before no padding.
    let long = texts.last().unwrap();
    assert!(tok.tokens_cut(long).unwrap() > 0);
    assert_eq!(tok.encode(long).unwrap()[63], 1);
    assert_eq!(tok.tokens_cut("a photo of a cat").unwrap(), 0);
}

#[test]
fn transformers_captions_are_the_processors_ids() {
    let e = expected();
    let texts = json_strings(&e["texts"]);
    let tok = tokenizer(TextPrep::Transformers);
    for (text, ids) in texts.iter().zip(id_rows(&e["transformers"]["input_ids"])) {
        assert_eq!(tok.encode(text).unwrap(), ids, "transformers' ids of {text:?}");
    }
    assert!(tok.tokens_cut(texts.last().unwrap()).unwrap() > 0);
    // The two preparations differ on most of these captions (casing, punctuation, entities).
    let authors = tokenizer(TextPrep::Authors);
    let differ = texts.iter().filter(|t| authors.encode(t).unwrap() != tok.encode(t).unwrap()).count();
    assert!(differ >= texts.len() / 2, "only {differ} differ");
}

/// Other `tokenizer_config.json` files of the same vocabulary, as transformers reads them: no
/// `padding_side` (GemmaTokenizer pads on the left) and the `Siglip2Tokenizer` class (lower-cases).
#[test]
fn transformers_reads_the_padding_side_and_class_of_tokenizer_config() {
    let e = expected();
    let texts = json_strings(&e["texts"]);
    let source = fixture_model("siglip2-tiny");
    for (name, variant) in e["variants"].as_object().unwrap() {
        let dir = tempfile::tempdir().unwrap();
        let settings = dir.path().join("tokenizer_config.json");
        std::fs::write(&settings, variant["tokenizer_config"].to_string()).unwrap();
        let tok =
            Siglip2Tokenizer::from_file(&source.join("tokenizer.json"), Some(&settings), 64, TextPrep::Transformers)
                .unwrap();
        for (text, ids) in texts.iter().zip(id_rows(&variant["input_ids"])) {
            assert_eq!(tok.encode(text).unwrap(), ids, "{name}: ids of {text:?}");
        }
    }
}

#[test]
fn transformers_preparation_needs_tokenizer_config_and_says_so() {
    let source = fixture_model("siglip2-tiny");
    let err =
        Siglip2Tokenizer::from_file(&source.join("tokenizer.json"), None, 64, TextPrep::Transformers).unwrap_err();
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("tokenizer_config.json");
    std::fs::write(&settings, r#"{"padding_side": "middle"}"#).unwrap();
    let err = Siglip2Tokenizer::from_file(&source.join("tokenizer.json"), Some(&settings), 64, TextPrep::Transformers)
        .unwrap_err();
    assert!(
        err.to_string().contains("padding_side") && err.to_string().contains(&settings.display().to_string()),
        "{err}"
    );
    // The authors' preparation reads no settings.
    assert!(Siglip2Tokenizer::from_file(&source.join("tokenizer.json"), None, 64, TextPrep::Authors).is_ok());
}

fn pixels(model: &SiglipEncoder, e: &serde_json::Value) -> Tensor {
    let p = model.preprocessor();
    let mut all = Vec::new();
    for name in json_strings(&e["images"]) {
        let image = benchctl_suites::ImageSource::File(fixture_model("siglip2-tiny").join(&name)).load_pil().unwrap();
        let mut out = vec![0.0; p.len()];
        p.apply_pil(&image, &mut out);
        all.extend(out);
    }
    Tensor::from_vec(all, (e["images"].as_array().unwrap().len(), 3, p.size, p.size), &test_device()).unwrap()
}

#[test]
fn both_preparations_score_as_siglip_model_does() {
    let e = expected();
    let files = hub::from_dir(&fixture_model("siglip2-tiny")).unwrap();
    assert_eq!(registry::architecture_of(&files).unwrap().name(), "siglip");
    let texts = json_strings(&e["texts"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    for prep in TextPrep::ALL {
        let model = SiglipEncoder::load_with(&files, prep, DType::F32, &test_device()).unwrap();
        assert!(matches!(model.tokenizer(), SiglipText::Siglip2(t) if t.prep() == prep));
        let pixel_values = pixels(&model, &e);
        let per_image = e["pixel_values"].as_array().unwrap();
        for (i, (name, theirs)) in json_strings(&e["images"]).iter().zip(per_image).enumerate() {
            let d = max_abs_diff(&pixel_values.narrow(0, i, 1).unwrap(), theirs);
            assert!(d <= 1e-6, "{name}: pixels differ by {d}");
        }

        let image = model.model().image_features(&pixel_values).unwrap();
        let d = max_abs_diff(&image, &e["image_embeds"]);
        assert!(d <= TOLERANCE, "{prep:?}: image features differ by {d}");
        let reference = &e[prep.name()];
        let (rows, masks): (Vec<_>, Vec<_>) =
            texts.iter().map(|t| model.tokenizer().encode_with_mask(t).unwrap()).unzip();
        assert_eq!(rows, id_rows(&reference["input_ids"]));
        // transformers' processor returns an attention mask and the model applies it; the
        // authors' preparation has none.
        let masks: Option<Vec<Vec<u32>>> = masks.into_iter().collect();
        assert_eq!(masks.is_some(), prep == TextPrep::Transformers);
        if let Some(masks) = &masks {
            assert_eq!(masks, &id_rows(&reference["attention_mask"]));
        }
        let text = model.model().masked_text_features(&rows, masks.as_deref()).unwrap();
        let d = max_abs_diff(&text, &reference["text_embeds"]);
        assert!(d <= TOLERANCE, "{prep:?}: text features differ by {d}");

        let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let logits = model.logits(&images, &encoded).unwrap().squeeze(0).unwrap();
        let d = max_abs_diff(&logits, &reference["logits_per_image"]);
        assert!(d <= TOLERANCE, "{prep:?}: logits differ by {d}");
    }
}

#[test]
fn the_architecture_offers_both_preparations_and_others_refuse_transformers() {
    let siglip = registry::architecture("siglip").unwrap();
    assert_eq!(siglip.choose_text_prep(None).unwrap(), TextPrep::Authors);
    assert_eq!(siglip.choose_text_prep(Some(TextPrep::Transformers)).unwrap(), TextPrep::Transformers);
    let clip = registry::architecture("clip").unwrap();
    let err = clip.choose_text_prep(Some(TextPrep::Transformers)).unwrap_err();
    assert!(err.to_string().contains("--text-prep transformers"), "{err}");
    // The caption limit follows the preparation: punctuation the authors drop still counts
    // against transformers' 64 tokens.
    let files = hub::from_dir(&fixture_model("siglip2-tiny")).unwrap();
    let caption = "a, ".repeat(40);
    let authors = siglip.caption_limit(&files, TextPrep::Authors).unwrap();
    let transformers = siglip.caption_limit(&files, TextPrep::Transformers).unwrap();
    assert_eq!(authors.tokens_cut(&caption).unwrap(), 0);
    assert!(transformers.tokens_cut(&caption).unwrap() > 0);
}

/// bf16 and f16 beside `SiglipModel`'s f32 logits (the authors' captions): printed, and held to twice
/// transformers' own drift on the same inputs.
#[test]
fn half_precision_drift_is_reported_and_bounded() {
    let e = expected();
    let files = hub::from_dir(&fixture_model("siglip2-tiny")).unwrap();
    let texts = json_strings(&e["texts"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    for dtype in [DType::BF16, DType::F16] {
        let (bound, theirs) = half_precision_bound(&e, "transformers_half_precision_drift", dtype);
        let model = SiglipEncoder::load_with(&files, TextPrep::Authors, dtype, &test_device()).unwrap();
        let pixel_values = pixels(&model, &e).to_dtype(dtype).unwrap();
        let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let logits = model.logits(&images, &encoded).unwrap().squeeze(0).unwrap();
        let d = max_abs_diff(&logits, &e["authors"]["logits_per_image"]);
        eprintln!("siglip2-tiny {dtype:?}: max abs logit drift {d} (transformers' own {theirs})");
        assert!(d < bound, "{dtype:?} drifts by {d}");
    }
}
