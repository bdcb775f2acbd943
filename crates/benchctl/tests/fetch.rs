//! `benchctl fetch` against a local stand-in for the Hugging Face hub (loopback only, a
//! bounded number of requests): a gated refusal and a complete download.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;

use common::{benchctl, demo_suite, stderr, stdout};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Serves hub-style requests on 127.0.0.1 from `files` (repo path → bytes); with `refuse`,
/// answers 401 to everything. Stops after `max_requests` connections.
fn serve(repo: &'static str, files: Vec<(String, Vec<u8>)>, refuse: bool, max_requests: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(max_requests) {
            let Ok(mut stream) = stream else { continue };
            stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).ok();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request).to_string();
            let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
            let range = text
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("range: bytes=").map(|r| r.trim().to_string()));
            let (status, headers, body) = if refuse {
                ("401 Unauthorized", String::new(), b"{\"error\": \"gated\"}".to_vec())
            } else if path == format!("/api/datasets/{repo}/revision/main") {
                let siblings: Vec<serde_json::Value> =
                    files.iter().map(|(n, _)| serde_json::json!({"rfilename": n})).collect();
                let body = serde_json::json!({"sha": COMMIT, "siblings": siblings}).to_string().into_bytes();
                ("200 OK", "Content-Type: application/json\r\n".to_string(), body)
            } else if let Some((_, bytes)) = files.iter().find(|(n, _)| {
                path == format!("/datasets/{repo}/resolve/main/{n}")
                    || path == format!("/datasets/{repo}/resolve/{COMMIT}/{n}")
            }) {
                let start: usize =
                    range.as_deref().and_then(|r| r.split('-').next()).and_then(|s| s.parse().ok()).unwrap_or(0);
                let end = if range.as_deref() == Some("0-0") { 1 } else { bytes.len() };
                let headers = format!(
                    "ETag: \"etag-{}\"\r\nX-Repo-Commit: {COMMIT}\r\nContent-Range: bytes {start}-{}/{}\r\n",
                    bytes.len(),
                    end.max(start + 1) - 1,
                    bytes.len()
                );
                ("206 Partial Content", headers, bytes[start..end].to_vec())
            } else {
                ("404 Not Found", String::new(), Vec::new())
            };
            let head =
                format!("HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
        }
    });
    endpoint
}

