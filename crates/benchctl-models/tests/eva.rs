//! open_clip checkpoints with timm's `Eva` image tower against open_clip 3.3 and timm 1.0:
//! `pe-core-tiny` (`scripts/fixtures/gen_pe_core_fixture.py`: `PE-Core-T-16-384`'s tower two
//! blocks deep), `eva02-tiny` (`gen_eva02_fixture.py`: `EVA02-B-16`'s tower at width 128, two
//! blocks) and `eva02e-tiny` (the same script: `EVA02-E-14`'s tower at width 224, two heads of
//! 112, two blocks), each with a small text tower and f16 weights: open_clip's eval transform under the
//! checkpoint's `preprocess_cfg`, its tokenizer, timm's rotary table, `encode_image` within 1e-5
//! of its largest feature, `encode_text` and the logits within 1e-4 in f32.

use benchctl_models::hub;
use benchctl_models::models::eva::tower::rotary_table;
use benchctl_models::models::eva::{eva02, pe_core, EvaClipEncoder, EvaTower};
use benchctl_models::preprocess::{Filter, Resize};
use benchctl_models::registry;
use benchctl_models::{DualEncoder, ErrorKind};
use benchctl_testkit::{
    fixture_expected, fixture_model, half_precision_bound, json_id_rows, json_numbers, json_strings, max_abs_diff,
    test_device,
};
use candle_core::{DType, Tensor};

const TOLERANCE: f64 = 1e-4;

/// Each fixture: its architecture, its family's towers, and the preprocessing its config asks for.
struct Case {
    fixture: &'static str,
    architecture: &'static str,
    towers: &'static [EvaTower],
    preprocess: (Resize, Filter, usize),
    context: usize,
}

const CASES: [Case; 3] = [
    Case {
        fixture: "pe-core-tiny",
        architecture: "pe-core",
        towers: pe_core::TOWERS,
        preprocess: (Resize::Stretch, Filter::Bilinear, 384),
        context: 32,
    },
    Case {
        fixture: "eva02-tiny",
        architecture: "eva02-clip",
        towers: eva02::TOWERS,
        preprocess: (Resize::ShorterSideThenCrop, Filter::Bicubic, 224),
        context: 77,
    },
    // EVA02-E: post-norm blocks, q/k/v fused with q and v biases beside it, no rotary table.
    Case {
        fixture: "eva02e-tiny",
        architecture: "eva02-clip",
        towers: eva02::TOWERS,
        preprocess: (Resize::ShorterSideThenCrop, Filter::Bicubic, 224),
        context: 77,
    },
];

