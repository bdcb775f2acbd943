//! InternVL3 by VQAScore on the tiny random-weight checkpoint of
//! `scripts/fixtures/gen_internvl_fixture.py`, whose expected values come from `t2v_metrics`'
//! `InternVLModel` run unchanged (its `load_image` tiles, its `internvl2_5` prompt) over
//! `transformers`' `InternVLForConditionalGeneration`: the tile grids `dynamic_preprocess`
//! picks, every tile's pixels, every prompt's ids and every pair's log P("Yes"); and images
//! shown together in one prompt as InternVL's model card shows separate images
//! (`scripts/fixtures/gen_internvl_together_fixture.py`).

use benchctl_models::hub;
use benchctl_models::models::internvl::InternVlVqa;
use benchctl_models::preprocess::tiles::TileLayout;
use benchctl_models::vqascore::local::LocalVqa;
use benchctl_models::{ErrorKind, FusionEncoder};
use benchctl_testkit::{fixture_model, test_device};
use candle_core::{DType, Tensor};

const TILE: usize = 448;

/// InternVL3 (a Qwen2 decoder), InternVL3.5 (a Qwen3 decoder) and InternVL3.5's mixture of
/// experts (a Qwen3-MoE decoder: 4 experts, 2 a token, one dense layer).
const FIXTURES: [&str; 3] = ["internvl-tiny", "internvl35-tiny", "internvl35moe-tiny"];

fn expected() -> serde_json::Value {
    expected_of("internvl-tiny")
}

fn expected_of(fixture: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture_model(fixture).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn model(dtype: DType) -> InternVlVqa {
    model_of("internvl-tiny", dtype)
}

fn model_of(fixture: &str, dtype: DType) -> InternVlVqa {
    InternVlVqa::load(&hub::from_dir(&fixture_model(fixture)).unwrap(), dtype, &test_device()).unwrap()
}

/// A fixture image as the runner prepares it: decoded in its own mode, packed tiles (every
/// fixture holds the same images).
fn packed(model: &dyn FusionEncoder, file: &str) -> Tensor {
    let path = fixture_model("internvl-tiny").join("images").join(file);
    let image = benchctl_suites::ImageSource::File(path).load_pil().unwrap();
    let p = model.preprocessor();
    let (w, h) = image.dimensions();
    let (out_w, out_h) = p.output_size(w as usize, h as usize);
    let mut out = vec![0.0; p.len_for(w as usize, h as usize)];
    p.apply_pil(&image, &mut out);
    Tensor::from_vec(out, (1, 3, out_h, out_w), &test_device()).unwrap()
}

fn numbers(value: &serde_json::Value) -> Vec<f64> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
}

