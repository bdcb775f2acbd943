//! Generative scoring (VQAScore) on the tiny random-weight Gemma 3 and PaliGemma that
//! `scripts/fixtures/gen_vqascore_fixture.py` builds with `transformers`: the prompts' token ids equal
//! the processors', the image preprocessing Pillow's (bilinear for Gemma 3, bicubic for
//! PaliGemma), and every pair's log P("Yes") `Gemma3ForConditionalGeneration`'s and
//! `PaliGemmaForConditionalGeneration`'s within 1e-4 in f32; and on the tiny Qwen3-VL of
//! `scripts/fixtures/gen_qwen3vl_fixture.py`, every pair's P("Yes") as `t2v_metrics`' own Qwen3-VL
//! scorer computes it, each image resized as `qwen_vl_utils` resizes it (and on its mixture of
//! experts, `--moe`); every family's whole
//! prompt as its processor builds it on captions that stress a tokenizer
//! (`scripts/fixtures/gen_prompt_tokens_fixture.py`); generated replies read as VisMin's
//! official `is_match_with_label` reads them, on its verdicts
//! (`scripts/fixtures/gen_vismin_replies_fixture.py`); images of other modes and sizes shown
//! together in one prompt as each family's processor lays them out
//! (`scripts/fixtures/gen_together_modes_fixture.py`).

use benchctl_models::hub;
use benchctl_models::models::gemma3::Gemma3Vqa;
use benchctl_models::models::internvl::InternVlVqa;
use benchctl_models::models::paligemma::PaliGemmaVqa;
use benchctl_models::models::qwen25vl;
use benchctl_models::models::qwen3vl::Qwen3VlVqa;
use benchctl_models::vqascore::local::LocalVqa;
use benchctl_models::{FusionEncoder, ScoreKind};
use benchctl_testkit::{fixture_model, test_device, workspace_root};
use candle_core::{DType, Tensor};

fn expected() -> serde_json::Value {
    expected_of("gemma3-tiny")
}

fn expected_of(fixture: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture_model(fixture).join("expected.json")).unwrap()).unwrap()
}

fn model(dtype: DType) -> Gemma3Vqa {
    Gemma3Vqa::load(&hub::from_dir(&fixture_model("gemma3-tiny")).unwrap(), dtype, &test_device()).unwrap()
}

fn pixels(model: &dyn FusionEncoder, path: &std::path::Path) -> Tensor {
    let image = image::open(path).unwrap().to_rgb8();
    let p = model.preprocessor();
    Tensor::from_vec(p.apply(&image), (1, 3, p.size, p.size), &test_device()).unwrap()
}

#[test]
fn the_prompt_tokenizes_as_the_gemma3_processor_does() {
    let expected = expected();
    let ids: Vec<u32> =
        expected["prompt"]["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    assert_eq!(model(DType::F32).prompt_ids(expected["prompt"]["caption"].as_str().unwrap()).unwrap(), ids);
}

#[test]
fn images_are_resized_as_pillows_bilinear_filter_does() {
    let expected = expected();
    let model = model(DType::F32);
    let path = workspace_root().join(expected["bilinear"]["image"].as_str().unwrap());
    let ours = pixels(&model, &path).flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let theirs: Vec<f64> =
        expected["bilinear"]["pixels"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(ours.len(), theirs.len());
    let worst = ours.iter().zip(&theirs).map(|(&a, &b)| (f64::from(a) - b).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-6, "pixels differ by {worst}");
}

/// Every pair's log P("Yes") of `model` beside `expected`'s, as the runner computes it: each
/// image's state once, then its captions over it.
fn scores_of(model: &dyn FusionEncoder, expected: &serde_json::Value) -> Vec<(f64, f64)> {
    assert_eq!(model.score_kind(), ScoreKind::LogProbability);
    let images = workspace_root().join("crates/benchctl/tests/fixtures/vqa-winoground/images");
    let mut out = Vec::new();
    for (name, captions) in expected["local"].as_object().unwrap() {
        let state = model.encode_images(&pixels(model, &images.join(format!("{name}.png")))).unwrap();
        let texts: Vec<&str> = captions.as_object().unwrap().keys().map(String::as_str).collect();
        let index = Tensor::new(vec![0u32; texts.len()], &test_device()).unwrap();
        let got = model.score_pairs(&state.index_select(&index, 0).unwrap(), &texts).unwrap();
        for (score, text) in got.to_vec1::<f32>().unwrap().into_iter().zip(&texts) {
            out.push((f64::from(score), captions[*text].as_f64().unwrap()));
        }
    }
    assert_eq!(out.len(), 32);
    out
}

fn scores(dtype: DType) -> Vec<(f64, f64)> {
    scores_of(&model(dtype), &expected())
}

#[test]
fn gemma3_log_p_yes_matches_transformers() {
    let worst = scores(DType::F32).iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-4, "log P(Yes) differs from transformers by {worst}");
}

#[test]
fn gemma3_half_precision_drift_is_bounded() {
    for dtype in [DType::BF16, DType::F16] {
        let worst = scores(dtype).iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        eprintln!("Gemma 3 {dtype:?}: log P(Yes) at most {worst:.2e} from transformers' f32");
        assert!(worst <= 0.05, "{dtype:?}: log P(Yes) drifts by {worst} from transformers' f32");
    }
}

#[test]
fn image_processor_settings_not_reproduced_are_refused_by_key() {
    let source = fixture_model("gemma3-tiny");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("preprocessor_config.json")).unwrap()).unwrap();
    for (key, value) in [
        ("do_pan_and_scan", serde_json::json!(true)),
        ("resample", serde_json::json!(3)),
        ("size", serde_json::json!({"height": 64, "width": 64})),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for file in ["config.json", "model.safetensors", "tokenizer.json"] {
            std::fs::copy(source.join(file), dir.path().join(file)).unwrap();
        }
        let mut changed = config.clone();
        changed[key] = value;
        std::fs::write(dir.path().join("preprocessor_config.json"), changed.to_string()).unwrap();
        let files = hub::from_dir(dir.path()).unwrap();
        let err = Gemma3Vqa::load(&files, DType::F32, &test_device()).err().expect("refused");
        assert!(err.to_string().contains(&format!("key `{key}`")), "{key}: {err}");
    }
}

