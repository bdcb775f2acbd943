//! PE-Core against open_clip 3.3 and timm 1.0 on `pe-core-tiny`
//! (`scripts/fixtures/gen_pe_core_fixture.py`: `PE-Core-T-16-384`'s tower two blocks deep, a
//! small text tower, f16 weights): open_clip's eval transform under the checkpoint's
//! `preprocess_cfg` (squash, bilinear, mean/std 0.5), its tokenizer, timm's rotary table, and
//! `encode_image` within 1e-5 of its largest feature, `encode_text` and the logits within 1e-4
//! in f32.

use benchctl_models::hub;
use benchctl_models::models::pe_core::{self, PeCoreEncoder};
use benchctl_models::preprocess::{Filter, Resize};
use benchctl_models::registry;
use benchctl_models::{DualEncoder, ErrorKind};
use benchctl_testkit::{
    fixture_expected, fixture_model, json_id_rows, json_numbers, json_strings, max_abs_diff, test_device,
};
use candle_core::{DType, Tensor};

const TOLERANCE: f64 = 1e-4;
const FIXTURE: &str = "pe-core-tiny";

/// The fixture with open_clip's BPE beside it (the hub's PE-Core repos ship none; open_clip
/// uses its own, which `tokenizer/tokenizer.json` is).
fn fixture_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model(FIXTURE)).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    std::fs::copy(fixture_model("tokenizer").join("tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    dir
}

fn pixels(model: &PeCoreEncoder, dir: &std::path::Path, names: &[String]) -> Tensor {
    let p = model.preprocessor();
    let mut all = Vec::new();
    for name in names {
        let image = benchctl_suites::ImageSource::File(dir.join(name)).load_pil().unwrap();
        let mut out = vec![0.0; p.len()];
        p.apply_pil(&image, &mut out);
        all.extend(out);
    }
    Tensor::from_vec(all, (names.len(), 3, p.size, p.size), &test_device()).unwrap()
}

#[test]
fn pe_core_scores_as_open_clip_does() {
    let e = fixture_expected(FIXTURE);
    let dir = fixture_dir();
    let files = hub::from_dir(dir.path()).unwrap();
    assert_eq!(registry::architecture_of(&files).unwrap().name(), "pe-core");
    let model = PeCoreEncoder::load(&files, DType::F32, &test_device()).unwrap();
    let p = model.preprocessor();
    assert_eq!((p.resize, p.filter, p.size), (Resize::Stretch, Filter::Bilinear, 384));

    let names = json_strings(&e["images"]);
    let pixel_values = pixels(&model, dir.path(), &names);
    let rows: Vec<usize> = json_numbers(&e["pixel_rows"]).iter().map(|&r| r as usize).collect();
    for (i, (name, theirs)) in names.iter().zip(e["pixel_values"].as_array().unwrap()).enumerate() {
        let picked: Vec<Tensor> = rows.iter().map(|&r| pixel_values.get(i).unwrap().narrow(1, r, 1).unwrap()).collect();
        let ours = Tensor::cat(&picked, 1).unwrap();
        let theirs = serde_json::Value::Array(vec![theirs.clone()]);
        let d = max_abs_diff(&ours, &theirs);
        assert!(d <= 1e-6, "{name}: pixels differ by {d}");
    }

    let texts = json_strings(&e["texts"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
    for ((text, ours), theirs) in texts.iter().zip(&ids).zip(json_id_rows(&e["input_ids"])) {
        assert_eq!(ours[..], theirs[..ours.len()], "ids of {text:?}");
        assert!(theirs[ours.len()..].iter().all(|&id| id == 0), "only padding after {text:?}");
    }
    assert_eq!(ids.last().unwrap().len(), 32, "the long caption fills PE's 32 tokens");

    // The random tower's features reach ~110: compared relative to their largest.
    let largest =
        e["image_features"].as_array().unwrap().iter().flat_map(json_numbers).fold(0.0, |m: f64, x| m.max(x.abs()));
    let d = max_abs_diff(&model.vision().forward(&pixel_values).unwrap(), &e["image_features"]) / largest;
    eprintln!("pe-core-tiny: image features within {d} of their largest ({largest})");
    assert!(d <= 1e-5, "image features differ by {d} of their largest");
    let d = max_abs_diff(&model.text().text_features(&ids).unwrap(), &e["text_features"]);
    assert!(d <= TOLERANCE, "text features differ by {d}");
    let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
    let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
    let d = max_abs_diff(&model.scores(&images, &encoded).unwrap(), &e["logits_per_image"]);
    eprintln!("pe-core-tiny: logits within {d}");
    assert!(d <= TOLERANCE, "logits differ by {d}");
}

#[test]
fn the_rotary_table_is_timms() {
    let e = fixture_expected(FIXTURE);
    let tower = pe_core::tower_named("vit_pe_core_tiny_patch16_384").unwrap();
    let (sin, cos) = pe_core::rotary_table(64, (24, 24), tower);
    // timm's table is `[sin | cos]` per patch.
    let row = |i: usize| -> Vec<f32> {
        sin[i * 64..(i + 1) * 64].iter().chain(&cos[i * 64..(i + 1) * 64]).copied().collect()
    };
    let mut theirs: Vec<serde_json::Value> = e["rope"]["first_rows"].as_array().unwrap().clone();
    theirs.push(e["rope"]["last_row"].clone());
    for (i, expected) in [0, 1, 2, 575].into_iter().zip(theirs) {
        let d = row(i).iter().zip(json_numbers(&expected)).map(|(&a, b)| (f64::from(a) - b).abs()).fold(0.0, f64::max);
        assert!(d <= 1e-5, "rotary row {i} differs by {d}");
    }
}

#[test]
fn half_precision_drift_is_reported_and_bounded() {
    let e = fixture_expected(FIXTURE);
    let dir = fixture_dir();
    let files = hub::from_dir(dir.path()).unwrap();
    let texts = json_strings(&e["texts"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    for (dtype, bound) in [(DType::BF16, 0.25), (DType::F16, 0.05)] {
        let model = PeCoreEncoder::load(&files, dtype, &test_device()).unwrap();
        let pixel_values = pixels(&model, dir.path(), &json_strings(&e["images"])).to_dtype(dtype).unwrap();
        let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let d = max_abs_diff(&model.scores(&images, &encoded).unwrap(), &e["logits_per_image"]);
        eprintln!("pe-core-tiny {dtype:?}: max abs logit drift {d}");
        assert!(d < bound, "{dtype:?} drifts by {d}");
    }
}

#[test]
fn a_timm_tower_benchctl_does_not_build_is_refused_naming_it() {
    let dir = fixture_dir();
    let path = dir.path().join("open_clip_config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["model_cfg"]["vision_cfg"]["timm_model_name"] = "eva02_base_patch16_clip_224".into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = registry::detect_architecture(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadConfig);
    let message = err.to_string();
    assert!(message.contains("eva02_base_patch16_clip_224") && message.contains("vit_pe_core_"), "{message}");

    config["model_cfg"]["vision_cfg"]["timm_model_name"] = "vit_pe_core_base_patch16_224".into();
    config["model_cfg"]["vision_cfg"]["timm_proj"] = "linear".into();
    std::fs::write(&path, config.to_string()).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let err = PeCoreEncoder::load(&files, DType::F32, &test_device()).unwrap_err();
    assert!(err.to_string().contains("timm_proj") || err.to_string().contains("projects"), "{err}");
}
