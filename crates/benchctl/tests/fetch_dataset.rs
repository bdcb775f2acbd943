//! `benchctl fetch --dataset` and the `[hub]` section of a manifest against a local server
//! playing the Hugging Face hub (its file list API, `resolve` at branches, branch paths and
//! commits, gated repos, ranged requests), and offline against a hub cache laid out as
//! `huggingface_hub` lays it out.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use benchctl_testkit::http::{reply, Request, Server};
use common::{benchctl, stderr, stdout, stored_run, tiny_model};

const MAIN: &str = "1111111111111111111111111111111111111111";
const CONVERTED: &str = "2222222222222222222222222222222222222222";
const TOKEN: &str = "hf_right_token";

/// A commit's files: repo path and bytes.
type Files = Vec<(String, Vec<u8>)>;

/// A dataset repo as the stand-in hub serves it.
struct Release {
    repo: &'static str,
    /// Branch (or tag) → commit.
    refs: Vec<(&'static str, &'static str)>,
    /// Commit → its files.
    files: Vec<(&'static str, Files)>,
    /// The token a gated repo wants (`None`: public).
    token: Option<&'static str>,
    /// A file whose first unranged download stops after this many bytes.
    cut: Option<(String, usize)>,
}

/// A blob id of `bytes`, as the hub names blobs by their content.
fn etag(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("{h:016x}{:08x}", bytes.len())
}

/// The hub's answers for `release`: the file list at a revision, and each file at a revision
/// (whole, or from the requested byte on), as huggingface.co gives them.
fn start(release: Release) -> Server {
    let cut_done: Arc<Mutex<HashSet<String>>> = Arc::default();
    Server::start(move |request: &Request| {
        let answer = answer(&release, request, &cut_done);
        (answer, Duration::ZERO)
    })
    .unwrap()
}

fn answer(release: &Release, request: &Request, cut_done: &Mutex<HashSet<String>>) -> Vec<u8> {
    if let Some(token) = release.token {
        match request.authorization.as_deref() {
            None => return reply("401 Unauthorized", &[], b"{\"error\":\"Access to dataset is restricted\"}"),
            Some(given) if given != format!("Bearer {token}") => {
                return reply("403 Forbidden", &[], b"{\"error\":\"no access\"}")
            }
            Some(_) => {}
        }
    }
    let commit_of = |rev: &str| {
        let rev = rev.replace("%2F", "/");
        release
            .refs
            .iter()
            .find(|(r, _)| *r == rev)
            .map(|(_, c)| *c)
            .or_else(|| release.files.iter().find(|(c, _)| *c == rev).map(|(c, _)| *c))
    };
    let files_at = |commit: &str| &release.files.iter().find(|(c, _)| *c == commit).unwrap().1;
    if let Some(rev) = request.path.strip_prefix(&format!("/api/datasets/{}/revision/", release.repo)) {
        let Some(commit) = commit_of(rev) else { return reply("404 Not Found", &[], b"") };
        let siblings: Vec<_> = files_at(commit).iter().map(|(n, _)| serde_json::json!({"rfilename": n})).collect();
        let body = serde_json::json!({"id": release.repo, "sha": commit, "siblings": siblings}).to_string();
        return reply("200 OK", &[("Content-Type", "application/json".into())], body.as_bytes());
    }
    let Some(rest) = request.path.strip_prefix(&format!("/datasets/{}/resolve/", release.repo)) else {
        return reply("404 Not Found", &[], b"");
    };
    let (rev, name) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(commit) = commit_of(rev) else { return reply("404 Not Found", &[], b"") };
    let Some((_, bytes)) = files_at(commit).iter().find(|(n, _)| n == name) else {
        return reply("404 Not Found", &[("x-repo-commit", commit.to_string())], b"Entry not found");
    };
    let headers = |extra: Vec<(&'static str, String)>| {
        let mut all = vec![("x-repo-commit", commit.to_string()), ("ETag", format!("\"{}\"", etag(bytes)))];
        all.extend(extra);
        all
    };
    if let Some(from) = request.range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
        let from: usize = from.trim_end_matches('-').parse().unwrap();
        let range = format!("bytes {from}-{}/{}", bytes.len() - 1, bytes.len());
        return reply("206 Partial Content", &headers(vec![("Content-Range", range)]), &bytes[from..]);
    }
    if let Some((file, at)) = &release.cut {
        if file == name && cut_done.lock().unwrap().insert(file.clone()) {
            // Announces every byte, sends `at` of them and closes: a connection that broke.
            let mut whole = reply("200 OK", &headers(Vec::new()), bytes);
            let head = whole.len() - bytes.len();
            whole.truncate(head + at);
            return whole;
        }
    }
    reply("200 OK", &headers(Vec::new()), bytes)
}

