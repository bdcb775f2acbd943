//! Hub downloads with bounded network use: every request has connect and read timeouts,
//! every response a size limit, redirects are followed by hand (at most
//! [`NetLimits::max_redirects`], only to `http(s)`, never from HTTPS down to HTTP), the
//! token goes only to the endpoint's own origin, and nothing a server names (commit, blob id,
//! file name) becomes a path before it is checked. TLS is rustls with its certificate
//! verification, which nothing here can turn off.
//!
//! The protocol and cache layout are the hub's, as `huggingface_hub` and `hf-hub` use them:
//! `GET {endpoint}/{repo}/resolve/{revision}/{file}` answers with the commit
//! (`x-repo-commit`) and the blob's id (`x-linked-etag`, else `etag`), usually by redirecting
//! to a CDN; the file lands in `blobs/{etag}`, linked from `snapshots/{commit}/{file}`, and
//! `refs/{revision}` names the commit. A file the repo lacks (404) is recorded as
//! `.no_exist/{commit}/{file}`, so that offline runs know it is absent rather than missing.
//!
//! A download is written to `blobs/{etag}.incomplete` and moved to its name only once every
//! byte the server announced has arrived; a download that stops keeps its part, and the next
//! one asks only for the rest (`Range: bytes=N-`, as `huggingface_hub` resumes), starting
//! over where the server answers with the whole file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use crate::{Error, ErrorKind, Result};

/// How far a download may go: timeouts, redirects and response sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetLimits {
    /// Time to open a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// The longest wait for any read or write on a connection: a server that stops sending
    /// for this long fails the download.
    pub read_timeout: Duration,
    /// Redirects followed for one request.
    pub max_redirects: u32,
    /// The largest JSON answer (a repo's file list) read.
    pub max_api_bytes: u64,
    /// The largest file downloaded, whatever the server announces.
    pub max_file_bytes: u64,
}

impl Default for NetLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(20),
            read_timeout: Duration::from_secs(60),
            max_redirects: 10,
            max_api_bytes: 64 << 20,
            // The largest checkpoints benchctl loads are a few GB.
            max_file_bytes: 64 << 30,
        }
    }
}

/// A bounded HTTP client for one hub endpoint.
pub(crate) struct Client {
    agent: ureq::Agent,
    endpoint: Url,
    token: Option<String>,
    limits: NetLimits,
}

/// The hub's answer for one file: the commit and blob id, and the response carrying its bytes
/// with the address it came from (after redirects).
struct Resolved {
    commit: String,
    etag: String,
    body: ureq::Response,
    at: Url,
}

/// An answer to `GET`: the response with the address that gave it (and the first response,
/// where it redirected), or, where the caller accepts it, a 404 with the commit the hub named
/// on it.
enum Answer {
    Found { last: Box<ureq::Response>, at: Url, first: Option<Box<ureq::Response>> },
    Absent { commit: Option<String> },
}

fn network(message: String) -> Error {
    Error::new(ErrorKind::MissingFile, message)
}

