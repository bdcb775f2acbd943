//! VisMin's similarities as its benchmark's submission CSV (`id,T0_I0,T0_I1,T1_I0,T1_I1`, the
//! README of `vismin-bench/`): a run writes one, `score` reads it back to the run's scores and
//! metrics, and reads a CSV written by pandas (`scripts/fixtures/gen_vismin_submission_fixture.py`)
//! to the official `compute_contrastive_accuracy`'s text, image and group score per category.

mod common;

use std::path::PathBuf;

use benchctl::results::read_scores;
use common::{benchctl, dump_path, scratch_dir, stderr, stored_run};

fn fixtures() -> PathBuf {
    benchctl_testkit::workspace_root().join("crates/benchctl-suites/tests/fixtures")
}

/// `benchctl score --suite SUITE` of the fixture's data: its printed report.
fn score(suite: &str, scores: &std::path::Path, extra: &[&str]) -> Result<serde_json::Value, String> {
    let data = fixtures().join("vismin");
    let args = ["score", "--suite", suite, "--data-dir", data.to_str().unwrap(), "--scores", scores.to_str().unwrap()];
    let out = benchctl(&[&args[..], extra].concat(), &[]);
    if !out.status.success() {
        return Err(stderr(&out));
    }
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    Ok(serde_json::from_str(&printed[printed.find("\n{").unwrap()..]).unwrap())
}

#[test]
fn a_run_writes_the_similarities_csv_and_score_reads_it_as_the_official_metric_does() {
    let (results, model) = (scratch_dir("vismin-results"), common::tiny_model());
    let data = fixtures().join("vismin");
    let args = common::eval_args(&model, "vismin", data.to_str().unwrap(), results.to_str().unwrap(), &[]);
    let out = benchctl(&args, &[]);
    let (run_path, run) = stored_run(&out);
    let csv = run_path.with_extension("submission").join("vismin.csv");
    assert!(common::stdout(&out).contains(&format!("wrote {}", csv.display())), "{}", common::stdout(&out));

    // Tt_Ii is the dump's cell (image i, text t), exactly; items in the suite's order.
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,T0_I0,T0_I1,T1_I0,T1_I1"));
    let dump = read_scores(&dump_path(&run_path, &run)).unwrap();
    for ((id, matrix), line) in dump.iter().zip(lines) {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields[0], id);
        for (field, (i, t)) in fields[1..].iter().zip([(0, 0), (1, 0), (0, 1), (1, 1)]) {
            assert_eq!(field.parse::<f64>().unwrap(), f64::from(matrix[i][t]), "item {id} T{t}_I{i}");
        }
    }
    let again = score("vismin", &csv, &[]).unwrap();
    assert_eq!(again["metrics"], run["report"]["metrics"]);
    assert_eq!(again["breakdowns"], run["report"]["breakdowns"]);

    // A participant's CSV (pandas' `to_csv`) scores as the official code scores it, to the two
    // decimals it prints.
    let submitted = score("vismin", &fixtures().join("vismin/submission.csv"), &[]).unwrap();
    let official: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("vismin/submission-official.json")).unwrap())
            .unwrap();
    for (category, want) in official["categories"].as_object().unwrap() {
        for (ours, theirs) in [("text_score", "text"), ("image_score", "image"), ("group_score", "group")] {
            let got = submitted["breakdowns"]["category"][category.as_str()][ours].as_f64().unwrap();
            assert_eq!((got * 100.0).round() / 100.0, want[theirs].as_f64().unwrap(), "{category} {ours}: {got}");
        }
    }
}

/// An external model's run (`score --model-name`) writes its submission file too: a
/// participant's CSV stored and written back holds the same values, in the suite's order.
#[test]
fn an_external_run_writes_its_submission_file_back() {
    let (data, results) = (fixtures().join("vismin"), scratch_dir("vismin-external"));
    let submitted = fixtures().join("vismin/submission.csv");
    let args = ["score", "--suite", "vismin", "--data-dir", data.to_str().unwrap(), "--scores"];
    let named = ["--model-name", "a-participant", "--results-dir", results.to_str().unwrap()];
    let out = benchctl(&[&args[..], &[submitted.to_str().unwrap()], &named[..]].concat(), &[]);
    let (run_path, _) = stored_run(&out);
    let values = |path: &std::path::Path| -> Vec<Vec<f64>> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines().skip(1).map(|l| l.split(',').map(|f| f.parse().unwrap()).collect()).collect()
    };
    assert_eq!(values(&run_path.with_extension("submission").join("vismin.csv")), values(&submitted));
}

/// Bad CSVs are named by file, line and column; a format another suite has is refused (exit 2).
#[test]
fn a_bad_similarities_csv_is_named() {
    let dir = scratch_dir("vismin-bad-csv");
    let good = std::fs::read_to_string(fixtures().join("vismin/submission.csv")).unwrap();
    let cases = [
        ("not-a-number", good.replacen("0,0.5,", "0,half,", 1), "line 2 column T0_I0: `half` is not a number"),
        ("twice", format!("{good}{}\n", good.lines().nth(1).unwrap()), "line 26"),
        ("missing", good.lines().take(24).collect::<Vec<_>>().join("\n"), "1 item(s) lack scores"),
        ("unknown-id", good.replacen("\n0,", "\n999,", 1), "999"),
        ("short-row", good.replacen("0,0.5,0.375,", "0,0.5,", 1), "line 2: 4 field(s), the header 5"),
    ];
    for (name, text, want) in cases {
        let path = dir.join(format!("{name}.csv"));
        std::fs::write(&path, text).unwrap();
        let error = score("vismin", &path, &["--format", "vismin-csv"]).unwrap_err();
        assert!(error.contains(&path.display().to_string()) && error.contains(want), "{name}: {error}");
    }
    // Windows line ends and a byte-order mark (a spreadsheet's export) read as the same file.
    let windows = dir.join("windows.csv");
    std::fs::write(&windows, format!("\u{feff}{}", good.replace('\n', "\r\n"))).unwrap();
    let submitted = |path: &std::path::Path| score("vismin", path, &[]).unwrap()["breakdowns"].clone();
    assert_eq!(submitted(&windows), submitted(&fixtures().join("vismin/submission.csv")));
    // A CSV of neither form is read as the suite's format, which names what it lacks.
    let odd = dir.join("odd.csv");
    std::fs::write(&odd, "idx,T0_I0,T1_I0\n0,1,2\n").unwrap();
    let error = score("vismin", &odd, &[]).unwrap_err();
    assert!(error.contains("its header is neither `id,T0_I0,T0_I1,T1_I0,T1_I1`"), "{error}");
    // The other form's file: named, with the suite that reads it.
    let answers = fixtures().join("vismin-vqa/submission.csv");
    let error = score("vismin", &answers, &[]).unwrap_err();
    assert!(
        error.contains("it holds answers (VisMin's VQA form)") && error.contains("`vismin-vqa` the answers"),
        "{error}"
    );
    let error = score("vismin-vqa", &fixtures().join("vismin/submission.csv"), &[]).unwrap_err();
    assert!(error.contains("it holds similarities"), "{error}");
    let error = score("vismin", &fixtures().join("vismin/submission.csv"), &["--format", "eqben-npy"]).unwrap_err();
    assert!(
        error.contains("`eqben-npy`: that is not vismin's official submission format (its format: `vismin-csv`)"),
        "{error}"
    );
    let error = score("vismin", &fixtures().join("vismin/submission.csv"), &["--format", "csv"]).unwrap_err();
    assert!(error.contains("`csv` is none of dump, winoground-jsonl, eqben-npy"), "{error}");
}