#[test]
fn tile_grids_follow_dynamic_preprocess() {
    for grid in expected()["grids"].as_array().unwrap() {
        let size: Vec<usize> = grid["size"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let layout = TileLayout::for_image(size[0], size[1], TILE, 12);
        assert_eq!(layout.tiles() as u64, grid["tiles"].as_u64().unwrap(), "{size:?}: {layout:?}");
    }
}

/// Every tile of every image, in t2v_metrics' order (the grid row by row, then the
/// thumbnail): its sum and 129 values spread over it, as `load_image` makes them.
#[test]
fn tiles_are_cut_and_normalised_as_load_image_does() {
    let model = model(DType::F32);
    for image in expected()["images"].as_array().unwrap() {
        let file = image["file"].as_str().unwrap();
        let pixels = packed(&model, file).get(0).unwrap();
        let (_, h, w) = pixels.dims3().unwrap();
        let layout = TileLayout::of(w, h, TILE).unwrap();
        assert_eq!(layout.tiles() as u64, image["tiles"].as_u64().unwrap(), "{file}");
        let picks: Vec<usize> = numbers(&image["picked_indices"]).iter().map(|&i| i as usize).collect();
        let origins = layout.origins(TILE);
        for (t, &(left, top)) in origins.iter().enumerate() {
            let tile = pixels.narrow(2, left, TILE).unwrap().narrow(1, top, TILE).unwrap();
            let values = tile.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let theirs = numbers(&image["picked_values"][t]);
            let worst = picks.iter().zip(&theirs).map(|(&i, &v)| (f64::from(values[i]) - v).abs()).fold(0.0, f64::max);
            assert!(worst < 1e-6, "{file} tile {t}: values differ by {worst}");
            let sum: f64 = values.iter().map(|&v| f64::from(v)).sum();
            let their_sum = image["tile_sums"][t].as_f64().unwrap();
            assert!((sum - their_sum).abs() < 1e-7 * values.len() as f64, "{file} tile {t}: {sum} vs {their_sum}");
        }
    }
}

/// The largest difference of `dtype`'s log P("Yes") from t2v_metrics' (f32) over every pair,
/// checking each prompt's ids on the way.
fn worst(fixture: &str, dtype: DType) -> f64 {
    let expected = expected_of(fixture);
    let model = model_of(fixture, dtype);
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let images = expected["images"].as_array().unwrap();
    let pairs = expected["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), images.len() * captions.len());
    let mut worst = 0.0f64;
    for (i, image) in images.iter().enumerate() {
        let state = model.encode_images(&packed(&model, image["file"].as_str().unwrap())).unwrap();
        let index = Tensor::new(vec![0u32; captions.len()], &test_device()).unwrap();
        let got =
            model.score_pairs(&state.index_select(&index, 0).unwrap(), &captions).unwrap().to_vec1::<f32>().unwrap();
        let tiles = image["tiles"].as_u64().unwrap() as usize;
        for pair in pairs.iter().filter(|p| p["image"].as_u64() == Some(i as u64)) {
            let c = pair["caption"].as_u64().unwrap() as usize;
            let ids = |key: &str| -> Vec<u32> { numbers(&pair[key]).iter().map(|&v| v as u32).collect() };
            let context = std::iter::repeat_n(model.context_token(), pair["context_tokens"].as_u64().unwrap() as usize);
            let theirs_ids: Vec<u32> = ids("prefix_ids").into_iter().chain(context).chain(ids("suffix_ids")).collect();
            assert_eq!(model.prompt_ids(tiles, captions[c]).unwrap(), theirs_ids, "image {i} caption {c}: the prompt");
            let theirs = pair["t2v_metrics_p_yes"].as_f64().unwrap().ln();
            assert!((theirs - pair["log_p_yes"].as_f64().unwrap()).abs() < 1e-5);
            worst = worst.max((f64::from(got[c]) - theirs).abs());
        }
    }
    worst
}

/// InternViT-6B's tower (InternVL3-38B and -78B): RMS norms, RMS-normed queries and keys, no
/// query/key/value biases (`scripts/fixtures/gen_internvit6b_fixture.py`), on images of 1, 3
/// and 13 tiles: log P("Yes") within 1e-4 of t2v_metrics' over transformers' model.
#[test]
fn internvit6b_towers_score_as_t2v_metrics_does() {
    let model = model_of("internvit6b-tiny", DType::F32);
    let text = std::fs::read_to_string(fixture_model("internvit6b-tiny").join("expected.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pairs = expected["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6);
    for pair in pairs {
        let (file, caption) = (pair["image"].as_str().unwrap(), pair["caption"].as_str().unwrap());
        let state = model.encode_images(&packed(&model, file)).unwrap();
        let got = model.score_pairs(&state, &[caption]).unwrap().to_vec1::<f32>().unwrap()[0];
        let want = pair["log_p_yes"].as_f64().unwrap();
        assert!((f64::from(got) - want).abs() <= 1e-4, "{file} {caption:?}: {got} against {want}");
    }
}

/// Two and three images in one prompt (`Image-1: <image>\nImage-2: <image>\n…`, each its own
/// tiles), in f32: the prompt's ids and log P("Yes") as t2v_metrics' `_build_inputs` and
/// transformers give them.
#[test]
fn images_shown_together_are_labelled_and_tiled_as_the_model_card_shows_them() {
    for fixture in &FIXTURES[..2] {
        let model = model_of(fixture, DType::F32);
        let text = std::fs::read_to_string(fixture_model(fixture).join("together.json")).unwrap();
        let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cases = expected["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 3);
        for case in cases {
            let files: Vec<&str> = case["images"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
            let tiles: Vec<usize> = numbers(&case["tiles"]).iter().map(|&t| t as usize).collect();
            let caption = case["caption"].as_str().unwrap();
            // Their ids, each run of <IMG_CONTEXT> recorded as minus its length.
            let theirs: Vec<u32> = numbers(&case["ids"])
                .iter()
                .flat_map(|&id| match id < 0.0 {
                    true => vec![model.context_token(); -id as usize],
                    false => vec![id as u32],
                })
                .collect();
            assert_eq!(model.prompt_ids_together(&tiles, caption).unwrap(), theirs, "{fixture} {files:?}");
            let images: Vec<Tensor> = files.iter().map(|f| packed(&model, f)).collect();
            let state = model.encode_shown_together(&images).unwrap();
            let got = model.score_pairs(&state, &[caption]).unwrap().to_vec1::<f32>().unwrap()[0];
            let want = case["log_p_yes"].as_f64().unwrap();
            assert!((f64::from(got) - want).abs() <= 1e-4, "{fixture} {files:?}: {got} against {want}");
        }
    }
}

/// Images shown together just after each was encoded alone (VisMin's image task, item by item)
/// take their tile features from those runs: the state is the one a fresh model computes, bit
/// for bit, and the tower runs once per image.
#[test]
fn images_shown_together_after_alone_reuse_their_tower_runs() {
    let text = std::fs::read_to_string(fixture_model("internvl-tiny").join("together.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let files: Vec<&str> =
        expected["cases"][0]["images"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    let warm = model_of("internvl-tiny", DType::F32);
    let images: Vec<Tensor> = files.iter().map(|f| packed(&warm, f)).collect();
    for image in &images {
        warm.encode_images(image).unwrap();
    }
    assert_eq!(warm.tower_runs(), images.len());
    let state = warm.encode_shown_together(&images).unwrap();
    assert_eq!(warm.tower_runs(), images.len(), "the tower ran again on images it had just encoded");
    let fresh = model_of("internvl-tiny", DType::F32);
    let theirs = fresh.encode_shown_together(&images).unwrap();
    assert_eq!(fresh.tower_runs(), images.len());
    let values = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(values(&state), values(&theirs));
}

#[test]
fn internvl_log_p_yes_matches_t2v_metrics() {
    for fixture in FIXTURES {
        let worst = worst(fixture, DType::F32);
        eprintln!("{fixture} f32: log P(Yes) at most {worst:.2e} from t2v_metrics'");
        assert!(worst <= 1e-4, "{fixture}: log P(Yes) differs from t2v_metrics' by {worst}");
        // Half precision: within twice the drift of transformers' own model in that dtype on
        // the same inputs (the generator records it).
        for (dtype, name) in [(DType::BF16, "bf16"), (DType::F16, "f16")] {
            let worst = self::worst(fixture, dtype);
            let theirs = expected_of(fixture)["transformers_half_precision_drift"][name].as_f64().unwrap();
            eprintln!(
                "{fixture} {name}: log P(Yes) at most {worst:.2e} from t2v_metrics' f32 (transformers' {theirs:.2e})"
            );
            assert!(
                worst <= (2.0 * theirs).max(0.01),
                "{fixture} {name}: log P(Yes) drifts {worst}, transformers' {theirs}"
            );
        }
    }
}

#[test]
fn a_caption_holding_the_image_context_token_is_refused() {
    let model = model(DType::F32);
    let error = model.caption_ids("a cat <IMG_CONTEXT> on a mat").err().unwrap();
    assert_eq!(error.kind(), ErrorKind::UnusableInput);
    assert!(error.to_string().contains("<IMG_CONTEXT>"), "{error}");
    // Text the remote model's prompt takes as text, or as its own tokens, is scored.
    for caption in ["a cat <image> on a mat", "<img> a frame </img>", "IMG_CONTEXT"] {
        assert!(model.caption_ids(caption).is_ok(), "{caption}");
    }
}

/// A copy of the fixture with `edit` applied to its config.
fn with_config(edit: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_model("internvl-tiny");
    for name in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture.join(name), dir.path().join(name)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

#[test]
fn configs_it_cannot_compute_exactly_are_refused_by_key() {
    let cases: [(&str, &str, serde_json::Value); 6] = [
        ("vision_config", "norm_type", serde_json::json!("group_norm")),
        ("text_config", "model_type", serde_json::json!("gpt_oss")),
        ("text_config", "use_sliding_window", serde_json::json!(true)),
        ("", "vision_feature_layer", serde_json::json!(-2)),
        ("", "downsample_ratio", serde_json::json!(0.25)),
        ("text_config", "attention_bias", serde_json::json!(true)),
    ];
    for (section, key, value) in cases {
        let dir = with_config(|config| {
            let target = if section.is_empty() { config } else { &mut config[section] };
            target[key] = value.clone();
        });
        let error = InternVlVqa::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).err().unwrap();
        assert_eq!(error.kind(), ErrorKind::BadConfig, "{key}: {error}");
        assert!(error.to_string().contains(key), "{key}: {error}");
    }
    let scaled = with_config(|config| {
        config["text_config"]["rope_parameters"] =
            serde_json::json!({"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0});
    });
    let error = InternVlVqa::load(&hub::from_dir(scaled.path()).unwrap(), DType::F32, &test_device()).err().unwrap();
    assert!(error.to_string().contains("yarn"), "{error}");
}

/// A checkpoint saved with `transformers`' current tensor names (`model.vision_tower.*`,
/// `model.multi_modal_projector.*`, `model.language_model.*`) and an output layer of its own
/// (`lm_head.weight`, here the embeddings' copy) scores as the hub's `-hf` layout does.
#[test]
fn current_tensor_names_and_an_own_output_layer_read_as_the_hub_layout() {
    let fixture = fixture_model("internvl-tiny");
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture.join(name), dir.path().join(name)).unwrap();
    }
    let tensors = candle_core::safetensors::load(fixture.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    assert!(tensors.contains_key("vision_tower.embeddings.cls_token") && !tensors.contains_key("lm_head.weight"));
    let mut renamed: std::collections::HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(name, t)| match name.strip_prefix("language_model.model.") {
            Some(rest) => (format!("model.language_model.{rest}"), t),
            None => (format!("model.{name}"), t),
        })
        .collect();
    let embeddings = renamed["model.language_model.embed_tokens.weight"].copy().unwrap();
    renamed.insert("lm_head.weight".into(), embeddings);
    candle_core::safetensors::save(&renamed, dir.path().join("model.safetensors")).unwrap();
    let current = InternVlVqa::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).unwrap();
    let hub = model(DType::F32);
    let expected = expected();
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let score = |m: &InternVlVqa| {
        let state = m.encode_images(&packed(m, "wide.png")).unwrap();
        let rows = Tensor::new(vec![0u32; captions.len()], &test_device()).unwrap();
        m.score_pairs(&state.index_select(&rows, 0).unwrap(), &captions).unwrap().to_vec1::<f32>().unwrap()
    };
    assert_eq!(score(&current), score(&hub));
}
