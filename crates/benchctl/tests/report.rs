//! `benchctl report`: the failure browser's data agrees with the run's scores (outcomes and
//! margins recomputed here from the dump), is split into chunks, and the page works in a
//! real browser (headless Chromium: item count, a filter, a sort, a screenshot).

mod common;

use std::path::{Path, PathBuf};

use common::{benchctl, demo_suite, stderr};

/// `BENCH_INDEX = {…};` or `BENCH_CHUNK(n, […]);` as JSON.
fn script_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.find(['{', '[']).unwrap();
    let body = text[start..].trim_end().trim_end_matches(';').trim_end_matches(')');
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A run of the tiny CLIP and an external run that is right on every item but the first
/// (an 8-item Winoground-layout suite), in `results`; returns both run files.
fn two_runs(results: &Path) -> (PathBuf, PathBuf, Vec<serde_json::Value>) {
    let (run_path, run, _) = common::eval_tiny("winoground", &demo_suite(), results, &[]);
    let dump: Vec<serde_json::Value> = std::fs::read_to_string(common::dump_path(&run_path, &run))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut lines = String::new();
    for (n, item) in dump.iter().enumerate() {
        let good = if n == 0 { [[0.2, 0.8], [0.8, 0.2]] } else { [[0.8, 0.2], [0.2, 0.8]] };
        lines.push_str(&serde_json::json!({"id": item["id"], "scores": good}).to_string());
        lines.push('\n');
    }
    let scores = results.join("external.jsonl");
    std::fs::write(&scores, lines).unwrap();
    let out = common::score_external(&demo_suite(), &scores, "oracle-but-one", results, &[]);
    let (external, _) = common::stored_run(&out);
    (run_path, external, dump)
}

/// Winoground's group outcome and the smallest winning gap of a 2×2 item, from its scores.
fn expected(scores: &serde_json::Value) -> (bool, f64) {
    let s = |k: usize, l: usize| scores[k][l].as_f64().unwrap();
    let gaps = [s(0, 0) - s(0, 1), s(1, 1) - s(1, 0), s(0, 0) - s(1, 0), s(1, 1) - s(0, 1)];
    (gaps.iter().all(|&g| g > 0.0), gaps.iter().copied().fold(f64::INFINITY, f64::min))
}

