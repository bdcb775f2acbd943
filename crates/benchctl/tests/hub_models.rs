//! `--model hf:ORG/NAME[@REVISION]`: any hub checkpoint of a supported architecture, against a
//! local server playing the hub (its model API and `resolve`): the architecture read from the
//! checkpoint's own config (an open_clip config by the timm tower it names), the commit
//! recorded, offline from the cache afterwards, and each
//! bad input (no such repo, a gated one, an unknown architecture, a missing file, a malformed
//! id) refused naming the id and the file; and a zoo entry that names `main` keeps the commit
//! of its first download.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use benchctl_testkit::http::{reply, Request, Server};
use common::{benchctl, demo_suite, stderr, stored_run};

const MAIN: &str = "3333333333333333333333333333333333333333";
const V1: &str = "4444444444444444444444444444444444444444";

/// The tiny CLIP fixture's files, with `config.json` changed by `config`, minus `drop`.
fn checkpoint(config: impl Fn(serde_json::Value) -> serde_json::Value, drop: &[&str]) -> Vec<(String, Vec<u8>)> {
    let dir = benchctl_testkit::fixture_model("clip-tiny-a");
    ["config.json", "model.safetensors", "tokenizer.json"]
        .into_iter()
        .filter(|name| !drop.contains(name))
        .map(|name| {
            let bytes = std::fs::read(dir.join(name)).unwrap();
            let bytes = if name == "config.json" {
                serde_json::to_vec(&config(serde_json::from_slice(&bytes).unwrap())).unwrap()
            } else {
                bytes
            };
            (name.to_string(), bytes)
        })
        .collect()
}

/// A hub with one model repo `repo`: `main` at [`MAIN`] and `v1` at [`V1`], both holding
/// `files`; with `token`, everything answers 401 without it.
fn hub(repo: &'static str, files: Vec<(String, Vec<u8>)>, token: Option<&'static str>) -> Server {
    hub_moving(repo, files, token, Arc::new(AtomicBool::new(false)))
}

/// [`hub`] whose `main` moves to [`V1`] once `moved` is set.
fn hub_moving(
    repo: &'static str,
    files: Vec<(String, Vec<u8>)>,
    token: Option<&'static str>,
    moved: Arc<AtomicBool>,
) -> Server {
    Server::start(move |request: &Request| {
        if let Some(token) = token {
            if request.authorization.as_deref() != Some(&format!("Bearer {token}")) {
                return (reply("401 Unauthorized", &[], b"{\"error\":\"gated\"}"), Duration::ZERO);
            }
        }
        let main = if moved.load(Ordering::SeqCst) { V1 } else { MAIN };
        let commit_of = |rev: &str| match rev {
            "main" => Some(main),
            MAIN => Some(MAIN),
            "v1" | V1 => Some(V1),
            _ => None,
        };
        if let Some(rev) = request.path.strip_prefix(&format!("/api/models/{repo}/revision/")) {
            let Some(commit) = commit_of(rev) else { return (reply("404 Not Found", &[], b""), Duration::ZERO) };
            let siblings: Vec<_> = files.iter().map(|(n, _)| serde_json::json!({"rfilename": n})).collect();
            let body = serde_json::json!({"id": repo, "sha": commit, "siblings": siblings}).to_string();
            return (reply("200 OK", &[], body.as_bytes()), Duration::ZERO);
        }
        let Some(rest) = request.path.strip_prefix(&format!("/{repo}/resolve/")) else {
            return (reply("404 Not Found", &[], b""), Duration::ZERO);
        };
        let (rev, name) = rest.split_once('/').unwrap_or((rest, ""));
        let Some(commit) = commit_of(rev) else { return (reply("404 Not Found", &[], b""), Duration::ZERO) };
        match files.iter().find(|(n, _)| n == name) {
            Some((_, bytes)) => {
                let etag = format!(
                    "{:016x}{:08x}",
                    bytes.iter().fold(7u64, |h, &b| h.wrapping_mul(31) ^ u64::from(b)),
                    bytes.len()
                );
                let headers = [("x-repo-commit", commit.to_string()), ("ETag", format!("\"{etag}\""))];
                (reply("200 OK", &headers, bytes), Duration::ZERO)
            }
            None => {
                (reply("404 Not Found", &[("x-repo-commit", commit.to_string())], b"Entry not found"), Duration::ZERO)
            }
        }
    })
    .unwrap()
}

fn eval(model: &str, endpoint: &str, home: &Path, extra_env: &[(&str, &str)]) -> std::process::Output {
    eval_with(model, endpoint, home, extra_env, &[])
}

fn eval_with(
    model: &str,
    endpoint: &str,
    home: &Path,
    extra_env: &[(&str, &str)],
    extra_args: &[&str],
) -> std::process::Output {
    let (results, demo) = (common::scratch_dir("hub-model-results"), demo_suite());
    let mut args = vec![
        "eval",
        "--model",
        model,
        "--suite",
        "winoground",
        "--data-dir",
        demo.to_str().unwrap(),
        "--results-dir",
        results.to_str().unwrap(),
    ];
    args.extend_from_slice(extra_args);
    let mut env = vec![("HF_ENDPOINT", endpoint), ("HF_HOME", home.to_str().unwrap())];
    env.extend_from_slice(extra_env);
    benchctl(&args, &env)
}

