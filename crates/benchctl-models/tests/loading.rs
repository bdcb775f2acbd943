//! Bad model files get errors that name the file, key or tensor; never a panic.

use benchctl_models::hub;
use benchctl_models::models::clip::ClipEncoder;
use benchctl_models::{registry, ErrorKind};
use benchctl_testkit::fixture_model;
use candle_core::{DType, Device};

/// A copy of a fixture model directory that a test may break.
fn copy_of(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

fn load(dir: &std::path::Path) -> benchctl_models::Result<ClipEncoder> {
    let files = hub::from_dir(dir)?;
    ClipEncoder::load(&files, DType::F32, &Device::Cpu)
}

#[test]
fn missing_files_are_listed() {
    let dir = copy_of("clip-tiny-a");
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let err = load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingFile);
    assert!(err.to_string().contains("missing model.safetensors, tokenizer.json"), "{err}");
    let err = load(std::path::Path::new("/nonexistent/model")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/model"), "{err}");
}

#[test]
fn weights_that_disagree_with_the_config_name_the_tensor() {
    let dir = copy_of("clip-tiny-a");
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["vision_config"]["intermediate_size"] = 100.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadWeights);
    let msg = err.to_string();
    assert!(msg.contains("vision_model.encoder.layers.0.mlp.fc1.weight") && msg.contains("[100, 48]"), "{msg}");
    assert!(msg.contains("model.safetensors"), "{msg}");
}

#[test]
fn deeper_configs_than_the_weights_name_the_missing_tensor() {
    let dir = copy_of("clip-tiny-a");
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["text_config"]["num_hidden_layers"] = 3.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("`text_model.encoder.layers.2.layer_norm1.weight` is missing"), "{err}");
}

/// A config with fewer layers than the checkpoint would silently ignore the extra ones.
#[test]
fn shallower_configs_than_the_weights_name_the_extra_layer() {
    let dir = copy_of("clip-tiny-a");
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["vision_config"]["num_hidden_layers"] = 1.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadWeights);
    let msg = err.to_string();
    assert!(
        msg.contains("`vision_model.encoder.layers.1.") && msg.contains("beyond the 1 that config.json builds"),
        "{msg}"
    );
}

/// The same for OpenCLIP's own naming (`transformer.resblocks.N`), converted on load.
#[test]
fn shallower_open_clip_configs_name_the_extra_layer() {
    for (tower, key) in [("vision_cfg", "visual.transformer.resblocks.1."), ("text_cfg", "`transformer.resblocks.1.")] {
        let dir = copy_of("openclip-tiny");
        let path = dir.path().join("open_clip_config.json");
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config["model_cfg"][tower]["layers"] = 1.into();
        std::fs::write(&path, config.to_string()).unwrap();
        let files = hub::from_dir(dir.path()).unwrap();
        let err = benchctl_models::models::clip_openai::load_open_clip(&files, DType::F32, &Device::Cpu).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BadWeights, "{tower}");
        let msg = err.to_string();
        assert!(msg.contains(key) && msg.contains("beyond the 1 that"), "{tower}: {msg}");
    }
}

/// Headers the `safetensors` crate rejects: overlapping tensors, and data the tensors do
/// not cover; both named, before any tensor is read.
#[test]
fn overlapping_or_uncovered_tensor_data_is_refused() {
    let write = |header: &str, data: usize| {
        let dir = copy_of("clip-tiny-a");
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data));
        std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
        load(dir.path()).unwrap_err()
    };
    let overlapping = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}"#;
    let err = write(overlapping, 24);
    assert_eq!(err.kind(), ErrorKind::BadWeights);
    assert!(err.to_string().contains("model.safetensors") && err.to_string().contains("not valid"), "{err}");
    let short = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let err = write(short, 40);
    assert!(err.to_string().contains("cover 16 bytes of data but the file holds 40"), "{err}");
}