fn paligemma(dtype: DType) -> PaliGemmaVqa {
    PaliGemmaVqa::load(&hub::from_dir(&fixture_model("paligemma-tiny")).unwrap(), dtype, &test_device()).unwrap()
}

#[test]
fn the_paligemma_prompt_tokenizes_as_its_processor_does() {
    let expected = expected_of("paligemma-tiny");
    let ids: Vec<u32> =
        expected["prompt"]["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let (prompt, answer) = paligemma(DType::F32).caption_ids(expected["prompt"]["caption"].as_str().unwrap()).unwrap();
    assert_eq!(prompt, ids);
    // The answer is the token t2v_metrics reads (its processor's tokenizer adds no <bos>).
    assert_eq!(answer, vec![expected["t2v_metrics_answer_token"]["id"].as_u64().unwrap() as u32]);
}

#[test]
fn paligemma_images_are_resized_as_pillows_bicubic_filter_does() {
    let expected = expected_of("paligemma-tiny");
    let path = workspace_root().join(expected["bicubic"]["image"].as_str().unwrap());
    let ours = pixels(&paligemma(DType::F32), &path).flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let theirs: Vec<f64> =
        expected["bicubic"]["pixels"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let worst = ours.iter().zip(&theirs).map(|(&a, &b)| (f64::from(a) - b).abs()).fold(0.0, f64::max);
    assert!(ours.len() == theirs.len() && worst < 1e-6, "pixels differ by {worst}");
}

#[test]
fn paligemma_log_p_yes_matches_transformers() {
    let expected = expected_of("paligemma-tiny");
    let worst = scores_of(&paligemma(DType::F32), &expected).iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-4, "log P(Yes) differs from transformers by {worst}");
    for dtype in [DType::BF16, DType::F16] {
        let worst = scores_of(&paligemma(dtype), &expected).iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst <= 0.05, "{dtype:?}: log P(Yes) drifts by {worst} from transformers' f32");
    }
}

/// The tiny Gemma 3's files in a temp dir, its config.json's `text_config` changed by `edit`.
fn gemma3_with_text_config(edit: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let source = fixture_model("gemma3-tiny");
    let dir = tempfile::tempdir().unwrap();
    for file in ["model.safetensors", "tokenizer.json", "preprocessor_config.json"] {
        std::fs::copy(source.join(file), dir.path().join(file)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap()).unwrap();
    edit(&mut config["text_config"]);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

#[test]
fn gemma3_configs_it_cannot_run_exactly_are_named() {
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit); 4] = [
        ("layer_types holds `chunked_attention`", |t| t["layer_types"][0] = "chunked_attention".into()),
        ("names 5 layers, num_hidden_layers is 6", |t| drop(t["layer_types"].as_array_mut().unwrap().pop())),
        ("RoPE type `yarn` is not supported", |t| t["rope_parameters"]["full_attention"]["rope_type"] = "yarn".into()),
        ("do not share 3 key-value heads", |t| t["num_key_value_heads"] = 3.into()),
    ];
    for (expected, edit) in cases {
        let dir = gemma3_with_text_config(edit);
        let err =
            Gemma3Vqa::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).err().expect("refused");
        assert!(err.to_string().contains(expected) && err.to_string().contains("config.json"), "{expected}: {err}");
    }
    // transformers 4's keys for the same model (a pattern and per-kind RoPE bases) load too.
    let dir = gemma3_with_text_config(|t| {
        let t = t.as_object_mut().unwrap();
        t.remove("layer_types");
        t.remove("rope_parameters");
        t.insert("sliding_window_pattern".into(), 6.into());
        t.insert("rope_theta".into(), 1_000_000.0.into());
        t.insert("rope_local_base_freq".into(), 10_000.0.into());
    });
    let expected = expected();
    let v4 = Gemma3Vqa::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).unwrap();
    let worst = scores_of(&v4, &expected).iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-4, "transformers 4's config keys: {worst}");
}

