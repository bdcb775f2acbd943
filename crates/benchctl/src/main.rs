//! The `benchctl` binary: parse the command line into a plan ([`cli`]), dispatch it to the
//! library command that runs it, print, and map errors to exit codes.

use std::io::Write;
use std::process::ExitCode;

use benchctl::plan::EvalPlan;
use benchctl::record::Evaluation;
use benchctl::{
    bench, check, compare, evaluate, fetch, leaderboard, merge, score, submission, summary, Error, ErrorKind,
};
use clap::Parser;
use cli::{Cli, Command};

mod cli;

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::parse();
    // A tier this CPU cannot run (or a typo) is refused before any work, not worked around.
    if let Some(problem) = benchctl_cpu::Request::from_env().problem() {
        benchctl_base::stderr_line!("error: failed to choose the CPU tier: {problem}");
        return ExitCode::from(ErrorKind::Usage.exit_code() as u8);
    }
    if let Some(problem) = benchctl_base::spill::settings_problem() {
        benchctl_base::stderr_line!("error: failed to {problem}");
        return ExitCode::from(ErrorKind::Usage.exit_code() as u8);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            benchctl_base::stderr_line!("error: failed to {e}");
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

/// Runs one command.
fn run(cli: Cli) -> Result<(), Error> {
    benchctl::table::set_wide(cli.wide);
    match cli.command {
        Command::Eval(args) => match &args.config {
            None => eval_one(&args.plan()?),
            Some(spec) => eval_spec(spec, &args),
        },
        Command::Score(args) => score_command(&args),
        Command::Report(args) => print(&format!("wrote {}", benchctl::report::run(&(&args).into())?.display())),
        Command::Fetch(args) => print(&fetch::run(&args.plan()?, &benchctl_models::hub::HubSettings::from_env())?),
        Command::Check(args) => {
            let report = check::run(&(&args).into())?;
            print_with(|out| report.write_to(out))?;
            report.into_result()
        }
        Command::Leaderboard(args) => {
            let written = leaderboard::write(&args.results_dir)?;
            print(&format!("wrote {} from {} run(s)", written.path.display(), written.runs))
        }
        Command::Compare(args) => compare_command(&args),
        Command::Power(args) => {
            let plan = benchctl::power::PowerPlan::from(&args);
            let answer = benchctl::power::run(&plan)?;
            print(&benchctl::power::table(&plan, &answer))
        }
        Command::Merge(args) => {
            let evaluation = merge::run(&(&args).into())?;
            print(&summary::run_table(&evaluation.run))?;
            let path = store(&evaluation, &args.results_dir)?;
            export_submission(&evaluation, &path)
        }
        Command::Bench(args) => {
            let plan = args.plan()?;
            let (name, parts) = bench::run(&plan)?;
            if args.json {
                print(&bench::to_json(&name, &plan, &parts).to_string())
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
        Command::Models => print(&summary::models_table()),
        Command::Suites(args) => print(&summary::suites_list(&benchctl::catalog::statuses(&args.data_root))),
    }
}

/// One `benchctl eval`: evaluate, show the table, store, and export the official submission
/// (EqBen's `prediction.npy`) where the suite has one.
fn eval_one(plan: &EvalPlan) -> Result<(), Error> {
    let evaluation = evaluate::run(plan)?;
    // The table comes first, so a results directory that cannot be written loses nothing shown.
    print(&summary::run_table(&evaluation.run))?;
    let path = store(&evaluation, &plan.options.results_dir)?;
    // A shard scores only its slice: its submission is written by `merge`'s run, not here.
    if plan.options.shard.is_none() {
        export_submission(&evaluation, &path)?;
    }
    Ok(())
}

/// `eval --config`: every run of the spec is attempted and stored as it finishes; the first
/// failure decides the exit code.
fn eval_spec(spec: &std::path::Path, args: &cli::EvalArgs) -> Result<(), Error> {
    let (device, dtype) = args.device()?;
    let defaults =
        benchctl::config::SpecDefaults { data_dir: args.data_dir.clone(), device, dtype, options: args.options() };
    let all = benchctl::config::expand(spec, &defaults)?;
    let mut first_error = None;
    for (n, plan) in all.iter().enumerate() {
        print(&format!("run {}/{}: {} on {}", n + 1, all.len(), plan.model_name(), plan.suite.id))?;
        if let Err(e) = eval_one(plan) {
            benchctl_base::stderr_line!("error: failed to {e}");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Stores a finished evaluation and says where; returns the run file.
fn store(evaluation: &Evaluation, results_dir: &std::path::Path) -> Result<std::path::PathBuf, Error> {
    let (id, path) = evaluation.store(results_dir)?;
    print(&format!("run {id} in {}", results_dir.join(benchctl::store::FILE_NAME).display()))?;
    print(&format!("stored {}", path.display()))?;
    Ok(path)
}

/// `benchctl score`: the report, and with `--model-name` the stored external run.
fn score_command(args: &cli::ScoreArgs) -> Result<(), Error> {
    let plan = args.plan();
    let scored = score::run(&plan)?;
    let title = format!("{} on {}", plan.scores.display(), scored.suite_id);
    print(&summary::report_table(&title, &scored.report))?;
    let json = serde_json::to_string_pretty(&scored.report.to_json())
        .map_err(|e| Error::results(format!("format report: {e}")))?;
    print(&json)?;
    if plan.model_name.is_none() {
        return Ok(());
    }
    let evaluation = scored.external_run(&plan)?;
    let path = store(&evaluation, &args.results_dir)?;
    export_submission(&evaluation, &path)
}

/// `benchctl compare`: the table, the CI reports (written whatever the verdict), the verdict.
fn compare_command(args: &cli::CompareArgs) -> Result<(), Error> {
    let gate = compare::run(&args.into())?;
    print(&compare::table(&gate))?;
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| Error::results(format!("write {}: {e}", path.display())))
    };
    if let Some(path) = &args.junit {
        write(path, compare::junit(&gate))?;
    }
    if let Some(path) = &args.summary {
        write(path, compare::markdown(&gate))?;
    }
    compare::verdict(&gate)
}

/// Writes the suite's official submission file (`benchctl::submission`) beside the run file
/// `run_path`, when the suite has one.
fn export_submission(evaluation: &Evaluation, run_path: &std::path::Path) -> Result<(), Error> {
    let Some((suite, scores)) = evaluation.scored() else { return Ok(()) };
    match submission::export(suite, scores, evaluation.replies(), run_path)? {
        Some((out, about)) => print(&format!("wrote {} ({about})", out.display())),
        None => Ok(()),
    }
}