#[test]
fn the_report_shows_every_item_with_its_outcome_and_margin() {
    let results = tempfile::tempdir().unwrap();
    let (run, external, dump) = two_runs(results.path());
    let out = benchctl(&["report", run.to_str().unwrap(), "--against", external.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = run.with_extension("report");
    let index = script_json(&dir.join("data/index.js"));
    assert_eq!(index["ids"].as_array().unwrap().len(), dump.len());
    let group = index["metrics"].as_array().unwrap().iter().position(|m| m == "group_score").unwrap();
    assert_eq!(index["outcome"], group);
    for (i, item) in dump.iter().enumerate() {
        assert_eq!(index["ids"][i], item["id"]);
        let (pass, margin) = expected(&item["scores"]);
        let bits = index["bits"][i].as_u64().unwrap();
        assert_eq!(bits >> group & 1 == 1, pass, "item {i}");
        let shown = index["margin"][i].as_f64().unwrap();
        assert!((shown - margin).abs() <= 1e-3 * margin.abs().max(1e-3), "item {i}: margin {shown} vs {margin}");
        let other = index["againstBits"][i].as_u64().unwrap();
        assert_eq!(other >> group & 1 == 1, i != 0, "item {i} of the external run");
    }
    // Every item once, in order, in the chunk; images as thumbnails beside the page.
    let chunk = script_json(&dir.join("data/chunk-0000.js"));
    assert_eq!(chunk.as_array().unwrap().len(), dump.len());
    assert!(!dir.join("data/chunk-0001.js").exists());
    let thumb = chunk[0]["images"][0][1].as_str().unwrap();
    let decoded = image::open(dir.join(thumb)).unwrap();
    assert!(decoded.width() <= 112 && decoded.height() <= 112);
    assert_eq!(chunk[1]["against"], serde_json::json!([[0.8, 0.2], [0.2, 0.8]]));

    // The leaderboard links the run to its page (and the external run, which has none, not).
    let out = benchctl(&["leaderboard", "--results-dir", results.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let board = std::fs::read_to_string(results.path().join("LEADERBOARD.md")).unwrap();
    let stem = run.file_stem().unwrap().to_str().unwrap();
    assert!(board.contains(&format!("| [clip-tiny-a](runs/{stem}.report/index.html) |")), "{board}");
    assert!(board.contains("| oracle-but-one (external) |"), "{board}");

    // A run of other items cannot be compared; a shard must be merged first.
    let other_data = tempfile::tempdir().unwrap();
    common::copy_tree(&demo_suite(), other_data.path());
    let examples = other_data.path().join("examples.jsonl");
    let text = std::fs::read_to_string(&examples).unwrap();
    std::fs::write(&examples, text.lines().take(4).map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let (fewer, _, _) = common::eval_tiny("winoground", other_data.path(), results.path(), &[]);
    let out = benchctl(&["report", run.to_str().unwrap(), "--against", fewer.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("same items"), "{}", stderr(&out));
    let (shard, _, _) = common::eval_tiny("winoground", &demo_suite(), results.path(), &["--shard", "0/2"]);
    let out = benchctl(&["report", shard.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("merge the shards first"), "{}", stderr(&out));
}

/// Chromium, from `BENCHCTL_CHROMIUM` or the usual names on `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BENCHCTL_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser", "google-chrome"].map(|name| dir.join(name)))
        .find(|p| p.is_file())
}

/// Chromium for a browser test; without it the test is skipped (saying so), except under
/// `BENCHCTL_CI=1`, where it fails.
fn browser_or_skip() -> Option<PathBuf> {
    let ci = benchctl_testkit::required();
    // Under BENCHCTL_CI=1 the README's one test command installs what it needs (once per
    // process, whichever browser test comes first).
    static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if ci && chromium().is_none() {
        INSTALLED.get_or_init(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup/install-chromium.sh");
            std::process::Command::new("bash").arg(script).status().is_ok_and(|s| s.success())
        });
    }
    let browser = chromium();
    if browser.is_none() {
        if ci {
            panic!("BENCHCTL_CI=1 needs Chromium for the report's browser test: scripts/setup/install-chromium.sh could not install it");
        }
        benchctl_testkit::skip_even_in_ci(
            "no chromium on PATH (scripts/setup/install-chromium.sh installs it; or set BENCHCTL_CHROMIUM)",
        );
    }
    browser
}

/// The page after its scripts ran, as headless Chromium leaves it.
fn dump_dom(browser: &Path, page: &Path, fragment: &str, screenshot: Option<&Path>) -> String {
    let url = format!("file://{}#{fragment}", page.display());
    let mut args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--allow-file-access-from-files".into(),
        "--virtual-time-budget=5000".into(),
        "--window-size=1280,1800".into(),
    ];
    match screenshot {
        Some(path) => args.push(format!("--screenshot={}", path.display())),
        None => args.push("--dump-dom".into()),
    }
    args.push(url);
    let out = std::process::Command::new(browser).args(&args).output().expect("run chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `data-item` ids of the cards on the page, in order.
fn cards(dom: &str) -> Vec<String> {
    dom.split("data-item=\"").skip(1).map(|rest| rest[..rest.find('"').unwrap()].to_string()).collect()
}

#[test]
fn the_page_filters_and_sorts_in_a_real_browser() {
    let Some(browser) = browser_or_skip() else { return };
    let results = tempfile::tempdir().unwrap();
    let (run, external, dump) = two_runs(results.path());
    let out = benchctl(&["report", external.to_str().unwrap(), "--against", run.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = external.with_extension("report").join("index.html");

    let all = dump_dom(&browser, &page, "", None);
    assert!(all.contains("data-ready=\"1\""), "the page did not finish rendering");
    let ids: Vec<String> = dump.iter().map(|d| d["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(cards(&all), ids, "every item, in item order");

    // The external run fails only the first item.
    let failed = dump_dom(&browser, &page, "outcome=fail", None);
    assert_eq!(cards(&failed), vec![ids[0].clone()]);
    assert!(failed.contains("1 shown"));

    // Worst margin first: the failing item (−0.6) leads, the others (+0.6) follow in order.
    let sorted = dump_dom(&browser, &page, "sort=asc", None);
    assert_eq!(cards(&sorted), ids);
    let best_first = dump_dom(&browser, &page, "sort=desc", None);
    let mut expected: Vec<String> = ids[1..].to_vec();
    expected.push(ids[0].clone());
    assert_eq!(cards(&best_first), expected);

    // The header: the run's headline metrics with their intervals, the other run's beside,
    // and the legend that says what a margin is.
    assert!(
        all.contains("<table id=\"metrics\" class=\"metrics\"><tr><th>metric</th>"),
        "the metrics table heads the page"
    );
    let row = all
        .split("data-metric=\"group_score\">")
        .nth(1)
        .expect("a group_score row")
        .split("</tr>")
        .next()
        .unwrap()
        .to_string();
    assert!(
        row.matches("<td>").count() == 5 && row.contains("<td>["),
        "value, interval, design effect, other run: {row}"
    );
    assert!(all.contains("Margin: for one item, the smallest gap"), "the legend");

    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../report-demo.png");
    let _ = std::fs::remove_file(&shot);
    dump_dom(&browser, &page, "", Some(&shot));
    assert!(std::fs::metadata(&shot).map(|m| m.len() > 10_000).unwrap_or(false), "a screenshot at {}", shot.display());
}

/// Strings that try to inject markup or script, in every place data reaches the page.
const INJECTIONS: [&str; 4] = [
    "\"><img src=x onerror=\"document.title='PWNED'\">",
    "</script><script>document.title='PWNED'</script>",
    "<!-- | x |\n| y | [a](javascript:document.title='PWNED') \u{2028}",
    "<img src=x onerror=document.title='PWNED'>",
];

/// A run whose item id, captions, tag and model name are injection strings, opened in
/// headless Chromium: the page renders (its Content-Security-Policy lets its own files run),
/// no injected script or handler runs (each would set the title), no injected element
/// exists, and the strings show as text.
#[test]
fn injected_markup_stays_text_in_a_real_browser() {
    let Some(browser) = browser_or_skip() else { return };
    let data = tempfile::tempdir().unwrap();
    common::copy_tree(&demo_suite(), data.path());
    let examples = data.path().join("examples.jsonl");
    let text = std::fs::read_to_string(&examples).unwrap();
    let mut lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    lines[0]["id"] = INJECTIONS[0].into();
    lines[0]["caption_0"] = INJECTIONS[1].into();
    lines[0]["caption_1"] = INJECTIONS[2].into();
    lines[0]["tag"] = INJECTIONS[3].into();
    let jsonl: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&examples, jsonl).unwrap();
    let results = tempfile::tempdir().unwrap();
    let (run, run_json, _) = common::eval_tiny("winoground", data.path(), results.path(), &[]);
    // An external run under a hostile model name, against the first.
    let dump = std::fs::read_to_string(common::dump_path(&run, &run_json)).unwrap();
    let scores = results.path().join("external.jsonl");
    std::fs::write(&scores, &dump).unwrap();
    let out =
        common::score_external(data.path(), &scores, "<script>document.title='PWNED'</script>", results.path(), &[]);
    let (external, _) = common::stored_run(&out);
    let out = benchctl(&["report", external.to_str().unwrap(), "--against", run.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = external.with_extension("report").join("index.html");
    let dom = dump_dom(&browser, &page, "", None);
    assert!(dom.contains("data-ready=\"1\""), "the page did not render under its policy: {dom}");
    assert!(dom.contains("<title>benchctl report</title>") && !dom.contains("PWNED</title>"), "a script ran");
    assert!(!dom.contains("<img src=\"x\"") && !dom.to_lowercase().contains("<script>document"), "{dom}");
    // Shown as text: in the serialised DOM, `<` and `>` of text are escaped.
    for shown in
        [INJECTIONS[1], "<img src=x onerror=document.title='PWNED'>", "<script>document.title='PWNED'</script>"]
    {
        let escaped = shown.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        assert!(dom.contains(&escaped), "{shown} is not shown as text");
    }
}

/// A run's generated replies show beside its scores, each cell's reply as text, markup and
/// script in a reply staying text, and with `--against` the other run's beside them:
/// NaturalBench's fixture scored from two output lists of replies (`score --format
/// naturalbench-outputs`), then the page in headless Chromium.
#[test]
fn generated_replies_show_as_text_beside_the_scores_in_a_real_browser() {
    let Some(browser) = browser_or_skip() else { return };
    let data = benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures/naturalbench");
    let suite = benchctl_suites::find("naturalbench").unwrap().load(&data).unwrap();
    let mut outputs: Vec<String> = (0..4 * suite.items.len()).map(|i| format!("Reply {i}: yes, it is A")).collect();
    outputs[1] = format!("{} yes", INJECTIONS[1]);
    outputs[2] = format!("{} A", INJECTIONS[3]);
    let results = tempfile::tempdir().unwrap();
    let scored = |name: &str, outputs: &[String]| {
        let file = results.path().join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_string(outputs).unwrap()).unwrap();
        let args = ["score", "--suite", "naturalbench", "--data-dir", data.to_str().unwrap(), "--scores"];
        let more = [file.to_str().unwrap(), "--model-name", name, "--results-dir", results.path().to_str().unwrap()];
        common::stored_run(&benchctl(&[&args[..], &more].concat(), &[])).0
    };
    let run = scored("replier", &outputs);
    let other: Vec<String> = (0..outputs.len()).map(|i| format!("Other {i}: no, B")).collect();
    let other_run = scored("other", &other);
    let out = benchctl(&["report", run.to_str().unwrap(), "--against", other_run.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dom = dump_dom(&browser, &run.with_extension("report").join("index.html"), "", None);
    assert!(dom.contains("data-ready=\"1\""), "the page did not render: {dom}");
    let tables = dom.matches("<caption>generated replies, replier (external)</caption>").count();
    assert_eq!(tables, suite.items.len(), "one per item");
    // Item 0: question 0 of image 0, of image 1 (its two options each), then question 1.
    let first = dom.split("generated replies").nth(1).unwrap().split("</table>").next().unwrap().to_string();
    let cells: Vec<&str> =
        first.split("<td").skip(1).map(|c| &c[c.find('>').unwrap() + 1..c.find("</td>").unwrap()]).collect();
    let escaped = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let (reply_0, reply_1, reply_2) = (escaped(&outputs[0]), escaped(&outputs[1]), escaped(&outputs[2]));
    assert_eq!(
        cells,
        [&reply_0, &reply_0, &reply_2, &reply_2, &reply_1, &reply_1, &escaped(&outputs[3]), &escaped(&outputs[3])]
    );
    assert!(dom.contains("<title>benchctl report</title>") && !dom.contains("PWNED</title>"), "a script ran");
    assert!(!dom.contains("<img src=\"x\"") && !dom.to_lowercase().contains("<script>document"), "{dom}");
    // The other run's replies, beside.
    let theirs = dom.split("generated replies, other (external)").nth(1).unwrap().split("</table>").next().unwrap();
    assert!(theirs.contains(">Other 0: no, B</td>") && theirs.contains(">Other 3: no, B</td>"), "{theirs}");
    assert_eq!(dom.matches("<caption>generated replies, other (external)</caption>").count(), suite.items.len());
}
