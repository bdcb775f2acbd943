//! Hub downloads against local HTTP servers that play the hub, its CDN, and hostile servers:
//! the hub cache's layout, the token kept to the hub's origin, and each bound (redirects,
//! schemes, sizes, stalls, names) refused with a clear error.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use benchctl_models::hub::{self, HubSettings, NetLimits};
use benchctl_models::ErrorKind;
use benchctl_testkit::http::{self, reply};

/// The test server, its handler given the request's path (with query).
struct Server(http::Server);

impl Server {
    fn start(handler: impl Fn(&str) -> (Vec<u8>, Duration) + Send + Sync + 'static) -> Self {
        Server(http::Server::start(move |request: &http::Request| handler(&request.path)).unwrap())
    }

    fn url(&self) -> String {
        self.0.url()
    }

    fn seen(&self) -> Vec<http::Request> {
        self.0.seen()
    }
}

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_secret_token_1234";

fn etag_of(file: &str) -> String {
    format!("{:064x}", file.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))))
}

fn settings(cache: &std::path::Path, endpoint: &str, limits: NetLimits) -> HubSettings {
    HubSettings {
        cache_dir: cache.to_path_buf(),
        token: Some(TOKEN.into()),
        offline: false,
        endpoint: Some(endpoint.into()),
        limits,
    }
}

/// The hub answers each file with a redirect to its CDN (another origin), carrying the
/// commit and blob id, as huggingface.co does for LFS files.
fn hub_and_cdn() -> (Server, Server) {
    hub_and_cdn_without(|_| false)
}

/// [`hub_and_cdn`] for a repo without the files `absent` names: the hub answers those 404
/// with the commit, as huggingface.co answers a missing entry.
fn hub_and_cdn_without(absent: impl Fn(&str) -> bool + Send + Sync + 'static) -> (Server, Server) {
    hub_and_cdn_serving(absent, |file| format!("contents of {file}"))
}

