//! SigLIP and SigLIP 2 in open_clip's files (`timm/ViT-*-SigLIP*`) against open_clip 3.3 and
//! timm 1.0: `siglip-openclip-tiny` (timm's `vit_base_patch16_siglip_224`, exact GELU, a T5
//! tokenizer padded with `</s>`) and `siglip2-openclip-tiny` (`vit_base_patch32_siglip_256`,
//! tanh GELU in both towers, a Gemma tokenizer padded with `<pad>`), image towers 48 wide with
//! timm's own 12 heads, text towers 32 wide, two blocks each, f16 weights (`scripts/fixtures/gen_siglip_open_clip_fixture.py`): open_clip's eval
//! transform under the hub repos' `preprocess_cfg`, its `HFTokenizer(clean="canonicalize")` id
//! for id, `encode_image` / `encode_text` and the logits `exp(s) · cos + b` in f32.

use benchctl_models::hub;
use benchctl_models::models::siglip::SiglipEncoder;
use benchctl_models::models::siglip_open_clip::{self, TOWERS};
use benchctl_models::preprocess::{Filter, Resize};
use benchctl_models::registry;
use benchctl_models::{DualEncoder, ErrorKind};
use benchctl_testkit::{
    fixture_expected, fixture_model, half_precision_bound, json_id_rows, json_numbers, json_strings, max_abs_diff,
    test_device,
};
use candle_core::{DType, Tensor};

const FIXTURES: [(&str, usize); 2] = [("siglip-openclip-tiny", 224), ("siglip2-openclip-tiny", 256)];
const TOLERANCE: f64 = 1e-4;

fn load(fixture: &str, dtype: DType) -> SiglipEncoder {
    let files = hub::from_dir(&fixture_model(fixture)).unwrap();
    assert_eq!(registry::architecture_of(&files).unwrap().name(), "siglip-open-clip", "{fixture}");
    siglip_open_clip::load(&files, dtype, &test_device()).unwrap()
}

fn pixels(model: &SiglipEncoder, fixture: &str, names: &[String]) -> Tensor {
    let p = model.preprocessor();
    let mut all = Vec::new();
    for name in names {
        let image = benchctl_suites::ImageSource::File(fixture_model(fixture).join(name)).load_pil().unwrap();
        let mut out = vec![0.0; p.len()];
        p.apply_pil(&image, &mut out);
        all.extend(out);
    }
    Tensor::from_vec(all, (names.len(), 3, p.size, p.size), &test_device()).unwrap()
}

#[test]
fn siglip_in_open_clip_files_scores_as_open_clip_does() {
    for (fixture, size) in FIXTURES {
        let e = fixture_expected(fixture);
        let model = load(fixture, DType::F32);
        let p = model.preprocessor();
        assert_eq!(
            (p.resize, p.filter, p.size, p.mean, p.std),
            (Resize::Stretch, Filter::Bicubic, size, [0.5; 3], [0.5; 3])
        );

        let images = json_strings(&e["images"]);
        let pixel_values = pixels(&model, fixture, &images);
        let rows: Vec<usize> = json_numbers(&e["pixel_rows"]).iter().map(|&r| r as usize).collect();
        for (i, (image, theirs)) in images.iter().zip(e["pixel_values"].as_array().unwrap()).enumerate() {
            let picked: Vec<Tensor> =
                rows.iter().map(|&r| pixel_values.get(i).unwrap().narrow(1, r, 1).unwrap()).collect();
            let d = max_abs_diff(&Tensor::cat(&picked, 1).unwrap(), theirs);
            assert!(d <= 1e-6, "{fixture} {image}: pixels differ by {d}");
        }

        let texts = json_strings(&e["texts"]);
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
        assert_eq!(ids, json_id_rows(&e["input_ids"]), "{fixture}: ids");

        let largest = json_numbers(&e["image_features"]).iter().fold(0.0, |m: f64, x| m.max(x.abs()));
        let d = max_abs_diff(&model.model().image_features(&pixel_values).unwrap(), &e["image_features"]) / largest;
        eprintln!("{fixture}: image features within {d} of their largest ({largest})");
        assert!(d <= 1e-5, "{fixture}: image features differ by {d} of their largest");
        let d = max_abs_diff(&model.model().text_features(&ids).unwrap(), &e["text_features"]);
        eprintln!("{fixture}: text features within {d}");
        assert!(d <= TOLERANCE, "{fixture}: text features differ by {d}");
        let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let d = max_abs_diff(&model.logits(&images, &encoded).unwrap(), &e["logits_per_image"]);
        eprintln!("{fixture}: logits within {d}");
        assert!(d <= TOLERANCE, "{fixture}: logits differ by {d}");
    }
}

