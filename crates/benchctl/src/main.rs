//! The `benchctl` binary: parse the command line, run, map errors to exit codes.

use std::io::Write;
use std::process::ExitCode;

use benchctl::cli::{Cli, Command};
use benchctl::{
    bench, check, compare, evaluate, fetch, leaderboard, merge, results, score, submission, summary, Error, ErrorKind,
};
use clap::Parser;

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::parse();
    // A tier this CPU cannot run (or a typo) is refused before any work, not worked around.
    if let Some(problem) = benchctl_cpu::Request::from_env().problem() {
        eprintln!("error: failed to choose the CPU tier: {problem}");
        return ExitCode::from(ErrorKind::Usage.exit_code() as u8);
    }
    if let Some(problem) = benchctl_scoring::spill::settings_problem() {
        eprintln!("error: failed to {problem}");
        return ExitCode::from(ErrorKind::Usage.exit_code() as u8);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: failed to {e}");
            ExitCode::from(e.kind().exit_code() as u8)
        }
    }
}

/// Every tensor operation allocates its output; glibc returns large blocks to the kernel on
/// free (mmap, trimming, per-thread arenas), so the next batch page-faults and zeroes them
/// again, which cost a third of the encoder's time. One arena, no mmap for big blocks and no
/// trimming keep freed blocks for reuse; peak RSS stays the largest live set.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; it is called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

/// Prints to stdout; a closed pipe (`benchctl … | head`) is not an error.
fn print(text: &str) -> Result<(), Error> {
    print_with(|out| writeln!(out, "{text}"))
}

/// Writes to stdout with `write`; a reader that went away (broken pipe) is not an error.
fn print_with(write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<(), Error> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match write(&mut out).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::new(ErrorKind::Results, format!("write to stdout: {e}")))
        }
        _ => Ok(()),
    }
}

/// One `benchctl eval`: evaluate, show the table, store, and export the official submission
/// (EqBen's `prediction.npy`) where the suite has one.
fn eval_one(args: &benchctl::cli::EvalArgs) -> Result<(), Error> {
    let evaluation = evaluate::run(args)?;
    // The table comes first, so a results directory that cannot be written loses nothing shown.
    print(&summary::run_table(&evaluation.run))?;
    let (id, path) = evaluation.store(&args.results_dir)?;
    print(&format!("run {id} in {}", args.results_dir.join(benchctl::store::FILE_NAME).display()))?;
    print(&format!("stored {}", path.display()))?;
    // A shard scores only its slice: its submission is written by `merge`'s run, not here.
    if args.shard.is_none() {
        export_submission(&evaluation, &path)?;
    }
    Ok(())
}