/// A CLIP checkpoint by hub id: detected from its `config.json`, scored as the same files given
/// with `--model-path`, recorded with its repo, revision and commit; a branch resolves to its
/// commit; a second run offline reads the cache and asks the hub nothing.
#[test]
fn a_hub_checkpoint_by_id_runs_as_its_files_do() {
    let server = hub("org/tiny-clip", checkpoint(|c| c, &[]), None);
    let home = tempfile::tempdir().unwrap();
    let (_, run) = stored_run(&eval("hf:org/tiny-clip", &server.url(), home.path(), &[]));
    assert_eq!(run["model"]["id"], "hf:org/tiny-clip");
    assert_eq!((run["model"]["repo"].as_str(), run["model"]["commit"].as_str()), (Some("org/tiny-clip"), Some(MAIN)));
    assert_eq!(run["model"]["revision"], "main");
    let (_, by_path, _) = common::eval_tiny("winoground", &demo_suite(), &common::scratch_dir("hub-model-path"), &[]);
    assert_eq!(run["report"], by_path["report"], "the same model, the same metrics");

    let (_, pinned) = stored_run(&eval("hf:org/tiny-clip@v1", &server.url(), home.path(), &[]));
    assert_eq!((pinned["model"]["revision"].as_str(), pinned["model"]["commit"].as_str()), (Some("v1"), Some(V1)));

    let before = server.seen().len();
    let (_, offline) = stored_run(&eval("hf:org/tiny-clip", &server.url(), home.path(), &[("HF_HUB_OFFLINE", "1")]));
    assert_eq!(offline["model"]["commit"], MAIN);
    assert_eq!(server.seen().len(), before, "offline asks nothing");
}

/// Each bad input is refused with the id, what is wrong and what to do, and the weights of a
/// checkpoint benchctl cannot load are never downloaded.
#[test]
fn bad_hub_checkpoints_are_refused_naming_the_id_and_the_file() {
    let home = tempfile::tempdir().unwrap();
    // An architecture benchctl does not know, read from the checkpoint's own config.
    let bert = hub(
        "org/bert",
        checkpoint(
            |mut c| {
                c["model_type"] = "bert".into();
                c
            },
            &[],
        ),
        None,
    );
    let out = eval("hf:org/bert", &bert.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("hf:org/bert") && said.contains("model_type `bert` is not supported") && said.contains("clip"),
        "{said}"
    );
    assert!(bert.seen().iter().all(|r| !r.path.ends_with("model.safetensors")), "no weights downloaded");

    // A repo without its tokenizer: named before anything but the config is downloaded.
    let partial = hub("org/partial", checkpoint(|c| c, &["tokenizer.json"]), None);
    let out = eval("hf:org/partial", &partial.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out)
            .contains(&format!("org/partial at commit {MAIN} lacks tokenizer.json that a clip checkpoint needs")),
        "{}",
        stderr(&out)
    );
    assert!(partial.seen().iter().all(|r| !r.path.ends_with("model.safetensors")));

    // No such repo; a gated one without a token; a repo that holds no model.
    let empty = hub("org/tiny-clip", checkpoint(|c| c, &[]), None);
    let out = eval("hf:org/absent", &empty.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("hf:org/absent") && stderr(&out).contains("has no model org/absent"),
        "{}",
        stderr(&out)
    );
    let gated = hub("org/gated", checkpoint(|c| c, &[]), Some("hf_right"));
    let out = eval("hf:org/gated", &gated.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("needs a token") && stderr(&out).contains("HF_TOKEN"), "{}", stderr(&out));
    let data = hub("org/data-only", vec![("README.md".to_string(), b"# not a model".to_vec())], None);
    let out = eval("hf:org/data-only", &data.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("is not a checkpoint benchctl loads: it has none of config.json"),
        "{}",
        stderr(&out)
    );

    // Offline with nothing cached; a malformed id.
    let out = eval("hf:org/never-fetched", "http://127.0.0.1:9", home.path(), &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("HF_HUB_OFFLINE") && stderr(&out).contains("hf download org/never-fetched"),
        "{}",
        stderr(&out)
    );
    for bad in ["hf:tiny-clip", "hf:org/", "hf:org/x@", "hf:../x/y"] {
        let out = eval(bad, "http://127.0.0.1:9", home.path(), &[]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("hf:ORG/NAME"), "{bad}: {}", stderr(&out));
    }
}