#[test]
fn malformed_configs_are_named() {
    let dir = copy_of("clip-tiny-a");
    std::fs::write(dir.path().join("config.json"), "{\"text_config\": {").unwrap();
    let err = load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadConfig);
    assert!(err.to_string().contains("config.json"), "{err}");
    let cause = std::error::Error::source(&err).expect("the parser's error is kept as the cause");
    assert!(cause.downcast_ref::<serde_json::Error>().is_some(), "{cause}");

    std::fs::write(dir.path().join("config.json"), r#"{"text_config": {"hidden_act": "swish"}, "vision_config": {}}"#)
        .unwrap();
    let err = load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("text_config.hidden_act") && err.to_string().contains("swish"), "{err}");

    std::fs::write(
        dir.path().join("config.json"),
        r#"{"text_config": {"hidden_size": 30, "num_attention_heads": 4}, "vision_config": {}}"#,
    )
    .unwrap();
    let err = load(dir.path()).unwrap_err();
    assert!(err.to_string().contains("not a multiple of num_attention_heads"), "{err}");
}

#[test]
fn truncated_weights_are_an_error() {
    let dir = copy_of("clip-tiny-b");
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadWeights);
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

#[test]
fn unknown_models_list_the_zoo() {
    let err = registry::find("clip-vit-b33").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnknownModel);
    assert!(err.to_string().contains("known models are clip-vit-b32"), "{err}");
}