fn qwen3vl(dtype: DType) -> Qwen3VlVqa {
    qwen_vl("qwen3vl-tiny", dtype)
}

/// A Qwen-VL fixture's model (Qwen3-VL or Qwen2.5-VL, as its config says).
fn qwen_vl(fixture: &str, dtype: DType) -> Qwen3VlVqa {
    let files = hub::from_dir(&fixture_model(fixture)).unwrap();
    match fixture {
        "qwen25vl-tiny" => qwen25vl::load(&files, dtype, &test_device()).unwrap(),
        _ => Qwen3VlVqa::load(&files, dtype, &test_device()).unwrap(),
    }
}

/// The two Qwen-VL fixtures and their patch sides.
const QWEN_VL: [(&str, usize); 2] = [("qwen3vl-tiny", 16), ("qwen25vl-tiny", 14)];

/// An image of the Qwen3-VL fixture as the runner prepares it: at its own size.
fn qwen3vl_pixels(model: &dyn FusionEncoder, file: &str) -> Tensor {
    qwen_vl_pixels(model, "qwen3vl-tiny", file)
}

fn qwen_vl_pixels(model: &dyn FusionEncoder, fixture: &str, file: &str) -> Tensor {
    let image = image::open(fixture_model(fixture).join("images").join(file)).unwrap().to_rgb8();
    let p = model.preprocessor();
    let (w, h) = p.output_size(image.width() as usize, image.height() as usize);
    Tensor::from_vec(p.apply(&image), (1, 3, h, w), &test_device()).unwrap()
}

#[test]
fn qwen_vl_images_are_resized_and_patched_as_qwen_vl_utils_and_the_processor_do() {
    for (fixture, patch) in QWEN_VL {
        qwen_vl_images_match(fixture, patch);
    }
}