impl Client {
    pub(crate) fn new(endpoint: &str, token: Option<String>, limits: NetLimits) -> Result<Self> {
        let endpoint = Url::parse(endpoint.trim_end_matches('/'))
            .map_err(|e| network(format!("use the hub endpoint {endpoint:?}: {e}")))?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(network(format!("use the hub endpoint {endpoint}: only http and https are supported")));
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(limits.connect_timeout)
            .timeout_read(limits.read_timeout)
            .timeout_write(limits.read_timeout)
            // Redirects are followed here, to check each one and keep the token at home.
            .redirects(0)
            .user_agent(concat!("benchctl/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self { agent, endpoint, token, limits })
    }

    fn url(&self, path: &str) -> Result<Url> {
        Url::parse(&format!("{}/{path}", self.endpoint.as_str().trim_end_matches('/')))
            .map_err(|e| network(format!("make the hub address of {path:?}: {e}")))
    }

    /// `GET url`, following redirects within the limits, answering a 404 as
    /// [`Answer::Absent`] where `absent_ok`, asking for the bytes from `from` on where it is not
    /// 0. The first response is kept beside the last: the hub puts a file's commit and blob id
    /// on its own answer, which is often a redirect to the bytes.
    fn answer(&self, url: Url, what: &str, absent_ok: bool, from: u64) -> Result<Answer> {
        let mut current = url;
        let mut first = None;
        for _ in 0..=self.limits.max_redirects {
            let mut request = self.agent.request_url("GET", &current);
            if from > 0 {
                request = request.set("Range", &format!("bytes={from}-"));
            }
            if same_origin(&current, &self.endpoint) {
                if let Some(token) = &self.token {
                    request = request.set("Authorization", &format!("Bearer {token}"));
                }
            }
            let response = match request.call() {
                Ok(response) => response,
                Err(ureq::Error::Status(404, response)) if absent_ok => {
                    let commit = response.header("x-repo-commit").map(|c| c.trim().to_string());
                    return Ok(Answer::Absent { commit: commit.filter(|c| is_commit_hash(c)) });
                }
                Err(ureq::Error::Status(code, response)) => {
                    let kind = if matches!(code, 401 | 403) { ErrorKind::AccessDenied } else { ErrorKind::MissingFile };
                    let text = response.status_text().chars().take(200).collect::<String>();
                    return Err(Error::new(
                        kind,
                        format!("{what}: the server answered {code} {text} ({})", shown(&current)),
                    ));
                }
                Err(ureq::Error::Transport(t)) => {
                    return Err(network(format!("{what}: {} ({})", transport_text(&t), shown(&current))))
                }
            };
            if !(300..400).contains(&response.status()) {
                return Ok(Answer::Found { last: Box::new(response), at: current, first: first.map(Box::new) });
            }
            let location = response.header("Location").ok_or_else(|| {
                network(format!(
                    "{what}: the server redirected ({}) without a Location ({})",
                    response.status(),
                    shown(&current)
                ))
            })?;
            let next = redirect_target(&current, location).map_err(|e| network(format!("{what}: {e}")))?;
            first.get_or_insert(response);
            current = next;
        }
        Err(network(format!("{what}: more than {} redirects", self.limits.max_redirects)))
    }

    /// The hub's answer for `file` of a repo (`prefix`: `""` for models, `datasets/`); `Err`
    /// with the commit named on a 404 where `absent_ok`.
    fn resolve(
        &self,
        prefix: &str,
        (repo, revision): (&str, &str),
        file: &str,
        what: &str,
        absent_ok: bool,
    ) -> Result<std::result::Result<Resolved, Option<String>>> {
        let url = self.url(&format!("{prefix}{repo}/resolve/{}/{file}", encode_revision(revision)))?;
        let (body, at, first) = match self.answer(url, what, absent_ok, 0)? {
            Answer::Found { last, at, first } => (*last, at, first.map(|r| *r)),
            Answer::Absent { commit } => return Ok(Err(commit)),
        };
        let headers = first.as_ref().unwrap_or(&body);
        let commit = headers
            .header("x-repo-commit")
            .or_else(|| body.header("x-repo-commit"))
            .ok_or_else(|| network(format!("{what}: the hub's answer names no commit (x-repo-commit)")))?
            .trim()
            .to_string();
        let etag = headers
            .header("x-linked-etag")
            .or_else(|| headers.header("etag"))
            .ok_or_else(|| network(format!("{what}: the hub's answer names no blob (etag)")))?
            .trim()
            .trim_start_matches("W/")
            .replace('"', "");
        if !is_commit_hash(&commit) {
            return Err(network(format!("{what}: the hub named the commit {:?}, not a 40-digit hash", clip(&commit))));
        }
        // A blob id names a file: letters, digits, `-` and `_` only (the hub's are hex hashes).
        if etag.is_empty()
            || etag.len() > 128
            || !etag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(network(format!("{what}: the hub named the blob {:?}, not a hash", clip(&etag))));
        }
        Ok(Ok(Resolved { commit, etag, body, at }))
    }

    /// Downloads `file` of `repo` at `revision` into the hub cache at `cache_dir` (the repo's
    /// folder `folder`, e.g. `models--org--name`); returns the snapshot path and the commit.
    pub(crate) fn download(
        &self,
        cache_dir: &Path,
        folder: &str,
        prefix: &str,
        (repo, revision): (&str, &str),
        file: &str,
    ) -> Result<(PathBuf, String)> {
        let what = format!("download {file} of {repo}@{revision}");
        match self.download_if_present(cache_dir, folder, prefix, (repo, revision), file, false)? {
            Some(found) => Ok(found),
            None => Err(network(format!("{what}: the server answered 404"))),
        }
    }

    /// As [`Client::download`] for a file the repo may lack (where `absent_ok`): `None` when
    /// the hub answers 404, recorded as `.no_exist/{commit}/{file}` as `huggingface_hub`
    /// records it.
    pub(crate) fn download_if_present(
        &self,
        cache_dir: &Path,
        folder: &str,
        prefix: &str,
        (repo, revision): (&str, &str),
        file: &str,
        absent_ok: bool,
    ) -> Result<Option<(PathBuf, String)>> {
        let what = format!("download {file} of {repo}@{revision}");
        check_repo_path(file).map_err(|e| network(format!("{what}: {e}")))?;
        check_repo_path(revision).map_err(|e| network(format!("{what}: the revision: {e}")))?;
        let root = cache_dir.join(folder);
        let resolved = match self.resolve(prefix, (repo, revision), file, &what, absent_ok)? {
            Ok(resolved) => resolved,
            Err(commit) => {
                // Only a marker: a failure to write it costs a request next time, nothing more.
                if let Some(commit) = commit {
                    let marker = root.join(".no_exist").join(&commit).join(file);
                    if let Some(parent) = marker.parent() {
                        let _ = std::fs::create_dir_all(parent).and_then(|_| std::fs::write(&marker, b""));
                    }
                }
                return Ok(None);
            }
        };
        let Resolved { commit, etag, body, at } = resolved;
        let blob = root.join("blobs").join(&etag);
        let io = |action: &str, path: &Path, e: std::io::Error| {
            Error::caused_by(ErrorKind::MissingFile, format!("{what}: {action} {}: {e}", path.display()), e)
        };
        if !blob.is_file() {
            let parent = root.join("blobs");
            std::fs::create_dir_all(&parent).map_err(|e| io("create", &parent, e))?;
            let partial = parent.join(format!("{etag}.incomplete"));
            let have = std::fs::metadata(&partial).map_or(0, |m| m.len());
            let body = if have > 0 { self.rest_of(body, at, have, &what)? } else { Body::from(body) };
            self.save(body, &partial, &what)?;
            std::fs::rename(&partial, &blob).map_err(|e| io("move the download to", &blob, e))?;
        }
        let pointer = root.join("snapshots").join(&commit).join(file);
        if let Some(parent) = pointer.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
        }
        link_blob(&blob, &pointer).map_err(|e| io("link", &pointer, e))?;
        if revision != commit {
            let reference = root.join("refs").join(revision);
            if let Some(parent) = reference.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
            }
            std::fs::write(&reference, &commit).map_err(|e| io("write", &reference, e))?;
        }
        Ok(Some((pointer, commit)))
    }

    /// The rest of a download of which `have` bytes are kept: the address `at` that gave the
    /// `first` answer asked for the bytes from `have` on. The answer is a [`Body`] from `have`
    /// (206 with a `Content-Range` starting there) or, where the server sends the whole file
    /// (200), from 0.
    fn rest_of(&self, first: ureq::Response, at: Url, have: u64, what: &str) -> Result<Body> {
        // The first answer's bytes are not read: the address it came from gives the rest.
        drop(first);
        let (response, at) = match self.answer(at, what, false, have)? {
            Answer::Found { last, at, .. } => (*last, at),
            Answer::Absent { .. } => return Err(network(format!("{what}: the server answered 404"))),
        };
        match response.status() {
            206 => {
                let start = response
                    .header("Content-Range")
                    .and_then(|r| r.trim().strip_prefix("bytes "))
                    .and_then(|r| r.split('-').next())
                    .and_then(|n| n.trim().parse::<u64>().ok());
                if start != Some(have) {
                    return Err(network(format!(
                        "{what}: asked for the bytes from {have} on, the server answered with others ({:?}, {})",
                        response.header("Content-Range").unwrap_or("no Content-Range"),
                        shown(&at)
                    )));
                }
                Ok(Body { response, from: have })
            }
            _ => Ok(Body { response, from: 0 }),
        }
    }

    /// Writes a body's bytes to `path` (after the `from` bytes already there), no more than the
    /// server announced (when it did) nor than [`NetLimits::max_file_bytes`] in all, and
    /// exactly what it announced. A download that stops keeps what arrived, for the next one
    /// to resume; one that breaks a bound is removed.
    fn save(&self, body: impl Into<Body>, path: &Path, what: &str) -> Result<()> {
        let Body { response, from } = body.into();
        let announced = response.header("Content-Length").and_then(|v| v.trim().parse::<u64>().ok());
        let limit = self.limits.max_file_bytes;
        if let Some(size) = announced.filter(|&size| from + size > limit) {
            let _ = std::fs::remove_file(path);
            return Err(network(format!(
                "{what}: the server announces {} bytes, more than the {limit}-byte limit",
                from + size
            )));
        }
        let create = |e: std::io::Error| {
            Error::caused_by(ErrorKind::MissingFile, format!("{what}: create {}: {e}", path.display()), e)
        };
        let mut out = if from > 0 {
            std::fs::OpenOptions::new().append(true).open(path).map_err(create)?
        } else {
            std::fs::File::create(path).map_err(create)?
        };
        let total = announced.map(|size| from + size);
        let progress = indicatif::ProgressBar::new(total.unwrap_or(0));
        progress.set_position(from);
        let mut reader = response.into_reader().take(limit + 1 - from);
        let mut buffer = vec![0u8; 1 << 16];
        let mut written = from;
        let stopped = |written: u64, why: String| {
            let of = total.map_or(String::new(), |t| format!(" of {t}"));
            network(format!(
                "{what}: the download stopped after {written}{of} bytes: {why}; run the command again to resume it (the part is kept as {})",
                path.display()
            ))
        };
        loop {
            let n = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = out.sync_all();
                    return Err(stopped(written, e.to_string()));
                }
            };
            written += n as u64;
            if written > limit {
                let _ = std::fs::remove_file(path);
                return Err(network(format!("{what}: the server sent more than the {limit}-byte limit")));
            }
            out.write_all(&buffer[..n]).map_err(|e| {
                let _ = std::fs::remove_file(path);
                Error::caused_by(ErrorKind::MissingFile, format!("{what}: write {}: {e}", path.display()), e)
            })?;
            progress.inc(n as u64);
        }
        progress.finish_and_clear();
        out.sync_all().map_err(|e| {
            Error::caused_by(ErrorKind::MissingFile, format!("{what}: write {}: {e}", path.display()), e)
        })?;
        match total {
            Some(total) if written < total => Err(stopped(written, "the server closed the connection".into())),
            _ => Ok(()),
        }
    }

    /// A repo's commit at `revision` and its file names
    /// (`GET {endpoint}/api/{models,datasets}/{repo}/revision/{revision}`); a 404 says the hub
    /// has no such repo or revision.
    pub(crate) fn repo_info(&self, kind: RepoKind, repo: &str, revision: &str) -> Result<(String, Vec<String>)> {
        let what = format!("list the files of the {} {repo}@{revision}", kind.noun());
        let url = self.url(&format!("api/{}/{repo}/revision/{}", kind.api(), encode_revision(revision)))?;
        let response = match self.answer(url, &what, true, 0)? {
            Answer::Found { last, .. } => *last,
            Answer::Absent { .. } => {
                return Err(network(format!(
                    "{what}: the hub answered 404: it has no {} {repo} at revision {revision} (check the name and revision; a private repo needs HF_TOKEN)",
                    kind.noun()
                )))
            }
        };
        let mut text = String::new();
        response
            .into_reader()
            .take(self.limits.max_api_bytes + 1)
            .read_to_string(&mut text)
            .map_err(|e| network(format!("{what}: read the answer: {e}")))?;
        if text.len() as u64 > self.limits.max_api_bytes {
            return Err(network(format!("{what}: the answer is longer than {} bytes", self.limits.max_api_bytes)));
        }
        #[derive(serde::Deserialize)]
        struct Info {
            sha: String,
            siblings: Vec<Sibling>,
        }
        #[derive(serde::Deserialize)]
        struct Sibling {
            rfilename: String,
        }
        let info: Info = serde_json::from_str(&text).map_err(|e| network(format!("{what}: read the answer: {e}")))?;
        if !is_commit_hash(&info.sha) {
            return Err(network(format!(
                "{what}: the hub named the commit {:?}, not a 40-digit hash",
                clip(&info.sha)
            )));
        }
        Ok((info.sha, info.siblings.into_iter().map(|s| s.rfilename).collect()))
    }
}

