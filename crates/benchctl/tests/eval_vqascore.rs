//! VQAScore end to end. `benchctl eval --endpoint` against loopback servers that play an
//! OpenAI-compatible one (answering with log-probabilities made from the request) and failing
//! ones: what is sent, what is stored, retries, the request budget, and that every answer
//! received survives a failure and is not asked again; against a real llama-cpp-python
//! server (its own chat format against transformers; Gemma 3's, with the image first, against
//! the local model); and local generative models (`--model-path`) against transformers.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use benchctl::results::read_scores;
use benchctl_testkit::http::{reply, Request, Server};
use common::{benchctl, dump_path, scratch_dir, stderr, stored_run};

const QUESTION: &str = "Does this figure show \"{}\"? Please answer Yes or No.";

/// The demo Winoground: 8 items of 2 images × 2 captions, 32 unique pairs.
fn demo() -> std::path::PathBuf {
    benchctl_testkit::workspace_root().join("datasets/demo/winoground")
}

/// The log-probability of "Yes" the fake model gives a request: a function of the question
/// and the image's data URI, so every pair differs and a mixed-up pair shows.
fn yes_logprob(question: &str, image_uri: &str) -> f64 {
    let h = question.bytes().chain(image_uri.bytes()).fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    -0.01 * ((h % 400) + 1) as f64
}

/// The question and image URI of a chat-completions request benchctl sent, in either order.
fn parts(request: &Request) -> (String, String) {
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    let content = body["messages"][0]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    let part = |kind: &str| content.iter().find(|c| c["type"] == kind).unwrap();
    (
        part("text")["text"].as_str().unwrap().to_string(),
        part("image_url")["image_url"]["url"].as_str().unwrap().to_string(),
    )
}

/// A chat completion whose first token's top log-probabilities are `top`.
fn completion(top: &[(&str, f64)]) -> Vec<u8> {
    let top: Vec<serde_json::Value> =
        top.iter().map(|(t, lp)| serde_json::json!({"token": t, "logprob": lp})).collect();
    let body = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "tiny-vlm",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"}, "finish_reason": "length",
            "logprobs": {"content": [{"token": "Yes", "logprob": top[0]["logprob"], "top_logprobs": top}]}}],
    });
    reply("200 OK", &[("Content-Type", "application/json".into())], body.to_string().as_bytes())
}

/// The fake model's answer: "Yes" with [`yes_logprob`], "No" with the rest.
fn answer(request: &Request) -> Vec<u8> {
    let (question, uri) = parts(request);
    let yes = yes_logprob(&question, &uri);
    completion(&[("Yes", yes), ("No", (-yes.exp_m1()).ln())])
}

fn eval(server: &str, results: &std::path::Path, cache: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let (data, results, cache) = (demo(), results.to_str().unwrap().to_string(), cache.to_str().unwrap().to_string());
    let mut args = vec!["eval", "--endpoint", server, "--served-model", "tiny-vlm", "--suite", "winoground"];
    let data = data.to_str().unwrap().to_string();
    args.extend(["--data-dir", &data, "--results-dir", &results]);
    args.extend_from_slice(extra);
    benchctl(&args, &[("BENCHCTL_CACHE", &cache), ("VQA_TEST_KEY", "sk-test-key")])
}

#[test]
fn scores_are_the_servers_log_probabilities_of_yes() {
    let server = Server::start(|r| (answer(r), Duration::ZERO)).unwrap();
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let url = format!("{}/v1", server.url());
    let out = eval(&url, &results, &cache, &["--api-key-env", "VQA_TEST_KEY", "--max-in-flight", "4"]);
    let (run_path, json) = stored_run(&out);

    // Each unique pair asked once, as t2v_metrics asks: the question, then the image file's
    // own bytes as a data URI; one token, its top 2 log-probabilities; the key as a bearer token.
    let seen = server.seen();
    assert_eq!(seen.len(), 32);
    let mut asked = std::collections::HashSet::new();
    for request in &seen {
        assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/v1/chat/completions"));
        assert_eq!(request.authorization.as_deref(), Some("Bearer sk-test-key"));
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["model"], "tiny-vlm");
        assert_eq!(
            (body["max_tokens"].as_u64(), body["logprobs"].as_bool(), body["top_logprobs"].as_u64()),
            (Some(1), Some(true), Some(2))
        );
        // t2v_metrics' API models' message: the question, then the image.
        assert_eq!(body["messages"][0]["content"][0]["type"], "text");
        assert!(asked.insert(parts(request)), "a pair was asked twice");
    }
    let (_, uri) = parts(&seen[0]);
    let sent = uri.strip_prefix("data:image/png;base64,").expect("a PNG data URI");
    let sent = STANDARD.decode(sent).unwrap();
    let files: Vec<Vec<u8>> =
        std::fs::read_dir(demo().join("images")).unwrap().map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    assert!(files.contains(&sent), "the image is sent as the file's bytes");

    // Stored: log P("Yes") of every pair exactly as the server gave it (to f32), as the
    // log-probability kind, with the server, served model and template recorded.
    assert_eq!(json["model"]["score_kind"], "log-probability");
    assert_eq!(json["model"]["score"], "vqascore");
    assert_eq!(json["model"]["endpoint"]["served_model"], "tiny-vlm");
    assert_eq!(json["model"]["endpoint"]["url"], format!("{url}/chat/completions"));
    assert_eq!(json["model"]["endpoint"]["question_template"], QUESTION);
    assert_eq!(json["counts"]["pairs_scored"], 32);
    let suite = benchctl_suites::find("winoground").unwrap().load(&demo()).unwrap();
    let lines = read_scores(&dump_path(&run_path, &json)).unwrap();
    let by_pair: std::collections::HashMap<(String, String), f64> = seen
        .iter()
        .map(|r| {
            let (question, uri) = parts(r);
            ((question.clone(), uri.clone()), yes_logprob(&question, &uri))
        })
        .collect();
    for ((id, matrix), item) in lines.iter().zip(&suite.items) {
        assert_eq!(id, &item.id());
        for (k, row) in matrix.iter().enumerate() {
            let image = std::fs::read(item.image(k).path()).unwrap();
            let uri = format!("data:image/png;base64,{}", STANDARD.encode(&image));
            for (l, &score) in row.iter().enumerate() {
                let question = QUESTION.replace("{}", item.text(l));
                assert_eq!(score, by_pair[&(question, uri.clone())] as f32, "item {id} pair ({k}, {l})");
            }
        }
    }

    // The API key is sent, never written: not in the run file, the dump or the cache.
    let written = [run_path.clone(), dump_path(&run_path, &json)];
    let cached = walk(&cache);
    for file in written.iter().chain(&cached) {
        let bytes = std::fs::read(file).unwrap();
        assert!(!bytes.windows(11).any(|w| w == b"sk-test-key"), "the key is in {}", file.display());
    }
    // A second run asks nothing: every answer is cached.
    let out = eval(&url, &results, &cache, &[]);
    stored_run(&out);
    assert_eq!(server.seen().len(), 32);

    // Two shards, each with its own cache, ask their own pairs only, and merge into this run.
    let shards: Vec<String> = (0..2)
        .map(|i| {
            let shard_results = scratch_dir("endpoint-shard-results");
            let out = eval(&url, &shard_results, &scratch_dir("endpoint-shard-cache"), &["--shard", &format!("{i}/2")]);
            let (path, shard) = stored_run(&out);
            assert_eq!(shard["counts"]["pairs_scored"], 16, "shard {i}/2 asks its 4 items' pairs");
            path.display().to_string()
        })
        .collect();
    assert_eq!(server.seen().len(), 64);
    let merged = scratch_dir("endpoint-merged");
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(String::as_str));
    args.extend(["--results-dir", merged.to_str().unwrap()]);
    let (merged_path, merged) = stored_run(&benchctl(&args, &[]));
    assert_eq!(read_scores(&dump_path(&merged_path, &merged)).unwrap(), lines);
}

