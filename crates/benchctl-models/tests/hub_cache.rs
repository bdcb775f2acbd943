//! Hub resolution offline, against a Hugging Face cache laid out in a temp dir.

use benchctl_models::hub::{self, HubSettings, Origin};
use benchctl_models::registry;
use benchctl_testkit::fixture_model;

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> =
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| map.get(k).cloned()
}

/// `models--org--name/snapshots/<commit>/…` holding the files of a fixture model, and
/// `refs/<reference>` pointing at the commit.
fn lay_out_cache(cache: &std::path::Path, repo: &str, commit: &str, reference: Option<&str>) {
    let folder = cache.join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = folder.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    for file in hub::REQUIRED_FILES {
        std::fs::copy(fixture_model("clip-tiny-a").join(file), snapshot.join(file)).unwrap();
    }
    benchctl_testkit::write_clip_preprocessor_config(&snapshot, 224);
    if let Some(reference) = reference {
        let ref_path = folder.join("refs").join(reference);
        std::fs::create_dir_all(ref_path.parent().unwrap()).unwrap();
        std::fs::write(ref_path, commit).unwrap();
    }
}

#[test]
fn settings_follow_huggingface_hub() {
    let s = HubSettings::from_vars(vars(&[("HOME", "/home/u")]));
    assert_eq!(s.cache_dir, std::path::Path::new("/home/u/.cache/huggingface/hub"));
    assert!(!s.offline && s.token.is_none());
    let s = HubSettings::from_vars(vars(&[("HF_HOME", "/data/hf"), ("HF_TOKEN", "hf_x"), ("HF_HUB_OFFLINE", "1")]));
    assert_eq!(s.cache_dir, std::path::Path::new("/data/hf/hub"));
    assert_eq!(s.token.as_deref(), Some("hf_x"));
    assert!(s.offline);
    let s = HubSettings::from_vars(vars(&[
        ("HF_HOME", "/data/hf"),
        ("HF_HUB_CACHE", "/fast/hub"),
        ("HF_HUB_OFFLINE", "0"),
    ]));
    assert_eq!(s.cache_dir, std::path::Path::new("/fast/hub"));
    assert!(!s.offline);
}

#[test]
fn the_login_token_is_read_from_hf_home() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("token"), "hf_saved\n").unwrap();
    let s = HubSettings::from_vars(vars(&[("HF_HOME", home.path().to_str().unwrap())]));
    assert_eq!(s.token.as_deref(), Some("hf_saved"));
    let s = HubSettings::from_vars(vars(&[("HF_HOME", home.path().to_str().unwrap()), ("HF_TOKEN", "hf_env")]));
    assert_eq!(s.token.as_deref(), Some("hf_env"), "HF_TOKEN wins over the saved login");
}

#[test]
fn the_zoo_entry_resolves_offline_from_a_populated_cache() {
    let home = tempfile::tempdir().unwrap();
    let entry = registry::find("clip-vit-b32").unwrap();
    // The pinned revision is a commit: it resolves without any ref file.
    lay_out_cache(&home.path().join("hub"), entry.repo, entry.revision, None);
    let settings = HubSettings::from_vars(vars(&[("HF_HOME", home.path().to_str().unwrap()), ("HF_HUB_OFFLINE", "1")]));
    let files = hub::from_hub(entry.repo, entry.revision, &settings).unwrap();
    assert!(files.weights.ends_with(format!("snapshots/{}/model.safetensors", entry.revision)));
    assert_eq!(
        files.origin,
        Origin::Hub { repo: entry.repo.into(), revision: entry.revision.into(), commit: entry.revision.into() }
    );
}

/// Offline settings over the cache at `dir`.
fn offline(dir: &std::path::Path) -> HubSettings {
    HubSettings { cache_dir: dir.into(), token: None, offline: true, endpoint: None, limits: hub::NetLimits::default() }
}

#[test]
fn a_branch_resolves_through_its_ref() {
    let cache = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    lay_out_cache(cache.path(), "org/model", commit, Some("main"));
    let settings = offline(cache.path());
    let files = hub::from_hub("org/model", "main", &settings).unwrap();
    let Origin::Hub { commit: resolved, .. } = files.origin else { panic!("not a hub origin") };
    assert_eq!(resolved, commit);
    // A PR ref lives in a nested ref file, as huggingface_hub writes it.
    lay_out_cache(cache.path(), "org/model", commit, Some("refs/pr/15"));
    assert!(hub::from_hub("org/model", "refs/pr/15", &settings).is_ok());
}

#[test]
fn offline_without_the_files_says_what_is_missing() {
    let cache = tempfile::tempdir().unwrap();
    let settings = offline(cache.path());
    let err = hub::from_hub("openai/clip-vit-base-patch32", "main", &settings).unwrap_err();
    assert_eq!(err.kind(), benchctl_models::ErrorKind::MissingFile);
    let msg = err.to_string();
    assert!(
        msg.contains("config.json of openai/clip-vit-base-patch32@main") && msg.contains("HF_HUB_OFFLINE"),
        "{msg}"
    );
}