fn bivlc_fixture() -> PathBuf {
    benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/bivlc")
}

/// BiVLC's hub release at main: its two parquet shards (the fixture's), a README and a
/// statistics file the suite does not need.
fn bivlc_release(token: Option<&'static str>) -> Release {
    let shard = |n: &str| {
        let name = format!("data/test-0000{n}-of-00002.parquet");
        let bytes = std::fs::read(bivlc_fixture().join(&name)).unwrap();
        (name, bytes)
    };
    let files = vec![("README.md".to_string(), b"# BiVLC".to_vec()), shard("0"), shard("1")];
    Release { repo: "imirandam/BiVLC", refs: vec![("main", MAIN)], files: vec![(MAIN, files)], token, cut: None }
}

fn run(args: &[&str], endpoint: &str, home: &Path, extra: &[(&str, &str)]) -> std::process::Output {
    let mut env = vec![("HF_ENDPOINT", endpoint), ("HF_HOME", home.to_str().unwrap())];
    env.extend_from_slice(extra);
    benchctl(args, &env)
}

/// The cache folder of the dataset `repo` under `home`.
fn repo_folder(home: &Path, repo: &str) -> PathBuf {
    home.join("hub").join(format!("datasets--{}", repo.replace('/', "--")))
}

/// A bundled manifest with `[hub]`: `fetch --suite` downloads only the files it needs into
/// the hub cache, and `check` and `eval` then read the suite there without `--data-dir`; the
/// run records the repo and commit, which the data fingerprint holds; a second fetch
/// downloads nothing, and offline it finds the files in the cache.
#[test]
fn a_bundled_suite_is_fetched_into_the_hub_cache_and_read_there() {
    let hub = start(bivlc_release(None));
    let home = tempfile::tempdir().unwrap();
    let out = run(&["fetch", "--suite", "bivlc"], &hub.url(), home.path(), &[]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let said = stdout(&out);
    let snapshot = repo_folder(home.path(), "imirandam/BiVLC").join("snapshots").join(MAIN);
    assert!(said.contains(&format!("imirandam/BiVLC at commit {MAIN} (revision main): 2 of its 3 files")), "{said}");
    assert!(said.contains("(2 downloaded, 0 already in the hub cache)"), "{said}");
    assert!(said.contains(&snapshot.display().to_string()) && said.contains("reads it there"), "{said}");
    assert!(!snapshot.join("README.md").exists(), "only the files the suite needs");
    assert_eq!(std::fs::read_to_string(repo_folder(home.path(), "imirandam/BiVLC").join("refs/main")).unwrap(), MAIN);
    for shard in ["data/test-00000-of-00002.parquet", "data/test-00001-of-00002.parquet"] {
        assert_eq!(std::fs::read(snapshot.join(shard)).unwrap(), std::fs::read(bivlc_fixture().join(shard)).unwrap());
    }

    // `check` and `eval` find it in the cache.
    let out = run(&["check", "--suite", "bivlc"], &hub.url(), home.path(), &[]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("the official release has 2933 items, these annotations give 30"), "{text}");
    let results = tempfile::tempdir().unwrap();
    let model = tiny_model();
    let eval = ["eval", "--model-path", &model, "--suite", "bivlc", "--results-dir", results.path().to_str().unwrap()];
    let (_, from_cache) = stored_run(&run(&eval, &hub.url(), home.path(), &[("HF_HUB_OFFLINE", "1")]));
    assert_eq!(from_cache["suite"]["hub"], serde_json::json!({"repo": "imirandam/BiVLC", "commit": MAIN}));
    assert_eq!(from_cache["suite"]["data_dir"], snapshot.display().to_string());
    // The same files outside the cache are the same items and scores, but not the same release.
    let copy = results.path().join("plain");
    common::copy_tree(&bivlc_fixture(), &copy);
    let (_, plain, _) = common::eval_tiny("bivlc", &copy, &results.path().join("r2"), &[]);
    assert_eq!(plain["report"], from_cache["report"]);
    assert!(plain["suite"].get("hub").is_none());
    assert_ne!(plain["data_fingerprint"], from_cache["data_fingerprint"]);

    // Nothing is downloaded twice; offline, the cache answers.
    let out = run(&["fetch", "--suite", "bivlc"], &hub.url(), home.path(), &[]);
    assert!(stdout(&out).contains("(0 downloaded, 2 already in the hub cache)"), "{}", stdout(&out));
    let before = hub.seen().len();
    let out = run(&["fetch", "--suite", "bivlc"], &hub.url(), home.path(), &[("HF_HUB_OFFLINE", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("found in the hub cache (HF_HUB_OFFLINE is set)"), "{}", stdout(&out));
    assert_eq!(hub.seen().len(), before, "offline makes no request");
}

/// A repo with a branch `main` and the hub's parquet conversion branch
/// (`refs/convert/parquet`, a revision holding `/`).
fn two_branch_release() -> Release {
    let main = vec![
        ("README.md".to_string(), b"# bench".to_vec()),
        ("data/test.jsonl".to_string(), b"{\"a\": 1}\n".to_vec()),
        ("images/0.png".to_string(), vec![1, 2, 3]),
    ];
    let converted = vec![("default/test/0000.parquet".to_string(), b"PAR1 converted".to_vec())];
    Release {
        repo: "org/bench",
        refs: vec![("main", MAIN), ("refs/convert/parquet", CONVERTED)],
        files: vec![(MAIN, main), (CONVERTED, converted)],
        token: None,
        cut: None,
    }
}

/// Any dataset by id: every file by default, `--include` patterns, a branch, a branch whose
/// name holds `/` (in the id or with `--revision`), a commit; `--data-dir` places the files
/// there with the origin a run records; a pattern that matches nothing and a malformed id are
/// refused.
#[test]
fn any_dataset_by_id_at_a_branch_or_a_commit() {
    let hub = start(two_branch_release());
    let home = tempfile::tempdir().unwrap();
    let folder = repo_folder(home.path(), "org/bench");
    let fetch = |args: &[&str]| {
        let mut all = vec!["fetch"];
        all.extend_from_slice(args);
        let out = run(&all, &hub.url(), home.path(), &[]);
        assert!(out.status.success(), "{args:?}: {}{}", stdout(&out), stderr(&out));
        stdout(&out)
    };
    let said = fetch(&["--dataset", "org/bench"]);
    assert!(said.contains(&format!("org/bench at commit {MAIN} (revision main): 3 of its 3 files")), "{said}");
    assert_eq!(std::fs::read(folder.join("snapshots").join(MAIN).join("images/0.png")).unwrap(), [1, 2, 3]);

    let said = fetch(&["--dataset", "org/bench@refs/convert/parquet"]);
    assert!(
        said.contains(&format!("at commit {CONVERTED} (revision refs/convert/parquet): 1 of its 1 files")),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(folder.join("refs/refs/convert/parquet")).unwrap(), CONVERTED);
    let said = fetch(&["--dataset", "org/bench", "--revision", CONVERTED]);
    assert!(said.contains("(0 downloaded, 1 already in the hub cache)"), "{said}");

    // `--include` and `--data-dir`: the chosen files at their repo paths, and the origin.
    let placed = home.path().join("placed");
    let said = fetch(&["--dataset", "org/bench", "--include", "data/*", "--data-dir", placed.to_str().unwrap()]);
    assert!(said.contains("1 of its 3 files") && said.contains("data/test.jsonl"), "{said}");
    assert_eq!(std::fs::read(placed.join("data/test.jsonl")).unwrap(), b"{\"a\": 1}\n");
    assert!(!placed.join("README.md").exists());
    let origin = benchctl_suites::hub::HubOrigin::of(&placed).unwrap();
    assert_eq!((origin.repo.as_str(), origin.commit.as_str()), ("org/bench", MAIN));

    let out = run(&["fetch", "--dataset", "org/bench", "--include", "*.tsv"], &hub.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("no file of the repo at commit {MAIN} matches `*.tsv` (3 files listed)")));
    for bad in ["bench", "org/bench/extra", "org/bench@", "../x/y"] {
        let out = run(&["fetch", "--dataset", bad], &hub.url(), home.path(), &[]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("ORG/NAME"), "{bad}: {}", stderr(&out));
    }
    let out = run(&["fetch", "--dataset", "org/absent"], &hub.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("org/absent") && stderr(&out).contains("404"), "{}", stderr(&out));
}

/// A gated repo: refused without a token (saying to set `HF_TOKEN`) and with a token the hub
/// refuses (saying so, never printing it); fetched with the right one. A manifest that
/// declares its repo gated is refused without a token before any request.
#[test]
fn gated_datasets_need_a_token() {
    let hub = start(bivlc_release(Some(TOKEN)));
    let home = tempfile::tempdir().unwrap();
    let out = run(&["fetch", "--dataset", "imirandam/BiVLC"], &hub.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("401") && stderr(&out).contains("needs a token") && stderr(&out).contains("HF_TOKEN")
    );
    let out = run(&["fetch", "--dataset", "imirandam/BiVLC"], &hub.url(), home.path(), &[("HF_TOKEN", "hf_wrong_one")]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("403") && stderr(&out).contains("was refused"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("hf_wrong_one") && !stdout(&out).contains("hf_wrong_one"));
    let before = hub.seen().len();
    let out = run(&["fetch", "--suite", "bivlc"], &hub.url(), home.path(), &[("HF_TOKEN", TOKEN)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bearer = format!("Bearer {TOKEN}");
    assert!(hub.seen()[before..].iter().all(|r| r.authorization.as_deref() == Some(bearer.as_str())));

    // A manifest that says its repo is gated asks for the token up front.
    let manifest = home.path().join("gated.toml");
    let bundled = std::fs::read_to_string(benchctl_testkit::workspace_root().join("datasets/manifests/bivlc.toml"));
    let text = bundled
        .unwrap()
        .replace("id = \"bivlc\"", "id = \"bivlc-gated\"")
        .replace("repo = \"imirandam/BiVLC\"", "repo = \"imirandam/BiVLC\"\ngated = true");
    std::fs::write(&manifest, text).unwrap();
    let before = hub.seen().len();
    let out = run(&["fetch", "--suite", manifest.to_str().unwrap()], &hub.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("the dataset imirandam/BiVLC is gated: accept its terms on https://huggingface.co/datasets/imirandam/BiVLC and set HF_TOKEN"), "{}", stderr(&out));
    assert_eq!(hub.seen().len(), before, "no request without a token");
    let out = benchctl(&["suites"], &[]);
    assert!(stdout(&out).contains("benchctl fetch --suite bivlc"), "{}", stdout(&out));
}

/// A download that breaks off keeps its part (never as the file), says how to resume, and
/// the next fetch asks only for the rest.
#[test]
fn an_interrupted_download_resumes() {
    let mut release = bivlc_release(None);
    let shard = "data/test-00001-of-00002.parquet";
    let size = release.files[0].1.iter().find(|(n, _)| n == shard).unwrap().1.len();
    let cut = size / 3;
    release.cut = Some((shard.to_string(), cut));
    let hub = start(release);
    let home = tempfile::tempdir().unwrap();
    let out = run(&["fetch", "--suite", "bivlc"], &hub.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(stderr(&out).contains(&format!("stopped after {cut} of {size} bytes")), "{}", stderr(&out));
    assert!(stderr(&out).contains("run the command again to resume it"), "{}", stderr(&out));
    let folder = repo_folder(home.path(), "imirandam/BiVLC");
    assert!(!folder.join("snapshots").join(MAIN).join(shard).exists(), "a part never passes for the file");
    let expected = std::fs::read(bivlc_fixture().join(shard)).unwrap();
    let partial = folder.join("blobs").join(format!("{}.incomplete", etag(&expected)));
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), cut as u64);

    let out = run(&["fetch", "--suite", "bivlc"], &hub.url(), home.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("(1 downloaded, 1 already in the hub cache)"), "{}", stdout(&out));
    assert_eq!(std::fs::read(folder.join("snapshots").join(MAIN).join(shard)).unwrap(), expected);
    assert!(!partial.exists());
    let ranged: Vec<String> = hub.seen().iter().filter_map(|r| r.range.clone()).collect();
    assert_eq!(ranged, [format!("bytes={cut}-")]);
}

/// A hub cache laid out as `huggingface_hub` writes it (blobs named by hash, the snapshot's
/// files relative links to them, `refs/main`), read with `HF_HUB_OFFLINE=1`: `fetch` finds
/// the suite's files and `check` reads the suite there; a cache without the repo is named.
#[test]
fn offline_reads_a_cache_laid_out_by_huggingface_hub() {
    let home = tempfile::tempdir().unwrap();
    let folder = repo_folder(home.path(), "imirandam/BiVLC");
    let snapshot = folder.join("snapshots").join(MAIN);
    std::fs::create_dir_all(snapshot.join("data")).unwrap();
    std::fs::create_dir_all(folder.join("blobs")).unwrap();
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::write(folder.join("refs/main"), MAIN).unwrap();
    for shard in ["test-00000-of-00002.parquet", "test-00001-of-00002.parquet"] {
        let bytes = std::fs::read(bivlc_fixture().join("data").join(shard)).unwrap();
        std::fs::write(folder.join("blobs").join(etag(&bytes)), &bytes).unwrap();
        std::os::unix::fs::symlink(format!("../../../blobs/{}", etag(&bytes)), snapshot.join("data").join(shard))
            .unwrap();
    }
    let offline = [("HF_HUB_OFFLINE", "1")];
    let out = run(&["fetch", "--suite", "bivlc"], "http://127.0.0.1:9", home.path(), &offline);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("imirandam/BiVLC at commit {MAIN} (revision main): 2 of its 2 files found")));
    let out = run(&["check", "--suite", "bivlc"], "http://127.0.0.1:9", home.path(), &offline);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("these annotations give 30") && !text.contains("outside the data directory"), "{text}");

    let empty = tempfile::tempdir().unwrap();
    let out = run(&["fetch", "--dataset", "org/bench"], "http://127.0.0.1:9", empty.path(), &offline);
    assert_eq!(out.status.code(), Some(3));
    let said = stderr(&out);
    assert!(
        said.contains("find the dataset org/bench@main in the hub cache") && said.contains("HF_HUB_OFFLINE"),
        "{said}"
    );
}

/// The bytes of a zip archive holding `dir`'s files under `prefix/`, as `zip -r` writes one.
fn zip_of(dir: &Path, prefix: &str) -> Vec<u8> {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let mut pending = vec![(dir.to_path_buf(), prefix.to_string())];
    while let Some((from, name)) = pending.pop() {
        zip.add_directory(format!("{name}/"), options).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let entry = entry.unwrap();
            let child = format!("{name}/{}", entry.file_name().to_str().unwrap());
            if entry.file_type().unwrap().is_dir() {
                pending.push((entry.path(), child));
            } else {
                zip.start_file(child, options).unwrap();
                zip.write_all(&std::fs::read(entry.path()).unwrap()).unwrap();
            }
        }
    }
    zip.finish().unwrap().into_inner()
}