/// A response's bytes and where they start in the file.
struct Body {
    response: ureq::Response,
    from: u64,
}

impl From<ureq::Response> for Body {
    fn from(response: ureq::Response) -> Self {
        Body { response, from: 0 }
    }
}

/// Which kind of hub repo: its API path and its name in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RepoKind {
    Model,
    Dataset,
}

impl RepoKind {
    fn api(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }
}

/// Where a redirect from `current` to `location` leads, if it may be followed: a relative
/// location resolved against `current`; only `http(s)`, never from HTTPS down to HTTP.
fn redirect_target(current: &Url, location: &str) -> std::result::Result<Url, String> {
    let next = current.join(location).map_err(|e| format!("the server redirected to an unreadable address: {e}"))?;
    if !matches!(next.scheme(), "http" | "https") {
        return Err(format!("the server redirected to a {}: address; only http and https are followed", next.scheme()));
    }
    if current.scheme() == "https" && next.scheme() == "http" {
        return Err(format!("the server redirected from https to plain http ({})", shown(&next)));
    }
    Ok(next)
}

/// A revision in a URL: branch names may hold `/`, which the hub wants escaped.
fn encode_revision(revision: &str) -> String {
    revision.replace('/', "%2F")
}

pub(crate) use benchctl_base::hub_names::is_commit_hash;