#[test]
fn every_zoo_entry_is_pinned_and_resolves_offline_in_its_layout() {
    for entry in registry::MODELS {
        // A commit, or `main` for an entry whose commit could not be verified when it was added.
        let commit = entry.revision.len() == 40 && entry.revision.bytes().all(|b| b.is_ascii_hexdigit());
        assert!(
            commit || entry.revision == "main",
            "{} must pin a commit or name main, not {}",
            entry.id,
            entry.revision
        );
        assert_eq!(entry.is_pinned(), commit);
    }
    // The OpenCLIP entry reads open_clip's own files from the hub cache.
    let entry = registry::find("openclip-vit-b32-laion2b").unwrap();
    let layout = entry.architecture.layout();
    assert_eq!(layout, hub::OPEN_CLIP_LAYOUT);
    let cache = tempfile::tempdir().unwrap();
    let snapshot =
        cache.path().join(format!("models--{}", entry.repo.replace('/', "--"))).join("snapshots").join(entry.revision);
    std::fs::create_dir_all(&snapshot).unwrap();
    for file in layout.files() {
        std::fs::copy(fixture_model("openclip-tiny").join(file), snapshot.join(file)).unwrap();
    }
    let settings =
        HubSettings::from_vars(vars(&[("HF_HUB_CACHE", cache.path().to_str().unwrap()), ("HF_HUB_OFFLINE", "1")]));
    let files = hub::from_hub_with(entry.repo, entry.revision, layout, &settings).unwrap();
    assert!(files.weights.ends_with("open_clip_model.safetensors"));
    let head = entry.architecture.choose_head(None).unwrap();
    let model = entry
        .architecture
        .load(registry::LoadChoice::head(head), &files, candle_core::DType::F32, &candle_core::Device::Cpu)
        .unwrap();
    assert!(matches!(model, benchctl_models::Model::Dual(_)));
}

#[test]
fn local_directories_are_recognised_by_their_config() {
    use benchctl_models::models::{blip, clip, clip_openai, siglip};
    for (dir, expected) in [
        ("clip-tiny-a", clip::ARCHITECTURE),
        ("openclip-tiny", clip_openai::ARCHITECTURE),
        ("siglip-tiny", siglip::ARCHITECTURE),
        ("blip-tiny", blip::ARCHITECTURE),
    ] {
        let files = hub::from_dir(&fixture_model(dir)).unwrap();
        assert_eq!(registry::detect_architecture(&files.config).unwrap(), expected, "{dir}");
    }
    assert_eq!(blip::ARCHITECTURE.choose_head(None).unwrap(), registry::ScoreHead::Itm);
    assert_eq!(blip::ARCHITECTURE.choose_head(Some("itc")).unwrap(), registry::ScoreHead::Itc);
    let err = siglip::ARCHITECTURE.choose_head(Some("itm")).unwrap_err();
    assert!(err.to_string().contains("a siglip model offers sigmoid"), "{err}");
}

#[test]
fn an_openclip_config_with_an_unsupported_tower_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for file in hub::OPEN_CLIP_LAYOUT.files() {
        std::fs::copy(fixture_model("openclip-tiny").join(file), dir.path().join(file)).unwrap();
    }
    let config = dir.path().join("open_clip_config.json");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"head_width\": 32", "\"head_width\": 32, \"attentional_pool\": true");
    std::fs::write(&config, text).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let err = benchctl_models::models::clip_openai::load_open_clip(
        &files,
        candle_core::DType::F32,
        &candle_core::Device::Cpu,
    )
    .unwrap_err();
    assert!(err.to_string().contains("model_cfg.vision_cfg.attentional_pool = true is not supported"), "{err}");
}

/// The tiny Gemma 3's files in a hub snapshot, its weights split into two shards with an index,
/// as google/gemma-3-*-it publish theirs.
fn lay_out_sharded(snapshot: &std::path::Path) {
    std::fs::create_dir_all(snapshot).unwrap();
    let source = fixture_model("gemma3-tiny");
    for file in ["config.json", "tokenizer.json", "preprocessor_config.json"] {
        std::fs::copy(source.join(file), snapshot.join(file)).unwrap();
    }
    let tensors = candle_core::safetensors::load(source.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut weight_map = serde_json::Map::new();
    for (i, half) in names.chunks(names.len().div_ceil(2)).enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i + 1);
        let part: std::collections::HashMap<String, candle_core::Tensor> =
            half.iter().map(|&n| (n.clone(), tensors[n].clone())).collect();
        candle_core::safetensors::save(&part, snapshot.join(&file)).unwrap();
        half.iter().for_each(|&n| drop(weight_map.insert(n.clone(), file.clone().into())));
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(snapshot.join(hub::SHARD_INDEX_FILE), index.to_string()).unwrap();
}