/// The fixture with open_clip's BPE beside it (the hub's timm repos ship none; open_clip uses
/// its own, which `tokenizer/tokenizer.json` is).
fn fixture_dir(fixture: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model(fixture)).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    std::fs::copy(fixture_model("tokenizer").join("tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    dir
}

fn pixels(model: &EvaClipEncoder, dir: &std::path::Path, names: &[String]) -> Tensor {
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
fn each_family_scores_as_open_clip_does() {
    for case in &CASES {
        let (name, e) = (case.fixture, fixture_expected(case.fixture));
        let dir = fixture_dir(name);
        let files = hub::from_dir(dir.path()).unwrap();
        assert_eq!(registry::architecture_of(&files).unwrap().name(), case.architecture);
        let model = EvaClipEncoder::load(&files, case.towers, DType::F32, &test_device()).unwrap();
        let p = model.preprocessor();
        assert_eq!((p.resize, p.filter, p.size), case.preprocess, "{name}");

        let images = json_strings(&e["images"]);
        let pixel_values = pixels(&model, dir.path(), &images);
        let rows: Vec<usize> = json_numbers(&e["pixel_rows"]).iter().map(|&r| r as usize).collect();
        for (i, (image, theirs)) in images.iter().zip(e["pixel_values"].as_array().unwrap()).enumerate() {
            let picked: Vec<Tensor> =
                rows.iter().map(|&r| pixel_values.get(i).unwrap().narrow(1, r, 1).unwrap()).collect();
            let d = max_abs_diff(&Tensor::cat(&picked, 1).unwrap(), theirs);
            assert!(d <= 1e-6, "{name} {image}: pixels differ by {d}");
        }

        let texts = json_strings(&e["texts"]);
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
        for ((text, ours), theirs) in texts.iter().zip(&ids).zip(json_id_rows(&e["input_ids"])) {
            assert_eq!(ours[..], theirs[..ours.len()], "{name}: ids of {text:?}");
            assert!(theirs[ours.len()..].iter().all(|&id| id == 0), "{name}: only padding after {text:?}");
        }
        assert!(ids.iter().map(Vec::len).max().unwrap() <= case.context);

        // Random towers' features reach ~100: compared relative to their largest.
        let largest = json_numbers(&e["image_features"]).iter().fold(0.0, |m: f64, x| m.max(x.abs()));
        let d = max_abs_diff(&model.vision().forward(&pixel_values).unwrap(), &e["image_features"]) / largest;
        eprintln!("{name}: image features within {d} of their largest ({largest})");
        // cuBLAS sums f32 products in another order than the CPU's GEMM: PE-Core's tower came
        // within 1.6e-5 on an H200.
        let bound = if test_device().is_cuda() { 3e-5 } else { 1e-5 };
        assert!(d <= bound, "{name}: image features differ by {d} of their largest");
        let d = max_abs_diff(&model.text().text_features(&ids).unwrap(), &e["text_features"]);
        assert!(d <= TOLERANCE, "{name}: text features differ by {d}");
        let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let d = max_abs_diff(&model.scores(&images, &encoded).unwrap(), &e["logits_per_image"]);
        eprintln!("{name}: logits within {d}");
        assert!(d <= TOLERANCE, "{name}: logits differ by {d}");
    }
}

#[test]
fn the_rotary_tables_are_timms() {
    for (case, timm_name) in CASES.iter().zip(["vit_pe_core_tiny_patch16_384", "eva02_base_patch16_clip_224"]) {
        let e = fixture_expected(case.fixture);
        let tower = case.towers.iter().find(|t| t.timm_name == timm_name).unwrap();
        let grid: Vec<usize> = json_numbers(&e["rope"]["grid"]).iter().map(|&g| g as usize).collect();
        let (sin, cos) = rotary_table(tower, (grid[0], grid[1]));
        // timm's table is `[sin | cos]` per patch.
        let row = |i: usize| -> Vec<f32> {
            sin[i * 64..(i + 1) * 64].iter().chain(&cos[i * 64..(i + 1) * 64]).copied().collect()
        };
        let mut theirs: Vec<serde_json::Value> = e["rope"]["first_rows"].as_array().unwrap().clone();
        theirs.push(e["rope"]["last_row"].clone());
        let last = grid[0] * grid[1] - 1;
        for (i, expected) in [0, 1, 2, last].into_iter().zip(theirs) {
            let d =
                row(i).iter().zip(json_numbers(&expected)).map(|(&a, b)| (f64::from(a) - b).abs()).fold(0.0, f64::max);
            assert!(d <= 1e-5, "{}: rotary row {i} differs by {d}", case.fixture);
        }
    }
}

#[test]
fn half_precision_drift_is_reported_and_bounded() {
    for case in &CASES {
        let (name, e) = (case.fixture, fixture_expected(case.fixture));
        let dir = fixture_dir(name);
        let files = hub::from_dir(dir.path()).unwrap();
        let texts = json_strings(&e["texts"]);
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        for dtype in [DType::BF16, DType::F16] {
            let (bound, theirs) = half_precision_bound(&e, "open_clip_half_precision_drift", dtype);
            let model = EvaClipEncoder::load(&files, case.towers, dtype, &test_device()).unwrap();
            let pixel_values = pixels(&model, dir.path(), &json_strings(&e["images"])).to_dtype(dtype).unwrap();
            let images = model.encode_images(&pixel_values).unwrap().unsqueeze(0).unwrap();
            let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
            let d = max_abs_diff(&model.scores(&images, &encoded).unwrap(), &e["logits_per_image"]);
            eprintln!("{name} {dtype:?}: max abs logit drift {d} (open_clip's own {theirs})");
            assert!(d < bound, "{name} {dtype:?} drifts by {d}");
        }
    }
}

#[test]
fn a_timm_tower_benchctl_does_not_build_is_refused_naming_it() {
    let dir = fixture_dir("pe-core-tiny");
    let path = dir.path().join("open_clip_config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // timm's OpenAI-CLIP-style ViT: no family here builds it.
    config["model_cfg"]["vision_cfg"]["timm_model_name"] = "vit_huge_patch14_clip_224".into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = registry::detect_architecture(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadConfig);
    let message = err.to_string();
    assert!(
        message.contains("vit_huge_patch14_clip_224")
            && message.contains("vit_pe_core_")
            && message.contains("eva02_")
            && message.contains("vit_so400m_patch14_siglip_"),
        "{message}"
    );
    // A family's prefix, but a tower it does not build (EVA02's ImageNet fine-tuned classifier).
    config["model_cfg"]["vision_cfg"]["timm_model_name"] = "eva02_base_patch14_448".into();
    std::fs::write(&path, config.to_string()).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let err = EvaClipEncoder::load(&files, eva02::TOWERS, DType::F32, &test_device()).unwrap_err();
    assert!(err.to_string().contains("eva02_base_patch14_448"), "{err}");

    config["model_cfg"]["vision_cfg"]["timm_model_name"] = "vit_pe_core_base_patch16_224".into();
    config["model_cfg"]["vision_cfg"]["timm_proj"] = "linear".into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = EvaClipEncoder::load(&files, pe_core::TOWERS, DType::F32, &test_device()).unwrap_err();
    assert!(err.to_string().contains("projects with"), "{err}");
}

/// A tensor of the image tower that no layer reads (here timm's non-persistent `k_bias`, saved as
/// if it were a weight) is refused, naming it, as for every other architecture.
#[test]
fn a_tower_tensor_the_model_does_not_read_is_refused() {
    let dir = fixture_dir("eva02e-tiny");
    let path = dir.path().join("open_clip_model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    let k_bias = Tensor::zeros(224, DType::F16, &candle_core::Device::Cpu).unwrap();
    tensors.insert("visual.trunk.blocks.1.attn.k_bias".into(), k_bias);
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let err = EvaClipEncoder::load(&files, eva02::TOWERS, DType::F32, &test_device()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadWeights, "{err}");
    assert!(err.to_string().contains("visual.trunk.blocks.1.attn.k_bias"), "{err}");
}
