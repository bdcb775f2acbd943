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
    let s = HubSettings::from_vars(vars(&[("HF_HOME", "/data/hf"), ("HF_HUB_CACHE", "/fast/hub"), ("HF_HUB_OFFLINE", "0")]));
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

#[test]
fn a_branch_resolves_through_its_ref() {
    let cache = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    lay_out_cache(cache.path(), "org/model", commit, Some("main"));
    let settings = HubSettings { cache_dir: cache.path().into(), token: None, offline: true, endpoint: None };
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
    let settings = HubSettings { cache_dir: cache.path().into(), token: None, offline: true, endpoint: None };
    let err = hub::from_hub("openai/clip-vit-base-patch32", "main", &settings).unwrap_err();
    assert_eq!(err.kind(), benchctl_models::ErrorKind::MissingFile);
    let msg = err.to_string();
    assert!(msg.contains("config.json of openai/clip-vit-base-patch32@main") && msg.contains("HF_HUB_OFFLINE"), "{msg}");
}