/// Whether `url` goes to the endpoint's origin (scheme, host and port), where the token may go.
fn same_origin(url: &Url, endpoint: &Url) -> bool {
    url.scheme() == endpoint.scheme()
        && url.host_str() == endpoint.host_str()
        && url.port_or_known_default() == endpoint.port_or_known_default()
}

/// A URL as errors show it: without its query (signed CDN addresses carry credentials there).
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    let _ = url.set_password(None);
    let _ = url.set_username("");
    url.to_string()
}

fn clip(text: &str) -> String {
    text.chars().take(80).collect()
}

/// A transport failure in words (ureq's text can repeat the whole address with its query).
fn transport_text(t: &ureq::Transport) -> String {
    let detail = std::error::Error::source(t).map(|s| s.to_string()).unwrap_or_default();
    let kind = t.kind().to_string();
    if detail.is_empty() {
        kind
    } else {
        format!("{kind}: {detail}")
    }
}

/// A path inside a repo (a file name or a revision) that stays inside its folder
/// ([`benchctl_base::hub_names::is_repo_path`]), or why not.
pub(crate) fn check_repo_path(path: &str) -> std::result::Result<(), String> {
    if benchctl_base::hub_names::is_repo_path(path) {
        Ok(())
    } else {
        Err(format!("{:?} is not a path inside the repo", clip(path)))
    }
}