#[test]
fn model_directories_are_recognised_by_model_type() {
    let dir = copy_of("clip-tiny-a");
    let config = dir.path().join("config.json");
    assert_eq!(registry::detect_architecture(&config).unwrap(), benchctl_models::models::clip::ARCHITECTURE);
    let qwen = benchctl_testkit::fixture_model("qwen3vl-tiny").join("config.json");
    assert_eq!(registry::detect_architecture(&qwen).unwrap(), benchctl_models::models::qwen3vl::ARCHITECTURE);
    let qwen_moe = benchctl_testkit::fixture_model("qwen3vlmoe-tiny").join("config.json");
    assert_eq!(registry::detect_architecture(&qwen_moe).unwrap(), benchctl_models::models::qwen3vl::ARCHITECTURE);
    let qwen25 = benchctl_testkit::fixture_model("qwen25vl-tiny").join("config.json");
    assert_eq!(registry::detect_architecture(&qwen25).unwrap(), benchctl_models::models::qwen25vl::ARCHITECTURE);
    let internvl = benchctl_testkit::fixture_model("internvl-tiny").join("config.json");
    assert_eq!(registry::detect_architecture(&internvl).unwrap(), benchctl_models::models::internvl::ARCHITECTURE);
    let clip_t5 = benchctl_testkit::fixture_model("clip-flant5-tiny").join("config.json");
    assert_eq!(registry::detect_architecture(&clip_t5).unwrap(), benchctl_models::models::clip_t5::ARCHITECTURE);
    std::fs::write(&config, r#"{"model_type": "flava"}"#).unwrap();
    let err = registry::detect_architecture(&config).unwrap_err();
    assert!(
        err.to_string().contains(
            "model_type `flava` is not supported (supported: clip, siglip, siglip2, metaclip_2, blip, fiber, gemma3, paligemma, qwen3_vl, qwen3_vl_moe, qwen2_5_vl, internvl, clip_t5)"
        ),
        "{err}"
    );
    // Each open_clip family once, its timm towers listed together.
    assert!(
        err.to_string().contains("; a pe-core directory has open_clip_config.json naming a timm tower vit_pe_core_*;"),
        "{err}"
    );
    assert!(
        err.to_string().contains("naming a timm tower of vit_base_patch16_siglip_*, vit_base_patch32_siglip_*,"),
        "{err}"
    );
    std::fs::write(&config, r#"{"model_type": "internvl_chat"}"#).unwrap();
    let err = registry::detect_architecture(&config).unwrap_err();
    assert!(err.to_string().contains("OpenGVLab/InternVL3-2B-hf"), "{err}");
}

/// Each architecture's caption limit: a text that fits loses nothing, a longer one loses
/// tokens, and every extra token past the context counts.
#[test]
fn caption_limits_report_what_the_tokenizers_cut() {
    use benchctl_models::hub;
    for (fixture, architecture, context) in [
        ("clip-tiny-a", benchctl_models::models::clip::ARCHITECTURE, 77),
        ("siglip-tiny", benchctl_models::models::siglip::ARCHITECTURE, 0),
        ("siglip2-tiny", benchctl_models::models::siglip::ARCHITECTURE, 64),
        ("metaclip2-tiny", benchctl_models::models::metaclip2::ARCHITECTURE, 32),
        ("blip-tiny", benchctl_models::models::blip::ARCHITECTURE, 0),
    ] {
        let files = hub::from_dir(&benchctl_testkit::fixture_model(fixture)).unwrap();
        let limit = architecture.caption_limit(&files, benchctl_models::registry::TextPrep::Authors).unwrap();
        if context > 0 {
            assert_eq!(limit.context, context, "{fixture}");
        }
        assert_eq!(limit.tokens_cut("a red cube").unwrap(), 0, "{fixture}");
        let long: String = (0..3 * limit.context).map(|_| "cube").collect::<Vec<_>>().join(" ");
        assert!(limit.tokens_cut(&long).unwrap() > 0, "{fixture}");
        let longer = format!("{long} cube cube");
        assert!(
            limit.tokens_cut(&longer).unwrap() > limit.tokens_cut(&long).unwrap(),
            "{fixture}: every extra token counts"
        );
    }
}

/// Benchmarks run models of random weights. An operation on a candle variable records its
/// inputs for backpropagation, which kept every activation of a forward pass alive (on a GPU,
/// 20 times PyTorch's memory): such a model's outputs must carry no graph, as a loaded one's.
#[test]
fn random_weight_models_keep_no_graph() {
    use benchctl_models::models::clip::{Clip, ClipConfig};
    let config = ClipConfig::from_file(&fixture_model("clip-tiny-a").join("config.json")).unwrap();
    let size = config.vision_config.image_size;
    let model = Clip::random(config, DType::F32, &Device::Cpu).unwrap();
    let pixels = candle_core::Tensor::randn(0f32, 1f32, (2, 3, size, size), &Device::Cpu).unwrap();
    let images = model.image_features(&pixels).unwrap();
    let texts = model.text_features(&[vec![1, 2, 3], vec![4, 5]]).unwrap();
    assert!(!images.track_op() && !texts.track_op(), "the outputs hold the graph of their computation");
}

/// A tensor the architecture does not use would be silently ignored: a checkpoint of another
/// variant (here, an ITM head beside CLIP) is refused, naming it; buffers transformers saved
/// in older checkpoints (`position_ids`) are known and accepted.
#[test]
fn tensors_the_model_does_not_use_are_refused_unless_known() {
    let with = |extra: &str, tensor: candle_core::Tensor| {
        let dir = copy_of("clip-tiny-a");
        let path = dir.path().join("model.safetensors");
        let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        tensors.insert(extra.to_string(), tensor);
        candle_core::safetensors::save(&tensors, &path).unwrap();
        (load(dir.path()), dir)
    };
    let head = candle_core::Tensor::zeros((2, 4), DType::F32, &Device::Cpu).unwrap();
    let (loaded, _dir) = with("itm_head.weight", head);
    let Err(err) = loaded else { panic!("an unused tensor is refused") };
    assert_eq!(err.kind(), ErrorKind::BadWeights);
    let msg = err.to_string();
    assert!(msg.contains("`itm_head.weight`") && msg.contains("not part of the CLIP model"), "{msg}");

    let ids = candle_core::Tensor::arange(0i64, 7, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let (loaded, _dir) = with("text_model.embeddings.position_ids", ids);
    assert!(loaded.is_ok(), "{:?}", loaded.err());
}

/// The same for OpenCLIP's own naming, converted on load: whatever the conversion leaves
/// (here a CoCa-style decoder tensor) is refused.
#[test]
fn open_clip_tensors_the_conversion_leaves_are_refused() {
    let dir = copy_of("openclip-tiny");
    let path = dir.path().join("open_clip_model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    tensors.insert("text_decoder.proj".into(), candle_core::Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap());
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let Err(err) = benchctl_models::models::clip_openai::load_open_clip(&files, DType::F32, &Device::Cpu) else {
        panic!("a tensor the conversion leaves is refused")
    };
    assert_eq!(err.kind(), ErrorKind::BadWeights);
    assert!(err.to_string().contains("`text_decoder.proj`"), "{err}");
}

/// Each architecture is declared once, and the declaration is consistent: names are unique,
/// every declared `model_type` detects its architecture (and is named in the error for an
/// unknown one), an architecture without one owns a config file that detects it, at most one
/// is released as bare PyTorch checkpoints, each offers a head, and every zoo entry's
/// architecture is in the table with a default preprocessor or a reason it has none.
#[test]
fn every_architecture_is_declared_once_and_detected_by_its_declaration() {
    use std::collections::HashSet;
    let table = registry::ARCHITECTURES;
    let names: HashSet<&str> = table.iter().map(|a| a.name()).collect();
    assert_eq!(names.len(), table.len(), "duplicate architecture names");
    let dir = tempfile::tempdir().unwrap();
    let unknown = dir.path().join("config.json");
    std::fs::write(&unknown, r#"{"model_type": "not-a-model"}"#).unwrap();
    let supported = registry::detect_architecture(&unknown).unwrap_err().to_string();
    let mut model_types = HashSet::new();
    for &architecture in table {
        let spec = architecture.spec();
        assert!(!spec.heads.is_empty(), "{}: no score head", spec.name);
        assert_eq!(architecture.choose_head(None).unwrap(), spec.heads[0]);
        for &model_type in spec.model_types {
            assert!(model_types.insert(model_type), "`{model_type}` is declared twice");
            let config = dir.path().join("config.json");
            std::fs::write(&config, format!(r#"{{"model_type": "{model_type}"}}"#)).unwrap();
            assert_eq!(registry::detect_architecture(&config).unwrap(), architecture, "{model_type}");
            assert!(supported.contains(model_type), "{supported} does not name {model_type}");
        }
        if spec.model_types.is_empty() {
            assert_ne!(spec.layout.config, "config.json", "{}: detectable by nothing", spec.name);
            let own = dir.path().join(spec.layout.config);
            // Architectures sharing a layout are told apart by their timm image tower.
            let config = match spec.timm_towers.first() {
                Some(prefix) => format!(r#"{{"model_cfg": {{"vision_cfg": {{"timm_model_name": "{prefix}x"}}}}}}"#),
                None => "{}".to_string(),
            };
            std::fs::write(&own, config).unwrap();
            assert_eq!(registry::detect_architecture(&own).unwrap(), architecture);
            assert!(supported.contains(spec.layout.config), "{supported}");
        }
    }
    assert!(table.iter().filter(|a| a.spec().released_as_torch_checkpoint).count() <= 1);
    for entry in registry::MODELS {
        assert!(table.contains(&entry.architecture), "{}: not in the table", entry.id);
        match registry::default_preprocessor(entry.id) {
            Ok(prep) => assert!(entry.preprocessing.starts_with(&prep.size.to_string()), "{}", entry.id),
            Err(e) => assert!(e.to_string().contains("comes from its checkpoint's config"), "{}: {e}", entry.id),
        }
    }
}

/// open_clip's `ViT-bigG-14` (its `model_configs/ViT-bigG-14.json`, as the laion repo's
/// `open_clip_config.json` holds it): heads of 104 channels and an MLP of `int(1664 · 4.9231)`
/// = 8192, read as open_clip builds them.
#[test]
fn open_clip_bigg_is_read_as_open_clip_builds_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("open_clip_config.json");
    let config = r#"{"model_cfg": {"embed_dim": 1280,
        "vision_cfg": {"image_size": 224, "layers": 48, "width": 1664, "head_width": 104, "mlp_ratio": 4.9231, "patch_size": 14},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 1280, "heads": 20, "layers": 32}}}"#;
    std::fs::write(&path, config).unwrap();
    assert_eq!(registry::detect_architecture(&path).unwrap().name(), "openclip");
    let clip = benchctl_models::models::clip_openai::OpenClipFile::from_file(&path).unwrap().clip_config();
    let (v, t) = (&clip.vision_config, &clip.text_config);
    assert_eq!((v.num_attention_heads, v.intermediate_size, v.num_hidden_layers), (16, 8192, 48));
    assert_eq!((t.num_attention_heads, t.intermediate_size, t.num_hidden_layers), (20, 5120, 32));
    assert_eq!((clip.projection_dim, v.hidden_act.as_str()), (1280, "gelu"));
}