fn qwen_vl_images_match(fixture: &str, patch: usize) {
    let expected = expected_of(fixture);
    let model = qwen_vl(fixture, DType::F32);
    for image in expected["images"].as_array().unwrap() {
        let file = image["file"].as_str().unwrap();
        let pixels = qwen_vl_pixels(&model, fixture, file);
        let (_, _, h, w) = pixels.dims4().unwrap();
        let resized: Vec<usize> =
            image["resized"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(vec![w, h], resized, "{file}: smart_resize");
        let grid: Vec<usize> =
            image["grid_thw"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(grid, vec![1, h / patch, w / patch], "{file}");
        // The processor's first patch: channel by channel, two identical frames of p × p.
        let plane = pixels.get(0).unwrap().to_vec3::<f32>().unwrap();
        let first: Vec<f64> =
            image["pixel_values_first_row"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let mut at = 0;
        let mut worst = 0.0f64;
        for channel in &plane {
            for _frame in 0..2 {
                for row in channel.iter().take(patch) {
                    for &value in row.iter().take(patch) {
                        worst = worst.max((f64::from(value) - first[at]).abs());
                        at += 1;
                    }
                }
            }
        }
        assert_eq!(at, first.len());
        assert!(worst < 1e-6, "{file}: pixels differ by {worst}");
        // Every value, twice over (two frames): the sum of the processor's patches, within the
        // f32 rounding of each value (a pixel one level off would move it by 2/(255·std)).
        let values = 2 * plane.iter().flatten().flatten().count();
        let sum: f64 = plane.iter().flatten().flatten().map(|&v| 2.0 * f64::from(v)).sum();
        let theirs = image["pixel_values_sum"].as_f64().unwrap();
        assert!((sum - theirs).abs() < 1e-7 * values as f64, "{file}: {sum} vs {theirs}");
    }
}

/// The largest difference of `dtype`'s log P("Yes") from t2v_metrics' (f32) over every pair,
/// checking each prompt's ids on the way.
fn qwen3vl_worst(dtype: DType) -> f64 {
    qwen_vl_worst("qwen3vl-tiny", 16, dtype)
}

fn qwen_vl_worst(fixture: &str, patch: usize, dtype: DType) -> f64 {
    let expected = expected_of(fixture);
    let model = qwen_vl(fixture, dtype);
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let images = expected["images"].as_array().unwrap();
    let pairs = expected["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), images.len() * captions.len());
    let mut worst = 0.0f64;
    for (i, image) in images.iter().enumerate() {
        let pixels = qwen_vl_pixels(&model, fixture, image["file"].as_str().unwrap());
        let state = model.encode_images(&pixels).unwrap();
        let index = Tensor::new(vec![0u32; captions.len()], &test_device()).unwrap();
        let got =
            model.score_pairs(&state.index_select(&index, 0).unwrap(), &captions).unwrap().to_vec1::<f32>().unwrap();
        let tokens = (pixels.dim(2).unwrap() / (2 * patch)) * (pixels.dim(3).unwrap() / (2 * patch));
        for pair in pairs.iter().filter(|p| p["image"].as_u64() == Some(i as u64)) {
            let c = pair["caption"].as_u64().unwrap() as usize;
            let ids: Vec<u32> =
                pair["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(model.prompt_ids(tokens, captions[c]).unwrap(), ids, "image {i} caption {c}: the prompt");
            let theirs = pair["t2v_metrics_p_yes"].as_f64().unwrap().ln();
            // t2v_metrics' f32 softmax beside transformers' log-softmax of the same logits in f64.
            assert!((theirs - pair["log_p_yes"].as_f64().unwrap()).abs() < 1e-5);
            worst = worst.max((f64::from(got[c]) - theirs).abs());
        }
    }
    worst
}

#[test]
fn qwen3vl_log_p_yes_matches_t2v_metrics() {
    let worst = qwen3vl_worst(DType::F32);
    assert!(worst <= 1e-4, "log P(Yes) differs from t2v_metrics' by {worst}");
}

/// Qwen2.5-VL: windowed vision attention, Qwen2's decoder, 14-pixel patches.
#[test]
fn qwen25vl_log_p_yes_matches_t2v_metrics() {
    let worst = qwen_vl_worst("qwen25vl-tiny", 14, DType::F32);
    eprintln!("Qwen2.5-VL f32: log P(Yes) at most {worst:.2e} from t2v_metrics'");
    assert!(worst <= 1e-4, "log P(Yes) differs from t2v_metrics' by {worst}");
    for dtype in [DType::BF16, DType::F16] {
        let worst = qwen_vl_worst("qwen25vl-tiny", 14, dtype);
        eprintln!("Qwen2.5-VL {dtype:?}: log P(Yes) at most {worst:.2e} from t2v_metrics' f32");
        assert!(worst <= 0.1, "{dtype:?}: log P(Yes) drifts {worst} from t2v_metrics' f32");
    }
}

/// A Qwen2.5-VL config as transformers 4 wrote the hub's checkpoints (the text settings at the
/// top, `rope_scaling` of type `mrope`, `rope_theta`) scores as the fixture's transformers 5
/// config does.
#[test]
fn qwen25vl_reads_transformers_4_configs_as_transformers_5_ones() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_model("qwen25vl-tiny");
    for entry in std::fs::read_dir(&fixture).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().join("config.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut flat = config.clone();
    let object = flat.as_object_mut().unwrap();
    let text = object.remove("text_config").unwrap();
    for (key, value) in text.as_object().unwrap() {
        object.entry(key.clone()).or_insert_with(|| value.clone());
    }
    let rope = object.remove("rope_parameters").unwrap();
    object.insert("rope_theta".into(), rope["rope_theta"].clone());
    object.insert("rope_scaling".into(), serde_json::json!({"type": "mrope", "mrope_section": rope["mrope_section"]}));
    object.insert("model_type".into(), "qwen2_5_vl".into());
    std::fs::write(&path, flat.to_string()).unwrap();
    let old = qwen25vl::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).unwrap();
    let expected = expected_of("qwen25vl-tiny");
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let score = |model: &Qwen3VlVqa| {
        let state = model.encode_images(&qwen_vl_pixels(model, "qwen25vl-tiny", "image2.png")).unwrap();
        let index = Tensor::new(vec![0u32; captions.len()], &test_device()).unwrap();
        model.score_pairs(&state.index_select(&index, 0).unwrap(), &captions).unwrap().to_vec1::<f32>().unwrap()
    };
    assert_eq!(score(&old), score(&qwen_vl("qwen25vl-tiny", DType::F32)));
    // A window size that is not a whole number of merged patches is named.
    let mut bad = flat.clone();
    bad["vision_config"]["window_size"] = 50.into();
    std::fs::write(&path, bad.to_string()).unwrap();
    let error = qwen25vl::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).err().unwrap();
    assert!(error.to_string().contains("window_size 50"), "{error}");
}

/// Qwen3-VL's mixture of experts (`qwen3_vl_moe`: fused experts in the hub's layout, an
/// always-renormalising router, one dense layer by `mlp_only_layers`, its own output layer),
/// scored by t2v_metrics' `qwen3-vl-30b-a3b` entry run unchanged; in half precision with the
/// router's logits in f32 (`experts.rs`).
#[test]
fn qwen3vl_moe_log_p_yes_matches_t2v_metrics() {
    let worst = qwen_vl_worst("qwen3vlmoe-tiny", 16, DType::F32);
    eprintln!("Qwen3-VL-MoE f32: log P(Yes) at most {worst:.2e} from t2v_metrics'");
    assert!(worst <= 1e-4, "log P(Yes) differs from t2v_metrics' by {worst}");
    // Half precision: within twice the drift of transformers' own model in that dtype on the
    // same inputs (the generator records it).
    for (dtype, name) in [(DType::BF16, "bf16"), (DType::F16, "f16")] {
        let worst = qwen_vl_worst("qwen3vlmoe-tiny", 16, dtype);
        let theirs = expected_of("qwen3vlmoe-tiny")["transformers_half_precision_drift"][name].as_f64().unwrap();
        eprintln!(
            "Qwen3-VL-MoE {name}: log P(Yes) at most {worst:.2e} from t2v_metrics' f32 (transformers' {theirs:.2e})"
        );
        assert!(worst <= 2.0 * theirs, "{name}: log P(Yes) drifts {worst}, transformers' {theirs}");
    }
}

/// The fixture's checkpoint with its expert tensors rewritten by `edit`, in a temporary directory.
fn qwen3vl_moe_with_experts(edit: impl Fn(&Tensor) -> Tensor) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_model("qwen3vlmoe-tiny");
    for entry in std::fs::read_dir(&fixture).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    let experts: Vec<String> = tensors.keys().filter(|k| k.contains(".mlp.experts.")).cloned().collect();
    assert_eq!(experts.len(), 4, "two layers of fused experts: {experts:?}");
    for name in experts {
        let edited = edit(&tensors[&name]);
        tensors.insert(name, edited);
    }
    candle_core::safetensors::save(&tensors, &path).unwrap();
    dir
}

/// A checkpoint saved by transformers 5 holds the experts transposed from the hub's layout
/// (`(experts, out, in)`): read as transformers reads it, it scores the same; a tensor of
/// neither shape is refused naming it and the shape the config implies, a mixture that cannot
/// route naming the key.
#[test]
fn qwen3vl_moe_reads_transformers_5_saved_experts_and_refuses_other_shapes() {
    let transposed = qwen3vl_moe_with_experts(|t| t.transpose(1, 2).unwrap().contiguous().unwrap());
    let saved = Qwen3VlVqa::load(&hub::from_dir(transposed.path()).unwrap(), DType::F32, &test_device()).unwrap();
    let hub_layout = qwen_vl("qwen3vlmoe-tiny", DType::F32);
    let captions = ["a red square above a blue circle", "two green triangles"];
    let score = |model: &Qwen3VlVqa| {
        let state = model.encode_images(&qwen_vl_pixels(model, "qwen3vlmoe-tiny", "image1.png")).unwrap();
        let index = Tensor::new(vec![0u32; captions.len()], &test_device()).unwrap();
        model.score_pairs(&state.index_select(&index, 0).unwrap(), &captions).unwrap().to_vec1::<f32>().unwrap()
    };
    assert_eq!(score(&saved), score(&hub_layout));
    let cut = qwen3vl_moe_with_experts(|t| t.narrow(2, 0, t.dim(2).unwrap() - 1).unwrap().contiguous().unwrap());
    let error = Qwen3VlVqa::load(&hub::from_dir(cut.path()).unwrap(), DType::F32, &test_device()).err().unwrap();
    let message = error.to_string();
    assert!(message.contains("model.language_model.layers.0.mlp.experts.gate_up_proj"), "{message}");
    assert!(message.contains("[8, 64, 48]"), "{message}");
    // A mixture that cannot route (more experts a token than it has) is refused by key.
    let config_path = transposed.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["text_config"]["num_experts_per_tok"] = 9.into();
    std::fs::write(&config_path, config.to_string()).unwrap();
    let error = Qwen3VlVqa::load(&hub::from_dir(transposed.path()).unwrap(), DType::F32, &test_device()).err().unwrap();
    assert!(error.to_string().contains("text_config.num_experts_per_tok 9 of num_experts 8"), "{error}");
}

/// A Qwen2.5-VL config that gives its decoder experts is refused by key: the family has no
/// mixture of experts to compute them by.
#[test]
fn a_qwen25vl_config_with_experts_is_refused_by_key() {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model("qwen25vl-tiny")).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["text_config"]["num_experts"] = 4.into();
    config["text_config"]["num_experts_per_tok"] = 2.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let error = qwen25vl::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).err().unwrap();
    assert!(error.to_string().contains("text_config.num_experts 4"), "{error}");
}