/// `pointer` → `blob`, as a relative symbolic link (the hub cache's layout), else a copy.
fn link_blob(blob: &Path, pointer: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_file(pointer);
    #[cfg(unix)]
    {
        let depth = pointer
            .parent()
            .and_then(|p| p.strip_prefix(blob.parent()?.parent()?).ok())
            .map_or(0, |p| p.iter().count());
        let mut target = PathBuf::new();
        (0..depth).for_each(|_| target.push(".."));
        target.push("blobs");
        target.push(blob.file_name().unwrap_or_default());
        if std::os::unix::fs::symlink(&target, pointer).is_ok() {
            return Ok(());
        }
    }
    std::fs::copy(blob, pointer).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Outcome = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn redirects_stay_on_http_and_never_go_down_from_https() -> Outcome {
        let hub = Url::parse("https://huggingface.co/org/m/resolve/main/config.json")?;
        let cdn = redirect_target(&hub, "https://cdn-lfs.hf.co/x?sig=1")?;
        assert_eq!(cdn.host_str(), Some("cdn-lfs.hf.co"));
        assert_eq!(
            redirect_target(&hub, "/api/renamed/config.json")?.as_str(),
            "https://huggingface.co/api/renamed/config.json"
        );
        let down = redirect_target(&hub, "http://cdn-lfs.hf.co/x?sig=1").unwrap_err();
        assert!(down.contains("from https to plain http (http://cdn-lfs.hf.co/x)"), "{down}");
        assert!(redirect_target(&hub, "ftp://host/x").unwrap_err().contains("a ftp: address"));
        let plain = Url::parse("http://127.0.0.1:8080/a")?;
        assert!(redirect_target(&plain, "https://127.0.0.1:8443/b").is_ok());
        Ok(())
    }

    #[test]
    fn the_token_goes_to_the_endpoints_origin_only() -> Outcome {
        let endpoint = Url::parse("https://huggingface.co")?;
        let at = |u: &str| Url::parse(u).is_ok_and(|url| same_origin(&url, &endpoint));
        assert!(at("https://huggingface.co/org/m/resolve/main/x") && at("https://huggingface.co:443/x"));
        assert!(!at("http://huggingface.co/x") && !at("https://huggingface.co:8443/x"));
        assert!(!at("https://cdn-lfs.huggingface.co/x") && !at("https://huggingface.co.evil.example/x"));
        Ok(())
    }

    #[test]
    fn repo_paths_stay_inside_the_repo() {
        for good in ["config.json", "data/test-00000.parquet", "refs/pr/1", "main"] {
            assert!(check_repo_path(good).is_ok(), "{good}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\\b", "a\0b"] {
            assert!(check_repo_path(bad).is_err(), "{bad:?}");
        }
    }
}