#[test]
fn a_failing_server_keeps_every_answer_it_gave() {
    // The first 10 requests are answered, then the server fails until it is told to recover.
    let answered = Arc::new(AtomicUsize::new(0));
    let healthy = Arc::new(AtomicUsize::new(0));
    let (a, h) = (answered.clone(), healthy.clone());
    let server = Server::start(move |r| {
        if h.load(Ordering::SeqCst) == 1 || a.fetch_add(1, Ordering::SeqCst) < 10 {
            (answer(r), Duration::ZERO)
        } else {
            (reply("500 Internal Server Error", &[], b"{\"error\": \"model crashed\"}"), Duration::ZERO)
        }
    })
    .unwrap();
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let out = eval(&server.url(), &results, &cache, &["--retries", "1", "--max-in-flight", "1"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let message = stderr(&out);
    for part in [
        "500",
        "model crashed",
        "chat/completions",
        "tiny-vlm",
        "ex_",
        "with caption",
        "10 answer(s) received are cached",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert_eq!(server.seen().len(), 12, "10 answers, then one request and its one retry");
    healthy.store(1, Ordering::SeqCst);
    let out = eval(&server.url(), &results, &cache, &[]);
    let (_, json) = stored_run(&out);
    assert_eq!(server.seen().len(), 12 + 22, "the next run asks only the 22 pairs without an answer");
    assert_eq!(
        (json["counts"]["pairs_cached"].as_u64(), json["counts"]["pairs_scored"].as_u64()),
        (Some(10), Some(22))
    );
}

#[test]
fn busy_servers_are_retried_and_the_budget_leaves_the_rest_for_later() {
    // Every third pair asked is told once to come back (429, Retry-After: 0): by pair, not by
    // request, so that requests in flight side by side cannot land one pair on every refusal.
    let told: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    let server = Server::start(move |r| {
        let pair = parts(r);
        let mut told = told.lock().unwrap();
        if !told.contains(&pair) {
            told.push(pair);
            if told.len() % 3 == 1 {
                return (reply("429 Too Many Requests", &[("Retry-After", "0".into())], b"slow down"), Duration::ZERO);
            }
        }
        (answer(r), Duration::ZERO)
    })
    .unwrap();
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let out = eval(&server.url(), &results, &cache, &["--request-budget", "12", "--max-in-flight", "3"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("12 pair(s) were asked and cached, 20 are left for the next run"),
        "{}",
        stderr(&out)
    );
    let out = eval(&server.url(), &results, &cache, &[]);
    let (_, json) = stored_run(&out);
    assert_eq!(json["counts"]["pairs_scored"], 20);
    let requests = json["counts"]["requests"].as_u64().unwrap();
    assert!(requests > 20, "the 429s were retried: {requests} requests for 20 pairs");
    let distinct: std::collections::HashSet<(String, String)> = server.seen().iter().map(parts).collect();
    assert_eq!(distinct.len(), 32);
}

#[test]
fn answers_without_log_probabilities_or_json_are_named() {
    type Case = (&'static str, fn() -> Vec<u8>, &'static str);
    let cases: [Case; 3] = [
        (
            "no log-probabilities",
            || reply("200 OK", &[], br#"{"choices":[{"message":{"content":"Yes"},"logprobs":null}]}"#),
            "no log-probabilities",
        ),
        ("not JSON", || reply("200 OK", &[], b"<html>gateway</html>"), "not a chat completion"),
        ("a refusal", || reply("400 Bad Request", &[], br#"{"error":"image_url is not supported"}"#), "400"),
    ];
    for (what, answer, expected) in cases {
        let server = Server::start(move |_| (answer(), Duration::ZERO)).unwrap();
        let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
        let out = eval(&server.url(), &results, &cache, &["--max-in-flight", "2"]);
        assert_eq!(out.status.code(), Some(7), "{what}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(message.contains(expected) && message.contains("tiny-vlm"), "{what}: {message}");
        assert!(server.seen().len() <= 2, "{what}: not retried, nothing new sent after the failure");
        assert!(std::fs::read_dir(&results).map_or(true, |mut d| d.next().is_none()), "{what}: no run stored");
    }
}

#[test]
fn a_stalled_server_times_out_naming_it() {
    let server = Server::start(|_| (Vec::new(), Duration::from_secs(5))).unwrap();
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let out =
        eval(&server.url(), &results, &cache, &["--request-timeout", "1", "--retries", "0", "--max-in-flight", "1"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("timed out") && stderr(&out).contains("tiny-vlm"), "{}", stderr(&out));
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A stored run's scores of the Winoground-layout suite in `data`, as
/// `{image file stem: {caption: score}}`.
fn stored_scores(run_path: &std::path::Path, run: &serde_json::Value, data: &std::path::Path) -> serde_json::Value {
    let suite = benchctl_suites::find("winoground").unwrap().load(data).unwrap();
    let lines = read_scores(&dump_path(run_path, run)).unwrap();
    let mut out = serde_json::json!({});
    for ((_, matrix), item) in lines.iter().zip(&suite.items) {
        for (k, row) in matrix.iter().enumerate() {
            let image = item.image(k).path().file_stem().unwrap().to_str().unwrap().to_string();
            for (l, &score) in row.iter().enumerate() {
                out[&image][item.text(l)] = f64::from(score).into();
            }
        }
    }
    out
}

/// The largest difference between a stored run's scores of the Winoground-layout suite in
/// `data` and `reference[image file stem][caption]`, over every pair of the run.
fn worst_difference(
    run_path: &std::path::Path,
    run: &serde_json::Value,
    data: &std::path::Path,
    reference: &serde_json::Value,
) -> f64 {
    let stored = stored_scores(run_path, run, data);
    let mut pairs = 0;
    let mut worst = 0.0f64;
    for (image, captions) in stored.as_object().unwrap() {
        for (caption, score) in captions.as_object().unwrap() {
            let expected =
                reference[image][caption].as_f64().unwrap_or_else(|| panic!("no reference for {image}, {caption}"));
            worst = worst.max((score.as_f64().unwrap() - expected).abs());
            pairs += 1;
        }
    }
    assert_eq!(pairs, 32, "every pair of the demo suite");
    worst
}

/// A Python server process on a loopback port, stopped when dropped.
struct PythonServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `python` with the arguments `args` gives for a free loopback port, once `python -c
/// probe` succeeds (else why not: `install`), and waits up to `wait_s` for it to listen.
fn python_server(
    probe: &str,
    install: &str,
    wait_s: u64,
    args: impl FnOnce(&mut std::process::Command, &str),
) -> Result<PythonServer, String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    if !std::process::Command::new(&python).args(["-c", probe]).output().is_ok_and(|o| o.status.success()) {
        return Err(format!("{python} cannot run `{probe}` ({install})"));
    }
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let mut command = std::process::Command::new(&python);
    args(&mut command, &port.to_string());
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let server = PythonServer { child, port };
    for _ in 0..wait_s * 4 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(server);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!("the server did not start listening within {wait_s} s"))
}

/// Set to `1`, a missing llama-cpp-python server fails the tests that need it.
const REQUIRE_LLAMA: &str = "BENCHCTL_REQUIRE_LLAMA_SERVER";

/// How the server renders a chat: llama-cpp-python's own `llava-1-5` format, or Gemma 3's
/// (`scripts/fixtures/llama_cpp_gemma3_server.py`).
enum ChatFormat {
    Llava15,
    Gemma3,
}

/// llama-cpp-python's OpenAI-compatible server with the tiny Gemma 3 converted to GGUF by
/// llama.cpp's own converter (`scripts/fixtures/gen_vqascore_fixture.py`), or why it cannot run here.
fn llama_cpp_server(model: &std::path::Path, format: ChatFormat) -> Result<PythonServer, String> {
    let install = "pip install 'llama-cpp-python[server]'";
    python_server("import llama_cpp.server", install, 60, |command, port| {
        match format {
            ChatFormat::Llava15 => command.args(["-m", "llama_cpp.server", "--chat_format", "llava-1-5"]),
            ChatFormat::Gemma3 => {
                command.arg(benchctl_testkit::workspace_root().join("scripts/fixtures/llama_cpp_gemma3_server.py"))
            }
        };
        command
            .args(["--logits_all", "true", "--n_ctx", "512"])
            .arg("--model")
            .arg(model.join("gemma3-tiny-f32.gguf"))
            .arg("--clip_model_path")
            .arg(model.join("mmproj-gemma3-tiny-f32.gguf"))
            .args(["--host", "127.0.0.1", "--port", port]);
    })
}

/// The server, or `None` (with the reason printed) where it cannot start, unless the variable
/// `require` is `1` (then a failure).
fn server_or_skip(server: Result<PythonServer, String>, require: &str) -> Option<PythonServer> {
    match server {
        Ok(server) => Some(server),
        Err(why) if std::env::var(require).is_ok_and(|v| v == "1") => panic!("{why}"),
        Err(why) => {
            benchctl_testkit::skip_even_in_ci(&format!("{why}; see docs/models.md, \"VQAScore through a server\""));
            None
        }
    }
}

/// `eval` of the demo suite through `server`, with `extra` flags; the stored run.
fn eval_through(
    server: &PythonServer,
    data: &std::path::Path,
    extra: &[&str],
) -> (std::path::PathBuf, serde_json::Value) {
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let url = format!("http://127.0.0.1:{}/v1", server.port);
    let (data_dir, results_dir) = (data.to_str().unwrap(), results.to_str().unwrap());
    let args =
        ["eval", "--endpoint", &url, "--served-model", "gemma3-tiny", "--suite", "winoground", "--data-dir", data_dir];
    let out = benchctl(
        &[&args[..], &["--results-dir", results_dir, "--max-in-flight", "2"], extra].concat(),
        &[("BENCHCTL_CACHE", cache.to_str().unwrap())],
    );
    stored_run(&out)
}

fn gemma3_tiny() -> (std::path::PathBuf, serde_json::Value) {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/gemma3-tiny");
    let expected = serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap()).unwrap();
    (model, expected)
}

fn vqa_winoground() -> std::path::PathBuf {
    benchctl_testkit::workspace_root().join("crates/benchctl/tests/fixtures/vqa-winoground")
}

/// The default request (the question, then the image) through llama-cpp-python's `llava-1-5`
/// format: the stored scores are the server's, equal to transformers on that prompt.
#[test]
fn a_real_llama_cpp_server_scores_as_transformers_does() {
    let (model, expected) = gemma3_tiny();
    let Some(server) = server_or_skip(llama_cpp_server(&model, ChatFormat::Llava15), REQUIRE_LLAMA) else {
        return;
    };
    let (run_path, json) = eval_through(&server, &vqa_winoground(), &[]);
    let worst = worst_difference(&run_path, &json, &vqa_winoground(), &expected["server"]);
    assert!(worst < 1e-3, "stored log P(Yes) vs transformers on the server's prompt: max |Δ| = {worst:e}");
}

/// A server rendering the checkpoint's own chat format, asked with the image first, sees the
/// prompt the model is scored on locally: its stored scores equal benchctl's local scores of
/// the same weights (safetensors here, GGUF there), and transformers'.
#[test]
fn a_server_with_the_checkpoints_chat_format_scores_as_the_local_model_does() {
    let (model, expected) = gemma3_tiny();
    let Some(server) = server_or_skip(llama_cpp_server(&model, ChatFormat::Gemma3), REQUIRE_LLAMA) else {
        return;
    };
    let data = vqa_winoground();
    let (server_path, server_run) = eval_through(&server, &data, &["--image-position", "before-question"]);
    assert_eq!(server_run["model"]["endpoint"]["image_position"], "before-question");
    let (results, cache) = (scratch_dir("local-results"), scratch_dir("local-cache"));
    let args = common::eval_args(
        model.to_str().unwrap(),
        "winoground",
        data.to_str().unwrap(),
        results.to_str().unwrap(),
        &[],
    );
    let (local_path, local_run) = stored_run(&benchctl(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    let local = stored_scores(&local_path, &local_run, &data);
    let worst = worst_difference(&server_path, &server_run, &data, &local);
    assert!(worst < 1e-3, "server vs local candle scores of the same weights: max |Δ log P(Yes)| = {worst:e}");
    let worst = worst_difference(&server_path, &server_run, &data, &expected["local"]);
    assert!(worst < 1e-3, "server vs transformers' local prompt: max |Δ| = {worst:e}");
    // The default order asks a different prompt, and scores differently.
    let (default_path, default_run) = eval_through(&server, &data, &[]);
    let moved = worst_difference(&default_path, &default_run, &data, &local);
    assert!(moved > 1e-2, "the question-first prompt moved the scores by only {moved:e}");
}

/// `transformers serve` (5.x) on the same tiny Gemma 3, or why it cannot run here: it answers
/// chat completions but ignores `logprobs` (its handler logs "Ignoring unsupported fields").
fn transformers_serve(model: &std::path::Path) -> Result<PythonServer, String> {
    let probe = "import fastapi, uvicorn, transformers.cli.serving.chat_completion";
    python_server(probe, "pip install 'transformers[serving]'", 120, |command, port| {
        command.args(["-m", "transformers.cli.transformers", "serve"]).arg(model).args([
            "--host",
            "127.0.0.1",
            "--port",
            port,
        ]);
    })
}

/// A real server that answers without log-probabilities: the run stops with exit code 7
/// naming the server, the model and the pair, and stores no score.
#[test]
fn a_real_server_without_log_probabilities_is_named() {
    let (model, _) = gemma3_tiny();
    let Some(server) = server_or_skip(transformers_serve(&model), "BENCHCTL_REQUIRE_TRANSFORMERS_SERVE") else {
        return;
    };
    let data = vqa_winoground();
    let (results, cache) = (scratch_dir("no-logprobs-results"), scratch_dir("no-logprobs-cache"));
    let url = format!("http://127.0.0.1:{}/v1", server.port);
    let served = model.to_str().unwrap();
    let args = ["eval", "--endpoint", &url, "--served-model", served, "--suite", "winoground", "--data-dir"];
    let out = benchctl(
        &[&args[..], &[data.to_str().unwrap(), "--results-dir", results.to_str().unwrap(), "--max-in-flight", "1"]]
            .concat(),
        &[("BENCHCTL_CACHE", cache.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let message = stderr(&out);
    for part in ["no log-probabilities", url.as_str(), served, "ex_"] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
    assert!(walk(&results).iter().all(|f| !f.to_string_lossy().ends_with(".scores.jsonl")), "no scores stored");
}

#[test]
fn local_generative_models_score_every_pair_as_transformers_does() {
    for fixture in ["gemma3-tiny", "paligemma-tiny"] {
        local_generative_model(fixture);
    }
}

fn local_generative_model(fixture: &str) {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures").join(fixture);
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap()).unwrap();
    let data = vqa_winoground();
    let (results, cache) = (scratch_dir("generative-results"), scratch_dir("generative-cache"));
    let (model_dir, data_dir, results_dir) =
        (model.to_str().unwrap(), data.to_str().unwrap(), results.to_str().unwrap());
    let args = common::eval_args(model_dir, "winoground", data_dir, results_dir, &[]);
    let env = [("BENCHCTL_CACHE", cache.to_str().unwrap())];
    let (run_path, json) = stored_run(&benchctl(&[&args[..], &["--batch-size", "3"]].concat(), &env));
    assert_eq!(
        (json["model"]["score"].as_str(), json["model"]["score_kind"].as_str()),
        (Some("vqascore"), Some("log-probability"))
    );
    // Each image's prompt state once (16 images, in batches of 3), each of the 32 pairs once.
    let counts = &json["counts"];
    assert_eq!((counts["images_encoded"].as_u64(), counts["image_batches"].as_u64()), (Some(16), Some(6)));
    assert_eq!(counts["pairs_scored"], 32);
    let worst = worst_difference(&run_path, &json, &data, &expected["local"]);
    assert!(worst <= 1e-4, "{fixture}: stored log P(Yes) vs transformers: {worst:e}");
    // Winoground's scores compare log-probabilities as they compare any score.
    assert!(json["report"]["metrics"]["group_score"].is_number(), "{}", json["report"]);
    // A re-run reads every pair from the cache, without the weights.
    let (_, again) = stored_run(&benchctl(&args, &env));
    assert_eq!(
        (again["counts"]["pairs_cached"].as_u64(), again["counts"]["pairs_scored"].as_u64()),
        (Some(32), Some(0))
    );
    assert_eq!(again["timings"]["load_model_s"], 0.0);
}

/// A generative model's shards (`--shard i/n`), merged, and a run resumed from a cache that
/// holds only some of an image's pairs, give the cold run's scores bit for bit. The suite's
/// items share images across the shard boundary (item n shows item n mod 4's), so a shard
/// wants only some of an image's pairs; a batch of 3 then splits them. A score depends in its
/// last bits on the batch it was computed in (`--batch-size 1` and `3` differ here), so each
/// run scores the cold run's batches whole.
#[test]
fn a_generative_models_shards_and_resumed_runs_give_the_cold_runs_bits() {
    let data = scratch_dir("generative-shards");
    common::copy_tree(&vqa_winoground().join("images"), &data.join("images"));
    let base: Vec<serde_json::Value> = std::fs::read_to_string(vqa_winoground().join("examples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let items: String = (0..10)
        .map(|n| {
            let (shown, said) = (&base[n % 4], &base[n % 7]);
            let own = format!("{} number {n}", said["caption_1"].as_str().unwrap());
            let item = serde_json::json!({
                "id": n, "image_0": shown["image_0"], "image_1": shown["image_1"], "caption_0": said["caption_0"],
                "caption_1": own, "tag": "t", "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": "Object",
            });
            format!("{item}\n")
        })
        .collect();
    std::fs::write(data.join("examples.jsonl"), items).unwrap();
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/gemma3-tiny");
    let run = |cache: &std::path::Path, extra: &[&str]| {
        let (results, model, data) =
            (scratch_dir("generative-shard-results"), model.to_str().unwrap(), data.to_str().unwrap());
        let args = common::eval_args(model, "winoground", data, results.to_str().unwrap(), extra);
        stored_run(&benchctl(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]))
    };
    let scores = |(path, json): &(std::path::PathBuf, serde_json::Value)| read_scores(&dump_path(path, json)).unwrap();
    let cold = run(&scratch_dir("generative-shard-cache"), &["--batch-size", "3"]);
    let alone = run(&scratch_dir("generative-shard-cache"), &["--batch-size", "1"]);
    assert_ne!(scores(&alone), scores(&cold), "scores depend on their batch here, or this test shows nothing");
    let first_half = scratch_dir("generative-shard-cache");
    let shards: Vec<String> = (0..2)
        .map(|i| {
            let cache = if i == 0 { first_half.clone() } else { scratch_dir("generative-shard-cache") };
            run(&cache, &["--batch-size", "3", "--shard", &format!("{i}/2")]).0.display().to_string()
        })
        .collect();
    let merged = scratch_dir("generative-merged");
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(String::as_str));
    args.extend(["--data-dir", data.to_str().unwrap(), "--results-dir", merged.to_str().unwrap()]);
    let merged = stored_run(&benchctl(&args, &[]));
    assert_eq!(scores(&merged), scores(&cold), "the merged shards' scores");
    let resumed = run(&first_half, &["--batch-size", "3"]);
    let counts = &resumed.1["counts"];
    assert!(counts["pairs_cached"].as_u64().unwrap() > 0 && counts["pairs_scored"].as_u64().unwrap() > 0, "{counts}");
    assert_eq!(scores(&resumed), scores(&cold), "the resumed run's scores");
}

/// Qwen3-VL through the runner: each image at its own size (one per batch), every pair's
/// stored log P("Yes") as `t2v_metrics`' own Qwen3-VL scorer gives it.
#[test]
fn qwen3vl_scores_images_of_every_size_as_t2v_metrics_does() {
    // Each image at its own size: one image per batch.
    scores_fixture_images_as_t2v_metrics_does("qwen3vl-tiny", "t2v_metrics_p_yes", 4);
}

#[test]
fn qwen25vl_scores_images_of_every_size_as_t2v_metrics_does() {
    scores_fixture_images_as_t2v_metrics_does("qwen25vl-tiny", "t2v_metrics_p_yes", 4);
}

/// InternVL3: each image as its tiles (1, 3, 4 and 5 of them here), one image per batch.
#[test]
fn internvl_scores_images_of_every_tile_grid_as_t2v_metrics_does() {
    scores_fixture_images_as_t2v_metrics_does("internvl-tiny", "t2v_metrics_p_yes", 4);
}

#[test]
fn clip_flant5_scores_pairs_as_t2v_metrics_does() {
    // Square inputs: three images, then one, per batch of 3.
    scores_fixture_images_as_t2v_metrics_does("clip-flant5-tiny", "t2v_metrics_p", 2);
}

/// Two Winoground items over a generative fixture's first four images through `eval
/// --model-path` (batches of 3), each stored score within 1e-4 of t2v_metrics' log P.
fn scores_fixture_images_as_t2v_metrics_does(fixture: &str, key: &str, image_batches: u64) {
    let model = benchctl_testkit::fixture_model(fixture);
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap()).unwrap();
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    // Two Winoground items over the fixture's first four images (each of another size), as
    // `image0.png` to `image3.png`.
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("images")).unwrap();
    for (i, image) in expected["images"].as_array().unwrap().iter().take(4).enumerate() {
        let file = image["file"].as_str().unwrap();
        std::fs::copy(model.join("images").join(file), data.path().join("images").join(format!("image{i}.png")))
            .unwrap();
    }
    let lines: Vec<String> = (0..2)
        .map(|n| {
            let item = serde_json::json!({"id": n, "image_0": format!("image{}", 2 * n), "image_1": format!("image{}", 2 * n + 1),
                "caption_0": captions[2 * n], "caption_1": captions[2 * n + 1], "tag": "t", "secondary_tag": "s",
                "num_main_preds": 1, "collapsed_tag": "Object"});
            item.to_string() + "\n"
        })
        .collect();
    std::fs::write(data.path().join("examples.jsonl"), lines.concat()).unwrap();
    let (results, cache) = (scratch_dir(&format!("{fixture}-results")), scratch_dir(&format!("{fixture}-cache")));
    let args = common::eval_args(
        model.to_str().unwrap(),
        "winoground",
        data.path().to_str().unwrap(),
        results.to_str().unwrap(),
        &["--batch-size", "3"],
    );
    let (run_path, json) = stored_run(&benchctl(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_eq!(
        (json["model"]["score"].as_str(), json["model"]["score_kind"].as_str()),
        (Some("vqascore"), Some("log-probability"))
    );
    let counts = &json["counts"];
    assert_eq!((counts["images_encoded"].as_u64(), counts["image_batches"].as_u64()), (Some(4), Some(image_batches)));
    assert_eq!(counts["pairs_scored"], 8);
    let stored = stored_scores(&run_path, &json, data.path());
    let mut worst = 0.0f64;
    for pair in expected["pairs"].as_array().unwrap() {
        let (i, c) = (pair["image"].as_u64().unwrap(), pair["caption"].as_u64().unwrap() as usize);
        if let Some(score) = stored[format!("image{i}")][captions[c]].as_f64() {
            worst = worst.max((score - pair[key].as_f64().unwrap().ln()).abs());
        }
    }
    assert!(worst <= 1e-4, "{fixture}: stored log P(Yes) vs t2v_metrics: {worst:e}");
    assert_eq!(stored.as_object().unwrap().values().map(|c| c.as_object().unwrap().len()).sum::<usize>(), 8);
}

/// RoCOCO re-ranked by Qwen3-VL: text queries' shortlists of images of different sizes are
/// encoded one image at a time (their states differ in size), image queries' captions batched.
#[test]
fn qwen3vl_re_ranks_shortlists_of_images_of_different_sizes() {
    let data = scratch_dir("qwen3vl-rococo");
    benchctl_testkit::rococo_layout(&data, 4);
    let resized = data.join("images/val2014/COCO_val2014_000000000101.jpg");
    benchctl_testkit::generated_image(11, 40, 90).save_with_format(&resized, image::ImageFormat::Jpeg).unwrap();
    let model = benchctl_testkit::fixture_model("qwen3vl-tiny").display().to_string();
    let clip = benchctl_testkit::fixture_model("clip-tiny-a").display().to_string();
    let results = scratch_dir("qwen3vl-rococo-results");
    let gallery = ["--rococo-methods", "mix", "--rococo-lambdas", "900", "--rococo-seeds", "0", "--rerank-k", "3"];
    let args = common::eval_args(&model, "rococo", data.to_str().unwrap(), results.to_str().unwrap(), &gallery);
    let (_, run) = stored_run(&benchctl(&[&args[..], &["--shortlist-model-path", &clip]].concat(), &[]));
    assert_eq!(run["model"]["score"], "vqascore");
    let metrics = &run["report"]["metrics"];
    for metric in ["clean_t2i_r1", "clean_i2t_r1"] {
        assert!(metrics[metric].as_f64().is_some_and(|v| (0.0..=100.0).contains(&v)), "{metric}: {metrics}");
    }
}

#[test]
fn a_run_spec_scores_through_its_endpoints() {
    let server = Server::start(|r| (answer(r), Duration::ZERO)).unwrap();
    let dir = scratch_dir("endpoint-spec");
    let spec = dir.join("run.toml");
    let endpoint = |extra: &str| {
        format!(
            "results_dir = \"out\"\n\n[[runs]]\nendpoints = [{{ url = \"{}/v1\", served_model = \"tiny-vlm\", max_in_flight = 2{extra} }}]\nsuites = [\"winoground\"]\ndata_dirs = {{ winoground = {:?} }}\n",
            server.url(),
            demo().display().to_string()
        )
    };
    std::fs::write(&spec, endpoint(", top_logprobs = 5, image_position = \"before-question\"")).unwrap();
    let cache = scratch_dir("endpoint-spec-cache");
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stored = std::fs::read_dir(dir.join("out/runs")).unwrap().filter_map(|e| e.ok()).map(|e| e.path());
    let run: serde_json::Value = stored
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .next()
        .unwrap();
    assert_eq!(
        (run["model"]["endpoint"]["served_model"].as_str(), run["model"]["endpoint"]["top_logprobs"].as_u64()),
        (Some("tiny-vlm"), Some(5))
    );
    assert_eq!(server.seen().len(), 32);
    let body: serde_json::Value = serde_json::from_slice(&server.seen()[0].body).unwrap();
    assert_eq!(body["top_logprobs"], 5);
    assert_eq!(body["messages"][0]["content"][0]["type"], "image_url", "the image before the question");
    assert_eq!(run["model"]["endpoint"]["image_position"], "before-question");
    // An endpoint entry out of range is a usage error naming it.
    std::fs::write(&spec, endpoint(", top_logprobs = 50")).unwrap();
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("runs[0].endpoints[0]") && stderr(&out).contains("top_logprobs 50"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn rococo_re_ranks_a_contrastive_models_shortlist_with_a_generative_model() {
    let data = scratch_dir("generative-rococo");
    benchctl_testkit::rococo_layout(&data, 4);
    let model = benchctl_testkit::fixture_model("gemma3-tiny").display().to_string();
    let clip = benchctl_testkit::fixture_model("clip-tiny-a").display().to_string();
    let results = scratch_dir("generative-rococo-results");
    let (data_dir, results_dir) = (data.to_str().unwrap(), results.to_str().unwrap());
    let gallery = ["--rococo-methods", "mix", "--rococo-lambdas", "900", "--rococo-seeds", "0", "--rerank-k", "1"];
    let args = common::eval_args(&model, "rococo", data_dir, results_dir, &gallery);
    // A generative model has no contrastive head of its own: the error says what to pass.
    let out = benchctl(&args, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--shortlist-model"), "{}", stderr(&out));
    let (_, run) = stored_run(&benchctl(&[&args[..], &["--shortlist-model-path", &clip]].concat(), &[]));
    assert_eq!(run["suite"]["shortlist"], "clip-tiny-a");
    assert_eq!(run["model"]["score"], "vqascore");
    // Everything outside a shortlist of one ranks below it: an image query hits at rank 0 or
    // misses beyond rank 10 (galleries of 20+ captions).
    let metrics = &run["report"]["metrics"];
    for gallery in ["clean", "rand_voca", "danger"] {
        let r = |k: &str| metrics[format!("{gallery}_i2t_{k}")].as_f64().unwrap();
        assert_eq!((r("r1"), r("r5")), (r("r10"), r("r10")), "{gallery}");
    }
    // A contrastive main model takes no shortlist model.
    let out = benchctl(
        &[&common::eval_args(&clip, "rococo", data_dir, results_dir, &gallery)[..], &["--shortlist-model-path", &clip]]
            .concat(),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `--request-timeout` bounds a whole request, not each read: a server that drips a valid
/// answer a byte every 100 ms (its headers too, about 25 s in all) is cut off at the deadline
/// and named, exit 7. Without the deadline the run would wait for every byte (the test stops
/// waiting at 20 s and fails).
#[test]
fn a_dripping_server_is_cut_off_at_the_request_deadline() {
    let server =
        Server::dripping(Duration::from_millis(100), |_| (completion(&[("Yes", -0.5), ("No", -1.0)]), Duration::ZERO))
            .unwrap();
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let (data, results, cache) = (demo(), results.to_str().unwrap().to_string(), cache.to_str().unwrap().to_string());
    let url = server.url();
    let data = data.to_str().unwrap().to_string();
    let args = [
        "eval",
        "--endpoint",
        &url,
        "--served-model",
        "tiny-vlm",
        "--suite",
        "winoground",
        "--data-dir",
        &data,
        "--results-dir",
        &results,
        "--request-timeout",
        "2",
        "--retries",
        "0",
        "--max-in-flight",
        "1",
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_benchctl"))
        .args(args)
        .env("BENCHCTL_CACHE", &cache)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("eval kept waiting for a dripping answer past its 2 s request timeout");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(7), "{err}");
    assert!(err.contains("timed out") && err.contains("tiny-vlm"), "{err}");
}

/// A server that quotes the request's Authorization header back in its error never makes the
/// key appear: the key, and any bearer token, are redacted from every message.
#[test]
fn an_api_key_quoted_back_by_a_server_is_redacted() {
    let server = Server::start(|r| {
        let body =
            serde_json::json!({"error": "bad key", "authorization": r.authorization, "echo": "Bearer sk-other-token"});
        (reply("401 Unauthorized", &[], body.to_string().as_bytes()), Duration::ZERO)
    })
    .unwrap();
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let out = eval(&server.url(), &results, &cache, &["--api-key-env", "VQA_TEST_KEY", "--retries", "0"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("401") && err.contains("[redacted]"), "{err}");
    assert!(!err.contains("sk-test-key") && !err.contains("sk-other-token"), "{err}");
}

/// A redirect is named as one (it is not followed: the request carries the key); an answer
/// over the size limit is an error at once, not retried (the documented retries are 408, 429,
/// 5xx and network failures).
#[test]
fn redirects_and_oversized_answers_are_named_and_not_retried() {
    let requests = Arc::new(AtomicUsize::new(0));
    let count = requests.clone();
    let redirecting = Server::start(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
        (
            reply("307 Temporary Redirect", &[("Location", "http://127.0.0.1:9/v1/chat/completions".into())], b""),
            Duration::ZERO,
        )
    })
    .unwrap();
    let (results, cache) = (scratch_dir("endpoint-results"), scratch_dir("endpoint-cache"));
    let out = eval(&redirecting.url(), &results, &cache, &["--retries", "2", "--max-in-flight", "1"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("redirected (307") && stderr(&out).contains("not followed"), "{}", stderr(&out));
    assert_eq!(requests.load(Ordering::SeqCst), 1, "a redirect is not retried");
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    let oversized = Server::start(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
        (reply("200 OK", &[], &vec![b' '; 5 << 20]), Duration::ZERO)
    })
    .unwrap();
    let out = eval(&oversized.url(), &results, &cache, &["--retries", "2", "--max-in-flight", "1"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("longer than"), "{}", stderr(&out));
    assert_eq!(asked.load(Ordering::SeqCst), 1, "an oversized answer is not retried");
}

/// `crates/benchctl/tests/fixtures/vqa-modes`: images in every mode a release holds, and the
/// scores `t2v_metrics` gives them (scripts/fixtures/gen_vqascore_modes_fixture.py).
fn vqa_modes() -> (std::path::PathBuf, serde_json::Value) {
    let dir = benchctl_testkit::workspace_root().join("crates/benchctl/tests/fixtures/vqa-modes");
    let expected = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    (dir, expected)
}

/// A manifest suite of one item per image of `vqa-modes` (the fixture's caption, and a foil),
/// in a fresh data directory.
fn vqa_modes_suite(fixture: &std::path::Path, expected: &serde_json::Value) -> tempfile::TempDir {
    let data = tempfile::tempdir().unwrap();
    let images = data.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    let mut records = String::new();
    for name in expected["modes"].as_object().unwrap().keys() {
        std::fs::copy(fixture.join("images").join(name), images.join(name)).unwrap();
        records += &(serde_json::json!({"image": name}).to_string() + "\n");
    }
    std::fs::write(data.path().join("records.jsonl"), records).unwrap();
    let manifest = format!(
        "id = \"vqa-modes\"\ndescription = \"one image per mode\"\n[source]\nfile = \"records.jsonl\"\nformat = \"jsonl\"\n[item]\nid = \"{{image}}\"\nimage_dir = \"images\"\nimages = [\"{{image}}\"]\ntexts = [{:?}, \"a cat on a mat\"]\ntruth = {{ text = 0 }}\n[metrics]\nfamily = \"choice\"\n",
        expected["caption"].as_str().unwrap()
    );
    std::fs::write(data.path().join("vqa-modes.toml"), manifest).unwrap();
    data
}

/// How far a JPEG's score may be from the reference's: none with libjpeg-turbo (Pillow's own
/// decoder); zune-jpeg's pixels differ by a level on some pixels (docs/models.md, "Decoding":
/// 2% of the CMYK fixture's values), which moves the tiny random-weight models' log P("Yes")
/// by up to 3.3e-3 here. A wrong conversion moves it by far more.
const JPEG_SCORE_BOUND: f64 =
    if matches!(benchctl_suites::image::JPEG_DECODER.as_bytes(), b"libjpeg-turbo") { 1e-4 } else { 5e-3 };

/// `eval --model-path model` on the `vqa-modes` suite: the run record, stderr, and each image's
/// stored log P("Yes") of the caption, against `reference[image]` (at most 1e-4 apart, a JPEG
/// [`JPEG_SCORE_BOUND`]).
fn eval_modes(model: &std::path::Path, reference: &serde_json::Value) -> (serde_json::Value, String) {
    let (fixture, expected) = vqa_modes();
    let data = vqa_modes_suite(&fixture, &expected);
    let results = scratch_dir("vqa-modes-results");
    let manifest = data.path().join("vqa-modes.toml");
    let args = common::eval_args(
        model.to_str().unwrap(),
        manifest.to_str().unwrap(),
        data.path().to_str().unwrap(),
        results.to_str().unwrap(),
        &["--no-cache"],
    );
    let out = benchctl(&args, &[]);
    let (run_path, json) = stored_run(&out);
    let stored = read_scores(&dump_path(&run_path, &json)).unwrap();
    assert_eq!(stored.len(), expected["modes"].as_object().unwrap().len(), "one item per image");
    let off: Vec<String> = stored
        .iter()
        .filter_map(|(image, matrix)| {
            let want = reference[image].as_f64().unwrap_or_else(|| panic!("no reference for {image}"));
            let got = f64::from(matrix[0][0]);
            let mode = &expected["modes"][image];
            let bound = if image.ends_with(".jpg") { JPEG_SCORE_BOUND } else { 1e-4 };
            ((got - want).abs() > bound).then(|| format!("{image} ({mode}): {got} vs t2v_metrics' {want}"))
        })
        .collect();
    assert!(off.is_empty(), "{}:\n{}", model.display(), off.join("\n"));
    (json, stderr(&out))
}

/// Images in every mode a release holds (RGBA and LA with a gradient alpha, a palette with a
/// transparent entry, RGB and grey with a transparent colour, 16-bit grey, a CMYK JPEG) become
/// RGB for each generative family as `t2v_metrics` makes them (`Image.open(path).convert("RGB")`:
/// the alpha dropped, not composited over white; then, for Gemma 3 and PaliGemma processors with
/// `do_convert_rgb`, a transparent colour made white), and score as it scores them.
#[test]
fn generative_models_read_every_image_mode_as_t2v_metrics_does() {
    let (_, expected) = vqa_modes();
    // The fixture tells compositing from dropping the alpha: the RGBA image scores as its RGB.
    // The Qwen-VL fixtures were saved by transformers 5: their settings are in processor_config.json.
    // InternVL3 reads none: t2v_metrics' own transform, whatever the checkpoint carries.
    let settings = [
        ("gemma3-tiny", Some("preprocessor_config.json")),
        ("paligemma-tiny", Some("preprocessor_config.json")),
        ("qwen3vl-tiny", Some("processor_config.json:image_processor")),
        ("qwen25vl-tiny", Some("processor_config.json:image_processor")),
        ("internvl-tiny", None),
    ];
    for (fixture, source) in settings {
        let reference = &expected[fixture];
        assert_eq!(reference["rgba_gradient.png"], reference["rgb.png"], "{fixture}");
        let (json, err) = eval_modes(&benchctl_testkit::fixture_model(fixture), reference);
        assert_eq!(json["model"]["image_settings"].as_str(), source, "{fixture}");
        assert!(!err.contains("has no image settings"), "{fixture}: {err}");
    }
}

/// A checkpoint saved by transformers 5 holds its image settings only in
/// `processor_config.json` (`image_processor`): they are read (a PaliGemma with `image_mean`
/// (0.2, 0.3, 0.4) and `do_convert_rgb` null scores as transformers scores it, transparent
/// colours left as they are); a checkpoint with no image settings runs on the architecture's
/// defaults, and the run says which.
#[test]
fn image_settings_are_read_from_processor_config_json_and_defaults_are_named() {
    let (fixture, expected) = vqa_modes();
    let paligemma = benchctl_testkit::fixture_model("paligemma-tiny");
    let saved = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture.join("paligemma-processor-config")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, saved.path().join(path.file_name().unwrap())).unwrap();
    }
    for shared in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(paligemma.join(shared), saved.path().join(shared)).unwrap();
    }
    assert!(!saved.path().join("preprocessor_config.json").exists());
    let (json, _) = eval_modes(saved.path(), &expected["paligemma-processor-config"]);
    assert_eq!(json["model"]["image_settings"], "processor_config.json:image_processor");

    // Neither file: paligemma-tiny's own settings are PaliGemma's defaults, so the scores hold.
    let bare = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(paligemma.join(file), bare.path().join(file)).unwrap();
    }
    let (json, err) = eval_modes(bare.path(), &expected["paligemma-tiny"]);
    assert_eq!(json["model"]["image_settings"], "architecture defaults");
    assert!(
        err.contains("has no image settings (preprocessor_config.json, or processor_config.json's `image_processor`)")
            && err.contains("paligemma's defaults: 56 px stretched square, bicubic, mean 0.500/0.500/0.500"),
        "{err}"
    );
}

/// Captions that stress text handling (curly quotes, full-width letters, a ligature, mojibake,
/// casing and punctuation, whitespace, a long caption, other scripts and an emoji) go into the
/// question as t2v_metrics puts them, untouched: each family's stored log P("Yes") on the RGB
/// image equals transformers' (Gemma 3, PaliGemma) and t2v_metrics' own scorer's (Qwen3-VL).
#[test]
fn generative_models_score_stress_captions_as_t2v_metrics_does() {
    let (fixture, expected) = vqa_modes();
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("images")).unwrap();
    std::fs::copy(fixture.join("images/rgb.png"), data.path().join("images/rgb.png")).unwrap();
    let records: String = captions
        .iter()
        .enumerate()
        .map(|(i, c)| serde_json::json!({"id": format!("c{i}"), "caption": c}).to_string() + "\n")
        .collect();
    std::fs::write(data.path().join("records.jsonl"), records).unwrap();
    let manifest = data.path().join("captions.toml");
    std::fs::write(
        &manifest,
        "id = \"vqa-captions\"\ndescription = \"stress captions\"\n[source]\nfile = \"records.jsonl\"\nformat = \"jsonl\"\n[item]\nid = \"{id}\"\nimage_dir = \"images\"\nimages = [\"rgb.png\"]\ntexts = [\"{caption}\", \"a cat on a mat\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"choice\"\n",
    )
    .unwrap();
    for fixture in ["gemma3-tiny", "paligemma-tiny", "qwen3vl-tiny", "qwen25vl-tiny", "internvl-tiny"] {
        let (results, model) = (scratch_dir("vqa-captions-results"), benchctl_testkit::fixture_model(fixture));
        let args = common::eval_args(
            model.to_str().unwrap(),
            manifest.to_str().unwrap(),
            data.path().to_str().unwrap(),
            results.to_str().unwrap(),
            &["--no-cache"],
        );
        let (run_path, json) = stored_run(&benchctl(&args, &[]));
        let stored = read_scores(&dump_path(&run_path, &json)).unwrap();
        let reference = expected["caption_scores"][fixture].as_array().unwrap();
        assert_eq!(stored.len(), captions.len());
        for (id, matrix) in &stored {
            let i: usize = id.trim_start_matches('c').parse().unwrap();
            let (got, want) = (f64::from(matrix[0][0]), reference[i].as_f64().unwrap());
            assert!((got - want).abs() <= 1e-4, "{fixture}: {:?}: {got} vs {want}", captions[i]);
        }
    }
}