/// NaturalBench's dataset repo at main holding `files`.
fn naturalbench_release(files: Files) -> Release {
    Release {
        repo: "BaiqiL/NaturalBench",
        refs: vec![("main", MAIN)],
        files: vec![(MAIN, files)],
        token: None,
        cut: None,
    }
}

/// NaturalBench's retrieval form is a zip in its dataset repo, which t2v_metrics' loader
/// downloads and unzips: `fetch --suite naturalbench-retrieval` unpacks it into the data
/// directory (the repo's other files left alone), `eval` reads it there as the same files
/// unzipped by hand and records the repo and commit; `check` without a data directory names
/// the one `fetch` fills, not the hub cache's snapshot (which holds only the archive).
#[test]
fn a_zipped_release_is_unpacked_into_the_data_directory() {
    let fixture =
        benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/naturalbench-retrieval");
    let archive = zip_of(&fixture.join("NaturalBench-Retrieval"), "NaturalBench-Retrieval");
    let files = vec![
        ("README.md".to_string(), b"# NaturalBench".to_vec()),
        ("NaturalBench-Retrieval.zip".to_string(), archive),
        ("data/train-00000-of-00001.parquet".to_string(), b"the VQA form".to_vec()),
    ];
    let hub = start(naturalbench_release(files));
    let home = tempfile::tempdir().unwrap();

    let out = run(&["check", "--suite", "naturalbench-retrieval"], &hub.url(), home.path(), &[]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success() && said.contains("benchctl fetch --suite naturalbench-retrieval"), "{said}");

    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("nb");
    let fetch = ["fetch", "--suite", "naturalbench-retrieval", "--data-dir", data_dir.to_str().unwrap()];
    let out = run(&fetch, &hub.url(), home.path(), &[]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains(&format!("BaiqiL/NaturalBench at commit {MAIN} (revision main): 1 of its 3 files")),
        "{said}"
    );
    assert!(said.contains("unpacked 1 archive(s) into") && said.contains("--data-dir"), "{said}");
    let unpacked = data_dir.join("NaturalBench-Retrieval");
    assert_eq!(
        std::fs::read(unpacked.join("metadata.json")).unwrap(),
        std::fs::read(fixture.join("NaturalBench-Retrieval/metadata.json")).unwrap()
    );
    assert!(!data_dir.join("README.md").exists() && !data_dir.join("data").exists(), "only the archive");

    // Read where it was unpacked: the same items and scores as the files unzipped by hand, and
    // the release it came from.
    let results = tempfile::tempdir().unwrap();
    let (_, fetched, _) = common::eval_tiny("naturalbench-retrieval", &data_dir, &results.path().join("a"), &[]);
    assert_eq!(fetched["suite"]["hub"], serde_json::json!({"repo": "BaiqiL/NaturalBench", "commit": MAIN}));
    let (_, by_hand, _) = common::eval_tiny("naturalbench-retrieval", &fixture, &results.path().join("b"), &[]);
    assert_eq!(fetched["report"], by_hand["report"]);
    assert!(by_hand["suite"].get("hub").is_none());
}

/// An archive entry that would leave the data directory is refused, naming it, and the
/// directory is not marked as the release.
#[test]
fn an_archive_entry_leaving_the_data_directory_is_refused() {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("../escaped.json", zip::write::SimpleFileOptions::default()).unwrap();
    zip.write_all(b"[]").unwrap();
    let archive = zip.finish().unwrap().into_inner();
    let files = vec![("NaturalBench-Retrieval.zip".to_string(), archive)];
    let hub = start(naturalbench_release(files));
    let (home, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data_dir = data.path().join("nb");
    let fetch = ["fetch", "--suite", "naturalbench-retrieval", "--data-dir", data_dir.to_str().unwrap()];
    let out = run(&fetch, &hub.url(), home.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("entry `../escaped.json` would leave"), "{}", stderr(&out));
    assert!(!data.path().join("escaped.json").exists());
    assert!(!data_dir.join(".benchctl-hub-origin.json").exists());
}