#[test]
fn a_sharded_zoo_entry_resolves_offline_with_every_shard() {
    let entry = registry::find("gemma-3-4b-it").unwrap();
    let layout = entry.architecture.layout();
    assert_eq!(layout, hub::HF_SHARDED_LAYOUT);
    assert_eq!(registry::find("paligemma-3b-mix-224").unwrap().architecture.layout(), hub::HF_SHARDED_LAYOUT);
    let cache = tempfile::tempdir().unwrap();
    let snapshot =
        cache.path().join(format!("models--{}", entry.repo.replace('/', "--"))).join("snapshots").join(entry.revision);
    lay_out_sharded(&snapshot);
    let files = hub::from_hub_with(entry.repo, entry.revision, layout, &offline(cache.path())).unwrap();
    assert!(files.weights.ends_with(hub::SHARD_INDEX_FILE));
    // Loaded from the shards, the model scores a fixture pair as transformers does.
    let model = entry
        .architecture
        .load(
            registry::LoadChoice::head(registry::ScoreHead::Vqa),
            &files,
            candle_core::DType::F32,
            &candle_core::Device::Cpu,
        )
        .unwrap();
    let benchctl_models::Model::Fusion(model) = model else { panic!("a generative model scores pairs") };
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_model("gemma3-tiny").join("expected.json")).unwrap())
            .unwrap();
    let (image, captions) = expected["local"].as_object().unwrap().iter().next().unwrap();
    let (caption, reference) = captions.as_object().unwrap().iter().next().unwrap();
    let path = benchctl_testkit::workspace_root()
        .join(format!("crates/benchctl/tests/fixtures/vqa-winoground/images/{image}.png"));
    let p = model.preprocessor();
    let pixels = candle_core::Tensor::from_vec(
        p.apply(&image::open(path).unwrap().to_rgb8()),
        (1, 3, p.size, p.size),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let score = model
        .score_pairs(&model.encode_images(&pixels).unwrap(), &[caption.as_str()])
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()[0];
    assert!((f64::from(score) - reference.as_f64().unwrap()).abs() <= 1e-4, "{score} vs transformers' {reference}");
    // A shard missing from the cache is named, offline.
    std::fs::remove_file(snapshot.join("model-00002-of-00002.safetensors")).unwrap();
    let err = hub::from_hub_with(entry.repo, entry.revision, layout, &offline(cache.path())).unwrap_err();
    assert!(
        err.to_string().contains("model-00002-of-00002.safetensors") && err.to_string().contains("HF_HUB_OFFLINE"),
        "{err}"
    );
}

#[test]
fn a_shard_index_naming_a_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join(hub::SHARD_INDEX_FILE);
    for file in ["../outside.safetensors", "/etc/x.safetensors", "shard.bin", ".hidden.safetensors"] {
        std::fs::write(&index, serde_json::json!({"weight_map": {"w": file}}).to_string()).unwrap();
        let err = hub::shard_names(&index).unwrap_err();
        assert!(err.to_string().contains("not a plain .safetensors file name"), "{file}: {err}");
    }
    std::fs::write(&index, r#"{"weight_map": {}}"#).unwrap();
    assert!(hub::shard_names(&index).is_err());
}

/// A generative family whose layout reads no image settings (InternVL's `-hf` checkpoints, whose
/// preprocessing is the architecture's own) still reads its `generation_config.json` (its stop
/// tokens) and `tokenizer_config.json` (how replies decode) from the hub cache; an
/// OpenCLIP checkpoint, which never generates, reads neither.
#[test]
fn a_generative_checkpoint_reads_its_generation_settings_from_the_cache() {
    use benchctl_models::models::internvl;
    let cache = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snapshot = cache.path().join("models--OpenGVLab--InternVL3-1B-hf").join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    for file in
        ["config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "tokenizer_config.json"]
    {
        std::fs::copy(fixture_model("internvl-tiny").join(file), snapshot.join(file)).unwrap();
    }
    let layout = internvl::ARCHITECTURE.layout();
    assert!(!layout.image_settings);
    let files = hub::from_hub_with("OpenGVLab/InternVL3-1B-hf", commit, layout, &offline(cache.path())).unwrap();
    assert_eq!(files.generation, hub::GenerationFile::Found(snapshot.join("generation_config.json")));
    assert_eq!(files.tokenizer_settings, Some(snapshot.join("tokenizer_config.json")));

    let entry = registry::find("openclip-vit-b32-laion2b").unwrap();
    let snapshot =
        cache.path().join(format!("models--{}", entry.repo.replace('/', "--"))).join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    for file in
        entry.architecture.layout().files().into_iter().chain(["generation_config.json", "tokenizer_config.json"])
    {
        let from = fixture_model("openclip-tiny").join(file);
        let from = if from.is_file() { from } else { fixture_model("internvl-tiny").join(file) };
        std::fs::copy(from, snapshot.join(file)).unwrap();
    }
    let files = hub::from_hub_with(entry.repo, commit, entry.architecture.layout(), &offline(cache.path())).unwrap();
    assert_eq!((files.generation, files.tokenizer_settings), (hub::GenerationFile::Absent, None));
}
