//! NaturalBench's VQA form end to end (`scripts/fixtures/gen_naturalbench_fixture.py`): the
//! tiny Gemma 3 run here against transformers on every (image, question, option), a loopback
//! server playing an OpenAI-compatible one, each option's log-probability stored in the dump,
//! the metrics against the official `get_scores`, and a contrastive model refused.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use benchctl::results::read_scores;
use benchctl_testkit::http::{reply, Request, Server};
use common::{benchctl, dump_path, scratch_dir, stderr, stored_run};

fn fixture() -> PathBuf {
    benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/naturalbench")
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join(name)).unwrap()).unwrap()
}

/// `eval` of `model` (extra arguments first) on the fixture, with a fresh cache.
fn eval(model: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let (data, results) = (fixture(), scratch_dir("naturalbench-results"));
    let mut args = vec!["eval"];
    args.extend_from_slice(model);
    args.extend(["--suite", "naturalbench", "--data-dir", data.to_str().unwrap()]);
    args.extend(["--results-dir", results.to_str().unwrap()]);
    benchctl(&args, env)
}

/// The stored per-cell log-probabilities, `[item][image][text]`, against `expected` (the
/// fixture's layout): the largest difference.
fn worst_difference(run_path: &std::path::Path, run: &serde_json::Value, expected: &serde_json::Value) -> f64 {
    let stored = read_scores(&dump_path(run_path, run)).unwrap();
    assert_eq!(stored.len(), expected.as_array().unwrap().len());
    let mut worst = 0f64;
    for (r, (id, matrix)) in stored.iter().enumerate() {
        assert_eq!(id, &r.to_string());
        for (k, row) in matrix.iter().enumerate() {
            assert_eq!(row.len(), 4, "each question with each of its two options");
            for (l, &score) in row.iter().enumerate() {
                worst = worst.max((f64::from(score) - expected[r][k][l].as_f64().unwrap()).abs());
            }
        }
    }
    worst
}

/// Q-Acc, I-Acc, Acc and G-Acc of a run against the official `get_scores` (fractions).
fn assert_official(run: &serde_json::Value, official: &serde_json::Value) {
    let metrics = &run["report"]["metrics"];
    for (ours, theirs) in [("q_acc", "Q_Acc"), ("i_acc", "I_Acc"), ("acc", "Acc"), ("g_acc", "G_Acc")] {
        let (got, want) = (metrics[ours].as_f64().unwrap(), 100.0 * official[theirs].as_f64().unwrap());
        assert!((got - want).abs() < 1e-9, "{ours}: {got} against the official {want}");
    }
}

/// The tiny Gemma 3 scores each option as transformers does (log-softmax at the option's
/// token after the official prompt), and the options those choose score as `get_scores`
/// scores them.
#[test]
fn a_local_generative_model_answers_as_transformers_does() {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/gemma3-tiny");
    let cache = scratch_dir("naturalbench-cache");
    let out = eval(&["--model-path", model.to_str().unwrap()], &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
    let (run_path, run) = stored_run(&out);
    let reference = json("gemma3.json");
    let worst = worst_difference(&run_path, &run, &reference["scores"]);
    assert!(worst <= 1e-4, "stored log P(option) vs transformers: {worst:e}");
    // The choices are the reference's wherever its options are further apart than that.
    let scores = reference["scores"].as_array().unwrap();
    let closest = scores
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter())
        .flat_map(|cells| {
            let c: Vec<f64> = cells.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            [(c[0] - c[1]).abs(), (c[2] - c[3]).abs()]
        })
        .fold(f64::INFINITY, f64::min);
    assert!(closest > 1e-3, "the fixture's options are {closest:e} apart somewhere: choose another seed");
    assert_official(&run, &reference["official"]);
    assert_eq!(run["counts"]["pairs_scored"], 96, "12 items × 2 images × 4 (question, option) texts");
}

