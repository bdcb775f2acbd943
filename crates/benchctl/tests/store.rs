//! The results store: what a run stores, schema versions, concurrent writers, crashes, run
//! specs, and sharded runs merged back bit for bit.

mod common;

use std::path::{Path, PathBuf};

use benchctl::store::{Store, MIGRATIONS};
use common::{benchctl, demo_suite, stderr, stored_run, tiny_model};

fn eval_args<'a>(model: &'a str, data: &'a str, results: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args =
        vec!["eval", "--model-path", model, "--suite", "winoground", "--data-dir", data, "--results-dir", results];
    args.extend_from_slice(extra);
    args
}

fn eval(results: &Path, cache: &Path, extra: &[&str]) -> std::process::Output {
    let (model, data) = (tiny_model(), demo_suite().display().to_string());
    let results = results.display().to_string();
    benchctl(&eval_args(&model, &data, &results, extra), &[("BENCHCTL_CACHE", cache.to_str().unwrap())])
}

#[test]
fn a_run_is_stored_with_its_metrics_intervals_and_item_scores() {
    let (results, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_, json) = stored_run(&eval(results.path(), cache.path(), &[]));
    let store = Store::open(results.path()).unwrap();
    assert_eq!(store.version().unwrap(), MIGRATIONS.len());
    let runs = store.runs().unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0].run;
    assert_eq!(run.report.metrics.len(), 4);
    assert_eq!(run.intervals.len(), 4, "each headline metric has its interval");
    for i in &run.intervals {
        assert!(i.low <= i.value && i.value <= i.high, "{i:?}");
    }
    assert_eq!(run.data_fingerprint.len(), 64);
    assert_eq!(json["data_fingerprint"], run.data_fingerprint.as_str());
    assert_eq!(json["tool"]["commit"], run.tool_commit.as_str());
    assert_eq!(store.counts().unwrap(), (1, 4, 8));
    let lines = store.item_lines(runs[0].id).unwrap();
    assert_eq!(lines[0]["id"], "0");
    assert_eq!(lines.len(), 8);
}

#[test]
fn a_store_from_a_newer_benchctl_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    let conn = rusqlite::Connection::open(dir.path().join(benchctl::store::FILE_NAME)).unwrap();
    conn.pragma_update(None, "user_version", (MIGRATIONS.len() + 1) as i64).unwrap();
    drop(conn);
    let err = Store::open(dir.path()).err().unwrap();
    assert!(err.to_string().contains("is newer than this benchctl's"), "{err}");
}

#[test]
fn two_processes_writing_at_once_both_land() {
    let results = tempfile::tempdir().unwrap();
    let (model, data, dir) = (tiny_model(), demo_suite().display().to_string(), results.path().display().to_string());
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_benchctl"))
                .args(eval_args(&model, &data, &dir, &["--no-cache"]))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let store = Store::open(results.path()).unwrap();
    assert_eq!(store.counts().unwrap(), (2, 8, 16));
    let runs = store.runs().unwrap();
    assert_eq!(runs[0].run.report, runs[1].run.report);
}

fn aborted(out: &std::process::Output) -> bool {
    !out.status.success() && stderr(out).contains("injected fault")
}

