//! VisMin's VQA form end to end (`scripts/fixtures/gen_vismin_vqa_fixture.py`): a loopback
//! server playing an OpenAI-compatible one answers each question with the fixture's
//! log-probabilities of its options; the image task's questions arrive with both images in one
//! request, in order, the text task's with one; the dump holds each option's log-probability
//! asked (null where a question is not asked of a candidate) and reads back into the same
//! metrics, which are the official `compute_mllm_score_itg`'s; generated replies are read and
//! counted as the official `is_match_with_label` and `compute_mllm_score_itg` do; the tiny Gemma 3, Qwen2.5-VL and
//! Qwen3-VL show both images in one prompt as transformers does; a local model whose prompt
//! takes one image is refused.

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

fn fixtures() -> PathBuf {
    benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures")
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("vismin-vqa").join(name)).unwrap()).unwrap()
}

fn eval(model: &[&str], results: &std::path::Path, env: &[(&str, &str)]) -> std::process::Output {
    let data = fixtures().join("vismin");
    let mut args = vec!["eval"];
    args.extend_from_slice(model);
    args.extend(["--suite", "vismin-vqa", "--data-dir", data.to_str().unwrap()]);
    args.extend(["--results-dir", results.to_str().unwrap()]);
    benchctl(&args, env)
}

/// Each (prompt, image data URIs in order) the suite asks → (item, candidate, first text of the
/// question's options).
type Asked = HashMap<(String, Vec<String>), (usize, usize, usize)>;

fn asked_of(suite: &benchctl_suites::Suite) -> Asked {
    let uri = |source: &benchctl_suites::ImageSource| {
        let benchctl_suites::ImageSource::Embedded(image) = source else { panic!("images inside") };
        format!("data:image/png;base64,{}", STANDARD.encode(&image.bytes().unwrap()[..]))
    };
    let mut asked = HashMap::new();
    for (r, item) in suite.items.iter().enumerate() {
        for k in 0..item.image_count() {
            let uris: Vec<String> = item.image(k).shown().iter().map(uri).collect();
            for l in (0..item.text_count()).step_by(2).filter(|&l| item.truth().is_asked(k, l)) {
                let (prompt, _) = benchctl_scoring::metrics::answers::split_asked(item.text(l)).unwrap();
                asked.insert((prompt.to_string(), uris.clone()), (r, k, l));
            }
        }
    }
    asked
}

/// The cell a chat-completions request asks about, by its prompt and its images in order.
fn cell_asked(asked: &Asked, request: &Request) -> Option<(usize, usize, usize)> {
    let body: serde_json::Value = serde_json::from_slice(&request.body).ok()?;
    let content = body["messages"][0]["content"].as_array()?;
    let prompt = content.iter().find(|c| c["type"] == "text")?["text"].as_str()?.to_string();
    let uris: Vec<String> = (content.iter().filter(|c| c["type"] == "image_url"))
        .map(|c| c["image_url"]["url"].as_str().map(String::from))
        .collect::<Option<_>>()?;
    asked.get(&(prompt, uris)).copied()
}