/// A zoo entry without a pinned commit (`siglip2-base-patch16-224` names `main`) downloads
/// `main`'s commit once, records it, and keeps it when `main` moves on: the cache's ref is
/// not asked again. Its `tokenizer_config.json` comes along, which `--text-prep transformers`
/// reads.
#[test]
fn an_unpinned_zoo_entry_keeps_the_commit_of_its_first_download() {
    let entry = benchctl_models::registry::find("siglip2-base-patch16-224").unwrap();
    assert!(!entry.is_pinned());
    let dir = benchctl_testkit::fixture_model("siglip2-tiny");
    let files: Vec<(String, Vec<u8>)> =
        ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"]
            .iter()
            .map(|n| (n.to_string(), std::fs::read(dir.join(n)).unwrap()))
            .collect();
    let moved = Arc::new(AtomicBool::new(false));
    let server = hub_moving("google/siglip2-base-patch16-224", files, None, moved.clone());
    let home = tempfile::tempdir().unwrap();
    let (_, first) = stored_run(&eval(entry.id, &server.url(), home.path(), &[]));
    assert!(first["model"].get("text_prep").is_none(), "the authors' preparation is the default");
    assert_eq!((first["model"]["revision"].as_str(), first["model"]["commit"].as_str()), (Some("main"), Some(MAIN)));
    let snapshot = home.path().join("hub/models--google--siglip2-base-patch16-224/snapshots").join(MAIN);
    assert!(snapshot.join("tokenizer_config.json").is_file(), "the tokenizer settings are downloaded");

    moved.store(true, Ordering::SeqCst);
    let before = server.seen().len();
    let (_, second) =
        stored_run(&eval_with(entry.id, &server.url(), home.path(), &[], &["--text-prep", "transformers"]));
    assert_eq!(second["model"]["commit"], MAIN, "the first download's commit is kept");
    assert_eq!(second["model"]["text_prep"], "transformers");
    assert_eq!(server.seen().len(), before, "nothing is asked of the hub again");
    // An `hf:` id follows the branch.
    let (_, followed) = stored_run(&eval("hf:google/siglip2-base-patch16-224", &server.url(), home.path(), &[]));
    assert_eq!(followed["model"]["commit"], V1);
}

/// The PE-Core fixture's files as a `timm/PE-Core-*` repo holds them (with OpenAI's BPE as its
/// `tokenizer.json`), `open_clip_config.json` changed by `config`.
fn pe_core_repo(config: impl Fn(serde_json::Value) -> serde_json::Value) -> Vec<(String, Vec<u8>)> {
    let dir = benchctl_testkit::fixture_model("pe-core-tiny");
    let config_bytes = std::fs::read(dir.join("open_clip_config.json")).unwrap();
    let config = config(serde_json::from_slice(&config_bytes).unwrap());
    vec![
        ("open_clip_config.json".to_string(), serde_json::to_vec(&config).unwrap()),
        ("open_clip_model.safetensors".to_string(), std::fs::read(dir.join("open_clip_model.safetensors")).unwrap()),
        (
            "tokenizer.json".to_string(),
            std::fs::read(benchctl_testkit::fixture_model("tokenizer").join("tokenizer.json")).unwrap(),
        ),
    ]
}

/// An open_clip repo whose config names a timm image tower: PE-Core's runs as PE-Core (not as
/// plain OpenCLIP) and records it; another tower is refused naming it, before any weight is
/// downloaded.
#[test]
fn an_open_clip_repo_is_told_apart_by_its_timm_tower() {
    let home = tempfile::tempdir().unwrap();
    let server = hub("timm/PE-Core-tiny", pe_core_repo(|c| c), None);
    let (_, run) = stored_run(&eval("hf:timm/PE-Core-tiny", &server.url(), home.path(), &[]));
    assert_eq!(run["model"]["architecture"], "pe-core", "{}", run["model"]);
    assert_eq!(run["model"]["commit"], MAIN);

    let unknown = hub(
        "timm/vit-clip",
        pe_core_repo(|mut c| {
            c["model_cfg"]["vision_cfg"]["timm_model_name"] = "vit_huge_patch14_clip_224".into();
            c
        }),
        None,
    );
    let out = eval("hf:timm/vit-clip", &unknown.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("vit_huge_patch14_clip_224") && said.contains("vit_pe_core_"), "{said}");
    assert!(unknown.seen().iter().all(|r| !r.path.ends_with(".safetensors")), "no weights downloaded");
}

/// SigLIP as open_clip publishes it (`timm/ViT-*-SigLIP*`: a timm `vit_*_siglip_*` tower, the
/// repo's own tokenizer) runs by hub id as SigLIP in open_clip's files.
#[test]
fn an_open_clip_siglip_repo_runs_by_hub_id() {
    let home = tempfile::tempdir().unwrap();
    let dir = benchctl_testkit::fixture_model("siglip2-openclip-tiny");
    let files = ["open_clip_config.json", "open_clip_model.safetensors", "tokenizer.json"]
        .map(|name| (name.to_string(), std::fs::read(dir.join(name)).unwrap()))
        .to_vec();
    let server = hub("timm/ViT-tiny-SigLIP2", files, None);
    let (_, run) = stored_run(&eval("hf:timm/ViT-tiny-SigLIP2", &server.url(), home.path(), &[]));
    assert_eq!(run["model"]["architecture"], "siglip-open-clip", "{}", run["model"]);
    assert_eq!(run["model"]["commit"], MAIN);
}