/// Images shown together just after each was encoded alone (VisMin's image task, item by item)
/// take their tower outputs from those runs: the state is the one a fresh model computes, bit
/// for bit, and the tower runs once per image; an image not among the last few encoded runs it.
#[test]
fn images_shown_together_after_alone_reuse_their_tower_runs() {
    let values = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for (fixture, _) in QWEN_VL {
        let warm = qwen_vl(fixture, DType::F32);
        let images: Vec<Tensor> =
            ["image0.png", "image2.png"].iter().map(|f| qwen_vl_pixels(&warm, fixture, f)).collect();
        for image in &images {
            warm.encode_images(image).unwrap();
        }
        assert_eq!(warm.tower_runs(), 2);
        let state = warm.encode_shown_together(&images).unwrap();
        assert_eq!(warm.tower_runs(), 2, "{fixture}: the tower ran again on images it had just encoded");
        let fresh = qwen_vl(fixture, DType::F32);
        assert_eq!(values(&state), values(&fresh.encode_shown_together(&images).unwrap()), "{fixture}");
        assert_eq!(fresh.tower_runs(), 2);
        // Four other images later, the first is no longer held.
        for file in ["image1.png", "image3.png"] {
            warm.encode_images(&qwen_vl_pixels(&warm, fixture, file)).unwrap();
        }
        let flipped = qwen_vl_pixels(&warm, fixture, "image1.png").flip(&[3]).unwrap();
        warm.encode_images(&flipped).unwrap();
        warm.encode_images(&flipped.flip(&[2]).unwrap()).unwrap();
        assert_eq!(warm.tower_runs(), 6);
        warm.encode_images(&images[0]).unwrap();
        assert_eq!(warm.tower_runs(), 7, "{fixture}: an image encoded five images ago is not held");
    }
    // Gemma 3: a batch of both images (as the runner batches an item's images), then both
    // together; an image held is not run again in a batch of others.
    let warm = model(DType::F32);
    let folder = workspace_root().join("crates/benchctl/tests/fixtures/vqa-winoground/images");
    let images: Vec<Tensor> =
        ["ex_0_img_0.png", "ex_0_img_1.png", "ex_1_img_0.png"].iter().map(|f| pixels(&warm, &folder.join(f))).collect();
    warm.encode_images(&Tensor::cat(&images[..2], 0).unwrap()).unwrap();
    assert_eq!(warm.tower_runs(), 2);
    let state = warm.encode_shown_together(&images[..2]).unwrap();
    assert_eq!(warm.tower_runs(), 2, "gemma3: the tower ran again on images it had just encoded");
    let fresh = model(DType::F32);
    assert_eq!(values(&state), values(&fresh.encode_shown_together(&images[..2]).unwrap()), "gemma3");
    warm.encode_images(&Tensor::cat(&images[1..], 0).unwrap()).unwrap();
    assert_eq!(warm.tower_runs(), 3, "gemma3: only the image not held is run");
}