#[test]
fn a_scoring_server_is_asked_each_question_with_its_images_and_scores_as_the_official_code() {
    let suite = benchctl_suites::find("vismin-vqa").unwrap().load(&fixtures().join("vismin")).unwrap();
    let (asked, table) = (Arc::new(asked_of(&suite)), Arc::new(json("scores.json")));
    let server = Server::start(move |request: &Request| {
        let Some((r, k, l)) = cell_asked(&asked, request) else {
            return (reply("400 Bad Request", &[], b"{\"error\": \"unknown question or images\"}"), Duration::ZERO);
        };
        let (first, second) = (table[r][k][l].as_f64().unwrap(), table[r][k][l + 1].as_f64().unwrap());
        let options = if l == 0 { ("A", "B") } else { ("First", "Second") };
        (common::options_reply(options, first, second), Duration::ZERO)
    })
    .unwrap();
    let url = format!("{}/v1", server.url());
    let (cache, results) = (scratch_dir("vismin-vqa-cache"), scratch_dir("vismin-vqa-results"));
    let model = ["--endpoint", url.as_str(), "--served-model", "tiny-vlm"];
    let out = eval(&model, &results, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
    let (run_path, run) = stored_run(&out);

    // Four requests per item (a question and its options in one): 24 × 4, 8 cells each.
    assert_eq!((run["counts"]["requests"].as_u64(), run["counts"]["pairs_scored"].as_u64()), (Some(96), Some(192)));
    let images_sent: Vec<usize> = (server.seen().iter())
        .map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            body["messages"][0]["content"].as_array().unwrap().iter().filter(|c| c["type"] == "image_url").count()
        })
        .collect();
    assert_eq!(images_sent.iter().filter(|&&n| n == 2).count(), 48, "the image task: both images in one request");
    assert_eq!(images_sent.iter().filter(|&&n| n == 1).count(), 48, "the text task: one image");

    // Every cell asked stored as the server gave it; the others null (read back as NaN).
    let stored = read_scores(&dump_path(&run_path, &run)).unwrap();
    let expected = json("scores.json");
    for (r, (_, matrix)) in stored.iter().enumerate() {
        for (k, row) in matrix.iter().enumerate() {
            for (l, &score) in row.iter().enumerate() {
                match expected[r][k][l].as_f64() {
                    Some(want) => assert!((f64::from(score) - want).abs() <= 1e-6, "[{r}][{k}][{l}] {score} vs {want}"),
                    None => assert!(score.is_nan(), "[{r}][{k}][{l}] is not asked, and stored {score}"),
                }
            }
        }
    }

    let official = json("official.json");
    let check = |metrics: &serde_json::Value, want: &serde_json::Value, what: &str| {
        for name in ["text_score", "image_score", "group_score"] {
            let (got, want) = (metrics[name].as_f64().unwrap(), want["accuracy"][name].as_f64().unwrap());
            assert!((got - want).abs() < 1e-9, "{what} {name}: {got} against the official {want}");
        }
    };
    check(&run["report"]["metrics"], &official["overall"], "overall");
    for (category, want) in official["categories"].as_object().unwrap() {
        check(&run["report"]["breakdowns"]["category"][category.as_str()], want, category);
    }

    // The run's answers as VisMin-bench's submission CSV: byte for byte the file pandas writes
    // for the choices of the same log-probabilities (gen_vismin_submission_fixture.py).
    let csv = run_path.with_extension("submission").join("vismin.csv");
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap(),
        std::fs::read_to_string(fixtures().join("vismin-vqa/submission.csv")).unwrap()
    );

    // The stored dump scores again to the same metrics (`score`, from the run's own dump).
    let (data, dump) = (fixtures().join("vismin"), dump_path(&run_path, &run));
    let rescored = benchctl(
        &["score", "--suite", "vismin-vqa", "--data-dir", data.to_str().unwrap(), "--scores", dump.to_str().unwrap()]
            .into_iter()
            .chain(["--score-kind", "log-probability"])
            .collect::<Vec<_>>(),
        &[],
    );
    assert!(rescored.status.success(), "{}", stderr(&rescored));
    let printed = String::from_utf8_lossy(&rescored.stdout);
    let again: serde_json::Value = serde_json::from_str(&printed[printed.find("\n{").unwrap()..]).unwrap();
    assert_eq!(again["metrics"], run["report"]["metrics"]);
    assert_eq!(again["breakdowns"]["category"], run["report"]["breakdowns"]["category"]);

    // An asked cell without a score is missing, not unasked: refused, naming the item.
    let holed = results.join("holed.scores.jsonl");
    let dumped = std::fs::read_to_string(&dump).unwrap();
    std::fs::write(
        &holed,
        dumped.replacen("{\"id\":\"0\",\"scores\":[[", "{\"id\":\"0\",\"scores\":[[null,", 1).replacen(
            ",null,null,null,null]",
            ",null,null,null]",
            1,
        ),
    )
    .unwrap();
    let score_holed =
        ["score", "--suite", "vismin-vqa", "--data-dir", data.to_str().unwrap(), "--scores", holed.to_str().unwrap()];
    let refused = benchctl(&score_holed, &[]);
    assert!(
        !refused.status.success() && stderr(&refused).contains("1 item(s) lack scores, e.g. 0"),
        "{}",
        stderr(&refused)
    );

    // The failure browser shows the unasked cells as empty, and both images together side by
    // side in one thumbnail.
    let out = benchctl(&["report", run_path.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = run_path.with_extension("report");
    let text = std::fs::read_to_string(page.join("data/chunk-0000.js")).unwrap();
    let start = text.find('[').unwrap();
    let chunk: serde_json::Value =
        serde_json::from_str(text[start..].trim_end().trim_end_matches(';').trim_end_matches(')')).unwrap();
    assert_eq!(chunk[0]["scores"][0][2], serde_json::Value::Null);
    let thumb = |k: usize| image::open(page.join(chunk[0]["images"][k][1].as_str().unwrap())).unwrap();
    assert_eq!(thumb(2).width(), thumb(0).width() + thumb(1).width());
    assert_eq!(thumb(2).height(), thumb(0).height().max(thumb(1).height()));

    // A second run asks nothing: every option's answer is cached.
    let before = server.seen().len();
    let out = eval(&model, &results, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
    let (_, rerun) = stored_run(&out);
    assert_eq!((server.seen().len(), rerun["counts"]["pairs_cached"].as_u64()), (before, Some(192)));
}

/// `--answer-rule generate`: each question's reply (`vismin-vqa/replies.json`) read as the
/// official `is_match_with_label` reads it, and counted as `compute_mllm_score_itg` counts the
/// matches: a reply naming both options is right (the run's default tie rule, `shared`), one
/// naming neither wrong; `--ties strict` counts the first a miss too; `score --ties shared`
/// gives the official metrics again from the dump.
#[test]
fn generated_replies_are_read_and_counted_as_the_official_code_does() {
    let suite = benchctl_suites::find("vismin-vqa").unwrap().load(&fixtures().join("vismin")).unwrap();
    let fixture = json("replies.json");
    let (asked, replies) = (Arc::new(asked_of(&suite)), Arc::new(fixture["replies"].clone()));
    let server = Server::start(move |request: &Request| match cell_asked(&asked, request) {
        Some((r, k, l)) => (common::generated_reply(replies[r][k][l].as_str().unwrap()), Duration::ZERO),
        None => (reply("400 Bad Request", &[], b"{\"error\": \"unknown question or images\"}"), Duration::ZERO),
    })
    .unwrap();
    let url = format!("{}/v1", server.url());
    let results = scratch_dir("vismin-vqa-generate-results");
    let cache = scratch_dir("vismin-vqa-generate-cache");
    let env = [("BENCHCTL_CACHE", cache.to_str().unwrap())];
    let model = ["--endpoint", url.as_str(), "--served-model", "tiny-vlm", "--answer-rule", "generate"];
    let (run_path, run) = stored_run(&eval(&model, &results, &env));
    assert_eq!(run["model"]["endpoint"]["reply_reading"], "label-in-reply");
    assert_eq!(run["suite"]["ties"], "shared");
    assert_eq!(server.seen().len(), 96, "one reply per question asked");
    let official = &fixture["official"];
    let metric = |run: &serde_json::Value, name: &str| run["report"]["metrics"][name].as_f64().unwrap();
    for name in ["text_score", "image_score", "group_score"] {
        let want = official["overall"]["accuracy"][name].as_f64().unwrap();
        assert!((metric(&run, name) - want).abs() < 1e-9, "{name}: {} against the official {want}", metric(&run, name));
        for (category, scores) in official["categories"].as_object().unwrap() {
            let got = run["report"]["breakdowns"]["category"][category.as_str()][name].as_f64().unwrap();
            let want = scores["accuracy"][name].as_f64().unwrap();
            assert!((got - want).abs() < 1e-9, "{category} {name}: {got} against the official {want}");
        }
    }

    // A reply naming both options answers both (10 of the fixture's, by the official
    // `is_match_with_label`), which the submission CSV cannot say.
    assert!(!run_path.with_extension("submission").exists());
    let again = eval(&model, &results, &env);
    assert!(stderr(&again).contains("not written as VisMin's submission CSV: 10 of them tie"), "{}", stderr(&again));

    // Strict ties: a reply naming both options (cached now, not asked again) is a miss.
    let mut strict_model = model.to_vec();
    strict_model.extend(["--ties", "strict"]);
    let (_, strict) = stored_run(&eval(&strict_model, &results, &env));
    assert_eq!((strict["suite"]["ties"].as_str(), server.seen().len()), (Some("strict"), 96));
    assert!(metric(&strict, "text_score") < metric(&run, "text_score"), "{}", strict["report"]["metrics"]);

    let (data, dump) = (fixtures().join("vismin"), dump_path(&run_path, &run));
    let args = ["score", "--suite", "vismin-vqa", "--data-dir", data.to_str().unwrap(), "--scores"];
    let rescored = benchctl(&[&args[..], &[dump.to_str().unwrap(), "--ties", "shared"]].concat(), &[]);
    assert!(rescored.status.success(), "{}", stderr(&rescored));
    let printed = String::from_utf8_lossy(&rescored.stdout);
    let again: serde_json::Value = serde_json::from_str(&printed[printed.find("\n{").unwrap()..]).unwrap();
    assert_eq!(again["metrics"], run["report"]["metrics"]);

    // `shared` is for answer options: a suite of candidate captions refuses it.
    let wino = benchctl(&["eval", "--suite", "winoground", "--ties", "shared", "--model", "clip-vit-b32"], &[]);
    assert_eq!(wino.status.code(), Some(2), "{}", stderr(&wino));
    assert!(stderr(&wino).contains("--ties shared on winoground: it is for questions with answer options"));
}

/// A tiny local model whose prompt takes several images (`models/<model>-tiny`) against
/// transformers given the same images and prompts (`vismin-vqa/<model>.json`): each option's
/// log-probability (both images in one user turn, in order, for the image task), and the
/// metrics the official code gives its choices.
fn local_model_shows_both_images_as_transformers_does(model: &str) {
    let path = benchctl_testkit::workspace_root().join(format!("crates/benchctl-models/tests/fixtures/{model}-tiny"));
    let (cache, results) =
        (scratch_dir(&format!("vismin-vqa-{model}-cache")), scratch_dir(&format!("vismin-vqa-{model}")));
    let out = eval(&["--model-path", path.to_str().unwrap()], &results, &[("BENCHCTL_CACHE", cache.to_str().unwrap())]);
    let (run_path, run) = stored_run(&out);
    let reference = json(&format!("{model}.json"));
    let stored = read_scores(&dump_path(&run_path, &run)).unwrap();
    let mut worst = 0f64;
    for (r, (_, matrix)) in stored.iter().enumerate() {
        for (k, row) in matrix.iter().enumerate() {
            for (l, &score) in row.iter().enumerate() {
                match reference["scores"][r][k][l].as_f64() {
                    Some(want) => worst = worst.max((f64::from(score) - want).abs()),
                    None => assert!(score.is_nan(), "[{r}][{k}][{l}] is not asked, and stored {score}"),
                }
            }
        }
    }
    assert!(worst <= 1e-4, "{model}: stored log P(option) vs transformers: {worst:e}");
    for name in ["text_score", "image_score", "group_score"] {
        let (got, want) = (&run["report"]["metrics"][name], &reference["official"]["overall"]["accuracy"][name]);
        assert!((got.as_f64().unwrap() - want.as_f64().unwrap()).abs() < 1e-9, "{model} {name}: {got} against {want}");
    }
    // 48 single-image states and 24 of both images together, 8 options each item.
    assert_eq!(
        (run["counts"]["images_encoded"].as_u64(), run["counts"]["pairs_scored"].as_u64()),
        (Some(72), Some(192))
    );
}

#[test]
fn a_local_gemma3_shows_both_images_in_one_prompt_as_transformers_does() {
    local_model_shows_both_images_as_transformers_does("gemma3");
}

#[test]
fn a_local_qwen25vl_shows_both_images_in_one_prompt_as_transformers_does() {
    local_model_shows_both_images_as_transformers_does("qwen25vl");
}

#[test]
fn a_local_qwen3vl_shows_both_images_in_one_prompt_as_transformers_does() {
    local_model_shows_both_images_as_transformers_does("qwen3vl");
}

/// A local model whose prompt takes one image is refused before any work, naming what works.
#[test]
fn a_local_model_of_one_image_per_prompt_is_refused() {
    let model = benchctl_testkit::workspace_root().join("crates/benchctl-models/tests/fixtures/paligemma-tiny");
    let out = eval(&["--model-path", model.to_str().unwrap()], &scratch_dir("vismin-vqa-local"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("several images together") && said.contains("--endpoint"), "{said}");
}

/// `check` decodes each image once and counts images, not the candidates that show two of them
/// together (24 items of 2 images).
#[test]
fn check_counts_images_not_the_candidates_that_show_them_together() {
    let data = fixtures().join("vismin");
    let out = benchctl(&["check", "--suite", "vismin-vqa", "--data-dir", data.to_str().unwrap()], &[]);
    let said = common::stdout(&out);
    assert!(said.contains("24 items, 48 images, 1 problem(s)"), "{said}{}", stderr(&out));
    assert!(said.contains("the official release has 2084 items, these annotations give 24"), "{said}");
}

/// A participant's submission CSV of answers (pandas' `to_csv`, empty where a tie chose
/// nothing) scores as the official `compute_vqa_accuracy` scores it against the labels of
/// `solutions/vqa_solution.csv`, overall and per category; an answer that is no option counts
/// as wrong, with a warning naming it.
#[test]
fn a_submission_csv_of_answers_scores_as_the_official_metric() {
    let data = fixtures().join("vismin");
    let score = |csv: &std::path::Path| {
        benchctl(
            &[
                "score",
                "--suite",
                "vismin-vqa",
                "--data-dir",
                data.to_str().unwrap(),
                "--scores",
                csv.to_str().unwrap(),
            ],
            &[],
        )
    };
    let out = score(&fixtures().join("vismin-vqa/submission.csv"));
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&printed[printed.find("\n{").unwrap()..]).unwrap();
    let official = json("submission-official.json");
    let check = |metrics: &serde_json::Value, want: &serde_json::Value, what: &str| {
        for name in ["text_score", "image_score", "group_score"] {
            let (got, want) = (metrics[name].as_f64().unwrap(), want["accuracy"][name].as_f64().unwrap());
            assert!((got - want).abs() < 1e-9, "{what} {name}: {got} against the official {want}");
        }
    };
    check(&report["metrics"], &official["overall"], "overall");
    for (category, want) in official["categories"].as_object().unwrap() {
        check(&report["breakdowns"]["category"][category.as_str()], want, category);
    }

    // "First" where the text question's options are A and B (item 4's text task, right in the
    // file): wrong, as `==` finds it, and named.
    let wrong = scratch_dir("vismin-vqa-csv").join("wrong-label.csv");
    let text = std::fs::read_to_string(fixtures().join("vismin-vqa/submission.csv")).unwrap();
    std::fs::write(&wrong, text.replacen("\n4,A,B,", "\n4,First,B,", 1)).unwrap();
    let out = score(&wrong);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 answer(s) are none of their question's options and count as wrong"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("\"First\" (") && stderr(&out).contains("line 6 column Text_Q0"), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let worse: serde_json::Value = serde_json::from_str(&printed[printed.find("\n{").unwrap()..]).unwrap();
    let text_score = |r: &serde_json::Value| r["metrics"]["text_score"].as_f64().unwrap();
    assert!(text_score(&worse) < text_score(&report), "item 4's text task was right, and is wrong now");
}