/// A server answering each request with the fixture's log-probabilities of the two options
/// (found by the question and the image it was sent): each is stored as sent, and the
/// metrics are the official ones of the options they choose.
#[test]
fn a_scoring_server_answers_each_option() {
    let suite = benchctl_suites::find("naturalbench").unwrap().load(&fixture()).unwrap();
    let (cells, table) = (Arc::new(cells_of(&suite)), Arc::new(json("scores.json")));
    let server = Server::start(move |request: &Request| {
        let Some((r, k, q)) = cell_asked(&cells, request) else {
            return (reply("400 Bad Request", &[], b"{\"error\": \"unknown question or image\"}"), Duration::ZERO);
        };
        let (first, second) = (table[r][k][2 * q].as_f64().unwrap(), table[r][k][2 * q + 1].as_f64().unwrap());
        let options = if r % 3 == 0 { ("A", "B") } else { ("Yes", "No") };
        (common::options_reply(options, first, second), Duration::ZERO)
    })
    .unwrap();
    let url = format!("{}/v1", server.url());
    let cache = scratch_dir("naturalbench-server-cache");
    let out = eval(&["--endpoint", &url, "--served-model", "tiny-vlm"], &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
    let (run_path, run) = stored_run(&out);
    let worst = worst_difference(&run_path, &run, &json("scores.json"));
    assert!(worst <= 1e-6, "stored log P(option) vs the server's: {worst:e}");
    assert_official(&run, &json("official.json")["scores"]);
    // The prompt went as the official code writes it, the option never inside it.
    let sent: Vec<String> = server
        .seen()
        .iter()
        .map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["messages"][0]["content"].to_string())
        .collect();
    // One request per (image, question): both options are read from its answer.
    assert!(sent.iter().all(|s| !s.contains('\u{1f}')) && sent.len() == 48, "{}", sent.len());
    assert_eq!((run["counts"]["pairs_scored"].as_u64(), run["counts"]["requests"].as_u64()), (Some(96), Some(48)));
}

/// Each (prompt, image data URI) the fixture's items ask → (item, image, question).
fn cells_of(suite: &benchctl_suites::Suite) -> HashMap<(String, String), (usize, usize, usize)> {
    let mut cells = HashMap::new();
    for (r, item) in suite.items.iter().enumerate() {
        for k in 0..2 {
            let benchctl_suites::ImageSource::Embedded(image) = item.image(k) else { panic!("images inside") };
            let uri = format!("data:image/png;base64,{}", STANDARD.encode(&image.bytes().unwrap()[..]));
            for q in 0..2 {
                let (prompt, _) = benchctl_scoring::metrics::answers::split_asked(item.text(2 * q)).unwrap();
                cells.insert((prompt.to_string(), uri.clone()), (r, k, q));
            }
        }
    }
    cells
}

/// The cell a chat-completions request asks about, by its prompt and image.
fn cell_asked(
    cells: &HashMap<(String, String), (usize, usize, usize)>,
    request: &Request,
) -> Option<(usize, usize, usize)> {
    let body: serde_json::Value = serde_json::from_slice(&request.body).ok()?;
    let content = body["messages"][0]["content"].as_array()?;
    let part = |kind: &str| content.iter().find(|c| c["type"] == kind).cloned();
    let prompt = part("text")?["text"].as_str()?.to_string();
    let uri = part("image_url")?["image_url"]["url"].as_str()?.to_string();
    cells.get(&(prompt, uri)).copied()
}