/// The tower table holds what timm's own definitions fix (heads, GELU form, input side), for
/// every `map`-pooled SigLIP tower timm has, as the generator read them from timm.
#[test]
fn the_tower_table_is_timms() {
    let theirs = fixture_model("siglip-openclip-tiny").join("timm-siglip-towers.json");
    let theirs: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(theirs).unwrap()).unwrap();
    let names: Vec<&str> = theirs.iter().map(|t| t["timm_name"].as_str().unwrap()).collect();
    assert_eq!(names, TOWERS.iter().map(|t| t.timm_name).collect::<Vec<_>>());
    for (t, ours) in theirs.iter().zip(TOWERS) {
        assert_eq!(t["heads"].as_u64(), Some(ours.heads as u64), "{}", ours.timm_name);
        assert_eq!(t["tanh_gelu"].as_bool(), Some(ours.tanh_gelu), "{}", ours.timm_name);
        assert_eq!(t["image_size"].as_u64(), Some(ours.image_size as u64), "{}", ours.timm_name);
        let prefixes = siglip_open_clip::ARCHITECTURE.spec().timm_towers;
        assert!(prefixes.iter().any(|p| ours.timm_name.starts_with(p)), "{} has no prefix", ours.timm_name);
    }
}

#[test]
fn half_precision_drift_is_reported_and_bounded() {
    for (fixture, _) in FIXTURES {
        let e = fixture_expected(fixture);
        let texts = json_strings(&e["texts"]);
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        for dtype in [DType::BF16, DType::F16] {
            let (bound, theirs) = half_precision_bound(&e, "open_clip_half_precision_drift", dtype);
            let model = load(fixture, dtype);
            let pixel_values = pixels(&model, fixture, &json_strings(&e["images"])).to_dtype(dtype).unwrap();
            let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
            let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
            let d = max_abs_diff(&model.logits(&images, &encoded).unwrap(), &e["logits_per_image"]);
            eprintln!("{fixture} {dtype:?}: max abs logit drift {d} (open_clip's own {theirs})");
            assert!(d < bound, "{fixture} {dtype:?} drifts by {d}");
        }
    }
}

/// A copy of `fixture` whose `open_clip_config.json` `edit` changes.
fn edited(fixture: &str, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model(fixture)).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().join("open_clip_config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config["model_cfg"]);
    std::fs::write(&path, config.to_string()).unwrap();
    dir
}

/// A change to `model_cfg`.
type ConfigEdit = fn(&mut serde_json::Value);

#[test]
fn configs_it_cannot_compute_exactly_are_refused_by_key() {
    let cases: [(&str, ConfigEdit); 7] = [
        ("vit_base_patch16_siglip_gap_224", |c| {
            c["vision_cfg"]["timm_model_name"] = "vit_base_patch16_siglip_gap_224".into()
        }),
        ("pools with", |c| c["vision_cfg"]["timm_pool"] = "avg".into()),
        ("image_size 384", |c| c["vision_cfg"]["image_size"] = 384.into()),
        ("no_causal_mask false", |c| c["text_cfg"]["no_causal_mask"] = false.into()),
        ("tokenizer_kwargs", |c| c["text_cfg"]["tokenizer_kwargs"]["clean"] = "lower".into()),
        ("embed_cls", |c| c["text_cfg"]["embed_cls"] = true.into()),
        ("approximate", |c| c["text_cfg"]["act_kwargs"] = serde_json::json!({"approximate": "sigmoid"})),
    ];
    for (named, edit) in cases {
        let dir = edited("siglip-openclip-tiny", edit);
        let files = hub::from_dir(dir.path()).unwrap();
        let err = siglip_open_clip::load(&files, DType::F32, &test_device()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BadConfig, "{named}: {err}");
        assert!(err.to_string().contains(named) && err.to_string().contains("open_clip_config.json"), "{named}: {err}");
    }
}

#[test]
fn a_tensor_the_model_does_not_read_is_refused() {
    let dir = edited("siglip2-openclip-tiny", |_| {});
    let path = dir.path().join("open_clip_model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    tensors.insert("text.cls_emb".into(), Tensor::zeros(32, DType::F16, &candle_core::Device::Cpu).unwrap());
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let err = siglip_open_clip::load(&files, DType::F32, &test_device()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadWeights, "{err}");
    assert!(err.to_string().contains("text.cls_emb"), "{err}");
}