#[test]
fn qwen3vl_half_precision_drift_is_bounded() {
    for dtype in [DType::BF16, DType::F16] {
        let worst = qwen3vl_worst(dtype);
        assert!(worst <= 0.1, "{dtype:?}: log P(Yes) drifts {worst} from t2v_metrics' f32");
    }
}

#[test]
fn qwen3vl_sizes_follow_qwen_vl_utils_smart_resize() {
    let expected = expected_of("qwen3vl-tiny");
    for case in expected["smart_resize"].as_array().unwrap() {
        let get = |k: &str| case[k].as_u64().unwrap() as usize;
        let theirs: Vec<usize> =
            case["resized"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let ours = benchctl_models::preprocess::smart_resize(
            get("height"),
            get("width"),
            32,
            get("min_pixels"),
            get("max_pixels"),
        );
        assert_eq!(vec![ours.0, ours.1], theirs, "{case}");
    }
    // Beyond qwen_vl_utils' aspect ratio of 200 an image is refused, as there.
    let model = qwen3vl(DType::F32);
    let p = model.preprocessor();
    assert!(p.check_input(4, 600).is_ok());
    let error = p.check_input(3, 1000).unwrap_err().to_string();
    assert!(error.contains("aspect ratio 333") && error.contains("200"), "{error}");
}

/// A Qwen3-VL config as transformers 4.57 wrote the hub's checkpoints (`rope_scaling` and
/// `rope_theta` in `text_config`, no vision `rope_parameters`) scores as t2v_metrics does, and as
/// transformers 5's `rope_parameters` layout does.
#[test]
fn qwen3vl_reads_transformers_4_configs_as_transformers_5_ones() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_model("qwen3vl-tiny");
    for entry in std::fs::read_dir(&fixture).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let rope = config["text_config"].as_object_mut().unwrap().remove("rope_parameters").unwrap();
    config["text_config"]["rope_theta"] = rope["rope_theta"].clone();
    let mut scaling = rope.clone();
    scaling.as_object_mut().unwrap().remove("rope_theta");
    config["text_config"]["rope_scaling"] = scaling;
    config["vision_config"].as_object_mut().unwrap().remove("rope_parameters");
    std::fs::write(&path, config.to_string()).unwrap();
    let old = Qwen3VlVqa::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).unwrap();
    let expected = expected_of("qwen3vl-tiny");
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let score = |model: &Qwen3VlVqa| {
        let state = model.encode_images(&qwen3vl_pixels(model, "image2.png")).unwrap();
        let index = Tensor::new(vec![0u32; captions.len()], &test_device()).unwrap();
        model.score_pairs(&state.index_select(&index, 0).unwrap(), &captions).unwrap().to_vec1::<f32>().unwrap()
    };
    let ours = score(&old);
    for pair in expected["pairs"].as_array().unwrap().iter().filter(|p| p["image"] == 2) {
        let theirs = pair["t2v_metrics_p_yes"].as_f64().unwrap().ln();
        let got = f64::from(ours[pair["caption"].as_u64().unwrap() as usize]);
        assert!((got - theirs).abs() <= 1e-4, "{got} vs t2v_metrics' {theirs}");
    }
    assert_eq!(ours, score(&qwen3vl(DType::F32)));
}

