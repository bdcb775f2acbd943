//! Helpers shared by the runner's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the built `benchctl` with `args` and extra environment variables. Unless `env` names
/// `BENCHCTL_CACHE`, each call gets a fresh, empty embedding cache, under cargo's temporary
/// directory for tests (`target/tmp`), never left behind in the system's.
pub fn benchctl(args: &[&str], env: &[(&str, &str)]) -> Output {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut cmd = command(args, env);
    if !env.iter().any(|(k, _)| *k == "BENCHCTL_CACHE") {
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cache-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        cmd.env("BENCHCTL_CACHE", cache);
    }
    cmd.output().expect("run benchctl")
}

/// The built `benchctl` with `args` and `env`, without the hub's variables of the caller, nor
/// the `COLUMNS` its shell may export (tables then keep their rows on one line, as the tests
/// read them).
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_benchctl"));
    cmd.args(args).env_remove("HF_HUB_OFFLINE").env_remove("HF_HOME").env_remove("HF_TOKEN").env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `eval --model-path model --suite suite --data-dir data --results-dir results` plus `extra`.
pub fn eval_args<'a>(
    model: &'a str,
    suite: &'a str,
    data: &'a str,
    results: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["eval", "--model-path", model, "--suite", suite, "--data-dir", data, "--results-dir", results];
    args.extend_from_slice(extra);
    args
}

/// A fresh directory under cargo's temporary directory for tests (`target/tmp`), for results
/// a test reads after the call that wrote them: nothing is left in the system's temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts success and returns the stored run file's JSON.
pub fn stored_run(out: &Output) -> (PathBuf, serde_json::Value) {
    assert!(out.status.success(), "benchctl failed: {}\n{}", stderr(out), stdout(out));
    let text = stdout(out);
    let path = text.lines().find_map(|l| l.strip_prefix("stored ")).expect("a `stored` line");
    let path = PathBuf::from(path.trim());
    let json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (path, json)
}

pub fn tiny_model() -> String {
    benchctl_testkit::fixture_model("clip-tiny-a").display().to_string()
}

pub fn demo_suite() -> PathBuf {
    benchctl_testkit::workspace_root().join("datasets/demo/winoground")
}

/// Copies a directory tree (the demo suite) so a test may break it.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Where `eval` wrote a run's EqBen submission (`prediction.npy`, the official scorer's name).
pub fn prediction_path(run_path: &Path) -> PathBuf {
    run_path.with_extension("submission").join("prediction.npy")
}

/// `benchctl eval` of the tiny fixture model on `suite`, which must succeed: the run file,
/// its JSON, and the process output.
pub fn eval_tiny(suite: &str, data: &Path, results: &Path, extra: &[&str]) -> (PathBuf, serde_json::Value, Output) {
    eval_model(Path::new(&tiny_model()), suite, data, results, extra, &[])
}

/// `benchctl eval --model-path model --suite suite --data-dir data --results-dir results`
/// plus `extra` and `env`, which must succeed: the run file, its JSON, and the output.
pub fn eval_model(
    model: &Path,
    suite: &str,
    data: &Path,
    results: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (PathBuf, serde_json::Value, Output) {
    let (model, data, results) = (model.to_str().unwrap(), data.to_str().unwrap(), results.to_str().unwrap());
    let out = benchctl(&eval_args(model, suite, data, results, extra), env);
    let (path, json) = stored_run(&out);
    (path, json, out)
}

/// The score dump of a stored run.
pub fn dump_path(run_path: &Path, run: &serde_json::Value) -> PathBuf {
    run_path.with_file_name(run["scores_file"].as_str().unwrap())
}

/// `benchctl score --suite winoground --data-dir data --scores scores --model-name name
/// --results-dir results` plus `extra`: a run of an external model (not checked).
pub fn score_external(data: &Path, scores: &Path, name: &str, results: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "score",
        "--suite",
        "winoground",
        "--data-dir",
        data.to_str().unwrap(),
        "--scores",
        scores.to_str().unwrap(),
        "--model-name",
        name,
        "--results-dir",
        results.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    benchctl(&args, &[])
}

/// Runs the built `benchctl` as [`benchctl`] does, and also returns its own peak resident
/// memory in MiB (`wait4`'s `ru_maxrss`: this child alone, not the test's other children).
#[cfg(target_os = "linux")]
#[allow(clippy::zombie_processes)] // reaped by `wait4`, which std's `wait` would not give the usage of
pub fn benchctl_peak_rss(args: &[&str], env: &[(&str, &str)]) -> (Output, f64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child =
        command(args, env).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        err.read_to_end(&mut buf).map(|_| buf)
    });
    let mut stdout = Vec::new();
    out.read_to_end(&mut stdout).unwrap();
    let stderr = err_reader.join().unwrap().unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: the child is ours and not yet waited for; both out-pointers are valid.
    let waited = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(waited, child.id() as libc::pid_t, "wait4: {}", std::io::Error::last_os_error());
    let output = Output { status: std::process::ExitStatus::from_raw(status), stdout, stderr };
    (output, usage.ru_maxrss as f64 / 1024.0)
}

/// An OpenAI-compatible server's 200 reply generated as `text` (no log-probabilities).
pub fn generated_reply(text: &str) -> Vec<u8> {
    let answer = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "tiny-vlm",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    });
    benchctl_testkit::http::reply(
        "200 OK",
        &[("Content-Type", "application/json".into())],
        answer.to_string().as_bytes(),
    )
}

/// An OpenAI-compatible server's 200 reply to a question of two answer options: a chat
/// completion whose first token is the first option, its top log-probabilities `first` and
/// `second`, one for each option.
pub fn options_reply(options: (&str, &str), first: f64, second: f64) -> Vec<u8> {
    let top = serde_json::json!([{"token": options.0, "logprob": first}, {"token": options.1, "logprob": second}]);
    let answer = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "tiny-vlm",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": options.0}, "finish_reason": "length",
            "logprobs": {"content": [{"token": options.0, "logprob": first, "top_logprobs": top}]}}],
    });
    benchctl_testkit::http::reply(
        "200 OK",
        &[("Content-Type", "application/json".into())],
        answer.to_string().as_bytes(),
    )
}
