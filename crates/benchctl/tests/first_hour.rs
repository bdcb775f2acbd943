//! What a new user meets first, on the shipped demo data: tables that fit the terminal, the
//! demo as a suite of its own (listed, checked and evaluated from the checkout without a data
//! directory), and `eval --help` with headings and examples.

mod common;

use std::process::{Command, Output};

use common::{benchctl, stderr, stdout};

/// `benchctl` run from the checkout's root, as the README's commands are.
fn from_checkout(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_benchctl"))
        .args(args)
        .current_dir(benchctl_testkit::workspace_root())
        .env_remove("COLUMNS")
        .env("BENCHCTL_CACHE", std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("first-hour-cache"))
        .output()
        .unwrap()
}

fn widest_line(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn tables_fit_the_terminal_width_unless_wide() {
    for command in [&["models"][..], &["suites"][..]] {
        let fitted = benchctl(command, &[("COLUMNS", "120")]);
        assert!(fitted.status.success(), "{}", stderr(&fitted));
        assert!(widest_line(&stdout(&fitted)) <= 120, "{command:?}:\n{}", stdout(&fitted));
        let wide = benchctl(&[command, &["--wide"]].concat(), &[("COLUMNS", "120")]);
        assert!(widest_line(&stdout(&wide)) > 120, "{command:?} --wide keeps rows on one line");
        // Rows are wrapped, not dropped: the first column's text, read down, is the same.
        let first_column = |text: &str| -> String {
            text.lines()
                .filter_map(|l| l.strip_prefix('│')?.split('┆').next())
                .flat_map(|cell| cell.chars().filter(|c| !c.is_whitespace()))
                .collect()
        };
        assert_eq!(first_column(&stdout(&fitted)), first_column(&stdout(&wide)), "{command:?}");
    }
}

/// `benchctl suites` lists the shipped demo as ready; `check` accepts it as complete (where
/// the same directory read as Winoground is, rightly, 200 items short of the release); `eval`
/// runs it with no data directory and stores the run under the suite's own id.
#[test]
fn the_shipped_demo_is_a_suite_of_its_own() {
    let suites = from_checkout(&["suites"]);
    let listing = stdout(&suites);
    let demo = listing.lines().skip_while(|l| !l.contains("│ demo ")).take(3).collect::<Vec<_>>().join("\n");
    assert!(demo.contains("ready: 200 items, all 400 images in datasets/demo/shapes"), "{listing}");

    let check = from_checkout(&["check", "--suite", "demo"]);
    assert!(check.status.success(), "{}\n{}", stdout(&check), stderr(&check));
    assert!(stdout(&check).contains("200 items, 400 images, 0 problem(s)"), "{}", stdout(&check));
    let as_winoground = from_checkout(&["check", "--suite", "winoground", "--data-dir", "datasets/demo/shapes"]);
    assert_eq!(as_winoground.status.code(), Some(3), "{}", stdout(&as_winoground));

    let results = tempfile::tempdir().unwrap();
    let model = benchctl_testkit::fixture_model("clip-shapes");
    let out = from_checkout(&[
        "eval",
        "--model-path",
        model.to_str().unwrap(),
        "--suite",
        "demo",
        "--results-dir",
        results.path().to_str().unwrap(),
    ]);
    let (_, run) = common::stored_run(&out);
    assert_eq!(run["suite"]["id"], "demo");
    assert_eq!(run["report"]["metrics"]["group_score"], 81.5, "the README's figure");
}

#[test]
fn eval_help_has_headings_and_examples() {
    let help = stdout(&benchctl(&["eval", "--help"], &[]));
    for heading in
        ["Model and device:", "Suite:", "Results:", "RoCOCO:", "Retrieval re-ranking:", "Scoring server:", "Examples:"]
    {
        assert!(help.contains(heading), "{heading} missing:\n{help}");
    }
    assert!(!help.contains("[default: \"\"]"), "{help}");
    assert!(
        help.contains("benchctl eval --model-path crates/benchctl-models/tests/fixtures/clip-shapes --suite demo"),
        "{help}"
    );
    // RoCOCO's options sit under their heading, not among the general ones.
    let rococo = help.find("RoCOCO:").unwrap();
    assert!(help.find("--rococo-methods").unwrap() > rococo, "{help}");
}