/// Writes the suite's official submission (EqBen's `prediction.npy`) beside the run file
/// `run_path`, when the suite has one.
fn export_submission(evaluation: &evaluate::Evaluation, run_path: &std::path::Path) -> Result<(), Error> {
    let Some((suite, scores)) = evaluation.scored() else { return Ok(()) };
    let Some(ordered) = submission::ordered_scores(suite, scores)? else { return Ok(()) };
    let out = run_path.with_extension("submission").join(submission::PREDICTION_FILE);
    submission::write_npy_f32(&out, &ordered)?;
    let order = suite.pair_order.as_ref().map(|o| o.file.display().to_string()).unwrap_or_default();
    print(&format!(
        "wrote {} ({} scores in the order of {order}; the official scorer reads it as src_file/{})",
        out.display(),
        ordered.len(),
        submission::PREDICTION_FILE
    ))
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Eval(args) => match &args.config {
            None => eval_one(&args),
            Some(spec) => {
                // Every run is attempted and stored as it finishes; the first failure decides the exit code.
                let all = benchctl::config::expand(spec, &args)?;
                let mut first_error = None;
                for (n, one) in all.iter().enumerate() {
                    let what = one
                        .model
                        .model
                        .clone()
                        .or_else(|| one.model.model_path.as_ref().map(|p| p.display().to_string()));
                    print(&format!("run {}/{}: {} on {}", n + 1, all.len(), what.unwrap_or_default(), one.suite))?;
                    if let Err(e) = eval_one(one) {
                        eprintln!("error: failed to {e}");
                        first_error.get_or_insert(e);
                    }
                }
                first_error.map_or(Ok(()), Err)
            }
        },
        Command::Score(args) => {
            let scored = score::run(&args)?;
            let title = format!("{} on {}", args.scores.display(), scored.suite_id);
            print(&summary::report_table(&title, &scored.report))?;
            let json = serde_json::to_string_pretty(&scored.report.to_json())
                .map_err(|e| Error::results(format!("format report: {e}")))?;
            print(&json)?;
            if args.model_name.is_none() {
                return Ok(());
            }
            let (id, path) = scored.external_run(&args)?.store(&args.results_dir)?;
            print(&format!("run {id} in {}", args.results_dir.join(benchctl::store::FILE_NAME).display()))?;
            print(&format!("stored {}", path.display()))
        }
        Command::Report(args) => {
            let page = benchctl::report::run(&args)?;
            print(&format!("wrote {}", page.display()))
        }
        Command::Fetch(args) => print(&fetch::run(&args, &benchctl_models::hub::HubSettings::from_env())?),
        Command::Check(args) => {
            let report = check::run(&args)?;
            print_with(|out| report.write_to(out))?;
            report.into_result()
        }
        Command::Leaderboard(args) => {
            let (stored, skipped) = benchctl::store::Store::open_existing(&args.results_dir)?.runs_readable()?;
            for problem in &skipped {
                eprintln!("warning: left out of the leaderboard: failed to {problem}");
            }
            // Each run's failure browser page, where `benchctl report` wrote one.
            let mut pages = std::collections::HashMap::new();
            for s in &stored {
                let Some(file) = &s.run_file else { continue };
                let page = format!("runs/{}.report/index.html", file.trim_end_matches(".json"));
                if args.results_dir.join(&page).is_file() {
                    pages.insert((s.run.started_at.clone(), s.run.label(), s.run.suite.id.clone()), page);
                }
            }
            let runs: Vec<results::Run> = stored.into_iter().map(|s| s.run).collect();
            let path = args.results_dir.join("LEADERBOARD.md");
            let report = |r: &results::Run| pages.get(&(r.started_at.clone(), r.label(), r.suite.id.clone())).cloned();
            std::fs::write(&path, leaderboard::render_with_reports(&runs, &report))
                .map_err(|e| Error::results(format!("write {}: {e}", path.display())))?;
            let charts = args.results_dir.join("charts");
            std::fs::create_dir_all(&charts)
                .map_err(|e| Error::results(format!("create {}: {e}", charts.display())))?;
            for (name, svg) in leaderboard::charts(&runs) {
                let chart = charts.join(name);
                std::fs::write(&chart, svg).map_err(|e| Error::results(format!("write {}: {e}", chart.display())))?;
            }
            print(&format!("wrote {} from {} run(s)", path.display(), runs.len()))
        }
        Command::Compare(args) => {
            let changes = compare::run(&args)?;
            print(&compare::table(&changes))?;
            // The CI reports are written whatever the verdict, before its exit code.
            let write = |path: &std::path::Path, text: String| {
                std::fs::write(path, text).map_err(|e| Error::results(format!("write {}: {e}", path.display())))
            };
            if let Some(path) = &args.junit {
                write(path, compare::junit(&changes))?;
            }
            if let Some(path) = &args.summary {
                write(path, compare::markdown(&changes))?;
            }
            compare::verdict(&changes)
        }
        Command::Merge(args) => {
            let evaluation = merge::run(&args)?;
            print(&summary::run_table(&evaluation.run))?;
            let (id, path) = evaluation.store(&args.results_dir)?;
            print(&format!("run {id} in {}", args.results_dir.join(benchctl::store::FILE_NAME).display()))?;
            print(&format!("stored {}", path.display()))?;
            export_submission(&evaluation, &path)
        }
        Command::Bench(args) => {
            let (name, parts) = bench::run(&args)?;
            if args.json {
                print(&bench::to_json(&name, &args, &parts).to_string())
            } else {
                print(&summary::bench_table(&name, &parts, bench::peak_rss_mib()))
            }
        }
        Command::Convert(args) => {
            let converted = benchctl_models::models::convert_checkpoint(&args.input, &args.output)?;
            print(&format!(
                "wrote {}: {} tensors ({} training buffers left out: {})",
                args.output.display(),
                converted.tensors,
                converted.dropped.len(),
                converted.dropped.join(", ")
            ))
        }
        Command::Models => print(&benchctl::summary::models_table()),
        Command::Suites => {
            let lines: Vec<String> =
                benchctl_suites::all().iter().map(|s| format!("{:<20} {}", s.id, s.description)).collect();
            print(&lines.join("\n"))
        }
    }
}
