//! Inputs a hostile or careless user gives the runner, each exactly as it was reported: the
//! run ends with a clear error naming the file (or does the right thing), never hangs and
//! never reads without bound.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{copy_tree, demo_suite, eval_tiny, stderr, stdout};

/// `benchctl args` in `cwd`, killed (and the test failed) if it runs past a minute: a
/// blocked read must show as a failure, not as a CI job that never ends.
fn benchctl_within_a_minute(cwd: &Path, args: &[&str]) -> Output {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hostile-cache-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_benchctl"))
        .args(args)
        .current_dir(cwd)
        .env("BENCHCTL_CACHE", cache)
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_HOME")
        .env_remove("HF_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("benchctl {args:?} still ran after a minute: it blocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A FIFO standing where an image is expected: `check` and `eval` name it (an open would
/// wait for a writer forever).
#[test]
fn a_fifo_in_place_of_an_image_is_refused() {
    let data = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), data.path());
    let image = data.path().join("images/ex_0_img_0.png");
    mkfifo(&image);
    let dir = data.path().to_str().unwrap();
    let out = benchctl_within_a_minute(data.path(), &["check", "--suite", "winoground", "--data-dir", dir]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains(&image.display().to_string()) && text.contains("FIFO"), "{text}");
    let results = tempfile::tempdir().unwrap();
    let model = common::tiny_model();
    let args = common::eval_args(&model, "winoground", dir, results.path().to_str().unwrap(), &[]);
    let out = benchctl_within_a_minute(data.path(), &args);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains(&image.display().to_string()), "{}", stderr(&out));
}

/// Run files that are not regular files, in a baseline directory or given to `report`: a
/// FIFO (would block) and a symbolic link to `/dev/zero` (would be read until memory runs
/// out) are refused, naming the file.
#[test]
fn run_files_that_are_not_regular_files_are_refused() {
    let results = tempfile::tempdir().unwrap();
    eval_tiny("winoground", &demo_suite(), results.path(), &[]);
    let results_dir = results.path().to_str().unwrap();
    for bad in ["blocked.json", "zero.json"] {
        let baseline = tempfile::tempdir().unwrap();
        let path = baseline.path().join(bad);
        if bad == "blocked.json" {
            mkfifo(&path);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        }
        let out = benchctl_within_a_minute(
            results.path(),
            &["compare", "--baseline", baseline.path().to_str().unwrap(), "--results-dir", results_dir],
        );
        assert_eq!(out.status.code(), Some(8), "{bad}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&path.display().to_string()) && stderr(&out).contains("not a regular file"),
            "{bad}: {}",
            stderr(&out)
        );
        let out = benchctl_within_a_minute(results.path(), &["report", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(8), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("not a regular file"), "{bad}: {}", stderr(&out));
    }
}

/// A relative `--data-dir` is stored absolute, so `report` finds the data from any working
/// directory; data that moved since is named as such, not blamed on a gated download.
#[test]
fn a_relative_data_dir_is_stored_absolute_and_a_moved_one_is_named() {
    let work = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), &work.path().join("demo"));
    let results = work.path().join("results");
    let model = common::tiny_model();
    let args = common::eval_args(&model, "winoground", "demo", results.to_str().unwrap(), &[]);
    let out = benchctl_within_a_minute(work.path(), &args);
    let (run_path, run) = common::stored_run(&out);
    let recorded = PathBuf::from(run["suite"]["data_dir"].as_str().unwrap());
    assert!(recorded.is_absolute(), "{}", recorded.display());
    assert_eq!(recorded.canonicalize().unwrap(), work.path().join("demo").canonicalize().unwrap());
    // From elsewhere, the report finds the data.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = benchctl_within_a_minute(elsewhere.path(), &["report", run_path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Moved away: the missing directory is named, with the way out.
    std::fs::rename(work.path().join("demo"), work.path().join("moved")).unwrap();
    let out = benchctl_within_a_minute(elsewhere.path(), &["report", run_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&recorded.display().to_string()) && err.contains("--data-dir"), "{err}");
    assert!(!err.contains("HF_TOKEN"), "{err}");
}