/// Each generative family's whole prompt, id for id, as its own processor (InternVL:
/// t2v_metrics' own prompt builder) builds it from the committed tiny checkpoint, on captions
/// that stress a tokenizer (empty, casing, punctuation
/// and curly quotes, full-width and ligature forms, accents, Japanese, emoji, tabs and newlines,
/// runs of spaces, 500 tokens): `scripts/fixtures/gen_prompt_tokens_fixture.py`.
#[test]
fn prompts_tokenize_as_each_processor_does_on_hard_captions() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_model("prompt-tokens.json")).unwrap()).unwrap();
    let cases = |family: &str| -> Vec<(String, Vec<u32>, usize)> {
        let cases = expected[family].as_array().unwrap();
        assert!(cases.len() >= 10, "{family}");
        cases
            .iter()
            .map(|c| {
                let ids = c["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
                (c["caption"].as_str().unwrap().to_string(), ids, c["image_tokens"].as_u64().unwrap_or(0) as usize)
            })
            .collect()
    };
    let gemma = model(DType::F32);
    for (caption, ids, _) in cases("gemma3-tiny") {
        assert_eq!(gemma.prompt_ids(&caption).unwrap(), ids, "Gemma 3, {caption:?}");
    }
    let paligemma = paligemma(DType::F32);
    for (caption, ids, _) in cases("paligemma-tiny") {
        assert_eq!(paligemma.caption_ids(&caption).unwrap().0, ids, "PaliGemma, {caption:?}");
    }
    for fixture in ["qwen3vl-tiny", "qwen25vl-tiny"] {
        let qwen = qwen_vl(fixture, DType::F32);
        for (caption, ids, tokens) in cases(fixture) {
            assert!(tokens > 0);
            assert_eq!(qwen.prompt_ids(tokens, &caption).unwrap(), ids, "{fixture}, {caption:?}");
        }
    }
    // t2v_metrics' own InternVL prompt over a one-tile image: its `<IMG_CONTEXT>` run recorded
    // by its length.
    for fixture in ["internvl-tiny", "internvl35-tiny"] {
        let internvl =
            InternVlVqa::load(&hub::from_dir(&fixture_model(fixture)).unwrap(), DType::F32, &test_device()).unwrap();
        let cases = expected[fixture].as_array().unwrap();
        assert!(cases.len() >= 10, "{fixture}");
        for case in cases {
            let caption = case["caption"].as_str().unwrap();
            let ids = |key: &str| {
                case[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect::<Vec<_>>()
            };
            let context =
                std::iter::repeat_n(internvl.context_token(), case["context_tokens"].as_u64().unwrap() as usize);
            let theirs: Vec<u32> = ids("prefix_ids").into_iter().chain(context).chain(ids("suffix_ids")).collect();
            assert_eq!(internvl.prompt_ids(1, caption).unwrap(), theirs, "{fixture}, {caption:?}");
        }
    }
}

/// A caption holding the text of the token that stands for the image in a family's prompt is
/// refused, naming the caption and the token (`ErrorKind::UnusableInput`), where the reference
/// refuses it too (Gemma 3's processor or model, Qwen-VL's processor) or moves the image there
/// (PaliGemma's processor, whose ids then differ from any prompt with the image first).
#[test]
fn a_caption_holding_the_image_token_is_refused_as_its_reference_refuses_it() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_model("prompt-tokens.json")).unwrap()).unwrap();
    let gemma = model(DType::F32);
    let paligemma = paligemma(DType::F32);
    let qwen3 = qwen_vl("qwen3vl-tiny", DType::F32);
    let qwen25 = qwen_vl("qwen25vl-tiny", DType::F32);
    let families: [(&str, &dyn LocalVqaCaptions); 4] =
        [("gemma3-tiny", &gemma), ("paligemma-tiny", &paligemma), ("qwen3vl-tiny", &qwen3), ("qwen25vl-tiny", &qwen25)];
    for (family, model) in families {
        let refused = expected[format!("{family} refused")].as_array().unwrap();
        assert!(!refused.is_empty());
        for case in refused {
            let caption = case["caption"].as_str().unwrap();
            // The reference either failed or put the image's tokens where the caption's are.
            match (case.get("error"), case.get("ids")) {
                (Some(error), None) => assert!(!error.as_str().unwrap().is_empty()),
                (None, Some(ids)) => assert_eq!(family, "paligemma-tiny", "{caption:?}: {ids}"),
                other => panic!("{family} {caption:?}: {other:?}"),
            }
            let error = model.ids_of(caption).expect_err(caption);
            assert_eq!(error.kind(), benchctl_models::ErrorKind::UnusableInput, "{family} {caption:?}");
            let message = error.to_string();
            let token = caption.split_whitespace().nth(1).unwrap();
            assert!(message.contains(&format!("{caption:?}")) && message.contains(token), "{family}: {message}");
        }
    }
}

/// The prompt part of [`LocalVqa::caption_ids`], for the families above as one kind.
trait LocalVqaCaptions {
    fn ids_of(&self, caption: &str) -> benchctl_models::Result<Vec<u32>>;
}