/// [`hub_and_cdn_without`] whose CDN answers each file with `contents(file)`.
fn hub_and_cdn_serving(
    absent: impl Fn(&str) -> bool + Send + Sync + 'static,
    contents: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (Server, Server) {
    let cdn = Server::start(move |path| {
        let file = path.trim_start_matches("/blob/").split('?').next().unwrap_or("").to_string();
        (reply("200 OK", &[], contents(&file).as_bytes()), Duration::ZERO)
    });
    let cdn_url = cdn.url();
    let hub = Server::start(move |path| {
        let file = path.rsplit('/').next().unwrap_or("");
        if absent(file) {
            let headers = [("x-repo-commit", COMMIT.to_string()), ("x-error-code", "EntryNotFound".into())];
            return (reply("404 Not Found", &headers, b"Entry not found"), Duration::ZERO);
        }
        let headers = [
            ("Location", format!("{cdn_url}/blob/{file}?X-Amz-Signature=signed")),
            ("x-repo-commit", COMMIT.to_string()),
            ("x-linked-etag", format!("\"{}\"", etag_of(file))),
        ];
        (reply("302 Found", &headers, b""), Duration::ZERO)
    });
    (hub, cdn)
}

#[test]
fn a_model_downloads_into_the_hub_layout_and_the_token_stays_with_the_hub() {
    let (hub_server, cdn) = hub_and_cdn();
    let cache = tempfile::tempdir().unwrap();
    let files =
        hub::from_hub("org/model", "main", &settings(cache.path(), &hub_server.url(), NetLimits::default())).unwrap();
    let folder = cache.path().join("models--org--model");
    for (file, path) in [("config.json", &files.config), ("model.safetensors", &files.weights)] {
        assert_eq!(path, &folder.join("snapshots").join(COMMIT).join(file));
        assert_eq!(std::fs::read_to_string(path).unwrap(), format!("contents of {file}"));
        // The snapshot links to its blob, named by the hub's etag.
        assert_eq!(
            std::fs::canonicalize(path).unwrap(),
            std::fs::canonicalize(folder.join("blobs").join(etag_of(file))).unwrap()
        );
    }
    assert_eq!(std::fs::read_to_string(folder.join("refs/main")).unwrap(), COMMIT);
    assert!(matches!(files.origin, hub::Origin::Hub { ref commit, .. } if commit == COMMIT));
    // The hub got the token; the CDN (another origin) never did.
    assert!(hub_server.seen().iter().all(|s| s.authorization.as_deref() == Some(&format!("Bearer {TOKEN}")[..])));
    assert!(cdn.seen().iter().any(|s| s.path == "/blob/config.json?X-Amz-Signature=signed"), "{:?}", cdn.seen());
    assert!(cdn.seen().iter().all(|s| s.authorization.is_none()), "{:?}", cdn.seen());
    // Found in the cache now: no request on a second resolution.
    let before = hub_server.seen().len();
    hub::from_hub("org/model", "main", &settings(cache.path(), &hub_server.url(), NetLimits::default())).unwrap();
    assert_eq!(hub_server.seen().len(), before);
}

/// The error of downloading `org/model` from a hub that answers every path with `answer`.
fn failure(
    answer: impl Fn(&str) -> (Vec<u8>, Duration) + Send + Sync + 'static,
    limits: NetLimits,
) -> (benchctl_models::Error, tempfile::TempDir) {
    let server = Server::start(answer);
    let cache = tempfile::tempdir().unwrap();
    let error = hub::from_hub("org/model", "main", &settings(cache.path(), &server.url(), limits)).unwrap_err();
    (error, cache)
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn redirects_are_bounded_and_only_to_http() {
    let headers = |location: &str| {
        vec![("Location", location.to_string()), ("x-repo-commit", COMMIT.to_string()), ("etag", "\"abc\"".to_string())]
    };
    for (location, expected) in [
        ("file:///etc/passwd", "redirected to a file: address; only http and https are followed"),
        ("javascript:alert(1)", "redirected to a javascript: address"),
        ("data:text/plain,x", "redirected to a data: address"),
    ] {
        let location = location.to_string();
        let (error, _cache) =
            failure(move |_| (reply("302 Found", &headers(&location), b""), Duration::ZERO), NetLimits::default());
        assert!(error.to_string().contains(expected), "{error}");
        assert_eq!(error.kind(), ErrorKind::MissingFile);
    }
    // A redirect to itself, forever.
    let limits = NetLimits { max_redirects: 3, ..NetLimits::default() };
    let (error, _cache) = failure(move |path| (reply("302 Found", &headers(path), b""), Duration::ZERO), limits);
    assert!(error.to_string().contains("more than 3 redirects"), "{error}");
    // A redirect without a Location.
    let (error, _cache) = failure(|_| (reply("302 Found", &[], b""), Duration::ZERO), NetLimits::default());
    assert!(error.to_string().contains("redirected (302) without a Location"), "{error}");
}

#[test]
fn sizes_are_bounded_and_nothing_partial_is_kept() {
    // A 200 naming its commit and blob, with `length` as its Content-Length, then `body`.
    let answer = |length: Option<&str>, body: &[u8]| {
        let length = length.map(|l| format!("Content-Length: {l}\r\n")).unwrap_or_default();
        let head =
            format!("HTTP/1.1 200 OK\r\nConnection: close\r\n{length}x-repo-commit: {COMMIT}\r\netag: \"abc\"\r\n\r\n");
        [head.as_bytes(), body].concat()
    };
    // A length beyond the limit is refused before any byte is read.
    let huge = answer(Some("1000000000000"), b"");
    let (error, cache) = failure(move |_| (huge.clone(), Duration::ZERO), NetLimits::default());
    assert!(error.to_string().contains("announces 1000000000000 bytes, more than the"), "{error}");
    assert!(files_under(cache.path()).is_empty(), "{:?}", files_under(cache.path()));
    // No length, and more bytes than the limit: refused as they arrive, the partial file removed.
    let limits = NetLimits { max_file_bytes: 1000, ..NetLimits::default() };
    let long = answer(None, &[b'x'; 5000]);
    let (error, cache) = failure(move |_| (long.clone(), Duration::ZERO), limits);
    assert!(error.to_string().contains("sent more than the 1000-byte limit"), "{error}");
    assert!(files_under(cache.path()).is_empty(), "{:?}", files_under(cache.path()));
}

#[test]
fn a_stalled_server_times_out() {
    let limits = NetLimits { read_timeout: Duration::from_millis(300), ..NetLimits::default() };
    let started = std::time::Instant::now();
    let (error, cache) = failure(
        |_| {
            let head = format!(
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 100\r\nx-repo-commit: {COMMIT}\r\netag: \"abc\"\r\n\r\n0123456789"
            );
            (head.into_bytes(), Duration::from_secs(5))
        },
        limits,
    );
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    assert!(error.to_string().contains("the download stopped after 10 of 100 bytes"), "{error}");
    assert!(error.to_string().contains("run the command again to resume it"), "{error}");
    // What arrived is kept for the next download to resume, and nothing passes for the file.
    let blobs = cache.path().join("models--org--model/blobs");
    assert_eq!(files_under(cache.path()), [blobs.join("abc.incomplete")]);
    assert_eq!(std::fs::read(blobs.join("abc.incomplete")).unwrap(), b"0123456789");
}

/// A hub whose file (`FILE_LEN` bytes) is answered by `answer(range)`, `range` being the
/// request's Range header; each answer names the commit and the blob `abc`.
fn ranged_hub(answer: impl Fn(Option<&str>) -> (String, Vec<u8>) + Send + Sync + 'static) -> Server {
    Server(
        http::Server::start(move |request: &http::Request| {
            let (status_and_headers, body) = answer(request.range.as_deref());
            let head = format!(
                "HTTP/1.1 {status_and_headers}\r\nConnection: close\r\nx-repo-commit: {COMMIT}\r\netag: \"abc\"\r\n\r\n"
            );
            ([head.as_bytes(), &body].concat(), Duration::ZERO)
        })
        .unwrap(),
    )
}

const FILE_LEN: usize = 5000;

fn file_bytes() -> Vec<u8> {
    (0..FILE_LEN).map(|i| (i * 7 % 251) as u8).collect()
}

/// A download that stops half-way keeps its part; the next asks for the rest only
/// (`Range: bytes=N-`) and the file is whole; a server that ignores the range is read from
/// the start; one that answers with other bytes than those asked for is refused.
#[test]
fn a_stopped_download_resumes_where_it_stopped() {
    let bytes = file_bytes();
    let cut = 1234;
    let whole = bytes.clone();
    // The first answer announces every byte and sends `cut`; a ranged one sends the rest.
    let hub = ranged_hub(move |range| match range.and_then(|r| r.strip_prefix("bytes=")) {
        None => (format!("200 OK\r\nContent-Length: {FILE_LEN}"), whole[..cut].to_vec()),
        Some(r) => {
            let from: usize = r.trim_end_matches('-').parse().unwrap();
            let rest = &whole[from..];
            (
                format!(
                    "206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {from}-{}/{FILE_LEN}",
                    rest.len(),
                    FILE_LEN - 1
                ),
                rest.to_vec(),
            )
        }
    });
    let cache = tempfile::tempdir().unwrap();
    let at = || settings(cache.path(), &hub.url(), NetLimits::default());
    let error = hub::from_hub("org/model", "main", &at()).unwrap_err();
    assert!(error.to_string().contains(&format!("stopped after {cut} of {FILE_LEN} bytes")), "{error}");
    let blobs = cache.path().join("models--org--model/blobs");
    assert_eq!(std::fs::metadata(blobs.join("abc.incomplete")).unwrap().len(), cut as u64);
    assert!(!cache.path().join("models--org--model/snapshots").exists());
    // Every file of the model is the same blob here: the second run resumes it once and links it.
    let files = hub::from_hub("org/model", "main", &at()).unwrap();
    assert_eq!(std::fs::read(&files.weights).unwrap(), bytes);
    assert!(!blobs.join("abc.incomplete").exists());
    let ranges: Vec<Option<String>> = hub.seen().iter().map(|r| r.range.clone()).collect();
    // The first run's request, the second run's first answer (dropped) and its ranged request;
    // the other files are the blob already whole: no more ranges.
    assert_eq!(ranges[..3], [None, None, Some(format!("bytes={cut}-"))], "{ranges:?}");
    assert_eq!(ranges.iter().flatten().count(), 1, "{ranges:?}");

    // A server that ignores the range: the part is dropped and the file read whole.
    let whole = bytes.clone();
    let plain = ranged_hub(move |_| (format!("200 OK\r\nContent-Length: {FILE_LEN}"), whole.clone()));
    let cache = tempfile::tempdir().unwrap();
    let blobs = cache.path().join("models--org--model/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(blobs.join("abc.incomplete"), b"stale bytes of an earlier try").unwrap();
    let files =
        hub::from_hub("org/model", "main", &settings(cache.path(), &plain.url(), NetLimits::default())).unwrap();
    assert_eq!(std::fs::read(&files.config).unwrap(), bytes);

    // A server that answers a range with other bytes: refused, naming what it sent.
    let odd = ranged_hub(|range| match range {
        None => (format!("200 OK\r\nContent-Length: {FILE_LEN}"), Vec::new()),
        Some(_) => ("206 Partial Content\r\nContent-Length: 1\r\nContent-Range: bytes 0-0/5000".to_string(), vec![0]),
    });
    let cache = tempfile::tempdir().unwrap();
    let blobs = cache.path().join("models--org--model/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(blobs.join("abc.incomplete"), b"0123").unwrap();
    let error =
        hub::from_hub("org/model", "main", &settings(cache.path(), &odd.url(), NetLimits::default())).unwrap_err();
    assert!(error.to_string().contains("asked for the bytes from 4 on, the server answered with others"), "{error}");
}

#[test]
fn names_from_the_server_never_leave_the_cache() {
    for (commit, etag, expected) in [
        (COMMIT, "../../../outside", "named the blob \"../../../outside\", not a hash"),
        ("main", "abc", "named the commit \"main\", not a 40-digit hash"),
        ("../../../../tmp/x/0123456789abcdef0123456", "abc", "not a 40-digit hash"),
    ] {
        let head = format!("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\nx-repo-commit: {commit}\r\netag: \"{etag}\"\r\n\r\nok");
        let (error, cache) = failure(move |_| (head.clone().into_bytes(), Duration::ZERO), NetLimits::default());
        assert!(error.to_string().contains(expected), "{error}");
        assert!(files_under(cache.path()).is_empty());
    }
    // A dataset listing a file outside the repo.
    let listing = format!(r#"{{"sha": "{COMMIT}", "siblings": [{{"rfilename": "../../escape.json"}}]}}"#);
    let server = Server::start(move |_| (reply("200 OK", &[], listing.as_bytes()), Duration::ZERO));
    let cache = tempfile::tempdir().unwrap();
    let error = hub::fetch_dataset(
        "org/data",
        "main",
        &settings(cache.path(), &server.url(), NetLimits::default()),
        &|names| names.to_vec(),
    )
    .err()
    .unwrap();
    assert!(error.to_string().contains("\"../../escape.json\" is not a path inside the repo"), "{error}");
}

#[test]
fn a_refused_token_is_named_and_never_shown() {
    let (error, _cache) = failure(|_| (reply("401 Unauthorized", &[], b"no"), Duration::ZERO), NetLimits::default());
    assert_eq!(error.kind(), ErrorKind::AccessDenied);
    let text = error.to_string();
    assert!(text.contains("401") && text.contains("the token in HF_TOKEN was refused"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
}

/// TLS certificates are verified, always: an HTTPS hub whose certificate no public
/// authority signed (a self-signed one for 127.0.0.1, made once with
/// `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1
/// -addext subjectAltName=IP:127.0.0.1`, kept as DER in `tests/fixtures/tls/`) is refused
/// during the handshake, naming the certificate, and no request reaches it.
#[test]
fn a_server_certificate_no_authority_signed_is_refused() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    let cert = rustls::pki_types::CertificateDer::from(std::fs::read(fixtures.join("cert.der")).unwrap());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(std::fs::read(fixtures.join("key.der")).unwrap().into());
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requested = Arc::new(AtomicBool::new(false));
    let seen = requested.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let Ok(connection) = rustls::ServerConnection::new(config.clone()) else { continue };
            let mut tls = rustls::StreamOwned::new(connection, stream);
            let mut byte = [0u8; 1];
            // A request would be readable only after a completed handshake.
            if tls.read(&mut byte).is_ok_and(|n| n > 0) {
                seen.store(true, Ordering::SeqCst);
                let _ = tls.write_all(&reply("200 OK", &[], b"should never be read"));
            }
        }
    });
    let cache = tempfile::tempdir().unwrap();
    let endpoint = format!("https://127.0.0.1:{port}");
    let error =
        hub::from_hub("org/model", "main", &settings(cache.path(), &endpoint, NetLimits::default())).unwrap_err();
    let text = error.to_string();
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(!requested.load(Ordering::SeqCst), "a request reached the server");
    assert!(files_under(cache.path()).is_empty());
}

/// A hub repo without `preprocessor_config.json` (404, as the hub answers for a missing file):
/// the image settings come from `processor_config.json` (where transformers 5 saves them); a
/// repo with neither has none, which the cache records (`.no_exist/{commit}/`) so that offline
/// runs resolve it too, without a request.
#[test]
fn image_settings_fall_back_to_processor_config_json_and_absence_is_remembered() {
    for has_processor_config in [true, false] {
        let (missing, _cdn) = hub_and_cdn_without(move |file| {
            file == "preprocessor_config.json" || (file == "processor_config.json" && !has_processor_config)
        });
        let cache = tempfile::tempdir().unwrap();
        let online = settings(cache.path(), &missing.url(), NetLimits::default());
        let files = hub::from_hub("org/model", "main", &online).unwrap();
        let folder = cache.path().join("models--org--model");
        let marker = |file: &str| folder.join(".no_exist").join(COMMIT).join(file).is_file();
        assert!(marker("preprocessor_config.json"), "{:?}", files_under(&folder));
        if has_processor_config {
            assert_eq!(files.preprocessor, Some(folder.join("snapshots").join(COMMIT).join("processor_config.json")));
        } else {
            assert_eq!(files.preprocessor, None);
            assert!(marker("processor_config.json"));
        }
        // Offline, the cache answers alike.
        let offline = HubSettings { offline: true, ..online.clone() };
        let before = missing.seen().len();
        assert_eq!(hub::from_hub("org/model", "main", &offline).unwrap().preprocessor, files.preprocessor);
        assert_eq!(missing.seen().len(), before, "no request offline");
        // A cache that knows nothing of either file says so offline, naming both.
        for entry in std::fs::read_dir(folder.join("snapshots").join(COMMIT)).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap().to_str().unwrap().contains("processor_config") {
                std::fs::remove_file(path).unwrap();
            }
        }
        std::fs::remove_dir_all(folder.join(".no_exist")).unwrap();
        let err = hub::from_hub("org/model", "main", &offline).unwrap_err().to_string();
        assert!(err.contains("preprocessor_config.json or processor_config.json of org/model@main"), "{err}");
    }
}

/// `generation_config.json` (what replies generated here read) comes with a checkpoint where
/// the repo has it; its absence is recorded as the hub answered it, so offline runs know it
/// absent without a request; an offline cache that knows neither is `Unknown`, which a
/// generating run refuses (`tests/generate.rs` reads the settings themselves).
#[test]
fn the_generation_settings_come_along_and_their_absence_is_remembered() {
    use benchctl_models::hub::GenerationFile;
    for has_it in [true, false] {
        let (hub_server, _cdn) = hub_and_cdn_without(move |file| file == "generation_config.json" && !has_it);
        let cache = tempfile::tempdir().unwrap();
        let online = settings(cache.path(), &hub_server.url(), NetLimits::default());
        let files = hub::from_hub("org/model", "main", &online).unwrap();
        let snapshot = cache.path().join("models--org--model/snapshots").join(COMMIT);
        let want = match has_it {
            true => GenerationFile::Found(snapshot.join("generation_config.json")),
            false => GenerationFile::Absent,
        };
        assert_eq!(files.generation, want);
        let offline = HubSettings { offline: true, ..online.clone() };
        let before = hub_server.seen().len();
        assert_eq!(hub::from_hub("org/model", "main", &offline).unwrap().generation, want);
        assert_eq!(hub_server.seen().len(), before, "no request offline");
        if !has_it {
            std::fs::remove_dir_all(cache.path().join("models--org--model/.no_exist")).unwrap();
            let files = hub::from_hub("org/model", "main", &offline).unwrap();
            assert_eq!(files.generation, GenerationFile::Unknown);
            let err = benchctl_models::vqascore::generate::GenerationSettings::of(&files).unwrap_err().to_string();
            assert!(err.contains("generation_config.json") && err.contains("HF_HUB_OFFLINE"), "{err}");
        }
    }
}

/// An OpenCLIP repo as Apple's DFN ones are published: no `open_clip_model.safetensors` and no
/// `tokenizer.json` (404). The weights come from `open_clip_pytorch_model.bin` and the tokenizer
/// from OpenAI's ViT-B/32 repo at its pinned commit, as open_clip falls back to its own file and
/// ships OpenAI's BPE; the cache remembers both absences, so a second run, and an offline one,
/// resolve the same files without a request. A repo with neither weights file names both.
#[test]
fn an_openclip_repo_without_safetensors_or_tokenizer_takes_open_clips_fallbacks() {
    let (hub_server, _cdn) =
        hub_and_cdn_without(|file| file == "open_clip_model.safetensors" || file == "tokenizer.json");
    let cache = tempfile::tempdir().unwrap();
    let bpe = hub::OPENAI_CLIP_BPE;
    // The stand-in tokenizer is in the cache already (as after a run of the zoo's clip-vit-b32).
    let openai = cache.path().join("models--openai--clip-vit-base-patch32").join("snapshots").join(bpe.commit);
    std::fs::create_dir_all(&openai).unwrap();
    std::fs::write(openai.join(bpe.file), "the CLIP BPE").unwrap();
    let online = settings(cache.path(), &hub_server.url(), NetLimits::default());
    let files = hub::from_hub_with("apple/dfn", "main", hub::OPEN_CLIP_LAYOUT, &online).unwrap();
    let snapshot = cache.path().join("models--apple--dfn").join("snapshots").join(COMMIT);
    assert_eq!(files.config, snapshot.join("open_clip_config.json"));
    assert_eq!(files.weights, snapshot.join("open_clip_pytorch_model.bin"));
    assert_eq!(files.tokenizer, openai.join(bpe.file));
    let marker = |file: &str| cache.path().join("models--apple--dfn/.no_exist").join(COMMIT).join(file).is_file();
    assert!(marker("open_clip_model.safetensors") && marker("tokenizer.json"));

    let before = hub_server.seen().len();
    let again = hub::from_hub_with("apple/dfn", "main", hub::OPEN_CLIP_LAYOUT, &online).unwrap();
    let offline = HubSettings { offline: true, ..online.clone() };
    let cached = hub::from_hub_with("apple/dfn", "main", hub::OPEN_CLIP_LAYOUT, &offline).unwrap();
    for files in [again, cached] {
        assert_eq!(
            (&files.weights, &files.tokenizer),
            (&snapshot.join("open_clip_pytorch_model.bin"), &openai.join(bpe.file))
        );
    }
    assert_eq!(hub_server.seen().len(), before, "resolved from the cache, without a request");

    let (bare, _cdn) = hub_and_cdn_without(|file| file.starts_with("open_clip_") && file != "open_clip_config.json");
    let cache = tempfile::tempdir().unwrap();
    let settings = settings(cache.path(), &bare.url(), NetLimits::default());
    let err = hub::from_hub_with("apple/dfn", "main", hub::OPEN_CLIP_LAYOUT, &settings).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingFile);
    let text = err.to_string();
    assert!(
        text.contains("apple/dfn@main") && text.contains("open_clip_model.safetensors nor open_clip_pytorch_model.bin"),
        "{text}"
    );
}

/// A CLIP-FlanT5 repo as zhiqiulin's are published: `config.json` and PyTorch shards behind
/// `pytorch_model.bin.index.json`, no `tokenizer.json` (404). Every shard the index names is
/// downloaded beside it, the tokenizer is google/flan-t5-xl's at its pinned commit (with that
/// commit's `tokenizer_config.json`, which decodes replies), the repo's `generation_config.json`
/// is read, and an offline run resolves the same files from the cache.
#[test]
fn a_clip_flant5_repo_brings_its_pytorch_shards_and_flan_t5s_tokenizer() {
    let index = r#"{"metadata": {}, "weight_map": {"shared.weight": "pytorch_model-00001-of-00002.bin",
        "lm_head.weight": "pytorch_model-00002-of-00002.bin", "encoder.final_layer_norm.weight": "pytorch_model-00001-of-00002.bin"}}"#;
    let (hub_server, _cdn) = hub_and_cdn_serving(
        |file| file == "tokenizer.json",
        move |file| {
            if file == "pytorch_model.bin.index.json" {
                index.to_string()
            } else {
                format!("contents of {file}")
            }
        },
    );
    let cache = tempfile::tempdir().unwrap();
    let flan = benchctl_models::models::clip_t5::FLAN_T5_TOKENIZER;
    let stand_in = cache.path().join("models--google--flan-t5-xl").join("snapshots").join(flan.commit);
    std::fs::create_dir_all(&stand_in).unwrap();
    std::fs::write(stand_in.join(flan.file), "FlanT5's tokenizer").unwrap();
    std::fs::write(stand_in.join("tokenizer_config.json"), "{}").unwrap();
    let clip = benchctl_models::models::clip_t5::CLIP_L14_336.file;
    let tower = cache.path().join("models--openai--clip-vit-large-patch14-336").join("snapshots").join(clip.commit);
    std::fs::create_dir_all(&tower).unwrap();
    std::fs::write(tower.join(clip.file), "OpenAI's CLIP").unwrap();
    let online = settings(cache.path(), &hub_server.url(), NetLimits::default());
    let layout = benchctl_models::models::clip_t5::LAYOUT;
    let files = hub::from_hub_with("zhiqiulin/clip-flant5-xl", "main", layout, &online).unwrap();
    let snapshot = cache.path().join("models--zhiqiulin--clip-flant5-xl").join("snapshots").join(COMMIT);
    assert_eq!(files.weights, snapshot.join("pytorch_model.bin.index.json"));
    assert_eq!(files.tokenizer, stand_in.join(flan.file));
    assert_eq!(files.tokenizer_settings, Some(stand_in.join("tokenizer_config.json")));
    assert_eq!(files.generation, hub::GenerationFile::Found(snapshot.join("generation_config.json")));
    // The index names no tower tensor: the CLIP tower's weights come from OpenAI's repo.
    assert_eq!(files.companion, Some(tower.join(clip.file)));
    for shard in ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"] {
        assert_eq!(std::fs::read_to_string(snapshot.join(shard)).unwrap(), format!("contents of {shard}"));
    }
    let before = hub_server.seen().len();
    let offline = HubSettings { offline: true, ..online.clone() };
    let cached = hub::from_hub_with("zhiqiulin/clip-flant5-xl", "main", layout, &offline).unwrap();
    assert_eq!(
        (cached.weights, cached.tokenizer, cached.tokenizer_settings, cached.generation, cached.companion),
        (files.weights, files.tokenizer, files.tokenizer_settings, files.generation, files.companion)
    );
    assert_eq!(hub_server.seen().len(), before, "resolved from the cache, without a request");

    // An index that names the tower: nothing else is taken.
    let with_tower = r#"{"weight_map": {"shared.weight": "pytorch_model-00001-of-00001.bin",
        "vision_tower.vision_tower.vision_model.embeddings.class_embedding": "pytorch_model-00001-of-00001.bin"}}"#;
    let (hub_server, _cdn) = hub_and_cdn_serving(
        |file| file == "tokenizer.json",
        move |file| {
            if file == "pytorch_model.bin.index.json" {
                with_tower.to_string()
            } else {
                format!("contents of {file}")
            }
        },
    );
    let online = settings(cache.path(), &hub_server.url(), NetLimits::default());
    let files = hub::from_hub_with("zhiqiulin/clip-flant5-xxl", "main", layout, &online).unwrap();
    assert_eq!(files.companion, None);
}