/// `report --data-dir` at data that changed since the run (a caption edited) is refused:
/// the run's scores would be shown beside texts that were never scored. The flag shows it
/// anyway, with a warning.
#[test]
fn a_report_on_changed_data_is_refused_unless_asked() {
    let data = tempfile::tempdir().unwrap();
    copy_tree(&demo_suite(), data.path());
    let results = tempfile::tempdir().unwrap();
    let (run_path, _, _) = eval_tiny("winoground", data.path(), results.path(), &[]);
    let examples = data.path().join("examples.jsonl");
    let text = std::fs::read_to_string(&examples).unwrap();
    let first_caption = text.split("\"caption_0\": \"").nth(1).unwrap().split('"').next().unwrap().to_string();
    std::fs::write(&examples, text.replacen(&first_caption, "a caption nobody scored", 1)).unwrap();
    let (run, dir) = (run_path.to_str().unwrap(), data.path().to_str().unwrap());
    let out = benchctl_within_a_minute(results.path(), &["report", run, "--data-dir", dir]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("not the data the run scored") && stderr(&out).contains("--allow-changed-data"));
    let out = benchctl_within_a_minute(results.path(), &["report", run, "--data-dir", dir, "--allow-changed-data"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning:") && stderr(&out).contains("not the data the run scored"));
}

/// An image path inside the data directory by name that a symbolic link leads out of it:
/// `eval` and `check` refuse it, naming the path, where it leads and the data directory;
/// `--allow-outside-links` reads it (the same scores as the plain suite).
#[test]
fn a_link_out_of_the_data_directory_is_refused_unless_allowed() {
    let (data, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    copy_tree(&demo_suite(), data.path());
    let image = data.path().join("images/ex_0_img_0.png");
    let outside = elsewhere.path().join("secret.png");
    std::fs::rename(&image, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &image).unwrap();
    let dir = data.path().to_str().unwrap();
    let named = |text: &str| {
        text.contains(&image.display().to_string())
            && text.contains(&outside.canonicalize().unwrap().display().to_string())
            && text.contains("--allow-outside-links")
    };
    let out = benchctl_within_a_minute(data.path(), &["check", "--suite", "winoground", "--data-dir", dir]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(named(&stdout(&out)), "{}", stdout(&out));
    let allowed = benchctl_within_a_minute(
        data.path(),
        &["check", "--suite", "winoground", "--data-dir", dir, "--allow-outside-links"],
    );
    // Only the demo's own problem is left (it has 8 of the release's 400 items).
    assert!(stdout(&allowed).contains("1 problem(s)") && !named(&stdout(&allowed)), "{}", stdout(&allowed));

    let (model, results) = (common::tiny_model(), tempfile::tempdir().unwrap());
    let args = common::eval_args(&model, "winoground", dir, results.path().to_str().unwrap(), &[]);
    let out = benchctl_within_a_minute(data.path(), &args);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(named(&stderr(&out)), "{}", stderr(&out));
    let mut allowed = args.clone();
    allowed.push("--allow-outside-links");
    let out = benchctl_within_a_minute(data.path(), &allowed);
    let (_, run) = common::stored_run(&out);
    let plain = tempfile::tempdir().unwrap();
    let (_, reference, _) = eval_tiny("winoground", &demo_suite(), plain.path(), &[]);
    assert_eq!(run["report"], reference["report"]);
}

/// A Hugging Face token in the environment is never written anywhere: not by a run (run file,
/// score dump, store, embedding cache, output), nor by a download that fails (offline, no
/// cached files): every byte benchctl wrote is searched for it.
#[test]
fn a_token_in_the_environment_leaves_no_trace() {
    let token = "hf_trace_5c1e9d7b2a";
    let (results, cache, home) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let demo = demo_suite().display().to_string();
    let env = [
        ("HF_TOKEN", token),
        ("BENCHCTL_CACHE", cache.path().to_str().unwrap()),
        ("HF_HOME", home.path().to_str().unwrap()),
    ];
    let model = common::tiny_model();
    let args = common::eval_args(&model, "winoground", &demo, results.path().to_str().unwrap(), &[]);
    let run = common::benchctl(&args, &env);
    assert!(run.status.success(), "{}", stderr(&run));
    let offline = [env[0], env[1], env[2], ("HF_HUB_OFFLINE", "1")];
    let zoo = ["eval", "--model", "clip-vit-b32", "--suite", "winoground", "--data-dir", &demo, "--results-dir"];
    let mut zoo: Vec<&str> = zoo.to_vec();
    zoo.push(results.path().to_str().unwrap());
    let download = common::benchctl(&zoo, &offline);
    assert!(!download.status.success(), "an offline hub without the files fails");
    let fetch = common::benchctl(
        &["fetch", "--suite", "winoground", "--data-dir", home.path().join("w").to_str().unwrap()],
        &offline,
    );
    assert!(!fetch.status.success());
    for out in [&run, &download, &fetch] {
        assert!(!stdout(out).contains(token) && !stderr(out).contains(token), "the token was printed: {}", stderr(out));
    }
    let mut files = 0;
    let mut pending: Vec<PathBuf> =
        [results.path(), cache.path(), home.path()].iter().map(|p| p.to_path_buf()).collect();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                pending.push(path);
            } else if entry.file_type().unwrap().is_file() {
                files += 1;
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
                    "the token is in {}",
                    path.display()
                );
            }
        }
    }
    assert!(files >= 3, "the run wrote its files ({files} found)");
}