impl<T: LocalVqa> LocalVqaCaptions for T {
    fn ids_of(&self, caption: &str) -> benchctl_models::Result<Vec<u32>> {
        self.caption_ids(caption).map(|(prompt, _)| prompt)
    }
}

/// Casing, punctuation, parentheses, several lines, non-ASCII, "ANSWER:" phrases, replies
/// naming both options or neither.
#[test]
fn replies_match_labels_as_vismins_official_reader_matches_them() {
    use benchctl_models::vqascore::reply::{label_in_reply, names, ReplyReading};
    let path = workspace_root().join("crates/benchctl-suites/tests/fixtures/vismin-vqa/replies.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let matches = fixture["matches"].as_array().unwrap();
    assert!(matches.len() > 80);
    let mut differ = Vec::new();
    for case in matches {
        let (reply, label) = (case["reply"].as_str().unwrap(), case["label"].as_str().unwrap());
        let official = case["match"].as_bool().unwrap();
        if label_in_reply(reply, label) != official || names(ReplyReading::LabelInReply, reply, label) != official {
            differ.push(format!("{reply:?} for {label:?}: official {official}"));
        }
    }
    assert!(differ.is_empty(), "read otherwise than the official code: {differ:#?}");
    // Some replies name both options there; NaturalBench's reader takes only the first found.
    let both: Vec<&str> = (matches.chunks(2))
        .filter(|pair| pair.iter().all(|c| c["match"].as_bool().unwrap()))
        .map(|pair| pair[0]["reply"].as_str().unwrap())
        .collect();
    assert!(both.len() >= 3, "{both:?}");
    for reply in both {
        let labels = if reply.to_lowercase().contains("first") { ["First", "Second"] } else { ["A", "B"] };
        let found: Vec<bool> = labels.iter().map(|l| names(ReplyReading::FirstFound, reply, l)).collect();
        assert_eq!(found.iter().filter(|&&f| f).count(), 1, "{reply:?}: {found:?}");
    }
}

/// Two and three images in one prompt, of other modes (RGBA, LA, a palette with a transparent
/// entry, grey with a `tRNS`, 16-bit grey, a CMYK JPEG) and sizes beside RGB ones, read as the
/// runner reads them (`load_pil`, each family's mode rule): log P("Yes") within 1e-4 of Gemma 3's
/// processor and of t2v_metrics' own Qwen-VL input building given every image in one user turn
/// (a set with a JPEG within [`JPEG_SCORE_BOUND`]).
/// How far a score over a JPEG may be from the reference's: none with libjpeg-turbo (Pillow's own
/// decoder, `.ci/run` runs this test with it); zune-jpeg's pixels differ by a level on some
/// pixels (docs/models.md, "Decoding"), which moves the tiny models' log P("Yes") by a few 1e-3.
const JPEG_SCORE_BOUND: f64 =
    if matches!(benchctl_suites::image::JPEG_DECODER.as_bytes(), b"libjpeg-turbo") { 1e-4 } else { 5e-3 };

#[test]
fn images_of_other_modes_and_sizes_shown_together_score_as_the_references_do() {
    let path = workspace_root().join("crates/benchctl-models/tests/fixtures/together-modes.json");
    let expected: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = expected["cases"].as_array().unwrap();
    let gemma = model(DType::F32);
    let (qwen3, qwen25) = (qwen_vl("qwen3vl-tiny", DType::F32), qwen_vl("qwen25vl-tiny", DType::F32));
    let families: [(&str, &dyn FusionEncoder); 3] =
        [("gemma3-tiny", &gemma), ("qwen3vl-tiny", &qwen3), ("qwen25vl-tiny", &qwen25)];
    for (fixture, family) in families {
        for (case, want) in cases.iter().zip(expected[fixture].as_array().unwrap()) {
            let images: Vec<Tensor> = (case["images"].as_array().unwrap().iter())
                .map(|file| {
                    let path = workspace_root().join(file.as_str().unwrap());
                    let image = benchctl_suites::ImageSource::File(path).load_pil().unwrap();
                    let p = family.preprocessor();
                    let (w, h) = image.dimensions();
                    let (out_w, out_h) = p.output_size(w as usize, h as usize);
                    let mut out = vec![0.0; p.len_for(w as usize, h as usize)];
                    p.apply_pil(&image, &mut out);
                    Tensor::from_vec(out, (1, 3, out_h, out_w), &test_device()).unwrap()
                })
                .collect();
            let state = family.encode_shown_together(&images).unwrap();
            let caption = case["caption"].as_str().unwrap();
            let got = family.score_pairs(&state, &[caption]).unwrap().to_vec1::<f32>().unwrap()[0];
            let want = want.as_f64().unwrap();
            let jpeg = case["images"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().ends_with(".jpg"));
            let bound = if jpeg { JPEG_SCORE_BOUND } else { 1e-4 };
            assert!((f64::from(got) - want).abs() <= bound, "{fixture} {}: {got} against {want}", case["images"]);
        }
    }
}