/// The store's rows and the run files agree: every row names an existing run file and its
/// dump, every run file has exactly one row, and no `.partial` file is left.
fn assert_store_and_files_agree(results: &Path) -> (usize, usize, usize) {
    let store = Store::open(results).unwrap();
    let mut recorded: Vec<String> =
        store.run_files().unwrap().into_iter().map(|f| f.expect("every row names its file")).collect();
    recorded.sort();
    let before = recorded.len();
    recorded.dedup();
    assert_eq!(recorded.len(), before, "a run file is recorded twice");
    let mut on_disk: Vec<String> = std::fs::read_dir(results.join("runs"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!on_disk.iter().any(|n| n.ends_with(".partial")), "left over: {on_disk:?}");
    for dump in on_disk.iter().filter_map(|n| n.strip_suffix(".scores.jsonl")) {
        assert!(on_disk.contains(&format!("{dump}.json")), "a score dump without its run file: {on_disk:?}");
    }
    on_disk.retain(|n| n.ends_with(".json"));
    on_disk.sort();
    assert_eq!(recorded, on_disk, "rows and run files disagree");
    for name in &on_disk {
        let file = benchctl::results::read_run_file(&results.join("runs").join(name)).unwrap();
        assert!(file.dump.unwrap().is_file(), "{name}: its score dump is missing");
    }
    store.counts().unwrap()
}

/// Killed at each point of an eval, then reopened: the store and the run files agree and no
/// run is stored twice. A crash before the files exist stores nothing (a score dump written
/// without its run file is removed); a crash after they
/// are complete (before or inside the store's transaction) is finished when the store is next
/// opened, once. The rerun resumes from the cache.
#[test]
fn a_crash_at_any_point_leaves_the_store_and_run_files_in_agreement() {
    let (results, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A first complete run, so the store is not empty when the crashes come.
    let first = tempfile::tempdir().unwrap();
    stored_run(&eval(results.path(), first.path(), &[]));
    assert_eq!(assert_store_and_files_agree(results.path()), (1, 4, 8));

    let (model, data, dir) = (tiny_model(), demo_suite().display().to_string(), results.path().display().to_string());
    // (fault point, runs stored once the store is reopened)
    for (fault, expected_runs) in [
        ("encode-batch:0", 1),
        ("encode-batch:1", 1),
        ("store-dump:0", 1),
        ("store-files:0", 2),
        ("store-item:0", 3),
        ("store-item:5", 4),
    ] {
        let env = [("BENCHCTL_CACHE", cache.path().to_str().unwrap()), ("BENCHCTL_FAULT", fault)];
        let out = benchctl(&eval_args(&model, &data, &dir, &["--batch-size", "4"]), &env);
        assert!(aborted(&out), "{fault}: {}", stderr(&out));
        let (runs, metrics, items) = assert_store_and_files_agree(results.path());
        assert_eq!((runs, metrics, items), (expected_runs, 4 * expected_runs, 8 * expected_runs), "after {fault}");
        // Reopening again imports nothing twice.
        assert_eq!(assert_store_and_files_agree(results.path()).0, expected_runs, "{fault}, reopened");
    }

    // The rerun completes, from the cache: the interrupted runs' embeddings are reused.
    let (_, json) = stored_run(&eval(results.path(), cache.path(), &["--batch-size", "4"]));
    assert_eq!(json["counts"]["images_encoded"], 0);
    assert_eq!(json["counts"]["images_cached"], 16);
    assert_eq!(assert_store_and_files_agree(results.path()), (5, 20, 40));
}

/// A `.partial` file (a crash while writing a run file) is removed when the store opens; a
/// run file that cannot be read is left alone, named, and not imported.
#[test]
fn leftovers_of_a_crash_are_cleaned_or_named() {
    let results = tempfile::tempdir().unwrap();
    let first = tempfile::tempdir().unwrap();
    let (original, run) = stored_run(&eval(results.path(), first.path(), &[]));
    let runs = results.path().join("runs");
    std::fs::write(runs.join("20990101T000000Z_x_winoground.json.partial"), "{\"half").unwrap();
    std::fs::write(runs.join("20990101T000000Z_y_winoground.json"), "{not json").unwrap();
    let out = benchctl(&["leaderboard", "--results-dir", results.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("left") && stderr(&out).contains("20990101T000000Z_y_winoground.json"),
        "{}",
        stderr(&out)
    );
    assert!(!runs.join("20990101T000000Z_x_winoground.json.partial").exists());
    let (stored, metrics, item_scores) = Store::open(results.path()).unwrap().counts().unwrap();
    assert_eq!(stored, 1);

    // Run files with no row (as a crash between the files and the row leaves them) are imported
    // with their whole dump, read line by line; one whose dump has a line that is not JSON is
    // named with that line and stores nothing, not even its first lines.
    let dump = std::fs::read_to_string(original.with_extension("scores.jsonl")).unwrap();
    let lines = dump.lines().count();
    assert!(lines > 2);
    let broken: Vec<&str> =
        dump.lines().enumerate().map(|(i, l)| if i == 2 { "{\"id\": \"2\", \"scores\": [[0.1," } else { l }).collect();
    for (stem, text) in
        [("20990102T000000Z_w_winoground", dump.clone()), ("20990103T000000Z_v_winoground", broken.join("\n"))]
    {
        let mut run = run.clone();
        run["scores_file"] = format!("{stem}.scores.jsonl").into();
        std::fs::write(runs.join(format!("{stem}.json")), run.to_string()).unwrap();
        std::fs::write(runs.join(format!("{stem}.scores.jsonl")), text).unwrap();
    }
    let out = benchctl(&["leaderboard", "--results-dir", results.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("imported") && stderr(&out).contains("20990102T000000Z_w_winoground.json"));
    assert!(
        stderr(&out).contains("left") && stderr(&out).contains("20990103T000000Z_v_winoground.scores.jsonl line 3"),
        "{}",
        stderr(&out)
    );
    let store = Store::open(results.path()).unwrap();
    let counts = store.counts().unwrap();
    assert_eq!(counts, (2, 2 * metrics, item_scores + lines));
    drop(store);

    // A row stored before run files were recorded adopts its file once, rather than the file
    // being stored as a second run.
    let db = rusqlite::Connection::open(results.path().join(benchctl::store::FILE_NAME)).unwrap();
    db.execute("UPDATE runs SET run_file = NULL WHERE id = 1", []).unwrap();
    drop(db);
    let out = benchctl(&["leaderboard", "--results-dir", results.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let store = Store::open(results.path()).unwrap();
    assert_eq!(store.counts().unwrap(), counts);
    let name = original.file_name().unwrap().to_str().unwrap().to_string();
    assert_eq!(store.run_files().unwrap()[0], Some(name));
}

/// One unreadable row does not take the leaderboard down: it is named and left out. A
/// directory without a store is an error (exit 5), not an empty leaderboard.
#[test]
fn the_leaderboard_skips_an_unreadable_row_and_refuses_a_missing_store() {
    let results = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        stored_run(&eval(results.path(), tempfile::tempdir().unwrap().path(), &[]));
    }
    let db = rusqlite::Connection::open(results.path().join(benchctl::store::FILE_NAME)).unwrap();
    db.execute("UPDATE runs SET run_json = '{\"broken' WHERE id = 1", []).unwrap();
    drop(db);
    let out = benchctl(&["leaderboard", "--results-dir", results.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: left out of the leaderboard: failed to parse run 1"), "{}", stderr(&out));
    assert!(common::stdout(&out).contains("from 1 run(s)"), "{}", common::stdout(&out));

    let missing = results.path().join("mistyped");
    let baseline = benchctl_testkit::workspace_root().join("results/baselines");
    for command in [vec!["leaderboard"], vec!["compare", "--baseline", baseline.to_str().unwrap()]] {
        let command = [command, vec!["--results-dir", missing.to_str().unwrap()]].concat();
        let out = benchctl(&command, &[]);
        assert_eq!(out.status.code(), Some(8), "{command:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("there is none"), "{}", stderr(&out));
        assert!(!missing.exists(), "{command:?} created the directory");
    }
}

#[test]
fn a_run_spec_runs_every_model_on_every_suite() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("run.toml");
    let siglip = benchctl_testkit::fixture_model("siglip-tiny");
    std::fs::write(
        &spec,
        format!(
            "results_dir = \"out\"\n\n[[runs]]\nmodel_paths = [{:?}, {:?}]\nsuites = [\"winoground\"]\ndata_dirs = {{ winoground = {:?} }}\nbatch_size = 5\n",
            tiny_model(),
            siglip.display().to_string(),
            demo_suite().display().to_string()
        ),
    )
    .unwrap();
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let store = Store::open(&dir.path().join("out")).unwrap();
    let runs = store.runs().unwrap();
    let models: Vec<&str> = runs.iter().map(|r| r.run.model.id.as_str()).collect();
    assert_eq!(models, ["clip-tiny-a", "siglip-tiny"]);
    assert!(runs.iter().all(|r| r.run.batch_size == 5));

    std::fs::write(&spec, "[[runs]]\nmodels = [\"clip-vit-b32\"]\nsuites = [\"winoground\"]\nbatch = 3\n").unwrap();
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown field `batch`"), "{}", stderr(&out));
}

fn run_file(results: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(results.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files.pop().unwrap()
}

#[test]
fn merged_shards_equal_the_unsharded_run_bit_for_bit() {
    // A batch of 3 makes global batches straddle the shard boundaries; 10 shards of the 8
    // demo items leave two of them empty, which is legal and merges.
    for n in [2usize, 3, 10] {
        let whole = tempfile::tempdir().unwrap();
        let (_, full) = stored_run(&eval(whole.path(), tempfile::tempdir().unwrap().path(), &["--batch-size", "3"]));
        let mut shard_files = Vec::new();
        let shared_cache = tempfile::tempdir().unwrap();
        let mut temporary = Vec::new();
        for i in 0..n {
            let (dir, own_cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let shard = format!("{i}/{n}");
            // Alternate fresh and shared caches: both give the same bits.
            let cache = if i % 2 == 0 { own_cache.path() } else { shared_cache.path() };
            let (_, json) = stored_run(&eval(dir.path(), cache, &["--batch-size", "3", "--shard", &shard]));
            assert_eq!(json["options"]["shard"], shard.as_str());
            shard_files.push(run_file(dir.path()));
            temporary.push((dir, own_cache));
        }
        let merged = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(shard_files.iter().rev().map(|p| p.display().to_string()));
        args.extend(["--results-dir".into(), merged.path().display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (merged_path, merged_json) = stored_run(&benchctl(&args, &[]));
        assert_eq!(merged_json["report"], full["report"], "{n} shards");
        assert_eq!(merged_json["intervals"], full["intervals"]);
        assert_eq!(merged_json["data_fingerprint"], full["data_fingerprint"]);
        let dump = |p: &Path, j: &serde_json::Value| std::fs::read(common::dump_path(p, j)).unwrap();
        assert_eq!(dump(&merged_path, &merged_json), dump(&run_file(whole.path()), &full), "score dumps bit for bit");
    }
}

#[test]
fn merge_refuses_an_incomplete_set_of_shards() {
    let dir = tempfile::tempdir().unwrap();
    stored_run(&eval(dir.path(), tempfile::tempdir().unwrap().path(), &["--shard", "0/2"]));
    let out = benchctl(&["merge", run_file(dir.path()).to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("need shards 0/2 … 1/2 once each, got 0/2"), "{}", stderr(&out));
}

/// A full disk, met at every point of an eval (from no free page up to enough for the whole
/// run): the exit is 0 or the documented 5 with the reason, never a panic; the metrics are
/// printed either way; the cache warns at most once; and once space is freed, the store and
/// the run files agree and no run is stored twice. The disk is a real one: a small tmpfs in a
/// private mount namespace (`unshare -rm`), so the failures are the kernel's own `ENOSPC`.
#[test]
fn a_full_disk_at_any_point_loses_nothing_and_stores_nothing_twice() {
    const INSIDE: &str = "BENCHCTL_TEST_INSIDE_NAMESPACE";
    let Ok(mount_point) = std::env::var(INSIDE) else {
        let usable = std::process::Command::new("unshare").args(["-rm", "true"]).output();
        if !usable.is_ok_and(|o| o.status.success()) {
            let reason = "`unshare -rm` is unavailable here (no user namespaces), so no small disk can be mounted";
            benchctl_testkit::skip(reason);
            return;
        }
        // This test again, inside a private mount namespace where it may mount a tmpfs.
        let mount_point = common::scratch_dir("full-disk");
        let out = std::process::Command::new("unshare")
            .args(["-rm", "--"])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "a_full_disk_at_any_point_loses_nothing_and_stores_nothing_twice", "--nocapture"])
            .env(INSIDE, &mount_point)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&mount_point);
        assert!(out.status.success(), "{}\n{}", common::stdout(&out), stderr(&out));
        assert!(common::stdout(&out).contains("1 passed"), "the test ran inside: {}", common::stdout(&out));
        eprintln!("{}", stderr(&out).lines().filter(|l| l.starts_with("(free pages")).collect::<String>());
        return;
    };
    let disk = PathBuf::from(mount_point);
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "benchctl-full-disk"])
        .arg(&disk)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs on {}", disk.display());
    let (results, cache, filler) = (disk.join("results"), disk.join("cache"), disk.join("filler"));
    let (model, data) = (tiny_model(), demo_suite().display().to_string());
    let dir = results.display().to_string();
    let mut stored = 0;
    let mut outcomes = Vec::new();
    for free_pages in 0..=40u64 {
        fill_leaving(&filler, free_pages);
        let env = [("BENCHCTL_CACHE", cache.to_str().unwrap())];
        let out = benchctl(&eval_args(&model, &data, &dir, &["--batch-size", "4"]), &env);
        let err = stderr(&out);
        assert!(common::stdout(&out).contains("group_score"), "{free_pages} pages: metrics not printed\n{err}");
        match out.status.code() {
            Some(0) => {}
            Some(5) => assert!(
                err.contains("No space left on device") || err.contains(" bytes free on its filesystem)"),
                "{free_pages} pages: the reason is named\n{err}"
            ),
            code => panic!("{free_pages} free pages: exit {code:?}\n{err}"),
        }
        let cache_warnings = err.lines().filter(|l| l.starts_with("warning:") && l.contains("cache")).count();
        assert!(cache_warnings <= 1, "{free_pages} pages: the cache warns once\n{err}");
        std::fs::remove_file(&filler).unwrap();
        let (runs, _, _) = assert_store_and_files_agree(&results);
        assert!(runs == stored || runs == stored + 1, "{free_pages} pages: {stored} runs before, {runs} after");
        if out.status.success() {
            assert_eq!(runs, stored + 1, "{free_pages} pages: a successful run is stored");
        } else {
            // A failure after the run files were complete says they are kept; they enter the store.
            assert_eq!(runs == stored + 1, err.contains("the run is kept in"), "{free_pages} pages: {err}");
        }
        outcomes.push((free_pages, out.status.code().unwrap_or(-1), runs - stored));
        stored = runs;
    }
    eprintln!("(free pages, exit, runs added): {outcomes:?}");
    assert!(outcomes.iter().any(|o| o.1 == 5), "some fill level made storing fail: {outcomes:?}");
    assert!(outcomes.last().is_some_and(|o| o.1 == 0), "the largest fill level fits a run: {outcomes:?}");
    // With space again, a run lands once, and reuses what the cache holds.
    let (_, json) = stored_run(&eval(&results, &cache, &["--batch-size", "4"]));
    assert_eq!(json["counts"]["images_encoded"], 0, "the cache serves the images again");
    assert_eq!(assert_store_and_files_agree(&results).0, stored + 1);
    std::process::Command::new("umount").arg(&disk).status().unwrap();
}

/// Fills the filesystem holding `filler` until it is full, then frees `free_pages` pages.
fn fill_leaving(filler: &Path, free_pages: u64) {
    use std::io::Write;
    let mut file = std::fs::File::create(filler).unwrap();
    for chunk in [65536, 4096] {
        while file.write_all(&vec![0u8; chunk]).is_ok() {}
    }
    let len = file.metadata().unwrap().len();
    let len = len - len % 4096;
    file.set_len(len.saturating_sub(free_pages * 4096)).unwrap();
}