/// The demo suite's images as the `images.zip` of Winoground's dataset repo.
fn images_zip(dir: &Path) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut names: Vec<_> = std::fs::read_dir(dir.join("images")).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    for path in names {
        zip.start_file(format!("images/{}", path.file_name().unwrap().to_str().unwrap()), options).unwrap();
        zip.write_all(&std::fs::read(&path).unwrap()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// `benchctl fetch --suite winoground` from a stand-in hub serving `files`, with a token and
/// the hub cache under `home`; it must succeed. The data directory and the output.
fn fetch_winoground(files: Vec<(String, Vec<u8>)>, home: &Path) -> (std::path::PathBuf, std::process::Output) {
    let endpoint = serve("facebook/winoground", files, false, 40);
    let data = home.join("winoground");
    let out = benchctl(
        &["fetch", "--suite", "winoground", "--data-dir", data.to_str().unwrap()],
        &[("HF_ENDPOINT", &endpoint), ("HF_HOME", home.to_str().unwrap()), ("HF_TOKEN", "hf_test")],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    (data, out)
}

#[test]
fn a_gated_repo_without_access_says_so() {
    let endpoint = serve("facebook/winoground", Vec::new(), true, 5);
    let home = tempfile::tempdir().unwrap();
    let out = benchctl(
        &["fetch", "--suite", "winoground", "--data-dir", home.path().join("wg").to_str().unwrap()],
        &[("HF_ENDPOINT", &endpoint), ("HF_HOME", home.path().to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("needs a token") && stderr(&out).contains("HF_TOKEN"), "{}", stderr(&out));
}

#[test]
fn winoground_is_fetched_into_its_official_layout() {
    let demo = demo_suite();
    let files = vec![
        (".gitattributes".to_string(), b"*.zip filter=lfs".to_vec()),
        ("README.md".to_string(), b"# Winoground".to_vec()),
        ("data/examples.jsonl".to_string(), std::fs::read(demo.join("examples.jsonl")).unwrap()),
        ("data/images.zip".to_string(), images_zip(&demo)),
    ];
    let home = tempfile::tempdir().unwrap();
    let (data, out) = fetch_winoground(files, home.path());
    // Only the two files the suite needs are downloaded, and the commit is named.
    let said = stdout(&out);
    assert!(said.contains(&format!("at commit {COMMIT} (revision main)")), "{said}");
    assert!(said.contains("2 of its 4 files (data/examples.jsonl, data/images.zip), 17 files written"), "{said}");
    assert!(!data.join("README.md").exists());
    // The fetched directory passes every check but the full-release count.
    let out = benchctl(&["check", "--suite", "winoground", "--data-dir", data.to_str().unwrap()], &[]);
    let report = stdout(&out);
    assert!(
        report.contains("8 items, 16 images, 1 problem(s)") && report.contains("official release has 400"),
        "{report}"
    );
}

#[test]
fn suites_off_the_hub_say_where_to_get_them() {
    let out = benchctl(&["fetch", "--suite", "valse"], &[]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("Heidelberg-NLP/VALSE"), "{}", stdout(&out));
}

#[test]
fn offline_fetch_is_refused() {
    let out = benchctl(&["fetch", "--suite", "spec"], &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("HF_HUB_OFFLINE"), "{}", stderr(&out));
}

/// The main branch's parquet release: only `data/test-*.parquet` is downloaded, and the
/// fetched directory loads (the parquet written by the `datasets` library, see
/// `scripts/fixtures/gen_winoground_parquet.py`).
#[test]
fn winoground_parquet_is_fetched_alone() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../benchctl-suites/tests/fixtures/winoground-hub/snappy/data/test-00000-of-00001.parquet");
    let files = vec![
        ("README.md".to_string(), b"# Winoground".to_vec()),
        ("statistics.json".to_string(), b"{}".to_vec()),
        ("data/test-00000-of-00001.parquet".to_string(), std::fs::read(fixture).unwrap()),
    ];
    let home = tempfile::tempdir().unwrap();
    let (data, out) = fetch_winoground(files, home.path());
    assert!(stdout(&out).contains("1 of its 3 files (data/test-00000-of-00001.parquet)"), "{}", stdout(&out));
    let out = benchctl(&["check", "--suite", "winoground", "--data-dir", data.to_str().unwrap()], &[]);
    let report = stdout(&out);
    assert!(
        report.contains("4 items, 8 images, 1 problem(s)") && report.contains("official release has 400"),
        "{report}"
    );
}

#[test]
fn only_the_files_a_suite_needs_are_chosen() {
    use benchctl::fetch::needed_files;
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let main = names(&[
        "README.md",
        "data/test-00000-of-00002.parquet",
        "data/test-00001-of-00002.parquet",
        "data/examples.jsonl",
    ]);
    assert_eq!(
        needed_files("winoground", &main),
        names(&["data/test-00000-of-00002.parquet", "data/test-00001-of-00002.parquet"])
    );
    let old = names(&["README.md", "data/examples.jsonl", "data/images.zip", "winoground.py"]);
    assert_eq!(needed_files("winoground", &old), names(&["data/examples.jsonl", "data/images.zip"]));
    assert_eq!(needed_files("spec", &names(&["README.md", "data.zip", "assets/x.png"])), names(&["data.zip"]));
}

/// An archive whose entries would write outside the data directory (a `..` name, an
/// absolute name) or hold a symbolic link is refused, naming the entry, and nothing lands
/// outside; the token given never shows in what `fetch` prints.
#[test]
fn hostile_archive_entries_are_refused() {
    let demo = demo_suite();
    let hostile = |name: &str, link: bool| {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("images/ex_0_img_0.png", options).unwrap();
        zip.write_all(&std::fs::read(demo.join("images/ex_0_img_0.png")).unwrap()).unwrap();
        if link {
            zip.add_symlink(name, "/etc/passwd", options).unwrap();
        } else {
            zip.start_file(name, options).unwrap();
            zip.write_all(b"escaped").unwrap();
        }
        zip.finish().unwrap().into_inner()
    };
    for (name, link, said) in [
        ("../escaped.txt", false, "would leave"),
        ("/tmp/benchctl-escaped.txt", false, "would leave"),
        ("images/link", true, "symbolic link"),
    ] {
        let files = vec![
            ("data/examples.jsonl".to_string(), std::fs::read(demo.join("examples.jsonl")).unwrap()),
            ("data/images.zip".to_string(), hostile(name, link)),
        ];
        let home = tempfile::tempdir().unwrap();
        let endpoint = serve("facebook/winoground", files, false, 40);
        let data = home.path().join("winoground");
        let out = benchctl(
            &["fetch", "--suite", "winoground", "--data-dir", data.to_str().unwrap()],
            &[("HF_ENDPOINT", &endpoint), ("HF_HOME", home.path().to_str().unwrap()), ("HF_TOKEN", "hf_secret_token")],
        );
        assert_eq!(out.status.code(), Some(3), "{name}: {}{}", stdout(&out), stderr(&out));
        assert!(stderr(&out).contains(name) && stderr(&out).contains(said), "{name}: {}", stderr(&out));
        assert!(!home.path().join("escaped.txt").exists() && !Path::new("/tmp/benchctl-escaped.txt").exists());
        assert!(
            !stdout(&out).contains("hf_secret") && !stderr(&out).contains("hf_secret"),
            "{name}: the token was printed"
        );
    }
}