/// A contrastive model cannot score answer options: refused before any work, naming why.
#[test]
fn a_contrastive_model_is_refused() {
    let out = eval(&["--model-path", &common::tiny_model()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("questions with answer options") && said.contains("VQAScore"), "{said}");
}

/// The official generate-then-extract rule through a server (`--answer-rule generate`): one
/// reply per request at temperature 0, read as NaturalBench's `extract_answer` reads it (the
/// option found first scores 0, the other the log of zero; a reply with neither fails both),
/// and the metrics are `get_scores` of the official reading of the same replies.
#[test]
fn a_server_reply_is_read_by_the_official_rule() {
    let suite = benchctl_suites::find("naturalbench").unwrap().load(&fixture()).unwrap();
    let official = json("official.json");
    let cells = Arc::new(cells_of(&suite));
    let replies = Arc::new(official["replies"].clone());
    let server = Server::start(move |request: &Request| {
        let Some((r, k, q)) = cell_asked(&cells, request) else {
            return (reply("400 Bad Request", &[], b"{\"error\": \"unknown question or image\"}"), Duration::ZERO);
        };
        (common::generated_reply(replies[r][k][q].as_str().unwrap()), Duration::ZERO)
    })
    .unwrap();
    let url = format!("{}/v1", server.url());
    let cache = scratch_dir("naturalbench-generate-cache");
    let model = ["--endpoint", &url, "--served-model", "tiny-vlm", "--answer-rule", "generate"];
    let (run_path, run) = stored_run(&eval(&model, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_official(&run, &official["generated"]);
    assert_eq!(run["model"]["endpoint"]["answer_rule"], "generate");
    let stored = read_scores(&dump_path(&run_path, &run)).unwrap();
    assert!(stored.iter().flat_map(|(_, m)| m.iter().flatten()).all(|&s| s == 0.0 || s == -1000.0));
    assert_eq!(server.seen().len(), 48, "one reply per (image, question)");
    for request in server.seen() {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!((body["temperature"].as_f64(), body["max_tokens"].as_u64()), (Some(0.0), Some(128)));
        assert!(body.get("logprobs").is_none(), "{body}");
    }
    // Each cell keeps the reply its score was read from, as the server sent it.
    let kept = stored_replies(&run_path, &run);
    for (r, rows) in kept.iter().enumerate() {
        for (k, row) in rows.iter().enumerate() {
            for (l, reply) in row.iter().enumerate() {
                assert_eq!(reply.as_deref(), official["replies"][r][k][l / 2].as_str(), "row {r} image {k} text {l}");
            }
        }
    }
    // A warm run asks nothing and keeps the same replies.
    let (warm_path, warm) = stored_run(&eval(&model, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_eq!((warm["counts"]["pairs_scored"].as_u64(), server.seen().len()), (Some(0), 48));
    assert_eq!(stored_replies(&warm_path, &warm), kept);
}

/// NaturalBench's official output list (`output_file`: per item, each question asked of each
/// image, question by question) of the fixture's official replies, read by `score`: each reply
/// read by the official `extract_answer`, the metrics `get_scores`' of them, and with
/// `--model-name` the replies kept in the stored run's dump; a list of another length, or with
/// an entry that is not a string, is refused naming the file (exit 3) and nothing is stored.
#[test]
fn an_official_output_list_is_scored_as_the_official_code_scores_it() {
    let official = json("official.json");
    let replies = official["replies"].as_array().unwrap();
    let outputs: Vec<&str> = replies
        .iter()
        .flat_map(|row| (0..2).flat_map(move |q| (0..2).map(move |k| row[k][q].as_str().unwrap())))
        .collect();
    let dir = scratch_dir("naturalbench-outputs");
    let file = dir.join("Qwen_2_5_VL_72B.json");
    std::fs::write(&file, serde_json::to_string_pretty(&outputs).unwrap()).unwrap();
    let data = fixture();
    let score = |file: &std::path::Path, results: &std::path::Path| {
        let args = ["score", "--suite", "naturalbench", "--data-dir", data.to_str().unwrap()];
        let more =
            ["--scores", file.to_str().unwrap(), "--model-name", "outputs", "--results-dir", results.to_str().unwrap()];
        benchctl(&[&args[..], &more].concat(), &[])
    };
    let (run_path, run) = stored_run(&score(&file, &dir.join("results")));
    assert_official(&run, &official["generated"]);
    assert_eq!(run["model"]["external"]["scores_format"], "naturalbench-outputs", "detected from the file");
    let kept = stored_replies(&run_path, &run);
    for (r, rows) in kept.iter().enumerate() {
        for (k, row) in rows.iter().enumerate() {
            for (l, reply) in row.iter().enumerate() {
                assert_eq!(reply.as_deref(), replies[r][k][l / 2].as_str(), "row {r} image {k} text {l}");
            }
        }
    }
    let short = dir.join("short.json");
    std::fs::write(&short, serde_json::to_string(&outputs[1..]).unwrap()).unwrap();
    let numbers = dir.join("numbers.json");
    let mut with_number: Vec<serde_json::Value> = outputs.iter().map(|&o| o.into()).collect();
    with_number[5] = 1.into();
    std::fs::write(&numbers, serde_json::to_string(&with_number).unwrap()).unwrap();
    for (bad, said) in [(&short, "it holds 47 replies; naturalbench has 48"), (&numbers, "entry 5 is not a string")] {
        let results = dir.join("refused");
        let out = score(bad, &results);
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert!(stderr(&out).contains(bad.to_str().unwrap()) && stderr(&out).contains(said), "{}", stderr(&out));
        assert!(!results.join("runs").exists(), "nothing stored");
    }
}

/// Each dump line's `replies`, `[item][image][text]`, in dump order.
fn stored_replies(run_path: &std::path::Path, run: &serde_json::Value) -> Vec<Vec<Vec<Option<String>>>> {
    let text = std::fs::read_to_string(dump_path(run_path, run)).unwrap();
    text.lines()
        .map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            serde_json::from_value(line["replies"].clone()).unwrap_or_else(|e| panic!("{e}: {line}"))
        })
        .collect()
}

/// The official generate-then-extract rule on a model run here (`--answer-rule generate` with
/// `--model-path`): the tiny Qwen2.5-VL of `qwen25vl-chat-tiny` replies to each (image,
/// question) as `transformers`' `generate` does in NaturalBench's example
/// (`scripts/fixtures/gen_generate_fixture.py`), every option scores as the official
/// `extract_answer` reads that reply, and the metrics are `get_scores`' of those answers.
#[test]
fn a_local_model_generates_and_reads_replies_as_the_official_example_does() {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/qwen25vl-chat-tiny");
    let generated: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("generated.json")).unwrap()).unwrap();
    let cache = scratch_dir("naturalbench-local-generate-cache");
    let args = ["--model-path", model.to_str().unwrap(), "--answer-rule", "generate"];
    let (run_path, run) = stored_run(&eval(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_official(&run, &generated["official"]);
    assert_eq!(
        (run["model"]["answer_rule"].as_str(), run["model"]["reply_reading"].as_str()),
        (Some("generate"), Some("first-found"))
    );
    // Each cell's two options against the official answer of its reply: 1 gives the first
    // option (Yes, A), 0 the second, -1 neither.
    let stored = read_scores(&dump_path(&run_path, &run)).unwrap();
    let samples = generated["samples"].as_array().unwrap();
    assert!(samples.iter().any(|s| s["answer"] == 1) && samples.iter().any(|s| s["answer"] == -1));
    for sample in samples {
        let (r, k, q) = ["row", "image", "question"].map(|key| sample[key].as_u64().unwrap() as usize).into();
        let answer = sample["answer"].as_i64().unwrap();
        let want = [if answer == 1 { 0.0 } else { -1000.0 }, if answer == 0 { 0.0 } else { -1000.0 }];
        assert_eq!(stored[r].1[k][2 * q..2 * q + 2], want, "row {r} image {k} question {q}: {:?}", sample["reply"]);
    }
    assert_eq!(run["counts"]["pairs_scored"], 96);
    // Each cell keeps the reply transformers generated for its (image, question), decoded as
    // the example decodes it.
    let kept = stored_replies(&run_path, &run);
    for sample in samples {
        let (r, k, q) = ["row", "image", "question"].map(|key| sample[key].as_u64().unwrap() as usize).into();
        for l in [2 * q, 2 * q + 1] {
            assert_eq!(kept[r][k][l].as_deref(), sample["reply"].as_str(), "row {r} image {k} text {l}");
        }
    }
    // A warm run generates nothing and keeps every reply, byte for byte.
    let (warm_path, warm) = stored_run(&eval(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_eq!(warm["counts"]["pairs_scored"], 0);
    assert_eq!(
        std::fs::read(dump_path(&warm_path, &warm)).unwrap(),
        std::fs::read(dump_path(&run_path, &run)).unwrap(),
        "the warm run's dump is the cold one's, byte for byte"
    );
    // The replies as NaturalBench's output list, in the example's order, which `score` reads
    // back to the run's metrics.
    let outputs = run_path.with_extension("submission").join("outputs.json");
    let listed: Vec<String> = serde_json::from_str(&std::fs::read_to_string(&outputs).unwrap()).unwrap();
    let official: Vec<&str> = samples.iter().map(|s| s["reply"].as_str().unwrap()).collect();
    assert_eq!(listed, official);
    let data = fixture();
    let score = ["score", "--suite", "naturalbench", "--data-dir", data.to_str().unwrap(), "--scores"];
    let out = benchctl(&[&score[..], &[outputs.to_str().unwrap()]].concat(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = common::stdout(&out);
    let report: serde_json::Value = serde_json::from_str(&text[text.find("\n{").unwrap()..]).unwrap();
    assert_eq!(report["metrics"], run["report"]["metrics"]);
    // The failure browser shows each cell's reply beside its scores.
    let page = scratch_dir("naturalbench-report");
    let out = benchctl(&["report", run_path.to_str().unwrap(), "--out", page.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let chunk = std::fs::read_to_string(page.join("data/chunk-0000.js")).unwrap();
    let entries = chunk.trim_end().strip_prefix("BENCH_CHUNK(0, ").and_then(|c| c.strip_suffix(");")).unwrap();
    let entries: Vec<serde_json::Value> = serde_json::from_str(entries).unwrap();
    let shown: Vec<Vec<Vec<Option<String>>>> =
        entries.iter().map(|e| serde_json::from_value(e["replies"].clone()).unwrap()).collect();
    assert_eq!(shown, kept);
    // Log-probability runs keep their own cache: the same model scores differently.
    let (logprobs_path, logprobs) = stored_run(&eval(&args[..2], &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_eq!(logprobs["counts"]["pairs_scored"], 96, "nothing served from the generated run's cache");
    let dump = std::fs::read_to_string(dump_path(&logprobs_path, &logprobs)).unwrap();
    assert!(!dump.contains("\"replies\""), "a run by log-probabilities generates no replies");
    assert!(logprobs["model"].get("answer_rule").is_none());
    // Leaderboards and the regression gate keep the two apart.
    let (generated, logprobs): (benchctl::results::Run, benchctl::results::Run) =
        (benchctl::results::Run::from_json(&run).unwrap(), benchctl::results::Run::from_json(&logprobs).unwrap());
    assert_eq!(
        (generated.label(), logprobs.label()),
        ("qwen25vl-chat-tiny (generated replies)".into(), "qwen25vl-chat-tiny".into())
    );
    assert_ne!(generated.identity(), logprobs.identity());
}

/// A generative model's shards (`--shard i/n`), merged, give the unsharded run's dump (scores
/// and replies) and its official output list byte for byte: each shard generates the same
/// batches as the unsharded run (a batch of 5 puts the shard boundary inside one).
#[test]
fn generated_replies_shard_and_merge_to_the_unsharded_run() {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/qwen25vl-chat-tiny");
    let args = ["--model-path", model.to_str().unwrap(), "--answer-rule", "generate", "--batch-size", "5"];
    let fresh_cache = || scratch_dir("naturalbench-shard-cache");
    let cache = fresh_cache();
    let (whole_path, whole) = stored_run(&eval(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    let shards: Vec<String> = (0..2)
        .map(|i| {
            let shard = format!("{i}/2");
            let cache = fresh_cache();
            let out = eval(&[&args[..], &["--shard", &shard]].concat(), &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
            let (path, run) = stored_run(&out);
            assert_eq!(run["options"]["shard"], shard.as_str());
            assert!(!path.with_extension("submission").exists(), "a shard writes no output list");
            path.display().to_string()
        })
        .collect();
    let merged = scratch_dir("naturalbench-merged");
    let mut merge = vec!["merge"];
    merge.extend(shards.iter().map(String::as_str));
    merge.extend(["--results-dir", merged.to_str().unwrap()]);
    let (merged_path, merged_run) = stored_run(&benchctl(&merge, &[]));
    assert_eq!(merged_run["report"], whole["report"]);
    let bytes = |p: PathBuf| std::fs::read(p).unwrap();
    assert_eq!(bytes(dump_path(&merged_path, &merged_run)), bytes(dump_path(&whole_path, &whole)), "dumps");
    let outputs = |p: &std::path::Path| bytes(p.with_extension("submission").join("outputs.json"));
    assert_eq!(outputs(&merged_path), outputs(&whole_path), "the official output lists");
}

/// NaturalBench's Qwen2.5-VL example as it runs: its processor, loaded with `min_pixels=256·28·28`
/// and `max_pixels=1280·28·28`, resizes each image again after `qwen_vl_utils` (here
/// `--min-pixels 200704 --max-pixels 1003520`, enlarging the fixture's 56-pixel images to 448):
/// each reply is `generate`'s with that processor (the few whose generation passes within 1e-3 of
/// a tie left out, as f32 rounding could flip them), the bounds are recorded and label the run,
/// and a model without such a processor is refused (exit 2).
#[test]
fn the_examples_processor_bounds_resize_again_and_replies_follow() {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/qwen25vl-chat-tiny");
    let generated: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("generated.json")).unwrap()).unwrap();
    let example = &generated["example_processor"];
    let (least, most) = (example["min_pixels"].to_string(), example["max_pixels"].to_string());
    let args = ["--model-path", model.to_str().unwrap(), "--answer-rule", "generate"];
    let bounds = ["--min-pixels", least.as_str(), "--max-pixels", most.as_str()];
    let cache = scratch_dir("naturalbench-example-cache");
    let (run_path, run) =
        stored_run(&eval(&[&args[..], &bounds].concat(), &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_eq!(run["model"]["processor_pixels"], serde_json::json!([200_704, 1_003_520]));
    let label = benchctl::results::Run::from_json(&run).unwrap().label();
    assert_eq!(label, "qwen25vl-chat-tiny (200704–1003520 pixels) (generated replies)");
    let kept = stored_replies(&run_path, &run);
    let samples = example["samples"].as_array().unwrap();
    let (mut compared, mut differing_from_default) = (0, 0);
    for (sample, default) in samples.iter().zip(generated["samples"].as_array().unwrap()) {
        let (r, k, q) = ["row", "image", "question"].map(|key| sample[key].as_u64().unwrap() as usize).into();
        differing_from_default += usize::from(sample["reply"] != default["reply"]);
        if sample["smallest_gap"].as_f64().unwrap() <= 1e-3 {
            continue;
        }
        compared += 1;
        assert_eq!(kept[r][k][2 * q].as_deref(), sample["reply"].as_str(), "row {r} image {k} question {q}");
    }
    assert!(compared >= 36 && differing_from_default >= 24, "{compared} compared, {differing_from_default} changed");
    // A run spec gives them as `min_pixels` and `max_pixels`, both or neither.
    let spec = scratch_dir("naturalbench-example-spec").join("run.toml");
    let block = |bounds: &str| {
        format!(
            "[[runs]]\nmodel_paths = [{:?}]\nsuites = [\"naturalbench\"]\ndata_dirs = {{ naturalbench = {:?} }}\nanswer_rule = \"generate\"\n{bounds}",
            model.display().to_string(),
            fixture().display().to_string()
        )
    };
    let results = spec.with_file_name("out");
    std::fs::write(
        &spec,
        format!(
            "results_dir = {:?}\n{}",
            results.display().to_string(),
            block("min_pixels = 200704\nmax_pixels = 1003520\n")
        ),
    )
    .unwrap();
    let env = [("BENCHCTL_CACHE", cache.to_str().unwrap())];
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let (spec_path, spec_run) = stored_run(&out);
    assert_eq!(spec_run["model"]["processor_pixels"], run["model"]["processor_pixels"]);
    assert_eq!(spec_run["counts"]["pairs_scored"], 0, "served by the flags' run's cache");
    assert_eq!(stored_replies(&spec_path, &spec_run), kept);
    std::fs::write(&spec, block("min_pixels = 200704\n")).unwrap();
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &env);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("runs[0].min_pixels and max_pixels: give both"), "{}", stderr(&out));
    let refused = eval(&["--model-path", &common::tiny_model(), "--min-pixels", "1", "--max-pixels", "2"], &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("has no pixel bounds"), "{}", stderr(&refused));
}

/// CLIP-FlanT5 generates replies too (its replies against transformers' are in
/// `benchctl-models/tests/clip_t5.rs`): every cell keeps one, the output list holds the 48, and a
/// warm run generates nothing and keeps them.
#[test]
fn clip_flant5_generates_replies_through_the_runner() {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/clip-flant5-tiny");
    let cache = scratch_dir("naturalbench-clip-t5-cache");
    let args = ["--model-path", model.to_str().unwrap(), "--answer-rule", "generate"];
    let (run_path, run) = stored_run(&eval(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_eq!(run["model"]["answer_rule"], "generate");
    let kept = stored_replies(&run_path, &run);
    assert!(kept.iter().flatten().flatten().all(Option::is_some), "every cell asked keeps its reply");
    let listed: Vec<String> = serde_json::from_str(
        &std::fs::read_to_string(run_path.with_extension("submission").join("outputs.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(listed.len(), 48);
    let (warm_path, warm) = stored_run(&eval(&args, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]));
    assert_eq!(warm["counts"]["pairs_scored"], 0);
    assert_eq!(stored_replies(&warm_path, &warm), kept);
}

/// Replies are generated only by the generative families: a contrastive model asked to is
/// refused before any work, naming the rule.
#[test]
fn a_model_that_generates_no_replies_here_is_refused() {
    let out = eval(&["--model-path", &common::tiny_model(), "--answer-rule", "generate"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("--answer-rule generate") && said.contains("generates no replies here"), "{said}");
}
